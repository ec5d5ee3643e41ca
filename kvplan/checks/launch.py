"""vLLM's own start-up refusals of an approved value, per release, and the launch flags that pass them.

vLLM refuses to start, also with ``--kv-cache-memory-bytes`` set, when (a) a rank's free memory is below
``ceil(total × gpu_memory_utilization)`` (``v1/worker/utils.py:request_memory`` 0.20–0.33; ``free < total × U``
in ``gpu_worker.init_device`` 0.9.1–0.10.2; none before): the flag travels with a companion U
(:func:`kvplan.budget.largest_utilization`); (b) one request of ``max_model_len`` tokens does not fit
(V1 ``_check_enough_kv_cache_memory``, less the null block from 0.29; V0 ``raise_if_cache_size_invalid``):
:func:`check_full_request`. (c) is kvplan's own: the value plus the non-KV footprint fits free memory
(:func:`check_footprint`). Any other refusal of a manual value (0.33 ``config/cache.py``) holds by construction.

:func:`launch_section` judges a decision's launch per rank on the largest total memory, ``F_ref``
(:func:`kvplan.drift.reference_free_bytes`) and the non-KV footprint of the boot that set the room (``F_ref −
room`` for vLLM's suggestion, else that boot's weights + activation peak + non-torch + graphs where shown).

>>> largest_utilization([85_029_615_043], [52_194_590_065], 0)  # 79.19 GiB total, 48.61 GiB free
0.61
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from kvplan.budget import (
    PRINTED_MARGIN_BYTES,
    Budget,
    largest_utilization,
    launch_flags_text,
    passes_startup_check,
)
from kvplan.checks import Check
from kvplan.drift import lowest_free_bytes, reference_free_bytes
from kvplan.kvspec import KVSpec
from kvplan.kvspec.arch import parse_vllm_version
from kvplan.ledger import is_known
from kvplan.releases import AUTO_FIT_NULL_BLOCK_FROM, STARTUP_FREE_CHECK_FROM, V1_DEFAULT_FROM
from kvplan.units import format_size

UTILIZATION_CHECK = "vLLM's start-up free-memory check passes"
REQUEST_CHECK = "one max_model_len request fits"
FOOTPRINT_CHECK = "value + non-KV memory fit free memory"
#: The checks of vLLM's start-up refusals, in the order a decision lists them.
LAUNCH_CHECKS = (UTILIZATION_CHECK, REQUEST_CHECK, FOOTPRINT_CHECK)
#: What to measure when a rank's free memory at start-up is unknown.
MEASURE_FREE = (
    "measure every rank's free and total memory at start-up (nvidia-smi --query-gpu=memory.free,"
    "memory.total --format=csv, or the profiled boot's 'Free memory on device' lines) and run budget again"
)


@dataclass(frozen=True)
class LaunchFlags:
    """The whole set of flags a launch of the approved value needs.

    ``gpu_memory_utilization`` is None when no rank's free memory or logged utilization is known;
    ``warning`` then (or when some rank's free memory is unknown) says what to measure.

    >>> LaunchFlags(12_884_377_600, 0.61).flags
    ('--kv-cache-memory-bytes=12884377600', '--gpu-memory-utilization=0.61')
    """

    kv_cache_memory_bytes: int
    gpu_memory_utilization: float | None
    warning: str | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        """``--kv-cache-memory-bytes=B`` and, when known, ``--gpu-memory-utilization=U``."""
        return launch_flags_text(self.kv_cache_memory_bytes, self.gpu_memory_utilization)


def launch_flags(
    budget_bytes: int,
    total_bytes: Sequence[int | None],
    free_bytes: Sequence[int | None],
    guard_bytes: int,
    logged_utilization: float | None = None,
) -> LaunchFlags:
    """The launch flags of ``budget_bytes`` on ranks with these totals and start-up free memory [bytes].

    U comes from the ranks whose total and free memory are known; with none known, the utilization the
    profiled boot ran at (vLLM's check passed then) with a warning naming what to measure.

    >>> launch_flags(2**30, [None], [None], 0, 0.6).warning.startswith("no rank's free memory")
    True
    """
    known = [(t, f) for t, f in zip(total_bytes, free_bytes) if t is not None and f is not None]
    missing = len(known) < len(total_bytes)
    if not known:
        given = (
            f"{logged_utilization:.2f}, the value the profiled boot ran at"
            if logged_utilization is not None
            else "not given: none is known"
        )
        unknown = f"no rank's free memory at start-up is known, so --gpu-memory-utilization is {given}"
        return LaunchFlags(budget_bytes, logged_utilization, f"{unknown}; {MEASURE_FREE}")
    utilization = largest_utilization([t for t, _ in known], [f for _, f in known], guard_bytes)
    warning = (
        f"some rank's free or total memory at start-up is not shown; U covers the others only: {MEASURE_FREE}"
        if missing
        else None
    )
    return LaunchFlags(budget_bytes, utilization, warning)


def check_startup_memory(
    ranks: Sequence[int],
    total_bytes: Sequence[int | None],
    free_bytes: Sequence[int | None],
    guard_bytes: int,
    utilization: float | None,
    vllm_version: str | None,
) -> Check:
    """(a) vLLM's start-up check with ``utilization`` on every rank's free memory less the guard, one line
    per rank; not applicable before 0.9.1 (no such check) or without free-memory evidence.

    >>> check_startup_memory([0], [85_029_615_043], [52_194_590_065], 0, 0.61, "0.33.0").detail
    'rank 0: free 48.61 GiB − margin 5.12 MiB − guard 0 B ≥ ceil(79.2 GiB × 0.61) = 48.31 GiB'
    """
    if parse_vllm_version(vllm_version) < STARTUP_FREE_CHECK_FROM:
        return Check(
            UTILIZATION_CHECK,
            None,
            f"not applicable: vLLM {vllm_version} has no start-up free-memory check (V0 worker.py, V1 before 0.9.1)",
            applicable=False,
        )
    if not any(t is not None and f is not None for t, f in zip(total_bytes, free_bytes)):
        return Check(
            UTILIZATION_CHECK,
            None,
            f"not applicable: no free and total memory known; {MEASURE_FREE}",
            applicable=False,
        )
    if utilization is None:
        step = (
            "approve again with --guard 0 (a canary takes its guard from kvplan gate --guard)"
            if guard_bytes
            else "free GPU memory (other processes) and profile again"
        )
        return Check(
            UTILIZATION_CHECK,
            False,
            f"no --gpu-memory-utilization ≥ 0.01 passes on every rank: free memory is too low; next: {step}",
        )
    lines, passed = [], True
    for rank, total, free in zip(ranks, total_bytes, free_bytes):
        if total is None or free is None:
            lines.append(f"rank {rank}: free or total memory at start-up not shown")
            continue
        high, low = total + PRINTED_MARGIN_BYTES, free - PRINTED_MARGIN_BYTES - guard_bytes
        ok = passes_startup_check(high, low, utilization)
        passed = passed and ok
        lines.append(
            f"rank {rank}: free {format_size(free)} − margin {format_size(PRINTED_MARGIN_BYTES)} − guard "
            f"{format_size(guard_bytes)} {'≥' if ok else '<'} ceil({format_size(high)} × {utilization:.2f}) = "
            f"{format_size(math.ceil(high * utilization))}"
        )
    return Check(UTILIZATION_CHECK, passed, "; ".join(lines))


def largest_length(spec: KVSpec, kv_bytes: int, max_model_len: int) -> int:
    """The largest ``max_model_len`` (≤ the given one) whose one request fits ``kv_bytes`` in this release's
    rule: V0 ``block_size × blocks``; V1 vLLM's ``estimate_max_model_len`` (the null block held back from
    0.29), which is also the length ``--max-model-len -1`` fits (:meth:`KVSpec.auto_fit_max_model_len`).

    >>> from kvplan.kvspec import kv_spec
    >>> spec = kv_spec({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, vllm_version="0.6.6")  # 2 MiB blocks
    >>> largest_length(spec, 4 * 2**30, 131072)  # V0: 2,048 blocks × 16 tokens
    32768
    """
    if parse_vllm_version(spec.vllm_version) < V1_DEFAULT_FROM:
        return min(max_model_len, spec.num_blocks(kv_bytes) * spec.block_size)
    return spec.auto_fit_max_model_len(kv_bytes, max_model_len)


def request_bytes(spec: KVSpec, max_model_len: int) -> int:
    """The smallest per-rank KV value that holds one request of ``max_model_len`` tokens [bytes]: its blocks
    (V0: ``ceil(L / block_size)``) plus the null block from 0.29, on the limiting stage.

    >>> from kvplan.kvspec import kv_spec
    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4, vllm_version="0.33.0")
    >>> request_bytes(spec, 32768) // spec.block_bytes  # 2,048 blocks + the null block
    2049
    """
    version = parse_vllm_version(spec.vllm_version)
    if version < V1_DEFAULT_FROM:
        blocks = math.ceil(max_model_len / spec.block_size)
    else:
        blocks = spec.blocks_per_request(max_model_len) + (version >= AUTO_FIT_NULL_BLOCK_FROM)
    return blocks * spec.block_bytes


def check_full_request(
    spec: KVSpec | None, budget_bytes: int, max_model_len: int | None, min_room_bytes: int | None
) -> Check:
    """(b) One request of ``max_model_len`` tokens fits the approved value, by the release's own rule; on
    failure the next step: the largest ``--max-model-len`` that fits, or the reserve that would allow it
    (``min_room_bytes`` the weakest rank's room).

    >>> from kvplan.kvspec import kv_spec
    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4, vllm_version="0.26.0")
    >>> check_full_request(spec, 12_884_377_600, 32768, None).passed
    True
    """
    if spec is None or max_model_len is None:
        return Check(
            REQUEST_CHECK,
            None,
            "not applicable: give --model (and the length) to count blocks",
            applicable=False,
        )
    needed = request_bytes(spec, max_model_len)
    blocks = spec.num_blocks(budget_bytes)
    fits = largest_length(spec, budget_bytes, max_model_len)
    detail = (
        f"one request of {max_model_len:,} tokens needs {needed // spec.block_bytes:,} blocks "
        f"({format_size(needed)}) in vLLM {spec.vllm_version}'s rule; {format_size(budget_bytes)} holds {blocks:,}"
    )
    if fits >= max_model_len:
        return Check(REQUEST_CHECK, True, detail)
    steps = [f"the largest --max-model-len that fits is {fits:,}" if fits else "not even one token fits"]
    if fits:
        steps.append(f"--max-model-len -1 (auto-fit) would fit {fits:,}")
    if min_room_bytes is not None and min_room_bytes - needed > 0:
        steps.append(f"or a reserve ≤ {format_size(min_room_bytes - needed)} ({min_room_bytes - needed:,} B)")
    return Check(REQUEST_CHECK, False, f"{detail}: vLLM refuses to start; {'; '.join(steps)}")


def check_footprint(
    ranks: Sequence[int],
    budget_bytes: int,
    free_bytes: Sequence[int | None],
    non_kv_bytes: Sequence[int | None],
    guard_bytes: int,
) -> Check:
    """(c) Per rank, the approved value plus the non-KV footprint (weights, activation peak, non-torch,
    CUDA graphs) fits the start-up free memory less the guard; not applicable where neither is known.

    >>> check_footprint([0], 10, [100], [80], 5).detail
    'rank 0: 10 B + non-KV 80 B = 90 B ≤ free 100 B − guard 5 B'
    """
    lines, excess = [], None  # the most a rank's value + non-KV exceeds its limit [bytes]
    for rank, free, non_kv in zip(ranks, free_bytes, non_kv_bytes):
        if free is None or non_kv is None:
            continue
        used, limit = budget_bytes + non_kv, free - guard_bytes
        excess = used - limit if excess is None else max(excess, used - limit)
        lines.append(
            f"rank {rank}: {format_size(budget_bytes)} + non-KV {format_size(non_kv)} = {format_size(used)} "
            f"{'≤' if used <= limit else '>'} free {format_size(free)} − guard {format_size(guard_bytes)}"
        )
    if excess is None:
        return Check(
            FOOTPRINT_CHECK, None, f"not applicable: no free memory known; {MEASURE_FREE}", applicable=False
        )
    passed = excess <= 0
    if not passed:  # what to run: the value falls by the reserve added; without the guard the limit rises
        guard = (
            "--guard 0 (a canary takes its guard from kvplan gate --guard) or "
            if guard_bytes >= excess
            else ""
        )
        lines.append(f"next: approve again with {guard}a reserve {format_size(excess)} ({excess:,} B) larger")
    return Check(FOOTPRINT_CHECK, passed, "; ".join(lines))


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
    (:func:`~kvplan.drift.reference_free_bytes`)."""
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
