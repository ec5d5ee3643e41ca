"""Figures as PNG with alt text, an outcome's what-if charts and a panel's live chart (:class:`LiveChart`)."""

from __future__ import annotations

import html
import io
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure, SubplotParams
from matplotlib.image import imsave
from matplotlib.legend import Legend

from kvplan import charts
from kvplan.budget import limiting_ranks
from kvplan.notebook.launch import rows_that_set_the_room
from kvplan.notebook.whatif import Outcome, evaluate, weak_rank_at_median
from kvplan.units import bytes_to_gib, format_size

#: Dots per inch of every PNG a notebook or panel shows: 10 × 5.5 in charts are 800 × 440 px.
PANEL_DPI = 80
#: zlib's fastest level: the same pixels, encoded in a third of the time.
_FAST = {"compress_level": 1}


def figure_png(figure: Figure, dpi: int = PANEL_DPI) -> bytes:
    """The figure as PNG bytes at ``dpi`` (no tight box: its size in inches × dpi), white background."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, facecolor="white", pil_kwargs=_FAST)
    return buffer.getvalue()


def figure_alt(figure: Figure) -> str:
    """Alt text of a chart: ``Chart: `` and its titles."""
    titles = [figure._suptitle.get_text()] if figure._suptitle is not None else []
    titles += [ax.get_title(loc) for ax in figure.axes for loc in ("left", "center") if ax.get_title(loc)]
    return "Chart: " + ("; ".join(title for title in titles if title) or "untitled")


def sentence(figure: Figure) -> str | None:
    """The sentence a chart without axes stands for, else None."""
    return None if figure.axes or figure._suptitle is None else " ".join(figure._suptitle.get_text().split())


@dataclass(frozen=True)
class Chart:
    """A figure a notebook cell displays as a PNG with alt text, or as its :func:`sentence`."""

    figure: Figure

    def _repr_mimebundle_(self, include=None, exclude=None):
        words = sentence(self.figure)
        if words is not None:
            return {"text/markdown": html.escape(words), "text/plain": words}, {}
        alt = figure_alt(self.figure)
        return {"image/png": figure_png(self.figure), "text/plain": alt}, {"image/png": {"alt": alt}}


#: Show a :mod:`kvplan.charts` figure in a notebook: ``chart(safe_budget_chart(budget))``.
chart = Chart


def concurrency_figure(
    outcome: Outcome,
    weak_rank_fixed: bool = False,
    limits: tuple[float, float, float, float] | None = None,
    previous: Outcome | None = None,
    figure: Figure | None = None,
) -> Figure:
    """The concurrency chart of an outcome (``weak_rank_fixed``: also with its limiting rank at the median);
    ``limits``, ``previous`` and ``figure`` as :func:`kvplan.charts.concurrency_chart`'s."""
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
    note, scenario = getattr(outcome.capacity, "approximate_reason", ""), outcome.scenario
    marks = charts.ConcurrencyMarks(crossings, note, limits, None if previous is None else previous.curve)
    curves = {label: o.curve for label, o in outcomes.items()}
    length, target = scenario.max_model_len, scenario.target_concurrency
    return charts.concurrency_chart(curves, length, target, marks=marks, figure=figure)


@dataclass(frozen=True)
class ChartStep:
    """A panel's chart: its name, what it is drawn from (equal: not redrawn) and ``draw(figure=None)``."""

    name: str
    inputs: tuple
    draw: Callable[..., Figure]


@dataclass(frozen=True)
class Axes:
    """Fixed axis tops of a panel's charts [GiB], and the concurrency chart's ``(x0, x1, y0, y1)``."""

    budget_top_gib: float | None = None
    concurrency: tuple[float, float, float, float] | None = None
    stranded_top_gib: float | None = None


def panel_axes(baseline: Outcome) -> Axes:
    """The axes of a panel: its notebook's charts' at its parameters."""
    top = bytes_to_gib(max(baseline.budget.safe_bytes)) * 1.05  # safe_budget_chart's own top
    stranded = charts.stranded_chart(baseline.budget)  # its top: the notebook's chart's (none: a sentence)
    stranded_top = float(stranded.axes[0].get_ylim()[1]) if stranded.axes else None
    concurrency = None
    if baseline.curve is not None:
        curve = baseline.curve
        length = float(baseline.scenario.max_model_len or curve["seq_len"].max())
        target = baseline.scenario.target_concurrency
        lowest = min([float(curve["max_concurrency"].min()), *([target] if target else [])])
        x_range = (float(curve["seq_len"].min()) / 1.5, length * 1.08)
        concurrency = (*x_range, max(lowest, 1e-3) / 4, float(curve["max_concurrency"].max()) * 2)
    return Axes(top, concurrency, stranded_top)


