"""Charts for planners and review meetings: each takes computed results and returns a Figure.

Nothing here computes a budget: the numbers come from :mod:`kvplan.budget`, :mod:`kvplan.kvspec.capacity`,
:mod:`kvplan.drift` and the ledger, and are only converted to GiB for the axes. Every chart answers
one question, says it in its title, and annotates the numbers a reviewer would ask about. Figures
are sized and lettered to stay readable on a projector; they are plain ``matplotlib.figure.Figure``
objects, never registered with pyplot, so a drawing in one thread cannot be closed or flushed by another.

The limiting rank is always drawn in :data:`LIMITING_COLOR`, the other ranks in :data:`RANK_COLOR`.
"""

from kvplan.budget import limiting_ranks
from kvplan.charts.outcome import ConcurrencyMarks, concurrency_chart, drift_chart, spread_chart
from kvplan.charts.ranks import (
    LEDGER_SEGMENTS,
    SIZED_SEGMENTS,
    LedgerParts,
    ledger_chart,
    safe_budget_chart,
    stranded_chart,
)
from kvplan.charts.style import LIMITING_COLOR, RANK_COLOR

__all__ = [
    "LEDGER_SEGMENTS",
    "LIMITING_COLOR",
    "RANK_COLOR",
    "SIZED_SEGMENTS",
    "ConcurrencyMarks",
    "LedgerParts",
    "concurrency_chart",
    "drift_chart",
    "ledger_chart",
    "limiting_ranks",
    "safe_budget_chart",
    "spread_chart",
    "stranded_chart",
]
