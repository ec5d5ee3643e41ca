"""A budget under load: timeline, summary and gate checks from vLLM stats lines and /metrics scrapes.

A budget that boots is necessary, not sufficient. During a load test vLLM reports KV cache usage, running and
waiting requests, throughput and preemptions (periodic stats lines in the server log, and the Prometheus
``/metrics`` endpoint); OOMs show up as error lines. The readers in :mod:`kvplan.io.vllm_stats` and
:mod:`kvplan.io.prometheus_text` turn that evidence into :class:`~kvplan.load_rows.LoadRow` s (the row
types live on the base floor, :mod:`kvplan.load_rows`); this package turns rows into a timeline
(:mod:`.timeline`), a JSON-ready summary (:mod:`.summary`), gate checks (:mod:`.checks`) and canary
comparisons (:mod:`.compare`). Everything here is pure: no file is read.

Units: usage and hit rates in percent (0–100), throughput in tokens per second, capacity in tokens.
"""

from kvplan.load.checks import CAPACITY_CHECK, OOM_CHECK, PEAK_CHECK, PREEMPTION_CHECK, load_checks
from kvplan.load.compare import (
    COMPARISON_ROWS,
    canary_capacity_headline,
    capacity_change_text,
    capacity_loss,
    load_comparison_table,
)
from kvplan.load.summary import (
    load_summary,
    mean_throughput,
    peak_row,
    preemptions_lower_bound,
    run_preemptions,
    where_text,
)
from kvplan.load.timeline import TIMELINE_COLUMNS, load_timeline
from kvplan.load_reading import JSON_BATCH, LoadReading, LoadRows, combine_readings
from kvplan.load_rows import (
    EVENTS,
    KINDS,
    ROW_KEYS,
    YEARLESS_TIME_FORMAT,
    LoadFormatError,
    LoadRow,
    LoadSource,
    counter_increase,
    finite,
    percent,
)

__all__ = [
    "CAPACITY_CHECK",
    "COMPARISON_ROWS",
    "EVENTS",
    "JSON_BATCH",
    "KINDS",
    "OOM_CHECK",
    "PEAK_CHECK",
    "PREEMPTION_CHECK",
    "ROW_KEYS",
    "TIMELINE_COLUMNS",
    "YEARLESS_TIME_FORMAT",
    "LoadFormatError",
    "LoadReading",
    "LoadRow",
    "LoadRows",
    "LoadSource",
    "canary_capacity_headline",
    "capacity_change_text",
    "capacity_loss",
    "combine_readings",
    "counter_increase",
    "finite",
    "load_checks",
    "load_comparison_table",
    "load_summary",
    "load_timeline",
    "mean_throughput",
    "peak_row",
    "percent",
    "preemptions_lower_bound",
    "run_preemptions",
    "where_text",
]
