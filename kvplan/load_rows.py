"""Rows: what the load readers return and the load core reads: :class:`LoadRow`, :class:`LoadSource`.

The readers in :mod:`kvplan.io.vllm_stats` and :mod:`kvplan.io.prometheus_text` turn stats lines, /metrics
scrapes and OOM lines into :class:`LoadRow` s (kept packed in :class:`kvplan.load_reading.LoadRows`);
:mod:`kvplan.load` turns them into a timeline, a summary and gate checks. This module and
:mod:`kvplan.load_reading` sit on the base floor so that readers and core share the types.

Units: usage and hit rates in percent (0–100), throughput in tokens per second, capacity in tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

ROW_KEYS = (
    "source",
    "line",
    "time",
    "engine",
    "kv_cache_usage_pct",
    "running",
    "waiting",
    "swapped",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "prefix_cache_hit_pct",
    "preemptions",
    "preemptions_total",
    "event",
)
EVENTS = ("preemption", "oom", "error")
KINDS = ("log", "metrics")
YEARLESS_TIME_FORMAT = "%m-%d %H:%M:%S"  # vLLM's own `_DATE_FORMAT`


class LoadFormatError(ValueError):
    """A load-test file kvplan cannot read; the message names the file, the line and what was expected."""


@dataclass(frozen=True)
class LoadRow:
    """One stats line, one /metrics scrape of one engine, or one event (preemption warning, OOM, error).

    Unknown values are ``None``. ``engine`` is vLLM's engine index (``Engine 001`` → 1, ``engine="1"`` → 1);
    ``None`` when the evidence names no engine (V0, or ``N Engines Aggregated``). ``kind`` says which
    family of evidence the row came from (``log`` or ``metrics``); ``year_known`` is False when the time
    comes from vLLM's yearless ``%m-%d %H:%M:%S`` stamp with no year given; ``restarts`` counts the server
    restarts the file showed before this row (a log's counters, e.g. V0's ``total_num_cumulative_preemption``,
    start again from zero after each); ``raw`` is the text the row was read from (provenance). Only
    :data:`ROW_KEYS` go into :meth:`to_dict`.

    Times are naive: /metrics times are UTC, log times the server's local time unless the reader was given
    the server's UTC offset (see :func:`kvplan.io.vllm_stats.read_load_evidence`).

    >>> LoadRow("server.log", 7, None, 0, kv_cache_usage_pct=41.5, event=None).to_dict()["kv_cache_usage_pct"]
    41.5
    """

    source: str
    line: int
    time: datetime | None
    engine: int | None
    kv_cache_usage_pct: float | None = None
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    prefix_cache_hit_pct: float | None = None
    preemptions: int | None = None
    preemptions_total: int | None = None
    event: str | None = None
    kind: str = "log"
    year_known: bool = True
    restarts: int = 0
    raw: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.event is not None and self.event not in EVENTS:
            raise ValueError(f"unknown load event {self.event!r} (expected one of {EVENTS})")
        if self.kind not in KINDS:
            raise ValueError(f"unknown evidence kind {self.kind!r} (expected one of {KINDS})")

    @property
    def time_text(self) -> str | None:
        """ISO 8601 time, or vLLM's ``MM-DD HH:MM:SS`` when the year is unknown.

        >>> LoadRow("a.log", 1, datetime(2000, 11, 29, 10, 0, 10), None, year_known=False).time_text
        '11-29 10:00:10'
        """
        if self.time is None:
            return None
        return self.time.isoformat() if self.year_known else self.time.strftime(YEARLESS_TIME_FORMAT)

    def to_dict(self) -> dict:
        """JSON-ready dict with exactly the keys of :data:`ROW_KEYS`; a ``NaN`` or ``±Inf`` value is unknown.

        >>> LoadRow("m.prom", 1, None, 0, kv_cache_usage_pct=float("nan")).to_dict()["kv_cache_usage_pct"]
        """
        data = {key: finite(getattr(self, key)) for key in ROW_KEYS}
        data["time"] = self.time_text
        return data


@dataclass(frozen=True)
class LoadSource:
    """What one file says about the server it came from, besides its rows.

    ``kv_cache_tokens`` is the KV capacity in tokens (vLLM's "GPU KV cache size: N tokens" line, or
    ``num_gpu_blocks × block_size`` from ``vllm:cache_config_info``); ``kv_cache_memory_bytes`` the manual
    ``--kv-cache-memory-bytes`` value when the log shows one (a manual-value canary);
    ``reports_preemptions`` whether the format can show a preemption at all (V1 logs before 0.11.1
    cannot); ``utc_offset_hours`` a log's offset from UTC when known (given, or read from docker
    stamps), in which case its row times are UTC.
    """

    source: str
    kind: str
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    reports_preemptions: bool = True
    utc_offset_hours: float | None = None


def counter_increase(previous: float | None, current: float | None) -> float | None:
    """Increase of a Prometheus counter between two scrapes, reset-safe (never negative).

    A counter that went down was reset by a server restart; as Prometheus' ``rate()`` does, the increase
    is then the new value (everything counted since the restart).

    >>> counter_increase(40, 52), counter_increase(52, 3), counter_increase(None, 3)
    (12, 3, None)
    """
    if previous is None or current is None:
        return None
    return current - previous if current >= previous else current


def finite(value):
    """``value`` unless it is a float ``NaN`` or ``±Inf`` (unknown: ``None``; JSON has no such numbers).

    >>> finite(41.5), finite(float("nan")), finite(float("-inf")), finite("a.log")
    (41.5, None, None, 'a.log')
    """
    return None if isinstance(value, float) and not math.isfinite(value) else value


def percent(fraction: float) -> float:
    """A 0–1 fraction as a 0–100 percentage, without float noise.

    >>> percent(0.07), percent(0.153846)
    (7.0, 15.3846)
    """
    return round(fraction * 100, 6)
