"""A load run in numbers: :func:`load_summary` (peak usage, throughput, preemptions, events).

Everything here is pure: no file is read. Units: usage in percent (0–100), throughput in tokens per
second, capacity in tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from kvplan.load.timeline import load_timeline
from kvplan.load_reading import LoadReading
from kvplan.load_rows import LoadRow, finite


def _where(row: LoadRow) -> dict:
    return {"source": row.source, "line": row.line, "time": row.time_text, "engine": row.engine}


def where_text(row: LoadRow) -> str:
    when = f" ({row.time_text})" if row.time_text else ""
    engine = f", engine {row.engine}" if row.engine is not None else ""
    return f"{row.source}:{row.line}{when}{engine}"


def _preemptions_by_kind(reading: LoadReading) -> dict[str, tuple[int, bool]]:
    """Per evidence kind that counts preemptions: (run total summed over engines, lower bound?).

    A log's total is a lower bound when it comes from V0 preemption warnings: vLLM logs one only at the
    1st, 51st, 101st … preemption, so up to 49 more may follow the last one printed.
    """
    timeline = load_timeline(reading)
    totals = {}
    for kind, frame in timeline.groupby("kind"):
        last = frame.groupby("engine", dropna=False)["preemptions_cum"].max()
        if last.notna().any():
            from_warnings = kind == "log" and frame["preemptions_total"].notna().any()
            totals[kind] = (int(last.fillna(0).sum()), bool(from_warnings))
    return totals


def run_preemptions(reading: LoadReading) -> int | None:
    """Preemptions in the run: summed over engines, the larger of what logs and metrics show.

    Logs and /metrics of one run count the same preemptions, so the two kinds are never added.
    ``None`` when no file can tell (e.g. a V1 log before 0.11.1 without a /metrics snapshot). When only
    V0 preemption warnings count them, the total is a lower bound (:func:`preemptions_lower_bound`).

    >>> run_preemptions(LoadReading((LoadRow("s.log", 3, None, 0, preemptions=4),
    ...                              LoadRow("s.log", 9, None, 0, preemptions=0))))
    4
    """
    totals = _preemptions_by_kind(reading)
    if totals:
        return max(total for total, _ in totals.values())
    if reading.rows and all(s.reports_preemptions for s in reading.sources) and reading.sources:
        return 0
    return None


def preemptions_lower_bound(reading: LoadReading) -> bool:
    """True when :func:`run_preemptions` is only a lower bound: no exact count (a /metrics counter, V1's
    ``Preemptions: N``) reaches the total that V0's every-50th preemption warning shows.

    >>> preemptions_lower_bound(LoadReading((LoadRow("s.log", 5, None, None, preemptions_total=51,
    ...                                              event="preemption"),)))
    True
    """
    totals = _preemptions_by_kind(reading)
    if not totals:
        return False
    top = max(total for total, _ in totals.values())
    return all(bound for total, bound in totals.values() if total == top)


def _interval_seconds(rows: Sequence[LoadRow]) -> list[float | None]:
    """Seconds since the previous timed row of the same engine and evidence kind (``None`` for the first)."""
    last: dict[tuple, datetime] = {}
    out: list[float | None] = []
    for row in rows:
        key = (row.kind, row.engine)
        before = last.get(key)
        out.append(None if before is None or row.time is None else (row.time - before).total_seconds())
        if row.time is not None:
            last[key] = row.time
    return out


def mean_throughput(reading: LoadReading) -> tuple[float | None, float | None, str | None]:
    """The run's mean prompt and generation throughput [tokens/s] and the evidence kind they come from.

    Logs and /metrics cover different intervals, so they are never averaged together. The log's own
    figures are preferred: each stats line is the average over its logging interval (all of one length),
    so their plain mean is the time-weighted mean over the logged intervals (idle intervals, which vLLM
    logs at DEBUG only, are left out). Without log figures, the /metrics rates are weighted by the seconds
    since the previous scrape of that engine (= tokens counted / seconds covered). Means are per engine,
    then summed over engines (the server's throughput).

    >>> def scrape(line, second, rate=None):
    ...     return LoadRow("m", line, datetime(2026, 1, 1, 0, 0, second), 0, generation_tokens_per_s=rate,
    ...                    kind="metrics")
    >>> rows = (scrape(1, 0), scrape(2, 10, 900.0), scrape(3, 40, 500.0))
    >>> mean_throughput(LoadReading(rows))  # (900 × 10 + 500 × 30) / 40 s = 600
    (None, 600.0, 'metrics')
    """
    rows = list(reading.rows)
    seconds = _interval_seconds(rows)
    reported = [
        (row, dt)
        for row, dt in zip(rows, seconds)
        if finite(row.prompt_tokens_per_s) is not None or finite(row.generation_tokens_per_s) is not None
    ]
    kind = "log" if any(row.kind == "log" for row, _ in reported) else ("metrics" if reported else None)
    means = []
    for column in ("prompt_tokens_per_s", "generation_tokens_per_s"):
        per_engine: dict[int | None, list[tuple[float, float]]] = {}
        for row, dt in reported:
            value = finite(getattr(row, column))  # means over finite values only
            if row.kind == kind and value is not None:
                weight = 1.0 if kind == "log" else dt
                per_engine.setdefault(row.engine, []).append((value, weight))
        engine_means = []
        for pairs in per_engine.values():
            weighted = [(v, w) for v, w in pairs if w]
            if not weighted:  # /metrics rates with no known interval (e.g. V0 gauges in one scrape)
                weighted = [(v, 1.0) for v, _ in pairs]
            engine_means.append(sum(v * w for v, w in weighted) / sum(w for _, w in weighted))
        means.append(round(sum(engine_means), 3) if engine_means else None)
    return means[0], means[1], kind


def peak_row(rows: Sequence[LoadRow]) -> LoadRow | None:
    usage = [row for row in rows if finite(row.kv_cache_usage_pct) is not None]  # the peak of finite values
    return max(usage, key=lambda row: row.kv_cache_usage_pct) if usage else None


def load_summary(reading: LoadReading, kv_cache_tokens: int | None = None) -> dict:
    """JSON-ready summary of one run, for notebooks, the evidence bundle and the canary comparison.

    ``kv_cache_tokens`` overrides the capacity the files state. Keys: ``sources``, ``rows``,
    ``engines``, ``start``, ``end``, ``duration_s``, ``kv_cache_tokens``, ``kv_cache_memory_bytes`` (the
    manual ``--kv-cache-memory-bytes`` value when the log shows one), ``peak_kv_cache_usage_pct``,
    ``peak_kv_cache_tokens`` (peak usage × capacity, rounded down), ``peak_at``, ``max_running``,
    ``max_waiting``, ``mean_prompt_tokens_per_s``, ``mean_generation_tokens_per_s`` (from one evidence
    kind, ``throughput_from``: the log's interval figures when it has them, else the /metrics rates
    weighted by the seconds they cover; see :func:`mean_throughput`), ``preemptions``,
    ``preemptions_lower_bound`` (True when only V0's every-50th preemption warning counts them),
    ``oom_events``, ``error_events``, ``events``, ``warnings``.

    >>> rows = (LoadRow("s.log", 1, None, 0, kv_cache_usage_pct=50.0, generation_tokens_per_s=900.0),
    ...         LoadRow("s.log", 2, None, 0, kv_cache_usage_pct=80.0, generation_tokens_per_s=1100.0))
    >>> s = load_summary(LoadReading(rows), kv_cache_tokens=157280)
    >>> s["peak_kv_cache_usage_pct"], s["peak_kv_cache_tokens"], s["mean_generation_tokens_per_s"]
    (80.0, 125824, 1000.0)
    """
    rows = reading.rows
    capacity = kv_cache_tokens if kv_cache_tokens is not None else reading.kv_cache_tokens
    peak = peak_row(rows)
    times = [row.time for row in rows if row.time is not None]
    timed = [row for row in rows if row.time is not None]
    events = [row for row in rows if row.event is not None]
    running = [row.running for row in rows if finite(row.running) is not None]
    waiting = [row.waiting for row in rows if finite(row.waiting) is not None]
    manual = {s.kv_cache_memory_bytes for s in reading.sources if s.kv_cache_memory_bytes is not None}
    prompt, generation, throughput_from = mean_throughput(reading)
    return {
        "sources": list(dict.fromkeys(row.source for row in rows)),
        "rows": len(rows),
        "engines": sorted({row.engine for row in rows if row.engine is not None}),
        "start": min(timed, key=lambda r: r.time).time_text if timed else None,
        "end": max(timed, key=lambda r: r.time).time_text if timed else None,
        "duration_s": (max(times) - min(times)).total_seconds() if times else None,
        "kv_cache_tokens": capacity,
        "kv_cache_memory_bytes": manual.pop() if len(manual) == 1 else None,
        "peak_kv_cache_usage_pct": peak.kv_cache_usage_pct if peak else None,
        "peak_kv_cache_tokens": (
            int(peak.kv_cache_usage_pct * capacity // 100) if peak and capacity is not None else None
        ),
        "peak_at": _where(peak) if peak else None,
        "max_running": max(running) if running else None,
        "max_waiting": max(waiting) if waiting else None,
        "mean_prompt_tokens_per_s": prompt,
        "mean_generation_tokens_per_s": generation,
        "throughput_from": throughput_from,
        "preemptions": run_preemptions(reading),
        "preemptions_lower_bound": preemptions_lower_bound(reading),
        "oom_events": sum(row.event == "oom" for row in rows),
        "error_events": sum(row.event == "error" for row in rows),
        "events": [{"event": row.event, **_where(row)} for row in events],
        "warnings": list(reading.warnings),
    }
