"""The Room rule, given to the readers (:data:`ROOM_RULE`), and the budget of a ledger's rooms.

A rank's room, best evidence first: ``suggestion`` (vLLM's ``--kv-cache-memory`` suggestion), ``available_kv``
("Available KV cache memory" less the CUDA graphs captured after it), ``parts`` (free at startup − weights −
activation peak − non-torch − graphs − 150 MiB, vLLM's buffer)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path

import pandas as pd

from kvplan.budget import Budget, BudgetError, uniform_budget
from kvplan.columns import failure_phase, world_size
from kvplan.io.ledger_csv import read_ledger_csv
from kvplan.io.metadata import BootPlace, ReadMetadata, RoomRule, place_note
from kvplan.io.vllm import read_vllm_log, read_vllm_logs, stream_vllm_logs
from kvplan.ledger import LedgerError, _line, _where, plain_value
from kvplan.notes import Note
from kvplan.releases import rank0_only_advice
from kvplan.units import MiB, format_size

#: vLLM's ``redundancy_buffer_memory`` in the suggestion arithmetic.
SUGGESTION_BUFFER_BYTES = 150 * MiB


def room_evidence(
    values: dict, rank: int, flags: dict, origin: dict, source: str, warnings: list
) -> tuple[int, str, tuple] | None:
    """``(room_bytes, room_source, (line, raw))`` for one rank, best evidence first (None: no room); ``flags``:
    ``estimate_applied`` (a CUDA-graph estimate subtracted before KV sizing), ``eager``; ``origin[(rank, column)]``.
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
        where = origin[(rank, "available_kv_bytes")]
        if correction is not None:
            return values["available_kv_bytes"] - correction, "available_kv", where
        if values.get("outcome") in ("ok", "incomplete"):
            text = (
                f"rank {rank}: 'Available KV cache memory' is not used as room: CUDA graphs are captured after it "
                "and the log shows no 'Graph capturing finished … took X GiB' for this rank"
            )
            warnings.append(place_note("available-kv-not-room", source, where[0], text))
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
    rows: dict, key: dict, flags: dict, source: str, boot: BootPlace, origin: dict
) -> list[Note]:
    """What one boot's rooms need said: sources that differ per rank, ranks Ray deduplicated, a room shown on
    local rank 0 only, CUDA graphs counted twice in the suggestion."""
    version = flags["version"]
    known = {
        rank: values["room_source"] for rank, values in rows.items() if values.get("room_source") is not None
    }
    world = world_size(key) or len(rows)
    lacking = ", ".join(str(rank) for rank in range(max(world, len(rows))) if rank not in known)
    shown = ", ".join(str(rank) for rank in sorted(known))
    notes = []
    if len(set(known.values())) > 1:
        listing = ", ".join(f"rank {rank}: {src}" for rank, src in sorted(known.items()))
        text = f"room comes from different evidence per rank ({listing}); compare with care"
        notes.append(("room-sources-differ", boot.first_line, text))
    if lacking and boot.ray_repeats:
        text = (
            f"rank(s) {lacking} show no room of their own: Ray deduplicated their lines into other workers' "
            "'[repeated Nx across cluster]' lines (each value shown stays on the pid that printed it). Rerun "
            "with RAY_DEDUP_LOGS=0 for per-rank numbers."
        )
        notes.append(("ray-dedup-no-room", boot.ray_repeats[0], text))
    elif known and lacking and set(known.values()) == {"available_kv"}:
        line = origin.get((min(known), "room_bytes"), (boot.first_line,))[0]
        advice = rank0_only_advice(version, False)
        text = f"this log shows the room of rank(s) {shown} only; rank(s) {lacking} show none. {advice}."
        notes.append(("rank0-only-room", line, text))
    if (  # the suggestion of 0.18 and 0.27+ counts CUDA graphs twice once an estimate is applied
        version is not None
        and ((0, 18) <= version < (0, 19) or version >= (0, 27))
        and flags["estimate_applied"]
        and any(
            v.get("room_source") == "suggestion" and (v.get("cuda_graph_bytes") or 0) > 0
            for v in rows.values()
        )
    ):
        text = (
            f"vLLM {key['vllm_version']} counts CUDA-graph memory twice in its --kv-cache-memory suggestion "
            "(vllm#57936): the room shown is lower than the GPU really has (conservative)"
        )
        notes.append(("graph-counted-twice", boot.first_line, text))
    return [place_note(code, source, line, f"boot {boot.index}: {text}") for code, line, text in notes]


#: The Room rule as the readers take it.
ROOM_RULE = RoomRule(room_evidence, boot_room_warnings)


