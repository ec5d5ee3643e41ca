"""The Room rule: a rank's room (what its KV cache can take) from its logged values, best evidence first.

A domain rule of the core floor, given to the readers (:class:`kvplan.io.room_rule.RoomRule`), which
report only what the logs say: :data:`ROOM_RULE` is the rule, and :func:`read_vllm_log_rooms`,
:func:`read_vllm_logs_rooms`, :func:`stream_vllm_logs_rooms` and :func:`read_ledger_csv_rooms` are the
readers of :mod:`kvplan.io` with it, the
ledger every consumer reads (``room_bytes`` and ``room_source`` filled, the warnings about where rooms
came from, the safest of conflicting observations of a rank). Evidence, best first:

1. ``suggestion``: vLLM's own ``--kv-cache-memory`` suggestion ("to fully utilize gpu memory");
2. ``available_kv``: "Available KV cache memory", less the CUDA graphs captured after it;
3. ``parts``: free at startup − weights − activation peak − non-torch − graphs − 150 MiB (vLLM's buffer).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kvplan.columns import world_size
from kvplan.io.ledger_csv import read_ledger_csv
from kvplan.io.metadata import ReadMetadata, place_note
from kvplan.io.room_rule import BootPlace, RoomRule
from kvplan.io.vllm import read_vllm_log, read_vllm_logs, stream_vllm_logs
from kvplan.releases import rank0_only_advice
from kvplan.units import MiB

if TYPE_CHECKING:  # pandas only for the frames' annotations
    import pandas as pd


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
