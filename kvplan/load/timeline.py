"""The load run as a time-indexed DataFrame: :func:`load_timeline`, with preemptions counted per engine."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvplan.columns import LOAD_ROW_KEYS
from kvplan.io.load import LoadReading

TIMELINE_COLUMNS = [key for key in LOAD_ROW_KEYS if key != "time"] + ["kind", "preemptions_cum", "elapsed_s"]


def cumulative_preemptions(group: pd.DataFrame) -> np.ndarray:
    """Preemptions so far in the run [count], per row, for rows of one evidence kind and one engine (``NaN``
    until some count is known).

    Metrics: the first counter value plus the reset-safe increases after it. Logs: the running sum of the
    interval counts (V1 ``Preemptions: N``) plus the reset-safe increases of V0's counter
    ``total_num_cumulative_preemption`` (which starts again from zero when the server restarts: a row with
    more ``restarts`` than the one before counts its value from zero).

    >>> from kvplan.io.load import frame_of
    >>> rows = frame_of([{"source": "s.log", "line": 1, "preemptions_total": 51, "event": "preemption"},
    ...     {"source": "s.log", "line": 9, "preemptions_total": 1, "event": "preemption", "restarts": 1}])
    >>> cumulative_preemptions(rows).tolist()  # 51 before the restart + 1 after
    [51.0, 52.0]
    >>> cumulative_preemptions(frame_of([{"source": "s.log", "line": n, "preemptions": n} for n in (0, 2, 3)])).tolist()
    [0.0, 2.0, 5.0]
    """
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
    """The run as a DataFrame indexed by time, one row per load row, in file order.

    Columns: every :data:`~kvplan.columns.LOAD_ROW_KEYS` key but ``time``, plus ``kind`` (``log``/``metrics``),
    ``preemptions_cum`` (preemptions so far in the run for that engine and evidence kind, counter resets
    included, never decreasing) and ``elapsed_s`` (seconds since the run's first timed row, for comparing
    runs made at different times). Group by ``engine`` for per-engine series.

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
