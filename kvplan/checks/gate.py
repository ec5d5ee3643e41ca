"""Gate a canary boot against an approved budget (:class:`Approved`): each check with its verdict and evidence."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import pandas as pd

from kvplan.budget import kv_cache_flag, largest_utilization, launch_flags_text, round_down_to_blocks
from kvplan.checks import Check
from kvplan.checks.canary import (
    MEASURE_CANARY,
    check_canary_utilization,
    check_canary_value,
    judged_on_complete_evidence,
    manual_values,
)
from kvplan.checks.key import check_compatibility_key, check_outcomes, check_ranks_present, rank_list
from kvplan.drift import adjusted_budget_bytes, lowest_free_bytes, per_rank
from kvplan.units import format_budget, format_size

BUDGET_CHECK = "approved value fits every rank"
RESERVE_CHECK = "reserve present after warm-up"
TOKENS_CHECK = "tokens cover the admission plan"
OWN_GATE_CHECK = "the approved boot passes its own gate"


@dataclass(frozen=True)
class Approved:
    """What a gate needs from an approval [bytes, one entry per approved rank; None: not shown]; tokens: the
    admission plan's, the lowest logged "GPU KV cache size", the value's at ``max_model_len``."""

    budget_bytes: int
    ranks: tuple[int, ...]
    safe_bytes: tuple[int, ...]
    ref_free_bytes: tuple[int | None, ...]
    reserve_bytes: int
    guard_bytes: int
    block_bytes: int | None
    compatibility_key: Mapping[str, object]
    tokens_required: int | None = None
    logged_tokens: int | None = None
    capacity_tokens: int | None = None
    defaulted_key_fields: frozenset[str] = frozenset()
    gpu_memory_utilization: float | None = None
    total_bytes: tuple[int | None, ...] = ()


def check_budget_fits(approved: Approved, boot_ledger: pd.DataFrame, guard_bytes: int) -> Check:
    """Per rank, the lower of the drift rule ``safe_ref − max(0, F_ref − F_boot)`` and the boot's own room less
    the reserve, less the guard, is ≥ the approved value; a manual value that may hold more whole blocks fails.
    """
    boot_free = lowest_free_bytes(boot_ledger)
    room = per_rank(boot_ledger, "room_bytes", "min")
    manual = manual_values(boot_ledger)
    budget = approved.budget_bytes
    lines, estimates, reprofile = _rank_estimates(approved, boot_free, room, guard_bytes)
    above = [
        _above_text(rank, logged, most, budget)
        for rank, (logged, most) in sorted(manual.items())
        if _blocks(most, approved.block_bytes) > _blocks(budget, approved.block_bytes)
    ]
    failed = bool(above) or any(value < budget for value in estimates.values())
    unjudged = [rank for rank in approved.ranks if rank not in estimates]
    if unjudged and not failed:
        refs = dict(zip(approved.ranks, approved.ref_free_bytes))
        not_approved = [rank for rank in unjudged if refs[rank] is None]
        not_booted = [rank for rank in unjudged if rank not in boot_free]
        places = ((not_approved, "at approval"), (not_booted, "in this boot"))
        where = [f"rank {rank_list(ranks)} {place}" for ranks, place in places if ranks]
        return Check(BUDGET_CHECK, None, f"startup free memory not shown for {' and '.join(where)}")
    if reprofile:
        lines.append("some rank has more free memory than at approval: re-profile to raise the value")
    lines += above
    if failed:
        if unjudged:
            lines.append(f"rank {rank_list(unjudged)}: no startup free memory or room shown")
        if estimates:
            lowest = min(estimates.values())
            limiting = next(rank for rank in approved.ranks if estimates.get(rank) == lowest)
            utilization = _remedy_utilization(approved, boot_ledger, boot_free, guard_bytes)
            lines.append(_lower_value_text(lowest, limiting, approved.block_bytes, utilization))
    return Check(BUDGET_CHECK, not failed, "; ".join(lines))


def _rank_estimates(
    approved: Approved, boot_free: Mapping[int, int], room: Mapping[int, int], guard_bytes: int
) -> tuple[list[str], dict[int, int], bool]:
    """Per rank one line (the lower estimate first), the estimates by rank, whether a rank gained free memory."""
    budget = approved.budget_bytes
    lines, estimates = [], {}
    reprofile = False
    for rank, safe, ref in zip(approved.ranks, approved.safe_bytes, approved.ref_free_bytes):
        shown = []  # (estimate, its text)
        if ref is not None and rank in boot_free:
            adjusted = adjusted_budget_bytes(safe, int(ref), boot_free[rank], guard_bytes)
            reprofile = reprofile or boot_free[rank] > int(ref)
            drift = f"{format_size(safe)} − max(0, {format_size(int(ref))} − {format_size(boot_free[rank])})"
            shown.append((adjusted, f"{drift} − {format_size(guard_bytes)} = {_versus(adjusted, budget)}"))
        if rank in room:
            own = room[rank] - approved.reserve_bytes - guard_bytes
            parts = f"{format_size(room[rank])} − reserve {format_size(approved.reserve_bytes)}"
            shown.append(
                (own, f"the boot's own room {parts} − {format_size(guard_bytes)} = {_versus(own, budget)}")
            )
        if shown:
            shown.sort(key=lambda item: item[0])  # stable: the drift rule first on a tie
            estimates[rank] = shown[0][0]
            also = f" (also {shown[1][1]})" if len(shown) > 1 else ""
            lines.append(f"rank {rank}: {shown[0][1]}{also}")
    return lines, estimates, reprofile


def check_own_gate(approved: Approved, boot_ledger: pd.DataFrame) -> Check | None:
    """The refusal of an approval whose recorded guard fails its own boots where they pass without it (issue 24)."""
    check = check_budget_fits(approved, boot_ledger, approved.guard_bytes)
    if check.passed is not False or check_budget_fits(approved, boot_ledger, 0).passed is False:
        return None
    room = per_rank(boot_ledger, "room_bytes", "min")
    _, estimates, _ = _rank_estimates(approved, lowest_free_bytes(boot_ledger), room, 0)
    most = (
        min(estimates.values()) - approved.budget_bytes if estimates else 0
    )  # the largest guard that passes
    keeps = f"keeps {most:,} B ({format_size(most)})" if most > 0 else "keeps nothing"
    smaller = f"--guard {most:,} B or less, or " if most > 0 else ""
    why = (
        f"with --guard {format_size(approved.guard_bytes)}, recorded as kvplan gate's default, the approved boot "
        f"itself fails the gate (its weakest rank {keeps} above the approved value); next: approve again with "
        f"{smaller}--guard 0 and give canaries their guard with kvplan gate --guard"
    )
    return Check(OWN_GATE_CHECK, False, why)


def _versus(value: int, budget: int) -> str:
    """``28.25 GiB < 30 GiB``: a rank's estimate against the approved value."""
    return f"{format_size(value)} {'≥' if value >= budget else '<'} {format_size(budget)}"


