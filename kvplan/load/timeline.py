"""The load run as a time-indexed DataFrame: :func:`load_timeline`, with preemptions counted per engine."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvplan.load_reading import LoadReading
from kvplan.load_rows import ROW_KEYS, LoadRow, counter_increase

TIMELINE_COLUMNS = [key for key in ROW_KEYS if key != "time"] + ["kind", "preemptions_cum", "elapsed_s"]


def _cumulative_preemptions(rows: Sequence[LoadRow]) -> list[int | None]:
    """Preemptions so far in the run, per row, for rows of one evidence kind and one engine.

    Metrics: the first counter value plus the reset-safe increases after it. Logs: the running sum of the
    interval counts (V1 ``Preemptions: N``) plus the reset-safe increases of V0's counter
    ``total_num_cumulative_preemption`` (which starts again from zero when the server restarts: a row
    with more ``restarts`` than the one before counts its value from zero). ``None`` until some count is
    known.

    >>> rows = [LoadRow("s.log", 1, None, None, preemptions_total=51, event="preemption"),
    ...         LoadRow("s.log", 9, None, None, preemptions_total=1, event="preemption", restarts=1)]
    >>> _cumulative_preemptions(rows)  # 51 before the restart + 1 after
    [51, 52]
    """
    total: int | None = None
    counter: int | None = None  # the last V0 counter value seen in this server's life
    restarts = rows[0].restarts if rows else 0
    out: list[int | None] = []
    for position, row in enumerate(rows):
        if row.kind == "metrics":
            if position == 0 or total is None:
                total = row.preemptions_total
            elif row.preemptions is not None:
                total += row.preemptions
        else:
            if row.restarts != restarts:
                counter, restarts = 0, row.restarts
            if row.preemptions is not None:
                total = (total or 0) + row.preemptions
            if row.preemptions_total is not None:
                increase = counter_increase(counter, row.preemptions_total)
                total = (total or 0) + (row.preemptions_total if increase is None else int(increase))
                counter = row.preemptions_total
        out.append(total)
    return out


def load_timeline(reading: LoadReading) -> pd.DataFrame:
    """The run as a DataFrame indexed by time, one row per :class:`LoadRow`, in file order.

    Columns: every :data:`ROW_KEYS` key but ``time``, plus ``kind`` (``log``/``metrics``),
    ``preemptions_cum`` (preemptions so far in the run for that engine and evidence kind, counter
    resets included, never decreasing) and ``elapsed_s`` (seconds since the run's first timed row,
    for comparing runs made at different times). Group by ``engine`` for per-engine series.

    >>> from datetime import datetime
    >>> rows = (LoadRow("m", 1, datetime(2026, 1, 1, 0, 0, 0), 0, preemptions_total=5, kind="metrics"),
    ...         LoadRow("m", 9, datetime(2026, 1, 1, 0, 0, 10), 0, preemptions=2, preemptions_total=2,
    ...                 kind="metrics"))
    >>> load_timeline(LoadReading(rows))[["preemptions_cum", "elapsed_s"]].to_dict("list")
    {'preemptions_cum': [5, 7], 'elapsed_s': [0.0, 10.0]}
    """
    rows = list(reading.rows)
    cumulative: dict[int, int | None] = {}
    groups: dict[tuple, list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault((row.kind, row.engine), []).append(index)
    for indices in groups.values():
        for index, value in zip(indices, _cumulative_preemptions([rows[i] for i in indices])):
            cumulative[index] = value
    frame = pd.DataFrame(
        [{**{key: getattr(row, key) for key in TIMELINE_COLUMNS[:-2]}} for row in rows],
        columns=TIMELINE_COLUMNS[:-2],
    )
    frame["preemptions_cum"] = pd.array([cumulative[i] for i in range(len(rows))], dtype="Int64")
    for column in ("line", "engine", "running", "waiting", "swapped", "preemptions", "preemptions_total"):
        frame[column] = pd.array(frame[column].tolist(), dtype="Int64")
    times = pd.to_datetime(pd.Series([row.time for row in rows], dtype="object"))
    start = times.min()
    frame["elapsed_s"] = (times - start).dt.total_seconds().to_numpy() if len(rows) else []
    frame.index = pd.DatetimeIndex(times, name="time")
    return frame
