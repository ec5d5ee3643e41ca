"""A canary as evidence of the approved launch (issue 24): whether it is evidence at all (else exit 2), whether
it starts again, ran exactly the approved value (or startup plan) and serves it (``vllm:cache_config_info``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from kvplan.budget import kv_cache_flag
from kvplan.checks import Check
from kvplan.checks.key import KEY_CHECK, OUTCOME_CHECK, RANKS_CHECK
from kvplan.checks.launch import check_startup_memory
from kvplan.drift import lowest_free_bytes, per_rank
from kvplan.io.vllm.manual import APPLIED, NOT_APPLIED, StartupPlanLine
from kvplan.units import format_size

if TYPE_CHECKING:
    from kvplan.checks.gate import Approved
    from kvplan.io.prometheus import RunningValue

VALUE_CHECK = "canary ran the approved value"
#: What to give when a canary rank's free or total memory at start-up is not shown.
MEASURE_CANARY = (
    "gate a canary whose log shows every rank's free and total memory at start-up "
    "(VLLM_LOGGING_LEVEL=DEBUG prints them per rank)"
)
PLAN_CHECK = "startup plan applied on every rank"
#: The checks that say whether the canary is evidence of the approved launch at all (issue 24), and why not.
_NOT_EVIDENCE = {
    KEY_CHECK: "the canary shows another compatibility key",
    RANKS_CHECK: "the canary misses or adds ranks",
    OUTCOME_CHECK: "the canary's log stops before the KV cache is sized",
}
EVIDENCE_CHECKS = tuple(_NOT_EVIDENCE)


def judged_on_complete_evidence(checks: list[Check]) -> list[Check]:
    """``checks`` as a gate reports them: a canary of another key, with missing or extra ranks or cut short is no
    evidence, so those checks cannot judge and no other check is judged; an OOM or error still fails."""
    incomplete = [
        _NOT_EVIDENCE[c.name]
        for c in checks
        if c.name in _NOT_EVIDENCE and (c.passed is False if c.name != OUTCOME_CHECK else c.passed is None)
    ]
    if not incomplete:
        return checks
    reason = "; ".join(incomplete)
    out = []
    for check in checks:
        if check.name in (KEY_CHECK, RANKS_CHECK) and check.passed is False:
            out.append(Check(check.name, None, f"cannot judge: {check.detail}"))
        elif check.name in EVIDENCE_CHECKS or not check.applicable:
            out.append(check)
        else:
            out.append(Check(check.name, None, f"not judged: {reason}"))
    return out


def check_canary_utilization(
    approved: Approved, boot_ledger: pd.DataFrame, boot_key: Mapping[str, object], guard_bytes: int
) -> Check:
    """The canary's ``gpu_memory_utilization`` passes vLLM's start-up check on its free memory less the guard."""
    utilization = boot_key.get("gpu_memory_utilization")
    totals = per_rank(boot_ledger, "total_bytes", "max")
    free = lowest_free_bytes(boot_ledger)
    ranks = approved.ranks
    check = check_startup_memory(
        ranks,
        [totals.get(rank) for rank in ranks],
        [free.get(rank) for rank in ranks],
        guard_bytes,
        float(utilization) if isinstance(utilization, (int, float)) else None,
        str(boot_key.get("vllm_version")) if boot_key.get("vllm_version") is not None else None,
    )
    if check.passed is False and not isinstance(utilization, (int, float)):
        return Check(check.name, None, "the canary shows no gpu_memory_utilization")
    unseen = [rank for rank in ranks if totals.get(rank) is None or free.get(rank) is None]
    if check.passed and unseen:  # a check that could not see every rank cannot pass
        return Check(
            check.name, None, f"{check.detail}; cannot judge the rank(s) not shown: {MEASURE_CANARY}"
        )
    return check


def check_canary_value(approved: Approved, boot_ledger: pd.DataFrame) -> Check:
    """Every rank of a canary that ran a manual value ran exactly the approved bytes (a value printed to 0.01 GiB:
    its interval holds them)."""
    manual = manual_values(boot_ledger)
    if not manual:
        return Check.not_applicable(VALUE_CHECK, "the canary profiled (no manual value)")
    lines, passed = [], True
    budget = approved.budget_bytes
    for rank in approved.ranks:
        if rank not in manual:
            lines.append(f"rank {rank}: no manual value shown")
            passed = False
            continue
        logged, most = manual[rank]
        lowest = logged - (most - logged)
        if logged == most:
            ok = logged == budget
            text = f"ran {kv_cache_flag(logged)}, approved {kv_cache_flag(budget)}"
        else:
            ok = lowest <= budget <= most
            text = f"ran {format_size(logged)} (printed to 0.01 GiB: {lowest:,}–{most:,} B), approved {budget:,} B"
        passed = passed and ok
        lines.append(f"rank {rank}: {text}")
    return Check(VALUE_CHECK, passed, "; ".join(lines))


def manual_values(boot_ledger: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """Per rank that ran a manual value: (the value as logged, the most the flag can be) [bytes]."""
    shown = per_rank(boot_ledger, "manual_kv_bytes", "max")
    most = per_rank(boot_ledger, "manual_kv_max_bytes", "max")
    return {rank: (value, max(value, most.get(rank, value))) for rank, value in shown.items()}


def check_startup_plan(
    approved: Approved,
    boot_ledger: pd.DataFrame,
    plan_lines: Mapping[str, Sequence[StartupPlanLine]],
    plan_values: Mapping[str, int],
) -> Check:
    """Every rank of a canary logged "Applying persisted startup plan (fingerprint <fp>): kv_cache_memory_bytes=<v>" of
    an exported plan (``plan_values``: fingerprint → value; ``plan_lines`` by source); "not applied" fails."""
    by_rank: dict[int, list[tuple[str, StartupPlanLine]]] = {}
    for row in boot_ledger[["source", "rank", "pid"]].dropna().drop_duplicates().itertuples(index=False):
        found = [
            (str(row.source), line)
            for line in plan_lines.get(str(row.source), ())
            if line.pid == int(row.pid)
        ]
        by_rank.setdefault(int(row.rank), []).extend(found)
    if not any(by_rank.values()):
        return Check.not_applicable(PLAN_CHECK, "no rank logged a startup plan line")
    lines, passed = [], True
    for rank in approved.ranks:
        text, ok = _plan_line_text(by_rank.get(rank, []), plan_values)
        passed = passed and ok
        lines.append(f"rank {rank}: {text}")
    return Check(PLAN_CHECK, passed, "; ".join(lines))


def _plan_line_text(
    found: Sequence[tuple[str, StartupPlanLine]], plan_values: Mapping[str, int]
) -> tuple[str, bool]:
    """What one rank's startup-plan lines say, and whether it ran the approved plan."""
    refused = [(source, line) for source, line in found if line.kind == NOT_APPLIED]
    applied = [(source, line) for source, line in found if line.kind == APPLIED]
    if refused:
        source, line = refused[0]
        return (
            f"startup plan not applied: free memory {format_size(line.free_bytes or 0)} below the baseline "
            f"{format_size(line.baseline_bytes or 0)}; vLLM profiled instead ({source}:{line.line})"
        ), False
    if not applied:
        return "no 'Applying persisted startup plan' line", False
    source, line = applied[-1]
    expected = plan_values.get(str(line.fingerprint))
    where = f"({source}:{line.line})"
    if expected is None:
        return f"applied plan {line.fingerprint}, which is not one of the approved plan files {where}", False
    ok = line.kv_cache_memory_bytes == expected
    relation = "= the plan" if ok else f"≠ the plan's {expected:,}"
    return (
        f"applied plan {line.fingerprint}, kv_cache_memory_bytes={line.kv_cache_memory_bytes} {relation} {where}",
        ok,
    )