def _lengths(outcome: Outcome, axes: Axes) -> tuple[float, float, float, float] | None:
    """A state's concurrency axes: the panel's y range, doubled or halved where its curve leaves it."""
    if axes.concurrency is None or outcome.curve is None:
        return axes.concurrency
    curve, target = outcome.curve, outcome.scenario.target_concurrency
    length = float(outcome.scenario.max_model_len or curve["seq_len"].max())
    low, high = axes.concurrency[2:]
    while min([float(curve["max_concurrency"].min()), *([target] if target else [])]) / 4 < low:
        low /= 2
    while float(curve["max_concurrency"].max()) * 2 > high:
        high *= 2
    return (float(curve["seq_len"].min()) / 1.5, length * 1.08, low, high)


def ledger_parts(ledger: pd.DataFrame | charts.LedgerParts, ranks: tuple[int, ...]) -> charts.LedgerParts:
    """The ledger chart's parts of the rows that set each rank's room (parts given are kept)."""
    if isinstance(ledger, charts.LedgerParts):
        return ledger
    return charts.LedgerParts.of(rows_that_set_the_room(ledger), ranks)


def panel_charts(
    outcome: Outcome,
    ledger: pd.DataFrame | charts.LedgerParts | None = None,
    axes: Axes | None = None,
    baseline: Outcome | None = None,
) -> list[ChartStep]:
    """The charts an outcome allows, in display order; ``baseline`` is drawn faintly."""
    axes = axes or Axes()
    budget, scenario = outcome.budget, outcome.scenario
    top = axes.budget_top_gib  # raised by quarters where this state's bars need (one frame over neighbours)
    tallest = [*budget.safe_bytes, *(() if outcome.drift is None else outcome.drift.adjusted_bytes)]
    while top is not None and bytes_to_gib(max(tallest)) * 1.05 > top:
        top *= 1.25
    before = None if baseline is None else baseline.budget
    draw = partial(charts.safe_budget_chart, budget, top_gib=top, previous=before)
    steps = [ChartStep("safe budget", (budget, top, before), draw)]
    if ledger is not None:

        def draw_ledger(figure: Figure | None = None) -> Figure:
            parts = ledger_parts(ledger, budget.ranks).with_add_back(scenario.add_back_bytes)
            return charts.ledger_chart(parts, budget, figure=figure)

        steps.append(ChartStep("ledger", (budget, scenario.add_back_bytes), draw_ledger))
    limiting, top_stranded = tuple(limiting_ranks(budget)), axes.stranded_top_gib
    stranded = (budget.ranks, budget.stranded_bytes, budget.rounding_loss_bytes, limiting, top_stranded)
    steps.append(
        ChartStep("stranded", stranded, partial(charts.stranded_chart, budget, top_gib=top_stranded))
    )
    if outcome.curve is not None:
        limits = _lengths(outcome, axes)
        length = (scenario.effective_block_size, scenario.max_model_len, scenario.target_concurrency)
        draw = partial(concurrency_figure, outcome, limits=limits, previous=baseline)
        inputs = (budget.uniform_budget_bytes, *length, limits, baseline is None)
        steps.append(ChartStep("concurrency", inputs, draw))
    if outcome.drift is not None:
        draw = partial(charts.drift_chart, outcome.drift, top_gib=top)
        steps.append(ChartStep("drift", (outcome.drift, top), draw))
    return steps


@dataclass
class LiveChart:
    """A panel's chart drawn state after state into :attr:`figure` by blitting: while its frame
    (:func:`_frame_key`) holds, only what moved is drawn."""

    figure: Figure | None = None
    _canvas: _Canvas | None = None
    _key: tuple = ()
    _frame: object = None

    def png(self, figure: Figure) -> bytes:
        """The figure as PNG at :data:`PANEL_DPI`: :func:`figure_png`'s pixels."""
        if figure is not self.figure or self._canvas is None:
            figure.set_dpi(PANEL_DPI)
            self.figure, self._canvas, self._key = figure, _Canvas(figure), ()
        key, content = _frame_key(figure), _content(figure)
        if key != self._key:  # laid out as a new figure is (from the default margins), the frame drawn alone
            figure.subplots_adjust(**vars(SubplotParams()))
            figure.get_layout_engine().execute(figure)
            figure.set_layout_engine(None)
            shown = [artist for artist in content if artist.get_visible()]
            for artist in shown:
                artist.set_visible(False)
            self._canvas.draw()
            self._key, self._frame = key, self._canvas.copy_from_bbox(figure.bbox)
            for artist in shown:
                artist.set_visible(True)
        else:
            figure.set_layout_engine(None)
            self._canvas.restore_region(self._frame)
        renderer = self._canvas.get_renderer()
        for artist in content:
            if isinstance(artist, Legend):  # below or beside the plot: nothing else draws there
                entries = tuple(text.get_text() for text in artist.get_texts())
                renderer.draw_kept((key, id(artist.axes), entries), artist, artist.draw)
            else:
                artist.draw(renderer)
        buffer = io.BytesIO()  # zlib's fastest level, as figure_png
        imsave(buffer, np.asarray(self._canvas.buffer_rgba()), format="png", dpi=PANEL_DPI, pil_kwargs=_FAST)
        return buffer.getvalue()


