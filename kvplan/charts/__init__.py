"""Charts of computed results, each answering one question in its title as a plain ``Figure`` (never pyplot's);
``figure=`` draws into a what-if panel's last one again. The limiting rank is in :data:`LIMITING_COLOR`."""

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
