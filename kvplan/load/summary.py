"""A load run in numbers, column-wise: :func:`load_timeline` and :func:`load_summary` (usage [%], tokens/s)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from kvplan.columns import LOAD_ROW_KEYS
from kvplan.io.load import LoadReading

TIMELINE_COLUMNS = [key for key in LOAD_ROW_KEYS if key != "time"] + ["kind", "preemptions_cum", "elapsed_s"]


def cumulative_preemptions(group: pd.DataFrame) -> np.ndarray:
    """Preemptions so far per row of one kind and engine (``NaN`` until known), anew per restart in logs."""
    counts = group["preemptions"].to_numpy(dtype=float, na_value=np.nan)
    totals = group["preemptions_total"].to_numpy(dtype=float, na_value=np.nan)
    if len(group) and group["kind"].iloc[0] == "metrics":
        known = np.flatnonzero(~np.isnan(totals))
        out = np.full(len(group), np.nan)
        if len(known):
            first = known[0]  # the counter's first value, then the increases after it
            after = np.nan_to_num(counts[first:])
            after[0] = 0  # the first value is the total so far; the increases come after it
            out[first:] = totals[first] + np.cumsum(after)
        return out
    restarts = group["restarts"].to_numpy(dtype=np.int64, na_value=0)
    life = np.concatenate([[0], np.cumsum(restarts[1:] != restarts[:-1])])  # one server life after another
    counted = np.flatnonzero(~np.isnan(totals))
    increase = np.zeros(len(group))
    if len(counted):
        values, lives = totals[counted], life[counted]
        previous = np.concatenate([[np.nan], values[:-1]])
        previous[np.concatenate([[True], lives[1:] != lives[:-1]])] = np.nan  # a new life counts from zero
        increase[counted] = np.where(np.isnan(previous) | (values < previous), values, values - previous)
    seen = np.cumsum(~np.isnan(counts) | ~np.isnan(totals)) > 0
    return np.where(seen, np.cumsum(np.nan_to_num(counts) + increase), np.nan)


def load_timeline(reading: LoadReading) -> pd.DataFrame:
    """The rows indexed by time, in file order: :data:`TIMELINE_COLUMNS`, ``preemptions_cum`` per engine and
    kind, ``elapsed_s`` since the first timed row.

    >>> from datetime import datetime
    >>> from kvplan.io.load import frame_of
    >>> frame = frame_of([
    ...     {"source": "m", "line": 1, "time": datetime(2026, 1, 1), "engine": 0, "preemptions_total": 5, "kind": "metrics"},
    ...     {"source": "m", "line": 9, "time": datetime(2026, 1, 1, 0, 0, 10), "engine": 0, "preemptions": 2,
    ...      "preemptions_total": 2, "kind": "metrics"}])
    >>> load_timeline(LoadReading(frame))[["preemptions_cum", "elapsed_s"]].to_dict("list")
    {'preemptions_cum': [5, 7], 'elapsed_s': [0.0, 10.0]}
    """
    frame = reading.frame
    cumulative = np.full(len(frame), np.nan)
    for _, group in frame.groupby(["kind", "engine"], dropna=False, sort=False):
        cumulative[group.index.to_numpy()] = cumulative_preemptions(group)
    timeline = frame.loc[:, TIMELINE_COLUMNS[:-2]].reset_index(drop=True)
    timeline["preemptions_cum"] = pd.array(cumulative, dtype="Int64")  # NaN: not known yet
    times = frame["time"].reset_index(drop=True)
    timeline["elapsed_s"] = (times - times.min()).dt.total_seconds().to_numpy()
    timeline.index = pd.DatetimeIndex(times, name="time")
    return timeline


def _where(row: Mapping) -> dict:
    return {"source": row["source"], "line": row["line"], "time": row["time"], "engine": row["engine"]}


def where_text(row: Mapping) -> str:
    """Where a JSON row was read: ``file:line (time), engine N``."""
    when = f" ({row['time']})" if row["time"] else ""
    engine = f", engine {row['engine']}" if row["engine"] is not None else ""
    return f"{row['source']}:{row['line']}{when}{engine}"


def _preemptions_by_kind(timeline: pd.DataFrame) -> dict[str, tuple[int, bool]]:
    """(total over engines, lower bound?) per evidence kind; V0's warnings give a lower bound."""
    totals = {}
    for kind, frame in timeline.groupby("kind"):
        last = frame.groupby("engine", dropna=False)["preemptions_cum"].max()
        if last.notna().any():
            from_warnings = kind == "log" and frame["preemptions_total"].notna().any()
            totals[str(kind)] = (int(last.fillna(0).sum()), bool(from_warnings))
    return totals


