"""A budget under load: the timeline and summary (:mod:`.summary`), gate checks and canary comparisons
(:mod:`.checks`) of the :data:`~kvplan.columns.LOAD_COLUMNS` frame :mod:`kvplan.io.load` reads, all column-wise;
:mod:`.charts` draws them. Usage in percent (0–100), throughput in tokens per second, capacity in tokens.
"""

from kvplan.load.checks import (
    COMPARISON_ROWS,
    LOAD_VALUE_CHECK,
    PREEMPTION_CHECK,
    canary_capacity_headline,
    capacity_loss,
    load_checks,
    load_comparison_table,
)
from kvplan.load.summary import load_summary, load_timeline, preemptions_lower_bound, run_preemptions

__all__ = [
    "COMPARISON_ROWS",
    "LOAD_VALUE_CHECK",
    "PREEMPTION_CHECK",
    "canary_capacity_headline",
    "capacity_loss",
    "load_checks",
    "load_comparison_table",
    "load_summary",
    "load_timeline",
    "preemptions_lower_bound",
    "run_preemptions",
]