#: The readers with the Room rule (each rank's ``room_bytes`` and ``room_source``), whose ledger every consumer
#: reads: :func:`kvplan.io.read_vllm_log`, :func:`~kvplan.io.read_vllm_logs` (``names=``: a file's source) and
#: :func:`~kvplan.io.vllm.stream_vllm_logs` (rows only, in batches).
read_vllm_log_rooms = partial(read_vllm_log, room_rule=ROOM_RULE)
read_vllm_logs_rooms = partial(read_vllm_logs, room_rule=ROOM_RULE)
stream_vllm_logs_rooms = partial(stream_vllm_logs, room_rule=ROOM_RULE)


def read_ledger_csv_rooms(
    path: str | os.PathLike, source: str | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """:func:`kvplan.io.read_ledger_csv` with the Room rule: a CSV without ``room_bytes`` has each rank's room
    computed from its parts, as the log reader computes it."""
    return read_ledger_csv(Path(path), source, room_rule=ROOM_RULE)


#: Codes of reader notes that left a rank's lines out of the ledger (a process claiming a rank outside
#: TP × PP × DP): that GPU's room may be below every rank kept, so no budget may be computed without it.
DROPPED_RANK_CODES = frozenset({"rank-out-of-world"})


def check_dropped_ranks(notes: Iterable[object]) -> None:
    """Raise :class:`LedgerError`, quoting the note, when a reader note says a rank's lines were left out."""
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
    """Raise :class:`LedgerError` listing each row whose boot did not come through startup cleanly, with its
    file:line and text: OOM first, then errors (by line), then incomplete boots."""
    if "outcome" not in ledger:
        return
    lines = lines if lines is not None else {}
    failed = ledger[ledger["outcome"].fillna("incomplete") != "ok"]
    if failed.empty:
        return
    items = []
    for _, row in failed.iterrows():
        outcome = plain_value(row["outcome"]) or "incomplete"
        line = _line(lines, row["source"], row["boot"], row["rank"], "outcome")
        text = str(plain_value(row.get("error")) or "no text")
        text = text if len(text) <= 240 else text[:239] + "…"
        phase = failure_phase(plain_value(row.get("failed_in")))
        said = (
            f"{_where(lines, row['source'], row['boot'], row['rank'], 'outcome')}: boot {plain_value(row['boot'])} "
            f"rank {plain_value(row['rank'])} did not boot cleanly ({outcome}: {text})"
            + (f" {phase}" if phase else "")
        )
        items.append((_OUTCOME_ORDER.get(outcome, 3), line if line is not None else float("inf"), said))
    items.sort(key=lambda item: item[:2])
    shown = [item[2] for item in items[:_SHOWN_FAILURES]]
    more = f"; {len(items) - _SHOWN_FAILURES} more row(s) not ok" if len(items) > _SHOWN_FAILURES else ""
    refused = ". The budget is refused rather than computed from partial evidence. "
    raise LedgerError("; ".join(shown) + more + refused + _next_step(failed, ledger))


def _next_step(failed: pd.DataFrame, ledger: pd.DataFrame) -> str:
    """What to do: give the rest of a log cut short, or fix a failure; leave a boot out when the ledger holds others."""
    step = (
        "give the whole log, through its 'Application startup complete' line: it stops before startup completed."
        if set(failed["outcome"].fillna("incomplete")) == {"incomplete"}
        else "fix what failed and boot again."
    )
    if len(_boots(ledger)) > len(_boots(failed)):
        return f"Leave the failed boot(s) out (the ledger holds others), or {step}"
    return step[0].upper() + step[1:]


def _boots(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[["source", "boot"]].drop_duplicates() if {"source", "boot"} <= set(frame) else frame[:1]


def budget_from_rooms(
    rooms: pd.DataFrame, reserve_bytes: int, block_bytes: int | None = None, lines: Mapping | None = None
) -> Budget:
    """:func:`uniform_budget` of the worst room per rank (:func:`room_per_rank`); one that leaves nothing is
    refused naming the weakest rank's file and line (from ``lines``)."""
    room_bytes = rooms["room_bytes"].astype(int)
    try:
        return uniform_budget(
            room_bytes.tolist(), reserve_bytes, block_bytes, rooms.index.astype(int).tolist()
        )
    except BudgetError as exc:
        weakest = int(room_bytes.idxmin())
        record = rooms.loc[weakest]
        where = _where(lines or {}, record["source"], record["boot"], weakest, "room_bytes")
        raise LedgerError(f"{where}: {exc} (weakest room {format_size(int(record['room_bytes']))})") from None
