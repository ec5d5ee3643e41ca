"""A budget under load: timeline, summary, gate checks, canary comparisons and charts from load evidence.

A budget that boots is necessary, not sufficient. During a load test vLLM reports KV cache usage, running and
waiting requests, throughput and preemptions (periodic stats lines in the server log, and the Prometheus
``/metrics`` endpoint); OOMs show up as error lines. :mod:`kvplan.io.load` reads that evidence into one frame
(:data:`~kvplan.columns.LOAD_COLUMNS`); this package turns the frame into a timeline and a JSON-ready summary
(:mod:`.summary`), gate checks and canary comparisons (:mod:`.checks`), all pure and column-wise;
:mod:`.charts` (the charts floor) draws them.

Units: usage and hit rates in percent (0–100), throughput in tokens per second, capacity in tokens.
"""

from kvplan.load.checks import (
    CAPACITY_CHECK,
    COMPARISON_ROWS,
    LOAD_VALUE_CHECK,
    OOM_CHECK,
    PEAK_CHECK,
    PREEMPTION_CHECK,
    canary_capacity_headline,
    capacity_change_text,
    capacity_loss,
    load_checks,
    load_comparison_table,
    value_check,
)
from kvplan.load.summary import (
    TIMELINE_COLUMNS,
    load_summary,
    load_timeline,
    mean_throughput,
    peak_row,
    preemptions_lower_bound,
    run_preemptions,
    where_text,
)

__all__ = [
    "CAPACITY_CHECK",
    "COMPARISON_ROWS",
    "LOAD_VALUE_CHECK",
    "OOM_CHECK",
    "PEAK_CHECK",
    "PREEMPTION_CHECK",
    "TIMELINE_COLUMNS",
    "canary_capacity_headline",
    "capacity_change_text",
    "capacity_loss",
    "load_checks",
    "load_comparison_table",
    "load_summary",
    "load_timeline",
    "mean_throughput",
    "peak_row",
    "preemptions_lower_bound",
    "run_preemptions",
    "value_check",
    "where_text",
]
