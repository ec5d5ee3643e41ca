"""vLLM's own start-up refusals of an approved value, per release, and the launch flags that pass them.

vLLM refuses to start, also with ``--kv-cache-memory-bytes``, when (a) a rank's free memory is below
``ceil(total × gpu_memory_utilization)`` (``v1/worker/utils.py:request_memory`` 0.20–0.33; ``free < total × U``
in ``gpu_worker.init_device`` 0.9.1–0.10.2; none before), or (b) one request of ``max_model_len`` tokens does
not fit (V1 ``_check_enough_kv_cache_memory``, less the null block from 0.29; V0 ``raise_if_cache_size_invalid``).
(c) is kvplan's own: the value plus the non-KV footprint fits free memory. Any other refusal of a manual value
(0.33 ``config/cache.py``) holds by construction."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from kvplan.budget import (
    PRINTED_MARGIN_BYTES,
    Budget,
    largest_utilization,
    passes_startup_check,
)
from kvplan.checks import Check
from kvplan.drift import lowest_free_bytes, per_rank, reference_free_bytes
from kvplan.kvspec import KVSpec
from kvplan.kvspec.arch import parse_vllm_version
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


def launch_flags(
    total_bytes: Sequence[int | None],
    free_bytes: Sequence[int | None],
    guard_bytes: int,
    logged_utilization: float | None = None,
) -> tuple[float | None, str | None]:
    """The companion U on ranks with these totals and start-up free memory [bytes] (none known: the profiled
    boot's), and what to measure when it rests on incomplete evidence."""
    known = [(t, f) for t, f in zip(total_bytes, free_bytes) if t is not None and f is not None]
    if not known:
        given = (
            f"{logged_utilization:.2f}, the value the profiled boot ran at"
            if logged_utilization is not None
            else "not given: none is known"
        )
        unknown = f"no rank's free memory at start-up is known, so --gpu-memory-utilization is {given}"
        return logged_utilization, f"{unknown}; {MEASURE_FREE}"
    utilization = largest_utilization([t for t, _ in known], [f for _, f in known], guard_bytes)
    if len(known) < len(total_bytes):
        missing = "some rank's free or total memory at start-up is not shown; U covers the others only"
        return utilization, f"{missing}: {MEASURE_FREE}"
    return utilization, None


def check_startup_memory(
    ranks: Sequence[int],
    total_bytes: Sequence[int | None],
    free_bytes: Sequence[int | None],
    guard_bytes: int,
    utilization: float | None,
    vllm_version: str | None,
) -> Check:
    """(a) vLLM's start-up check with ``utilization`` on every rank's free memory less the guard, one line per rank."""
    if parse_vllm_version(vllm_version) < STARTUP_FREE_CHECK_FROM:
        why = f"vLLM {vllm_version} has no start-up free-memory check (V0 worker.py, V1 before 0.9.1)"
        return Check.not_applicable(UTILIZATION_CHECK, why)
    if not any(t is not None and f is not None for t, f in zip(total_bytes, free_bytes)):
        return Check.not_applicable(UTILIZATION_CHECK, f"no free and total memory known; {MEASURE_FREE}")
    if utilization is None:
        step = (
            "approve again with --guard 0 (a canary takes its guard from kvplan gate --guard)"
            if guard_bytes
            else "free GPU memory (other processes) and profile again"
        )
        too_low = "no --gpu-memory-utilization ≥ 0.01 passes on every rank: free memory is too low"
        return Check(UTILIZATION_CHECK, False, f"{too_low}; next: {step}")
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
    """The largest ``max_model_len`` (≤ the given one) whose one request fits ``kv_bytes``: V0 ``block_size ×
    blocks``; V1 vLLM's ``estimate_max_model_len``, the length ``--max-model-len -1`` fits."""
    if parse_vllm_version(spec.vllm_version) < V1_DEFAULT_FROM:
        return min(max_model_len, spec.num_blocks(kv_bytes) * spec.block_size)
    return spec.auto_fit_max_model_len(kv_bytes, max_model_len)


def request_bytes(spec: KVSpec, max_model_len: int) -> int:
    """The smallest per-rank KV value [bytes] holding one request of ``max_model_len`` tokens (+ the null block
    from 0.29)."""
    version = parse_vllm_version(spec.vllm_version)
    if version < V1_DEFAULT_FROM:
        blocks = math.ceil(max_model_len / spec.block_size)
    else:
        blocks = spec.blocks_per_request(max_model_len) + (version >= AUTO_FIT_NULL_BLOCK_FROM)
    return blocks * spec.block_bytes


def check_full_request(
    spec: KVSpec | None, budget_bytes: int, max_model_len: int | None, min_room_bytes: int | None
) -> Check:
    """(b) One request of ``max_model_len`` tokens fits the approved value; else the largest length that fits,
    or the reserve that would allow it (``min_room_bytes``: the weakest rank's room)."""
    if spec is None or max_model_len is None:
        return Check.not_applicable(REQUEST_CHECK, "give --model (and the length) to count blocks")
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
    """(c) Per rank, the approved value plus the non-KV footprint (weights, activation peak, non-torch, graphs)
    fits the start-up free memory less the guard."""
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
        return Check.not_applicable(FOOTPRINT_CHECK, f"no free memory known; {MEASURE_FREE}")
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
) -> tuple[float | None, str | None, list[Check]]:
    """The companion U of ``budget``, what to measure when it rests on incomplete evidence, and the checks (a), (b), (c),
    per rank on the largest total memory, the lowest start-up free memory, ``F_ref`` and the non-KV footprint of
    the boot that set the room (``F_ref − room`` for vLLM's suggestion, else that boot's parts)."""
    ref_free = reference_free_bytes(ledger, rooms)
    lowest = lowest_free_bytes(ledger)
    start_free = [
        ref if rank not in lowest else lowest[rank] if ref is None else min(ref, lowest[rank])
        for rank, ref in zip(budget.ranks, ref_free)
    ]
    totals = [per_rank(ledger, "total_bytes", "max").get(rank) for rank in budget.ranks]
    non_kv = [
        None if free is None else free - room if source == "suggestion" or parts is None else parts
        for parts, free, room, source in zip(
            _room_boot_parts(ledger, rooms), ref_free, budget.room_bytes, rooms["room_source"].astype(str)
        )
    ]
    utilizations, versions = (
        ledger[c].dropna() if c in ledger.columns else pd.Series(dtype=object)
        for c in ("gpu_memory_utilization", "vllm_version")
    )
    utilization, warning = launch_flags(
        totals, start_free, guard_bytes, float(utilizations.min()) if len(utilizations) else None
    )
    version = spec.vllm_version if spec is not None else str(versions.iloc[0]) if len(versions) else None
    checks = [
        check_startup_memory(budget.ranks, totals, start_free, guard_bytes, utilization, version),
        check_full_request(spec, budget.uniform_budget_bytes, max_model_len, min(budget.room_bytes)),
        check_footprint(budget.ranks, budget.uniform_budget_bytes, ref_free, non_kv, guard_bytes),
    ]
    return utilization, warning, checks


def _room_boot_parts(ledger: pd.DataFrame, rooms: pd.DataFrame) -> list[int | None]:
    """Per rank of ``rooms``, the largest sum of the non-KV parts over the rows of the boot that set its room."""
    if any(column not in ledger.columns for column in NON_KV_PARTS):
        return [None] * len(rooms)
    out: list[int | None] = []
    for rank, room in rooms.iterrows():
        boot = (
            (ledger["rank"] == rank) & (ledger["source"] == room["source"]) & (ledger["boot"] == room["boot"])
        )
        rows = ledger.loc[boot, list(NON_KV_PARTS)].dropna()
        out.append(int(rows.astype("int64").sum(axis=1).max()) if len(rows) else None)
    return out
