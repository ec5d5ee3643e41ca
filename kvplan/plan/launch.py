"""The launch of a decision: its flags and vLLM's start-up refusals (:mod:`kvplan.checks.launch`) on the
evidence the decision used.

Per rank: the total memory (the largest any boot shows), ``F_ref`` (the start-up free memory the decision
used, :func:`kvplan.plan.reference.reference_free_bytes`) and the non-KV footprint of the boot that set the
room: ``F_ref − room`` where the room is vLLM's suggestion (``free − non-KV − 150 MiB``, vLLM's own
arithmetic), else weights + activation peak + non-torch + CUDA graphs of that boot's row where all are shown
(a room from the available-KV figure can exceed ``F − non-KV`` on a shared GPU), else ``F_ref − room``.

>>> from kvplan import DATA_DIR
>>> from kvplan.plan import ModelLayout, Policy, decide
>>> d = decide([DATA_DIR / "boots" / "four-rank" / "boot.log"], Policy(966_367_642),
...            ModelLayout("llama-3.1-70b", {"tp": 4}))
>>> d.launch_flags
('--kv-cache-memory-bytes=12884377600', '--gpu-memory-utilization=0.61')
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvplan.budget import Budget
from kvplan.checks.launch import (
    LaunchFlags,
    check_footprint,
    check_full_request,
    check_startup_memory,
    launch_flags,
)
from kvplan.drift import lowest_free_bytes
from kvplan.kvspec import KVSpec
from kvplan.ledger import is_known
from kvplan.plan.reference import reference_free_bytes
from kvplan.verdict import Check

#: The ledger columns that add up to a rank's non-KV footprint.
NON_KV_PARTS = ("weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes")


def launch_section(
    ledger: pd.DataFrame,
    rooms: pd.DataFrame,
    budget: Budget,
    spec: KVSpec | None,
    max_model_len: int | None,
    guard_bytes: int,
) -> tuple[LaunchFlags, list[Check]]:
    """The launch flags of ``budget`` and the checks of vLLM's start-up refusals (a), (b), (c), on the ledger
    and its rooms (:func:`kvplan.ledger.room_per_rank`) with ``F_ref`` by the one rule
    (:func:`~kvplan.plan.reference.reference_free_bytes`)."""
    ref_free = reference_free_bytes(ledger, rooms)
    start_free = _lowest_start_free(ledger, ref_free, budget.ranks)
    room_sources = [str(source) for source in rooms["room_source"]]
    totals = _per_rank_max(ledger, ["total_bytes"], budget.ranks)
    non_kv = [
        None if free is None else free - room if source == "suggestion" or parts is None else parts
        for parts, free, room, source in zip(
            _room_boot_parts(ledger, rooms), ref_free, budget.room_bytes, room_sources
        )
    ]
    logged = _logged_utilization(ledger)
    flags = launch_flags(budget.uniform_budget_bytes, totals, start_free, guard_bytes, logged)
    version = spec.vllm_version if spec is not None else _logged_version(ledger)
    checks = [
        check_startup_memory(
            budget.ranks, totals, start_free, guard_bytes, flags.gpu_memory_utilization, version
        ),
        check_full_request(spec, budget.uniform_budget_bytes, max_model_len, min(budget.room_bytes)),
        check_footprint(budget.ranks, budget.uniform_budget_bytes, ref_free, non_kv, guard_bytes),
    ]
    return flags, checks


def _lowest_start_free(
    ledger: pd.DataFrame, ref_free: Sequence[int | None], ranks: Sequence[int]
) -> list[int | None]:
    """Per rank, the lowest start-up free memory of ``F_ref`` and every boot the rank shows [bytes].

    vLLM's start-up check runs at every boot, so ``--gpu-memory-utilization`` has to pass on the boot with
    the least free memory, not only on the boot that set the room (a restart can show more room but less
    free memory).

    >>> ledger = pd.DataFrame({"rank": [0, 0, 1], "init_free_bytes": [50, 47, None]})
    >>> _lowest_start_free(ledger, [50, 52], [0, 1])
    [47, 52]
    """
    lowest = lowest_free_bytes(ledger)
    return [
        ref if rank not in lowest else lowest[rank] if ref is None else min(ref, lowest[rank])
        for rank, ref in zip(ranks, ref_free)
    ]


def _per_rank_max(ledger: pd.DataFrame, columns: list[str], ranks: Sequence[int]) -> list[int | None]:
    """Per rank, the largest sum of ``columns`` over the rank's rows where every column is shown.

    >>> frame = pd.DataFrame({"rank": [0, 0, 1], "a": [1, 5, None], "b": [2, 2, 3]})
    >>> _per_rank_max(frame, ["a", "b"], [0, 1])
    [7, None]
    """
    if any(column not in ledger.columns for column in columns):
        return [None] * len(ranks)
    rows = ledger[["rank", *columns]].dropna()
    sums = rows[columns].astype("int64").sum(axis=1).groupby(rows["rank"]).max()
    return [int(sums[rank]) if rank in sums.index else None for rank in ranks]


def _room_boot_parts(ledger: pd.DataFrame, rooms: pd.DataFrame) -> list[int | None]:
    """Per rank of ``rooms``, the non-KV parts of the boot that set its room (its source and boot), summed.

    >>> ledger = pd.DataFrame({"source": ["a", "b"], "boot": [0, 0], "rank": [0, 0], "weights_bytes": [5, 9],
    ...                        "activation_peak_bytes": [1, 1], "non_torch_bytes": [1, 1], "cuda_graph_bytes": [1, 1]})
    >>> _room_boot_parts(ledger, pd.DataFrame({"source": ["a"], "boot": [0]}, index=[0]))
    [8]
    """
    out: list[int | None] = []
    for rank, room in rooms.iterrows():
        rows = ledger[
            (ledger["rank"] == rank) & (ledger["source"] == room["source"]) & (ledger["boot"] == room["boot"])
        ]
        out.append(_per_rank_max(rows, list(NON_KV_PARTS), [rank])[0])
    return out


def _logged_utilization(ledger: pd.DataFrame) -> float | None:
    """The lowest ``gpu_memory_utilization`` the profiled boots ran at (None when not shown)."""
    if "gpu_memory_utilization" not in ledger.columns:
        return None
    shown = ledger["gpu_memory_utilization"].dropna()
    return float(shown.min()) if not shown.empty else None


def _logged_version(ledger: pd.DataFrame) -> str | None:
    """The vLLM release the logs show (the first), None when not shown."""
    if "vllm_version" not in ledger.columns:
        return None
    shown = [value for value in ledger["vllm_version"] if is_known(value)]
    return str(shown[0]) if shown else None