RUNNING_CHECK = "running value"


def _verdict(value: RunningValue, approved_bytes: int, blocks: int | None) -> tuple[bool | None, str]:
    """Whether one engine runs the approved value, and the evidence."""
    from kvplan.io.prometheus import ABSENT  # requests: only where a running value is judged

    got = value.kv_cache_memory_bytes
    if got == ABSENT:
        bytes_ok, said = None, "shows no kv_cache_memory_bytes"
    elif got is None:
        bytes_ok, said = False, "runs without --kv-cache-memory-bytes (kv_cache_memory_bytes=None)"
    else:
        bytes_ok = got == approved_bytes
        said = f"kv_cache_memory_bytes={got} {'=' if bytes_ok else '≠'} the approved {approved_bytes}"
    if value.num_gpu_blocks is None or blocks is None:
        blocks_ok = None
        said += (
            f"; num_gpu_blocks={value.num_gpu_blocks or 'not shown'} (approved blocks {blocks or 'unknown'})"
        )
    else:
        blocks_ok = value.num_gpu_blocks >= blocks
        said += f"; num_gpu_blocks={value.num_gpu_blocks} {'≥' if blocks_ok else '<'} the approved {blocks}"
    if bytes_ok is False or blocks_ok is False:
        return False, said
    return (True if bytes_ok and blocks_ok else None), said


def check_running_values(
    values: Sequence[RunningValue], approved_bytes: int, block_bytes: int | None
) -> list[Check]:
    """One check per engine that reported a running value (``vllm:cache_config_info``); none when none did."""
    blocks = approved_bytes // block_bytes if block_bytes else None  # whole blocks per GPU (None: unknown)
    checks = []
    for value in values:
        where = f"{value.where} engine {value.engine}"
        if value.shows_bytes:
            passed, said = _verdict(value, approved_bytes, blocks)
            checks.append(Check(RUNNING_CHECK, passed, f"{where}: {said}"))
        elif blocks is None:
            checks.append(Check(RUNNING_CHECK, None, f"{where}: the approved blocks are unknown", False))
        else:
            ok = (value.num_gpu_blocks or 0) >= blocks
            said = f"num_gpu_blocks={value.num_gpu_blocks} {'≥' if ok else '<'} the approved {blocks}"
            checks.append(Check(RUNNING_CHECK, ok, f"{where}: {said}"))
    return checks