class _Keeper(RendererAgg):
    """An Agg renderer keeping the pixels of texts and legends it draws, drawn as images when they recur."""

    def __init__(self, width: int, height: int, dpi: float) -> None:
        super().__init__(width, height, dpi)
        self._scratch = RendererAgg(width, height, dpi)
        self._kept: dict[tuple, tuple] = {}

    def draw_text(self, gc, *text, **math_text):
        """``text`` is ``(x, y, s, prop, angle)``, ``math_text`` ``ismath`` and ``mtext``."""
        clip, mtext = gc.get_clip_rectangle(), math_text.get("mtext")
        if gc.get_clip_path()[0] is not None or mtext is None:
            return super().draw_text(gc, *text, **math_text)
        x, y, s, prop, angle = text
        key = (s, hash(prop), angle, x, y, gc.get_rgb(), gc.get_alpha(), gc.get_antialiased())
        key += (math_text.get("ismath", False), None if clip is None else tuple(clip.bounds))
        self.draw_kept(key, mtext, lambda renderer: RendererAgg.draw_text(renderer, gc, *text, **math_text))

    def draw_kept(self, key: tuple, artist, draw: Callable[[RendererAgg], object]) -> None:
        """``draw(renderer)``'s pixels, kept by ``key``."""
        if key not in self._kept:
            if len(self._kept) > 2000:
                self._kept.clear()
            self._scratch.clear()
            draw(self._scratch)
            box, height = artist.get_window_extent(self).padded(3), int(self.height)
            left, bottom, top = max(0, int(box.x0)), max(0, int(box.y0)), max(0, height - int(box.y1) - 1)
            pixels = np.asarray(self._scratch.buffer_rgba())[top : height - bottom, left : int(box.x1) + 1]
            rows = np.flatnonzero(pixels[..., 3].any(axis=1))
            columns = np.flatnonzero(pixels[..., 3].any(axis=0))
            self._kept[key] = (None, 0, 0)
            if len(rows):
                ink = pixels[rows[0] : rows[-1] + 1, columns[0] : columns[-1] + 1][::-1].copy()
                self._kept[key] = (ink, left + int(columns[0]), height - top - int(rows[-1]) - 1)
        image, left, bottom = self._kept[key]
        if image is not None:
            self.draw_image(self.new_gc(), left, bottom, image)


class _Canvas(FigureCanvasAgg):
    """An Agg canvas drawing with a :class:`_Keeper`."""

    def get_renderer(self) -> _Keeper:
        width, height = self.get_width_height(physical=True)
        renderer = getattr(self, "renderer", None)
        size = (width, height, self.figure.dpi)
        if not isinstance(renderer, _Keeper) or (renderer.width, renderer.height, renderer.dpi) != size:
            self.renderer = _Keeper(width, height, self.figure.dpi)
        return self.renderer


def _frame_key(figure: Figure) -> tuple:
    """What a chart's frame and margins depend on: equal keys, the same frame at the same place."""
    key: list = [None if figure._suptitle is None else figure._suptitle.get_text().count("\n")]
    for ax in figure.axes:
        legend = ax.get_legend()
        key += [ax.get_xlim(), ax.get_ylim(), ax.get_xscale(), ax.get_yscale(), ax.get_xlabel()]
        key += [ax.get_ylabel(), len(legend.get_texts()) if legend else 0, ax.get_title("left").count("\n")]
        key += [tuple((t.get_text(), t.get_color(), t.get_fontweight()) for t in ax.get_xticklabels())]
        key += [ax.get_title("center").count("\n")]
    return tuple(key)


def _content(figure: Figure) -> list:
    """What a chart draws over its frame, in a full drawing's order."""
    drawn = []
    for ax in figure.axes:
        frame = {ax.patch, ax.xaxis, ax.yaxis, *ax.spines.values()}
        drawn += sorted((a for a in ax.get_children() if a not in frame), key=lambda a: a.get_zorder())
    children = [a for a in figure.get_children() if a is not figure.patch and a not in figure.axes]
    return drawn + sorted(children, key=lambda a: a.get_zorder())
