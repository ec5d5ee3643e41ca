"""The what-if charts of an outcome, and figures as PNG images with alt text for notebooks and panels.

Every figure is a plain :class:`matplotlib.figure.Figure` from :mod:`kvplan.charts` (never pyplot), rendered
here to PNG bytes at a fixed size (:data:`PANEL_DPI`, no tight bounding box), so a panel's image has the same
size in every state and two renderings of one state are the same picture.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from kvplan import charts
from kvplan.budget import limiting_ranks
from kvplan.notebook.launch import rows_that_set_the_room
from kvplan.notebook.whatif import Outcome, evaluate, weak_rank_at_median
from kvplan.units import bytes_to_gib, format_size

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Dots per inch of every PNG a notebook or panel shows: 10 × 5.5 in charts are 800 × 440 px.
PANEL_DPI = 80


def figure_png(figure: Figure, dpi: int = PANEL_DPI) -> bytes:
    """The figure as PNG bytes at ``dpi`` (its size in inches × dpi, white background).

    >>> from kvplan.budget import uniform_budget
    >>> png = figure_png(charts.safe_budget_chart(uniform_budget([13 * 2**30, 18 * 2**30], 2**30)))
    >>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n", int.from_bytes(png[16:20], "big")  # 10 in × 80 dpi wide
    (True, 800)
    """
    buffer = io.BytesIO()  # zlib's fastest level: the same pixels, encoded in a third of the time
    figure.savefig(buffer, format="png", dpi=dpi, facecolor="white", pil_kwargs={"compress_level": 1})
    return buffer.getvalue()


def figure_alt(figure: Figure) -> str:
    """Alt text of a chart: its title (the question it answers and the answer), else its axes' titles.

    >>> from kvplan.budget import uniform_budget
    >>> figure_alt(charts.stranded_chart(uniform_budget([13 * 2**30, 18 * 2**30], 2**30)))
    'Chart: Stranded on the stronger ranks: 5 GiB in total'
    """
    titles = [figure._suptitle.get_text()] if figure._suptitle is not None else []
    titles += [ax.get_title(loc) for ax in figure.axes for loc in ("left", "center") if ax.get_title(loc)]
    return "Chart: " + ("; ".join(title for title in titles if title) or "untitled")


def sentence(figure: Figure) -> str | None:
    """The sentence a chart without axes stands for (one boot, nothing stranded), else None.

    Such a chart answers in words, so pages and panels show the sentence, not an empty picture.

    >>> from kvplan.budget import uniform_budget
    >>> sentence(charts.stranded_chart(uniform_budget([13 * 2**30] * 2, 2**30)))
    'Nothing stranded: every rank holds the same safe budget'
    >>> sentence(charts.stranded_chart(uniform_budget([13 * 2**30, 18 * 2**30], 2**30))) is None
    True
    """
    if figure.axes or figure._suptitle is None:
        return None
    return " ".join(figure._suptitle.get_text().split())


@dataclass(frozen=True)
class Chart:
    """A figure shown as a PNG with alt text, or as its sentence when it has no axes (:func:`sentence`);
    the last expression of a notebook cell displays it."""

    figure: Figure

    def _repr_mimebundle_(self, include=None, exclude=None):
        words = sentence(self.figure)
        if words is not None:
            return {"text/markdown": html.escape(words), "text/plain": words}, {}
        alt = figure_alt(self.figure)
        return {"image/png": figure_png(self.figure), "text/plain": alt}, {"image/png": {"alt": alt}}


def chart(figure: Figure) -> Chart:
    """Show a :mod:`kvplan.charts` figure in a notebook: ``chart(safe_budget_chart(budget))``."""
    return Chart(figure)


def concurrency_figure(
    outcome: Outcome,
    weak_rank_fixed: bool = False,
    limits: tuple[float, float, float, float] | None = None,
    previous: Outcome | None = None,
) -> Figure:
    """:func:`kvplan.charts.concurrency_chart` of an outcome (needs its curve), labelled and annotated.

    With ``weak_rank_fixed``, a second curve shows the same launch with its limiting rank raised to
    the median rank (:func:`~kvplan.notebook.whatif.weak_rank_at_median`). Each curve's crossing of the
    target concurrency is marked at its ``target_length``, and an approximate spec says why under the
    title. ``limits`` fixes the axes and ``previous`` is drawn faintly (a what-if panel's baseline).
    """
    if outcome.curve is None:
        raise ValueError(
            "no concurrency curve: the scenario needs a model spec (or bytes per token) and max_model_len"
        )
    budget = outcome.budget
    outcomes = {f"uniform {format_size(budget.uniform_budget_bytes)}": outcome}
    if weak_rank_fixed:
        fixed = evaluate(weak_rank_at_median(outcome))
        median = format_size(budget.median_safe_bytes)
        label = (
            f"rank {budget.limiting_rank} raised to the median ({median}): "
            f"uniform {format_size(fixed.budget.uniform_budget_bytes)}"
        )
        outcomes[label] = fixed
    crossings = {label: o.target_length for label, o in outcomes.items() if o.target_length is not None}
    return charts.concurrency_chart(
        {label: o.curve for label, o in outcomes.items()},
        outcome.scenario.max_model_len,
        outcome.scenario.target_concurrency,
        marks=charts.ConcurrencyMarks(
            crossings,
            getattr(outcome.capacity, "approximate_reason", ""),
            limits,
            None if previous is None else previous.curve,
        ),
    )


@dataclass(frozen=True)
class ChartStep:
    """A chart of a what-if panel: its name, the values it is drawn from (equal ``inputs``, the same
    picture: a panel draws it again only when they change) and the function drawing it."""

    name: str
    inputs: tuple
    draw: Callable[[], Figure]


@dataclass(frozen=True)
class Axes:
    """Fixed axis tops of a panel's charts [GiB], and the concurrency chart's ``(x0, x1, y0, y1)``."""

    budget_top_gib: float | None = None
    concurrency: tuple[float, float, float, float] | None = None
    stranded_top_gib: float | None = None


def panel_axes(baseline: Outcome) -> Axes:
    """The axes of a panel: those of the notebook's own charts at its parameters (one scale per quantity on
    the page); a chart raises its top when a moved state would not fit under it.

    >>> from kvplan.notebook.whatif import Scenario
    >>> GiB = 2**30
    >>> axes = panel_axes(evaluate(Scenario((13 * GiB, 18 * GiB), GiB)))
    >>> axes.budget_top_gib, axes.stranded_top_gib > 5  # 17 GiB × 1.05; above the 5 GiB stranded
    (17.85, True)
    """
    top = bytes_to_gib(max(baseline.budget.safe_bytes)) * 1.05  # safe_budget_chart's own top
    stranded = charts.stranded_chart(baseline.budget)  # its top: the notebook's chart's (none: a sentence)
    stranded_top = float(stranded.axes[0].get_ylim()[1]) if stranded.axes else None
    concurrency = None
    if baseline.curve is not None:
        curve = baseline.curve
        length = float(baseline.scenario.max_model_len or curve["seq_len"].max())
        target = baseline.scenario.target_concurrency
        lowest = min([float(curve["max_concurrency"].min()), *([target] if target else [])])
        concurrency = (
            float(curve["seq_len"].min()) / 1.5,
            length * 1.08,
            max(lowest, 1e-3) / 4,
            float(curve["max_concurrency"].max()) * 2,
        )
    return Axes(top, concurrency, stranded_top)


def _lengths(outcome: Outcome, axes: Axes) -> tuple[float, float, float, float] | None:
    """The concurrency axes of a panel: its fixed y range, x up to just past this state's max_model_len."""
    if axes.concurrency is None or outcome.curve is None:
        return axes.concurrency
    length = float(outcome.scenario.max_model_len or outcome.curve["seq_len"].max())
    return (float(outcome.curve["seq_len"].min()) / 1.5, length * 1.08, *axes.concurrency[2:])