def run_preemptions(reading: LoadReading, timeline: pd.DataFrame | None = None) -> int | None:
    """Preemptions in the run, the larger of logs' and metrics' counts; ``None`` when no file can tell."""
    totals = _preemptions_by_kind(load_timeline(reading) if timeline is None else timeline)
    if totals:
        return max(total for total, _ in totals.values())
    if len(reading.frame) and all(s.reports_preemptions for s in reading.sources) and reading.sources:
        return 0
    return None


def preemptions_lower_bound(reading: LoadReading, timeline: pd.DataFrame | None = None) -> bool:
    """Whether :func:`run_preemptions` is a lower bound: no exact count reaches V0's warnings' total."""
    totals = _preemptions_by_kind(load_timeline(reading) if timeline is None else timeline)
    if not totals:
        return False
    top = max(total for total, _ in totals.values())
    return all(bound for total, bound in totals.values() if total == top)


def interval_seconds(frame: pd.DataFrame) -> np.ndarray:
    """Seconds since the previous timed row of the same kind and engine (``NaN`` for the first, untimed)."""
    keys = [frame["kind"], frame["engine"]]
    times = frame["time"]
    previous = times.groupby(keys, dropna=False).ffill().groupby(keys, dropna=False).shift(1)
    return (times - previous).dt.total_seconds().to_numpy(dtype=float, na_value=np.nan)


def mean_throughput(reading: LoadReading) -> tuple[float | None, float | None, str | None]:
    """Mean prompt and generation throughput [tokens/s] per engine, summed, and their evidence kind: the log's
    (intervals of one length), else /metrics rates weighted by their seconds; never both kinds together.

    >>> from datetime import datetime
    >>> from kvplan.io.load import frame_of
    >>> def scrape(line, second, rate=None):
    ...     return {"source": "m", "line": line, "time": datetime(2026, 1, 1, 0, 0, second), "engine": 0,
    ...             "generation_tokens_per_s": rate, "kind": "metrics"}
    >>> mean_throughput(LoadReading(frame_of([scrape(1, 0), scrape(2, 10, 900.0), scrape(3, 40, 500.0)])))
    (None, 600.0, 'metrics')
    """
    frame = reading.frame
    prompt, generation = (
        frame[column].to_numpy(dtype=float, na_value=np.nan)
        for column in ("prompt_tokens_per_s", "generation_tokens_per_s")
    )
    kinds = frame["kind"].to_numpy(dtype=object)
    reported = ~np.isnan(prompt) | ~np.isnan(generation)
    kind = "log" if (kinds[reported] == "log").any() else ("metrics" if reported.any() else None)
    chosen = reported & (kinds == kind)
    weights = np.ones(len(frame)) if kind == "log" else interval_seconds(frame)
    engines = frame["engine"].to_numpy(dtype=float, na_value=np.nan)
    means = []
    for values in (prompt, generation):
        rows = chosen & ~np.isnan(values)
        engine_means = [
            _engine_mean(values[rows & same], weights[rows & same]) for same in _engine_masks(engines, rows)
        ]
        means.append(round(sum(engine_means), 3) if engine_means else None)
    return means[0], means[1], kind


def _engine_masks(engines: np.ndarray, rows: np.ndarray) -> list[np.ndarray]:
    """One mask per engine among ``rows``, in order of appearance (no engine: ``NaN``)."""
    seen = pd.unique(engines[rows])
    return [np.isnan(engines) if np.isnan(engine) else engines == engine for engine in seen]


