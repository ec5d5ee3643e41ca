"""Load-test evidence: vLLM server logs (:mod:`.log`) and ``/metrics`` (:mod:`.metrics`) read into one frame."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kvplan.io.load.frame import (
    LoadFormatError,
    LoadReading,
    LoadSource,
    bounded_lines,
    frame_of,
    reading_of,
)
from kvplan.io.load.log import parse_stats_message, parse_stats_text, read_vllm_stats
from kvplan.io.load.metrics import (
    is_metrics_lines,
    parse_metrics_snapshots,
    parse_metrics_text,
    physical_lines,
    read_metrics_snapshots,
    samples_reading,
)
from kvplan.io.load.records import log_time_shift
from kvplan.io.load.scrapes import Sample

__all__ = [
    "LoadFormatError",
    "LoadReading",
    "LoadSource",
    "Sample",
    "frame_of",
    "parse_metrics_snapshots",
    "parse_metrics_text",
    "parse_stats_message",
    "parse_stats_text",
    "read_load_evidence",
    "read_metrics_snapshots",
    "read_vllm_stats",
    "reading_of",
    "samples_reading",
]


def read_load_evidence(
    paths: Sequence[str | Path], year: int | None = None, utc_offset: float | None = None, scrapes=None
) -> LoadReading:
    """One run's load evidence from logs and /metrics files alike (sniffed), rows in file order. Without
    ``year`` logs take the snapshots'; ``utc_offset`` [h] makes log times UTC; ``scrapes`` (a reading, e.g.
    from Prometheus) stands for the /metrics files.

    >>> from kvplan import DATA_DIR
    >>> run = DATA_DIR / "load" / "manual-canary-overload"
    >>> frame, metadata = read_load_evidence([run / "server.log", run / "metrics.prom"], year=2026)
    >>> frame["kind"].value_counts().to_dict(), metadata.sources == (str(run / "metrics.prom"), str(run / "server.log"))
    ({'log': 59, 'metrics': 20}, True)
    """
    shift = log_time_shift(utc_offset)
    order = list(dict.fromkeys(str(path) for path in paths))
    metrics = [path for path in order if _is_metrics_file(path)]
    readings, notes, logged = [], [], len(metrics) < len(order)
    if scrapes is not None:
        order = [*(path for path in order if path not in metrics), *scrapes.metadata.sources]
        metrics = list(scrapes.metadata.sources)
    if metrics:
        readings.append(read_metrics_snapshots(metrics) if scrapes is None else scrapes)
        first = readings[0].frame["time"].min()
        if year is None and not pd.isna(first) and logged:
            year = (first - shift).year  # the servers' local year at the first scrape
            clocks = (
                ""
                if utc_offset is not None
                else "; log times are the server's local time, /metrics times UTC"
            )
            notes.append(f"the logs' year is taken from the /metrics times ({year}){clocks}")
    logs = [read_vllm_stats(path, year=year, utc_offset=utc_offset) for path in order if path not in metrics]
    local = [s.source for log in logs for s in log.sources if s.utc_offset_hours is None]
    if metrics and local:
        notes.append(
            f"log times (the server's local time) and /metrics times (UTC) are mixed without a known "
            f"offset for {', '.join(local)}: the timeline places them as if the server ran on UTC (the "
            "load checks do not depend on it); to align them give the server's UTC offset "
            "(kvplan load --log-utc-offset HOURS, utc_offset= in Python)"
        )
    parts = [*readings, *logs]
    frame = parts[0].frame
    if len(parts) > 1:
        frame = pd.concat([p.frame for p in parts], ignore_index=True)
        ranks = pd.Categorical(frame["source"], categories=order).codes  # each file's place in ``order``
        if (ranks[1:] < ranks[:-1]).any():  # rows by file as given, then as read
            frame = frame.iloc[np.argsort(ranks, kind="stable")].reset_index(drop=True)
    warnings = [
        *(readings[0].warnings if readings else ()),
        *notes,
        *(w for log in logs for w in log.warnings),
    ]
    return reading_of([frame], warnings, [s for part in parts for s in part.sources])


def _is_metrics_file(path: str) -> bool:
    """Whether the file is Prometheus text, from its first lines."""
    with open(path, encoding="utf-8", errors="replace") as lines:
        return is_metrics_lines(physical_lines(bounded_lines(lines, path)))
