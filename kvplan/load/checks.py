"""Gate checks for a canary's load test (``kvplan gate … --load``): pure functions returning ``Check``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvplan.io.load import LoadReading
from kvplan.load.compare import capacity_change_text, capacity_loss
from kvplan.load.summary import peak_row, preemptions_lower_bound, run_preemptions, where_text
from kvplan.load.timeline import load_timeline
from kvplan.verdict import Check

OOM_CHECK = "no OOM under load"
PREEMPTION_CHECK = "preemptions ≤ {max_preemptions}"
PEAK_CHECK = "peak KV cache usage reported"
CAPACITY_CHECK = "capacity vs profiled canary"
LOAD_VALUE_CHECK = "load run at the approved value"


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
    reading : the run, from :func:`kvplan.io.load.read_load_evidence` (logs and /metrics alike).
    max_preemptions : policy threshold on preemptions in the whole run [count], default 0.
    profiled_kv_cache_tokens : KV capacity of the profiled canary [tokens]; when given (the canary is a
        manual-value canary), the capacity loss against it is checked.
    max_capacity_loss_pct : policy bound on that loss [%]; ``None`` reports the loss without a bound.
    kv_cache_tokens : the canary's KV capacity [tokens], when its load files do not state it.

    Returns the checks in order: no OOM; preemptions ≤ threshold; peak KV cache usage (reported, passes
    whenever it is known); and, with a profiled capacity, the capacity loss. ``passed`` is ``None`` when
    the evidence cannot tell.

    >>> from kvplan.io.load import frame_of
    >>> rows = frame_of([{"source": "s.log", "line": 4, "engine": 0, "kv_cache_usage_pct": 88.0, "preemptions": 0}])
    >>> [c.passed for c in load_checks(LoadReading(rows))]
    [True, True, True]
    """
    capacity = kv_cache_tokens if kv_cache_tokens is not None else reading.kv_cache_tokens
    checks = [
        _oom_check(reading),
        _preemption_check(reading, max_preemptions),
        _peak_check(reading, capacity),
    ]
    if profiled_kv_cache_tokens is not None:
        checks.append(_capacity_check(capacity, profiled_kv_cache_tokens, max_capacity_loss_pct))
    return checks


def _oom_check(reading: LoadReading) -> Check:
    name, frame = OOM_CHECK, reading.frame
    if frame.empty:
        return Check(name, None, "no load evidence: no stats line, scrape or event was read")
    events = frame["event"]
    ooms = np.flatnonzero(events.eq("oom").to_numpy(dtype=bool, na_value=False))
    errors = np.flatnonzero(events.eq("error").to_numpy(dtype=bool, na_value=False))
    error_note = (
        f"; {len(errors)} other error event(s), first at {where_text(reading.records([errors[0]])[0])}"
        if len(errors)
        else ""
    )
    if len(ooms):
        raw = frame["raw"].iloc[ooms[0]]
        return Check(
            name,
            False,
            f"{len(ooms)} OOM event(s), first at {where_text(reading.records([ooms[0]])[0])}: "
            f"{'' if pd.isna(raw) else raw.strip()[:160]}{error_note}",
        )
    files = frame["source"].nunique()
    return Check(name, True, f"no OOM line in {files} file(s), {len(frame)} rows{error_note}")


def _preemption_check(reading: LoadReading, max_preemptions: int) -> Check:
    name = PREEMPTION_CHECK.format(max_preemptions=max_preemptions)
    timeline = load_timeline(reading)
    total = run_preemptions(reading, timeline)
    unreadable = _unreadable_counters(reading)
    if unreadable and (total is None or total <= max_preemptions):
        return Check(
            name,
            None,
            f"the preemption counter cannot be read: {unreadable}; the run's preemptions "
            f"are unknown ({'none readable' if total is None else f'{total} counted from the readable samples'}"
            f"), policy allows {max_preemptions}",
        )
    if total is None:
        return Check(
            name,
            None,
            "these files cannot show preemptions (V1 stats lines before vLLM 0.11.1 "
            "omit them): add a /metrics snapshot with vllm:num_preemptions_total",
        )
    bound = preemptions_lower_bound(reading, timeline)
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
    first = _first_preemption(reading, timeline)
    return Check(
        name,
        False,
        f"{counted} preemption(s) in the run, first seen at {where_text(first)}; policy "
        f"allows {max_preemptions}: the KV cache ran out for this request mix (requests were "
        f"evicted and recomputed){why}",
    )


def value_check(reading: LoadReading, approved_bytes: int) -> Check | None:
    """FAIL when a file of the run states a manual ``--kv-cache-memory-bytes`` other than ``approved_bytes``
    [bytes]: its load test is evidence for another value. ``None`` when every stated value is the approved
    one, or none is stated (a profiled run: the load section notes it).

    >>> from kvplan.io.load import LoadSource, frame_of
    >>> run = LoadReading(frame_of([{"source": "s.log", "line": 1}]),
    ...                   sources=(LoadSource("s.log", "log", kv_cache_memory_bytes=16_106_127_360),))
    >>> check = value_check(run, 12_884_377_600)
    >>> check.passed, check.detail[:61]
    (False, 's.log states --kv-cache-memory-bytes=16106127360 (15.00 GiB),')
    """
    other = [s for s in reading.sources if s.kv_cache_memory_bytes not in (None, approved_bytes)]
    if not other:
        return None
    stated = "; ".join(
        f"{s.source} states --kv-cache-memory-bytes={s.kv_cache_memory_bytes} "
        f"({s.kv_cache_memory_bytes / 2**30:.2f} GiB)"  # type: ignore[operator]  # not None: filtered
        for s in other
    )
    return Check(
        LOAD_VALUE_CHECK,
        False,
        f"{stated}, not the approved {approved_bytes} ({approved_bytes / 2**30:.2f} GiB): this load test "
        "is evidence for another value; load-test a canary at the approved value",
    )


def _unreadable_counters(reading: LoadReading) -> str:
    """The /metrics preemption counter samples read as unknown (``NaN``, ``±Inf``), as ``file:line is
    value`` (the first three and how many), or ``""`` when there is none."""
    found = [
        f"{note.file}:{note.line} is {note.split(' is ', 1)[1].split(' ', 1)[0]}"
        for note in reading.warnings
        if getattr(note, "code", "") == "metrics-non-finite" and "vllm:num_preemptions_total is " in note
    ]
    if not found:
        return ""
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"vllm:num_preemptions_total at {', '.join(found[:3])}{more} (not a finite number)"


def _first_preemption(reading: LoadReading, timeline: pd.DataFrame) -> dict:
    """The earliest JSON row (by time, then file order) at which some engine's preemption count is above 0."""
    counted = timeline.reset_index()
    counted = counted[counted["preemptions_cum"].fillna(0) > 0]
    firsts = counted.groupby(["kind", "engine"], dropna=False).head(1)
    first = firsts.sort_values(["time", "kind", "engine"], kind="stable", na_position="last").index[0]
    return reading.records([int(first)])[0]


def _peak_check(reading: LoadReading, capacity: int | None) -> Check:
    name = PEAK_CHECK
    peak = peak_row(reading)
    if peak is None:
        return Check(name, None, "no KV cache usage value in the load evidence")
    usage = peak["kv_cache_usage_pct"]
    tokens = ""
    if capacity is not None:
        tokens = f" of {capacity:,} tokens (≈{int(usage * capacity // 100):,} tokens)"
    return Check(name, True, f"peak {usage:.1f}%{tokens} at {where_text(peak)}")


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
