"""Gate checks of a canary's load test, and canaries side by side (capacity loss, comparison table)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from kvplan.budget import kv_cache_flag
from kvplan.checks import Check
from kvplan.io.load import LoadReading
from kvplan.io.load.scrapes import CONFIG_DISAGREES, COUNTER_DOWN
from kvplan.load.summary import load_timeline, peak_row, preemptions_lower_bound, run_preemptions, where_text

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
    """No OOM; preemptions ≤ ``max_preemptions``; peak usage (known: passes); with ``profiled_kv_cache_tokens``
    a capacity loss ≤ ``max_capacity_loss_pct`` [%]. ``kv_cache_tokens``: capacity the files do not state.

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
        capacity_check = _capacity_check(capacity, profiled_kv_cache_tokens, max_capacity_loss_pct)
        disagree = _disagreements(reading, ("num_gpu_blocks", "block_size"))
        if disagree:  # the run's own capacity is unknown: judged on no other number
            capacity_check = Check(
                capacity_check.name, None, f"the canary's KV capacity is unknown: {disagree}"
            )
        checks.append(capacity_check)
    return checks


def _disagreements(reading: LoadReading, labels: tuple[str, ...]) -> str:
    """The warnings of scrapes of one file disagreeing on one of ``labels``, joined (``""`` when none)."""
    found = [
        str(note).split(": the file's scrapes")[0]
        for note in reading.warnings
        if getattr(note, "code", "") == CONFIG_DISAGREES
        and any(f" shows {label}=" in note for label in labels)
    ]
    return "; ".join(found)


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
    seen = timeline.reset_index()  # the earliest row (by time, then file order) with preemptions counted
    firsts = seen[seen["preemptions_cum"].fillna(0) > 0].groupby(["kind", "engine"], dropna=False).head(1)
    first = firsts.sort_values(["time", "kind", "engine"], kind="stable", na_position="last").index[0]
    return Check(
        name,
        False,
        f"{counted} preemption(s) in the run, first seen at {where_text(reading.records([int(first)])[0])}; policy "
        f"allows {max_preemptions}: the KV cache ran out for this request mix (requests were "
        f"evicted and recomputed){why}",
    )


def value_check(reading: LoadReading, approved_bytes: int) -> Check | None:
    """FAIL when a file states another ``--kv-cache-memory-bytes`` than ``approved_bytes``, else ``None``."""
    other = [s for s in reading.sources if s.kv_cache_memory_bytes not in (None, approved_bytes)]
    disagree = _disagreements(reading, ("kv_cache_memory_bytes",))
    if disagree:  # two values in one file: at least one is not the approved value
        return Check(
            LOAD_VALUE_CHECK,
            False,
            f"{disagree}: the run is not at the approved {approved_bytes} throughout; load-test a canary at "
            "the approved value",
        )
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
    """The preemption counter samples read as unknown (``NaN``, ``±Inf``, down without a restart), or ``""``."""
    found = [
        f"{note.file}:{note.line} is {note.split(' is ', 1)[1].split(' ', 1)[0]}"
        for note in reading.warnings
        if getattr(note, "code", "") == "metrics-non-finite" and "vllm:num_preemptions_total is " in note
    ]
    down = [
        f"{note.file}:{note.line}"
        for note in reading.warnings
        if getattr(note, "code", "") == COUNTER_DOWN and "vllm:num_preemptions_total " in note
    ]
    parts = []
    if found:
        parts.append(
            f"vllm:num_preemptions_total at {', '.join(found[:3])}{_more(found)} (not a finite number)"
        )
    if down:
        parts.append(
            f"vllm:num_preemptions_total went down at {', '.join(down[:3])}{_more(down)} without a restart "
            "(its _created time unchanged: the scrapes disagree)"
        )
    return "; ".join(parts)


def _more(found: list) -> str:
    return f" and {len(found) - 3} more" if len(found) > 3 else ""


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


def capacity_loss(kv_cache_tokens: int, profiled_kv_cache_tokens: int) -> tuple[int, float]:
    """Tokens and percent of KV capacity a manual-value canary gives up against the profiled one (< 0: gain).

    >>> capacity_loss(157_280, 181_504)  # 181,504 − 157,280 = 24,224 tokens = 13.346%
    (24224, 13.346)
    """
    if profiled_kv_cache_tokens <= 0:
        raise ValueError(f"profiled KV capacity must be positive, got {profiled_kv_cache_tokens} tokens")
    loss = profiled_kv_cache_tokens - kv_cache_tokens
    return loss, round(100 * loss / profiled_kv_cache_tokens, 3)


def capacity_change_text(loss_tokens: int, loss_pct: float) -> str:
    """A :func:`capacity_loss` result in words: a loss, or a gain when it is negative."""
    return f"{'loss' if loss_tokens >= 0 else 'gain'} of {abs(loss_tokens):,} tokens ({abs(loss_pct):g}%)"


COMPARISON_ROWS = (
    "kv_cache_tokens",
    "peak_kv_cache_usage_pct",
    "peak_kv_cache_tokens",
    "max_running",
    "max_waiting",
    "mean_generation_tokens_per_s",
    "preemptions",
    "oom_events",
)
"""The :func:`load_summary` keys that :func:`load_comparison_table` shows, in its row order."""


def load_comparison_table(summaries: Mapping[str, Mapping]) -> pd.DataFrame:
    """One column per named :func:`load_summary`, one row per :data:`COMPARISON_ROWS` key.

    >>> runs = {"a": {"kv_cache_tokens": 100, "preemptions": 0}, "b": {"kv_cache_tokens": 90}}
    >>> load_comparison_table(runs).loc[["kv_cache_tokens", "preemptions"]]
                       a    b
    kv_cache_tokens  100   90
    preemptions        0  NaN
    """
    columns = {name: pd.Series(dict(summary), dtype=object) for name, summary in summaries.items()}
    return pd.DataFrame(columns).reindex(list(COMPARISON_ROWS))


def canary_capacity_headline(profiled: Mapping, canary: Mapping) -> dict[str, str]:
    """Capacity [tokens] of the profiled and the manual-value canary and the change, for a headline.

    >>> canary = {"kv_cache_tokens": 157_280, "kv_cache_memory_bytes": 12_884_377_600}
    >>> headline = canary_capacity_headline({"kv_cache_tokens": 155_856}, canary)
    >>> for label, text in headline.items():
    ...     print(f"{label}: {text}")
    profiled canary: 155,856 tokens
    manual-value canary: 157,280 tokens (--kv-cache-memory-bytes=12884377600)
    capacity change: gain of 1,424 tokens (0.914%)
    """
    for name, summary in (("profiled", profiled), ("manual-value", canary)):
        if summary.get("kv_cache_tokens") is None:
            raise ValueError(f"the {name} canary's files show no KV cache capacity (GPU KV cache size)")
    manual = canary.get("kv_cache_memory_bytes")
    flag = f" ({kv_cache_flag(manual)})" if manual is not None else ""
    return {
        "profiled canary": f"{profiled['kv_cache_tokens']:,} tokens",
        "manual-value canary": f"{canary['kv_cache_tokens']:,} tokens{flag}",
        "capacity change": capacity_change_text(
            *capacity_loss(canary["kv_cache_tokens"], profiled["kv_cache_tokens"])
        ),
    }