def check_reserve_after_warmup(
    approved: Approved,
    boot_ledger: pd.DataFrame,
    free_after_warmup_bytes: Mapping[int, int] | None = None,
) -> Check:
    """The reserve is still free on every rank after warm-up: in a snapshot taken then, else ``room − manual
    value``; no observation: not applicable, a rank unseen: cannot judge."""
    room = per_rank(boot_ledger, "room_bytes", "min")
    manual = {rank: most for rank, (_shown, most) in manual_values(boot_ledger).items()}
    lines, passed, unseen, reserve = [], True, [], format_size(approved.reserve_bytes)
    for rank in approved.ranks:
        if free_after_warmup_bytes is not None and rank in free_after_warmup_bytes:
            left, how = free_after_warmup_bytes[rank], "free after warm-up (snapshot)"
        elif rank in room and rank in manual:
            left = room[rank] - manual[rank]
            how = f"room {format_size(room[rank])} − KV {format_size(manual[rank])}"
        else:
            unseen.append(rank)
            continue
        ok = left >= approved.reserve_bytes
        passed = passed and ok
        lines.append(f"rank {rank}: {how} = {format_size(left)} {'≥' if ok else '<'} reserve {reserve}")
    if not lines:
        why = (
            "no observation after warm-up (give an nvidia-smi snapshot taken after warm-up with --nvidia-smi, "
            "or gate a boot that ran the manual value and logged its room)"
        )
        return Check.not_applicable(RESERVE_CHECK, why)
    if unseen:  # issue 24: a rank not observed cannot pass, whatever the others show
        lines.append(f"rank {rank_list(unseen)}: no free memory after warm-up shown: cannot judge")
    verdict = None if passed and unseen else passed
    return Check(RESERVE_CHECK, verdict, "; ".join(lines))


def check_tokens(approved: Approved, boot_ledger: pd.DataFrame) -> Check:
    """The boot's logged "GPU KV cache size" [tokens] covers the admission plan recorded at approval."""
    if approved.tokens_required is None:
        why = "no admission plan recorded at approval (approve with --target-concurrency and --seq-len)"
        return Check.not_applicable(TOKENS_CHECK, why)
    if "kv_cache_tokens" not in boot_ledger.columns or boot_ledger["kv_cache_tokens"].dropna().empty:
        return Check(TOKENS_CHECK, None, "the boot did not log its GPU KV cache size")
    tokens = int(boot_ledger["kv_cache_tokens"].dropna().min())
    passed = tokens >= approved.tokens_required
    plan = approved.tokens_required
    return Check(
        TOKENS_CHECK,
        passed,
        f"GPU KV cache size {tokens:,} tokens {'≥' if passed else '<'} plan {plan:,} tokens",
    )


