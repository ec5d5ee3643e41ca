"""Gate checks for a canary's load test (``kvplan gate … --load``): pure functions returning ``Check``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from kvplan.load.compare import capacity_change_text, capacity_loss
from kvplan.load.summary import peak_row, preemptions_lower_bound, run_preemptions, where_text
from kvplan.load.timeline import load_timeline
from kvplan.load_reading import LoadReading
from kvplan.load_rows import LoadRow
from kvplan.verdict import Check

OOM_CHECK = "no OOM under load"
PREEMPTION_CHECK = "preemptions ≤ {max_preemptions}"
PEAK_CHECK = "peak KV cache usage reported"
CAPACITY_CHECK = "capacity vs profiled canary"


def load_checks(
    reading: LoadReading,
    *,
    max_preemptions: int = 0,
    profiled_kv_cache_tokens: int | None = None,
    max_capacity_loss_pct: float | None = None,
    kv_cache_tokens: int | None = None,
) -> list[Check]:
    """Gate checks for a canary's load test (``kvplan gate … --load``).

    Parameters
    ----------
    reading : the run, from :func:`kvplan.io.vllm_stats.read_load_evidence` (logs and /metrics alike).
    max_preemptions : policy threshold on preemptions in the whole run [count], default 0.
    profiled_kv_cache_tokens : KV capacity of the profiled canary [tokens]; when given (the canary is a
        manual-value canary), the capacity loss against it is checked.
    max_capacity_loss_pct : policy bound on that loss [%]; ``None`` reports the loss without a bound.
    kv_cache_tokens : the canary's KV capacity [tokens], when its load files do not state it.

    Returns the checks in order: no OOM; preemptions ≤ threshold; peak KV cache usage (reported, passes
    whenever it is known); and, with a profiled capacity, the capacity loss. ``passed`` is ``None`` when
    the evidence cannot tell.

    >>> rows = (LoadRow("s.log", 4, None, 0, kv_cache_usage_pct=88.0, preemptions=0),)
    >>> [c.passed for c in load_checks(LoadReading(rows))]
    [True, True, True]
    """
    rows = reading.rows
    capacity = kv_cache_tokens if kv_cache_tokens is not None else reading.kv_cache_tokens
    checks = [_oom_check(rows), _preemption_check(reading, max_preemptions), _peak_check(rows, capacity)]
    if profiled_kv_cache_tokens is not None:
        checks.append(_capacity_check(capacity, profiled_kv_cache_tokens, max_capacity_loss_pct))
    return checks


def _oom_check(rows: Sequence[LoadRow]) -> Check:
    name = OOM_CHECK
    if not rows:
        return Check(name, None, "no load evidence: no stats line, scrape or event was read")
    ooms = [row for row in rows if row.event == "oom"]
    errors = [row for row in rows if row.event == "error"]
    error_note = f"; {len(errors)} other error event(s), first at {where_text(errors[0])}" if errors else ""
    if ooms:
        return Check(
            name,
            False,
            f"{len(ooms)} OOM event(s), first at {where_text(ooms[0])}: "
            f"{ooms[0].raw.strip()[:160]}{error_note}",
        )
    return Check(
        name, True, f"no OOM line in {len({r.source for r in rows})} file(s), {len(rows)} rows{error_note}"
    )


def _preemption_check(reading: LoadReading, max_preemptions: int) -> Check:
    name = PREEMPTION_CHECK.format(max_preemptions=max_preemptions)
    total = run_preemptions(reading)
    if total is None:
        return Check(
            name,
            None,
            "these files cannot show preemptions (V1 stats lines before vLLM 0.11.1 "
            "omit them): add a /metrics snapshot with vllm:num_preemptions_total",
        )
    bound = preemptions_lower_bound(reading)
    counted = f"at least {total}" if bound else f"{total}"
    why = (
        " (vLLM V0 logs a preemption warning only at the 1st, 51st, 101st … preemption, so the "
        "log's total_num_cumulative_preemption is a lower bound)"
        if bound
        else ""
    )
    if total <= max_preemptions:
        if bound and total > 0:
            return Check(
                name,
                None,
                f"{counted} preemption(s) in the run{why}; policy allows {max_preemptions}: add a "
                "/metrics snapshot with vllm:num_preemptions_total for the exact count",
            )
        return Check(name, True, f"{total} preemption(s) in the run; policy allows {max_preemptions}")
    first = _first_preemption(reading)
    return Check(
        name,
        False,
        f"{counted} preemption(s) in the run, first seen at {where_text(first)}; policy "
        f"allows {max_preemptions}: the KV cache ran out for this request mix (requests were "
        f"evicted and recomputed){why}",
    )


def _first_preemption(reading: LoadReading) -> LoadRow:
    """The earliest row (by time, then file order) at which some engine's preemption count is above 0."""
    timeline = load_timeline(reading).reset_index()
    firsts = [
        group.index[0]
        for _, group in timeline[timeline["preemptions_cum"].fillna(0) > 0].groupby(
            ["kind", "engine"], dropna=False
        )
    ]
    return min(
        (reading.rows[i] for i in firsts), key=lambda row: (row.time is None, row.time or datetime.min)
    )


def _peak_check(rows: Sequence[LoadRow], capacity: int | None) -> Check:
    name = PEAK_CHECK
    peak = peak_row(rows)
    if peak is None:
        return Check(name, None, "no KV cache usage value in the load evidence")
    tokens = ""
    if capacity is not None:
        tokens = f" of {capacity:,} tokens (≈{int(peak.kv_cache_usage_pct * capacity // 100):,} tokens)"
    return Check(name, True, f"peak {peak.kv_cache_usage_pct:.1f}%{tokens} at {where_text(peak)}")


def _capacity_check(capacity: int | None, profiled: int, bound_pct: float | None) -> Check:
    name = CAPACITY_CHECK + (f" (loss ≤ {bound_pct:g}%)" if bound_pct is not None else "")
    if capacity is None:
        return Check(
            name,
            None,
            "the canary's KV capacity is unknown: its load files state no "
            "'GPU KV cache size' line nor vllm:cache_config_info; pass it explicitly",
        )
    loss_tokens, loss_pct = capacity_loss(capacity, profiled)
    change = capacity_change_text(loss_tokens, loss_pct)
    detail = f"{capacity:,} tokens against {profiled:,} profiled: {change}"
    if bound_pct is None:
        return Check(name, True, detail + "; no policy bound set")
    return Check(name, loss_pct <= bound_pct, f"{detail}; policy bound {bound_pct:g}%")