def _concurrency_step(outcome: Outcome, axes: Axes, baseline: Outcome | None) -> ChartStep:
    """The concurrency chart of a panel: drawn from the uniform value, block size, length, target and axes."""
    limits = _lengths(outcome, axes)
    scenario = outcome.scenario
    return ChartStep(
        "concurrency",
        (
            outcome.budget.uniform_budget_bytes,
            scenario.effective_block_size,
            scenario.max_model_len,
            scenario.target_concurrency,
            limits,
            baseline is None,
        ),
        lambda: concurrency_figure(outcome, limits=limits, previous=baseline),
    )


def ledger_parts(ledger: pd.DataFrame | charts.LedgerParts, ranks: tuple[int, ...]) -> charts.LedgerParts:
    """What the ledger chart draws of a launch's ledger: the rows that set each rank's room
    (:func:`~kvplan.notebook.launch.rows_that_set_the_room`), read once (parts given are kept)."""
    if isinstance(ledger, charts.LedgerParts):
        return ledger
    return charts.LedgerParts.of(rows_that_set_the_room(ledger), ranks)


def panel_charts(
    outcome: Outcome,
    ledger: pd.DataFrame | charts.LedgerParts | None = None,
    axes: Axes | None = None,
    baseline: Outcome | None = None,
) -> list[ChartStep]:
    """The charts an outcome allows, as :class:`ChartStep` in display order (nothing drawn yet).

    Safe budget per rank; the ledger (when given: :func:`ledger_parts`, the add-back taken off the
    co-tenants); stranded capacity; concurrency (with a curve); drift.
    ``axes`` fixes the axes; ``baseline`` (the panel at the notebook's parameters) is drawn faintly.

    >>> from kvplan.notebook.whatif import Scenario
    >>> GiB = 2**30
    >>> [step.name for step in panel_charts(evaluate(Scenario((13 * GiB, 18 * GiB), GiB)))]
    ['safe budget', 'stranded']
    """
    axes = axes or Axes()
    top = axes.budget_top_gib
    budget, scenario = outcome.budget, outcome.scenario
    before = None if baseline is None else baseline.budget
    steps = [
        ChartStep(
            "safe budget",
            (budget, top, before),
            lambda: charts.safe_budget_chart(budget, top_gib=top, previous=before),
        )
    ]
    if ledger is not None:
        steps.append(
            ChartStep(
                "ledger",
                (budget, scenario.add_back_bytes),
                lambda: charts.ledger_chart(
                    ledger_parts(ledger, budget.ranks).with_add_back(scenario.add_back_bytes), budget
                ),
            )
        )
    stranded = (
        budget.ranks,
        budget.stranded_bytes,
        budget.rounding_loss_bytes,
        tuple(limiting_ranks(budget)),
    )
    steps.append(
        ChartStep(
            "stranded",
            (*stranded, axes.stranded_top_gib),
            lambda: charts.stranded_chart(budget, top_gib=axes.stranded_top_gib),
        )
    )
    if outcome.curve is not None:
        steps.append(_concurrency_step(outcome, axes, baseline))
    if outcome.drift is not None:
        drift = outcome.drift
        steps.append(ChartStep("drift", (drift, top), lambda: charts.drift_chart(drift, top_gib=top)))
    return steps