def gate_checks(
    approved: Approved,
    boot_ledger: pd.DataFrame,
    boot_key: Mapping[str, object],
    guard_bytes: int | None = None,
    free_after_warmup_bytes: Mapping[int, int] | None = None,
    boot_defaults: Collection[str] = (),
) -> list[Check]:
    """Every gate check of a boot against an approval, in a fixed order (``guard_bytes`` None: the approval's)."""
    guard = approved.guard_bytes if guard_bytes is None else guard_bytes
    if guard < 0:
        raise ValueError(f"guard must not be negative, got {guard} bytes")
    checks = [
        check_compatibility_key(
            approved.compatibility_key,
            boot_key,
            "manual_kv_bytes" in boot_ledger and bool(boot_ledger["manual_kv_bytes"].notna().any()),
            approved_defaults=approved.defaulted_key_fields,
            boot_defaults=boot_defaults,
        ),
        check_ranks_present(approved.ranks, boot_ledger),
        check_outcomes(boot_ledger),
        check_budget_fits(approved, boot_ledger, guard),
        check_reserve_after_warmup(approved, boot_ledger, free_after_warmup_bytes),
        check_tokens(approved, boot_ledger),
        check_canary_utilization(approved, boot_ledger, boot_key, guard),
        check_canary_value(approved, boot_ledger),
    ]
    return judged_on_complete_evidence(checks)


def _remedy_utilization(
    approved: Approved, boot_ledger: pd.DataFrame, boot_free: Mapping[int, int], guard_bytes: int
) -> float | str:
    """The companion U of a lower value on this boot's free memory less the guard (≤ the approval's), or why none."""
    totals, recorded = (
        per_rank(boot_ledger, "total_bytes", "max"),
        dict(zip(approved.ranks, approved.total_bytes)),
    )
    pairs = [(totals.get(rank, recorded.get(rank)), boot_free.get(rank)) for rank in approved.ranks]
    unseen = [rank for rank, (total, free) in zip(approved.ranks, pairs) if total is None or free is None]
    if unseen:
        return f"rank {rank_list(unseen)} shows no free or total memory at start-up: {MEASURE_CANARY}"
    utilization = largest_utilization([t for t, _ in pairs], [f for _, f in pairs], guard_bytes)  # type: ignore[misc]
    if utilization is None:
        return "no --gpu-memory-utilization ≥ 0.01 passes vLLM's start-up check on this boot's free memory"
    if approved.gpu_memory_utilization is not None:
        utilization = min(utilization, approved.gpu_memory_utilization)
    return utilization


def _lower_value_text(
    uniform_bytes: int, limiting_rank: int, block_bytes: int | None, utilization: float | str
) -> str:
    """The gate's remedy: the lower value in whole blocks with its companion U, or why no launch is offered."""
    value = (
        uniform_bytes
        if block_bytes is None or uniform_bytes <= 0
        else round_down_to_blocks(uniform_bytes, block_bytes)
    )
    if value <= 0:
        return f"no value fits rank {limiting_rank}: re-profile this deployment"
    if isinstance(utilization, str):
        return f"{format_size(value)} would fit rank {limiting_rank}, but no launch can be offered: {utilization}"
    rounding = " (whole blocks)" if block_bytes else ""
    return (
        f"a lower value fits: {format_size(value)}{rounding}, "
        f"{' '.join(launch_flags_text(value, utilization))} (limiting rank {limiting_rank})"
    )


def _above_text(rank: int, shown: int, most: int, budget: int) -> str:
    """Why a rank's manual value is not a canary of the approved ``budget`` (it is, or may be, above it)."""
    if most == shown:
        return (
            f"rank {rank} ran {kv_cache_flag(shown)}, above the approved {format_budget(budget)}: not a canary "
            "of the approved value"
        )
    return (
        f"rank {rank} ran a value vLLM printed as {format_size(shown)} (to 0.01 GiB), so up to "
        f"{kv_cache_flag(most)}, which may be above the approved {format_budget(budget)}: no canary pass without "
        "the flag's exact bytes (give the API server's log: its 'non-default args' line states them)"
    )


def _blocks(kv_bytes: int, block_bytes: int | None) -> int:
    """What vLLM allocates for a manual value: whole blocks (the bytes when the block size is unknown)."""
    return kv_bytes if not block_bytes else kv_bytes // block_bytes
