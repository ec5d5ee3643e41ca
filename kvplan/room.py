"""The Room rule (a rank's room, what its KV cache can take, best evidence first) and the budget of a ledger's
rooms.

The rule is given to the readers (:class:`kvplan.io.metadata.RoomRule`), which report only what the logs
say: :data:`ROOM_RULE` is the rule, :func:`read_vllm_log_rooms` and its siblings the readers with it, whose
ledger every consumer reads. Evidence, best first:

1. ``suggestion``: vLLM's own ``--kv-cache-memory`` suggestion ("to fully utilize gpu memory");
2. ``available_kv``: "Available KV cache memory", less the CUDA graphs captured after it;
3. ``parts``: free at startup − weights − activation peak − non-torch − graphs − 150 MiB (vLLM's buffer).

:func:`budget_from_rooms` is the uniform budget of the worst room per rank; :func:`refuse_failed_boots` and
:func:`check_dropped_ranks` refuse a ledger from which no budget may come, naming the file and line.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

import pandas as pd

from kvplan.budget import Budget, BudgetError, uniform_budget
from kvplan.columns import failure_phase, world_size
from kvplan.io.ledger_csv import read_ledger_csv
from kvplan.io.metadata import BootPlace, ReadMetadata, RoomRule, place_note
from kvplan.io.vllm import read_vllm_log, read_vllm_logs, stream_vllm_logs
from kvplan.ledger import LedgerError, _line, _where, plain_value, room_per_rank
from kvplan.releases import rank0_only_advice
from kvplan.units import MiB, format_size

#: vLLM's ``redundancy_buffer_memory`` in the suggestion arithmetic.
SUGGESTION_BUFFER_BYTES = 150 * MiB


def room_evidence(
    values: dict, rank: int, flags: dict, origin: dict, source: str, warnings: list
) -> tuple[int, str, tuple] | None:
    """``(room_bytes, room_source, (line, raw))`` for one rank, best evidence first (None: no room).

    ``flags``: whether vLLM subtracted a CUDA-graph estimate before sizing KV (``estimate_applied``),
    whether graphs were off (``eager``); ``origin[(rank, column)]`` is each value's ``(line, raw)``.

    >>> room_evidence({"suggested_full_bytes": 7}, 0, {}, {(0, "suggested_full_bytes"): (9, "")}, "a.log", [])
    (7, 'suggestion', (9, ''))
    """
    if values.get("suggested_full_bytes") is not None:
        return values["suggested_full_bytes"], "suggestion", origin[(rank, "suggested_full_bytes")]
    graph, estimate = values.get("cuda_graph_bytes"), values.get("cuda_graph_estimate_bytes")
    if graph is not None and values.get("encoder_cuda_graph_bytes") is not None:
        # the encoder's graphs (0.31+) are captured too: counted with the decoder's (the safe side)
        graph += max(0, values["encoder_cuda_graph_bytes"])
    if values.get("available_kv_bytes") is not None:
        if flags["estimate_applied"]:
            correction = max(0, graph - estimate) if graph is not None and estimate is not None else 0
        elif flags["eager"]:
            correction = 0
        else:
            correction = None if graph is None else max(0, graph)
        if correction is not None:
            return (
                values["available_kv_bytes"] - correction,
                "available_kv",
                origin[(rank, "available_kv_bytes")],
            )
        line = origin[(rank, "available_kv_bytes")][0]
        if values.get("outcome") in ("ok", "incomplete"):
            warnings.append(
                place_note(
                    "available-kv-not-room",
                    source,
                    line,
                    f"rank {rank}: 'Available KV cache memory' is not used as room: "
                    "CUDA graphs are captured after it and the log shows no 'Graph capturing finished … "
                    "took X GiB' for this rank",
                )
            )
    init_free, weights, activation, non_torch = (
        values.get(name)
        for name in ("init_free_bytes", "weights_bytes", "activation_peak_bytes", "non_torch_bytes")
    )
    graph_bytes = graph if graph is not None else estimate
    if graph_bytes is None and flags["eager"]:
        graph_bytes = 0
    if init_free is None or weights is None or activation is None or non_torch is None or graph_bytes is None:
        return None
    room = init_free - (weights + activation + non_torch + max(0, graph_bytes)) - SUGGESTION_BUFFER_BYTES
    return room, "parts", origin[(rank, "init_free_bytes")]


def boot_room_warnings(
    rows: dict, key: dict, flags: dict, source: str, boot: BootPlace, origin: dict, warnings: list
) -> None:
    """Append to ``warnings`` what one boot's rooms need said: sources that differ per rank, ranks Ray
    deduplicated, a room shown on local rank 0 only, CUDA graphs counted twice in the suggestion."""
    version = flags["version"]
    sources = {rank: values.get("room_source") for rank, values in rows.items()}
    known = {rank: src for rank, src in sources.items() if src is not None}
    first = boot.first_line
    if len(set(known.values())) > 1:
        listing = ", ".join(f"rank {rank}: {src}" for rank, src in sorted(known.items()))
        warnings.append(
            place_note(
                "room-sources-differ",
                source,
                first,
                f"boot {boot.index}: room comes from different evidence per rank "
                f"({listing}); compare with care",
            )
        )
    world = world_size(key) or len(rows)
    lacking = [rank for rank in range(max(world, len(rows))) if rank not in known]
    if lacking and boot.ray_repeats:
        warnings.append(
            place_note(
                "ray-dedup-no-room",
                source,
                boot.ray_repeats[0],
                f"boot {boot.index}: rank(s) "
                f"{', '.join(str(rank) for rank in lacking)} show no room of their own: Ray deduplicated their "
                "lines into other workers' '[repeated Nx across cluster]' lines (each value shown stays on the "
                "pid that printed it). Rerun with RAY_DEDUP_LOGS=0 for per-rank numbers.",
            )
        )
    elif known and lacking and set(known.values()) == {"available_kv"}:
        line = origin.get((min(known), "room_bytes"), (first,))[0]
        warnings.append(
            place_note(
                "rank0-only-room",
                source,
                line,
                f"boot {boot.index}: this log shows the room of rank(s) "
                f"{', '.join(str(rank) for rank in sorted(known))} only; rank(s) "
                f"{', '.join(str(rank) for rank in lacking)} show none. {rank0_only_advice(version, False)}.",
            )
        )
    double = version is not None and ((0, 18) <= version < (0, 19) or version >= (0, 27))
    if (
        double
        and flags["estimate_applied"]
        and any(
            values.get("room_source") == "suggestion" and (values.get("cuda_graph_bytes") or 0) > 0
            for values in rows.values()
        )
    ):
        warnings.append(
            place_note(
                "graph-counted-twice",
                source,
                first,
                f"boot {boot.index}: vLLM {key['vllm_version']} counts CUDA-graph memory "
                "twice in "
                "its --kv-cache-memory suggestion (vllm#57936): the room shown is lower than the GPU really has "
                "(conservative)",
            )
        )


#: The Room rule as the readers take it.
ROOM_RULE = RoomRule(room_evidence, boot_room_warnings)


def read_vllm_log_rooms(
    path_or_text: str | os.PathLike | bytes | IO[bytes], source: str | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """:func:`kvplan.io.read_vllm_log` with the Room rule: each rank's ``room_bytes`` and ``room_source``.

    >>> from kvplan import io
    >>> from kvplan import DATA_DIR
    >>> log = DATA_DIR / "boots" / "four-rank" / "boot.log"
    >>> ledger, _ = read_vllm_log_rooms(log)
    >>> ledger["room_source"].tolist(), int(ledger["room_bytes"].min())  # rank 2's suggestion, 12.9 GiB
    (['suggestion', 'suggestion', 'suggestion', 'suggestion'], 13851269530)
    >>> bool(io.read_vllm_log(log)[0]["room_bytes"].isna().all())  # the reader alone: no room
    True
    """
    return read_vllm_log(path_or_text, source, room_rule=ROOM_RULE)


def read_vllm_logs_rooms(
    paths: str | os.PathLike | Iterable[str | os.PathLike], names: Mapping[str, str] | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """:func:`kvplan.io.read_vllm_logs` (many logs, a folder or a glob; ``names``: a file's source) with the
    Room rule."""
    return read_vllm_logs(paths, room_rule=ROOM_RULE, names=names)


def stream_vllm_logs_rooms(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    rows_to: Callable[[list[dict]], None],
    names: Mapping[str, str] | None = None,
) -> ReadMetadata:
    """:func:`kvplan.io.vllm.stream_vllm_logs` (the rows only, in batches to ``rows_to``; no frame, no
    provenance) with the Room rule."""
    return stream_vllm_logs(paths, rows_to, room_rule=ROOM_RULE, names=names)


def read_ledger_csv_rooms(
    path: str | os.PathLike, source: str | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """:func:`kvplan.io.read_ledger_csv` with the Room rule: a CSV without ``room_bytes`` has each rank's
    room computed from its parts, as the log reader computes it."""
    return read_ledger_csv(Path(path), source, room_rule=ROOM_RULE)


#: Codes of reader notes that left a rank's lines out of the ledger (a process claiming a rank outside
#: TP × PP × DP): that GPU's room may be below every rank kept, so no budget may be computed without it.
DROPPED_RANK_CODES = frozenset({"rank-out-of-world"})


def check_dropped_ranks(notes: Iterable[object]) -> None:
    """Raise :class:`LedgerError` when a reader note (a :class:`kvplan.notes.Note`) says a rank's lines
    were left out; the message is the note's own ``file:line`` and text.

    >>> check_dropped_ranks(["a.log:3: a warning of another kind"])
    """
    dropped = [str(note) for note in notes if getattr(note, "code", None) in DROPPED_RANK_CODES]
    if dropped:
        more = f" (and {len(dropped) - 1} more)" if len(dropped) > 1 else ""
        raise LedgerError(
            f"{dropped[0]}{more}. That GPU's room may be below every rank kept, so the budget is refused: "
            "give the logs of one launch whose engine config names its parallel sizes, or leave those "
            "lines out"
        )


#: Order in which failed rows are reported: out of memory first, then errors, then cut-off boots.
_OUTCOME_ORDER = {"oom": 0, "error": 1, "incomplete": 2}
_SHOWN_FAILURES = 6


def refuse_failed_boots(ledger: pd.DataFrame, lines: Mapping | None = None) -> None:
    """Raise :class:`LedgerError` when any row's boot did not come through startup cleanly.

    The message lists each failed row with its own file:line and text, OOM first, then errors (a
    rank's own before the ones it only inherits from the engine, by line), then incomplete boots.

    >>> refuse_failed_boots(pd.DataFrame({"source": ["a.log"], "boot": [0], "rank": [0], "outcome": ["ok"]}))
    """
    if "outcome" not in ledger:
        return
    lines = lines if lines is not None else {}
    failed = ledger[ledger["outcome"].fillna("incomplete") != "ok"]
    if failed.empty:
        return
    items = []
    for _, row in failed.iterrows():
        outcome = plain_value(row["outcome"]) or "incomplete"
        where = _where(lines, row["source"], row["boot"], row["rank"], "outcome")
        line = _line(lines, row["source"], row["boot"], row["rank"], "outcome")
        text = str(plain_value(row.get("error")) or "no text")
        text = text if len(text) <= 240 else text[:239] + "…"
        phase = failure_phase(plain_value(row.get("failed_in")))
        items.append(
            (
                _OUTCOME_ORDER.get(outcome, 3),
                line if line is not None else float("inf"),
                f"{where}: boot {plain_value(row['boot'])} rank {plain_value(row['rank'])} did not boot cleanly "
                f"({outcome}: {text})" + (f" {phase}" if phase else ""),
            )
        )
    items.sort(key=lambda item: item[:2])
    shown = [item[2] for item in items[:_SHOWN_FAILURES]]
    more = f"; {len(items) - _SHOWN_FAILURES} more row(s) not ok" if len(items) > _SHOWN_FAILURES else ""
    raise LedgerError(
        "; ".join(shown)
        + more
        + ". The budget is refused rather than computed from partial evidence. "
        + _next_step(failed, ledger)
    )


def _next_step(failed: pd.DataFrame, ledger: pd.DataFrame) -> str:
    """What to do about the failed rows: give the rest of a log cut short, or fix a failure and boot
    again; leaving a boot out only when the ledger holds another.

    >>> frame = pd.DataFrame({"source": ["a.log"], "boot": [0], "outcome": ["incomplete"]})
    >>> _next_step(frame, frame)
    "Give the whole log, through its 'Application startup complete' line: it stops before startup completed."
    """
    cut_short = set(failed["outcome"].fillna("incomplete")) == {"incomplete"}
    step = (
        "give the whole log, through its 'Application startup complete' line: it stops before startup completed."
        if cut_short
        else "fix what failed and boot again."
    )
    boots = ledger[["source", "boot"]].drop_duplicates() if {"source", "boot"} <= set(ledger) else ledger[:1]
    failed_boots = (
        failed[["source", "boot"]].drop_duplicates() if {"source", "boot"} <= set(failed) else failed[:1]
    )
    if len(boots) > len(failed_boots):
        return f"Leave the failed boot(s) out (the ledger holds others), or {step}"
    return step[0].upper() + step[1:]


def budget_from_ledger(
    ledger: pd.DataFrame,
    reserve_bytes: int,
    block_bytes: int | None = None,
    assume_uniform: bool = False,
    lines: Mapping | None = None,
) -> Budget:
    """The uniform budget from a ledger: checks, worst room per rank, then :func:`uniform_budget`.

    >>> GiB = 2**30
    >>> frame = pd.DataFrame({"source": ["a.log"] * 2, "boot": [0, 0], "rank": [0, 1],
    ...                       "room_bytes": [13 * GiB, 14 * GiB], "room_source": ["suggestion"] * 2,
    ...                       "outcome": ["ok", "ok"]})
    >>> budget_from_ledger(frame, GiB).uniform_budget_bytes == 12 * GiB
    True
    """
    lines = lines if lines is not None else {}
    refuse_failed_boots(ledger, lines)
    return budget_from_rooms(
        ledger,
        room_per_rank(ledger, assume_uniform=assume_uniform, lines=lines),
        reserve_bytes,
        block_bytes,
        lines,
    )


def budget_from_rooms(
    ledger: pd.DataFrame,
    rooms: pd.DataFrame,
    reserve_bytes: int,
    block_bytes: int | None = None,
    lines: Mapping | None = None,
) -> Budget:
    """:func:`uniform_budget` of the worst room per rank (:func:`room_per_rank` of ``ledger``).

    A budget that leaves nothing is refused naming the weakest rank's file and line (from ``lines``).
    """
    lines = lines if lines is not None else {}
    try:
        return uniform_budget(
            rooms["room_bytes"].astype(int).tolist(),
            reserve_bytes,
            block_bytes=block_bytes,
            ranks=rooms.index.astype(int).tolist(),
        )
    except BudgetError as exc:
        weakest = int(rooms["room_bytes"].astype(int).idxmin())
        record = rooms.loc[weakest]
        where = _where(lines, record["source"], record["boot"], weakest, "room_bytes")
        raise LedgerError(f"{where}: {exc} (weakest room {format_size(int(record['room_bytes']))})") from None