def _engine_mean(values: np.ndarray, weights: np.ndarray) -> float:
    """Weighted mean (rows without an interval left out; all alike when none has one), in row order."""
    timed = (weights != 0) & ~np.isnan(weights)
    if timed.any():
        values, weights = values[timed], weights[timed]
    else:  # /metrics rates with no known interval (e.g. V0 gauges in one scrape)
        weights = np.ones(len(values))
    return float(np.cumsum(values * weights)[-1] / np.cumsum(weights)[-1])


def peak_row(reading: LoadReading) -> dict | None:
    """The JSON row with the highest KV cache usage (the first of equals), ``None`` without one."""
    usage = reading.frame["kv_cache_usage_pct"]
    if not usage.notna().any():
        return None
    return reading.records([int(usage.to_numpy(dtype=float, na_value=-np.inf).argmax())])[0]


def load_summary(reading: LoadReading, kv_cache_tokens: int | None = None) -> dict:
    """JSON-ready summary of one run (``kv_cache_tokens`` overrides the files' capacity); ``peak_kv_cache_tokens``
    is peak usage × capacity, rounded down.

    >>> from kvplan.io.load import frame_of
    >>> rows = [{"source": "s.log", "line": 1, "engine": 0, "kv_cache_usage_pct": 50.0, "generation_tokens_per_s": 900.0},
    ...         {"source": "s.log", "line": 2, "engine": 0, "kv_cache_usage_pct": 80.0, "generation_tokens_per_s": 1100.0}]
    >>> s = load_summary(LoadReading(frame_of(rows)), kv_cache_tokens=157280)
    >>> s["peak_kv_cache_usage_pct"], s["peak_kv_cache_tokens"], s["mean_generation_tokens_per_s"]
    (80.0, 125824, 1000.0)
    """
    frame, timeline = reading.frame, load_timeline(reading)
    capacity = kv_cache_tokens if kv_cache_tokens is not None else reading.kv_cache_tokens
    peak = peak_row(reading)
    times = frame["time"]
    ends = reading.records([int(times.argmin()), int(times.argmax())]) if times.notna().any() else None
    manual = {s.kv_cache_memory_bytes for s in reading.sources if s.kv_cache_memory_bytes is not None}
    prompt, generation, throughput_from = mean_throughput(reading)
    events = frame["event"]
    return {
        "sources": frame["source"].unique().tolist(),
        "rows": len(frame),
        "engines": sorted(int(engine) for engine in frame["engine"].dropna().unique()),
        "start": ends[0]["time"] if ends else None,
        "end": ends[1]["time"] if ends else None,
        "duration_s": (times.max() - times.min()).total_seconds() if ends else None,
        "kv_cache_tokens": capacity,
        "kv_cache_memory_bytes": manual.pop() if len(manual) == 1 else None,
        "peak_kv_cache_usage_pct": peak["kv_cache_usage_pct"] if peak else None,
        "peak_kv_cache_tokens": (
            int(peak["kv_cache_usage_pct"] * capacity // 100) if peak and capacity is not None else None
        ),
        "peak_at": _where(peak) if peak else None,
        "max_running": _largest(frame["running"]),
        "max_waiting": _largest(frame["waiting"]),
        "mean_prompt_tokens_per_s": prompt,
        "mean_generation_tokens_per_s": generation,
        "throughput_from": throughput_from,
        "preemptions": run_preemptions(reading, timeline),
        "preemptions_lower_bound": preemptions_lower_bound(reading, timeline),
        "oom_events": int(events.eq("oom").sum()),
        "error_events": int(events.eq("error").sum()),
        "events": [
            {"event": row["event"], **_where(row)}
            for row in reading.records(np.flatnonzero(events.notna().to_numpy(dtype=bool)).tolist())
        ],
        "warnings": [str(warning) for warning in reading.warnings],
    }


def _largest(column: pd.Series) -> int | None:
    return int(column.max()) if column.notna().any() else None
