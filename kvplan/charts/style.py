"""The charts' shared look: colours, sizes, figure set-up and bar annotations (no chart of its own)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from matplotlib import rc_context, rcParams
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

from kvplan.units import bytes_to_gib, format_budget, format_size

# Okabe–Ito colours: distinguishable with colour-vision deficiency and on projectors.
RANK_COLOR = "#0072B2"
LIMITING_COLOR = "#D55E00"
AVERAGE_COLOR = "#CC79A7"
REFERENCE_COLOR = "#999999"
TARGET_COLOR = "#009E73"
#: Letters [pt] and size [in] of a chart, readable on a projector.
FONT_SIZE = 12
FIGSIZE = (10, 5.5)
#: Plot-area size [in] of a :data:`FIGSIZE` chart with its legend below, and beside (the ledger chart).
PLOT_AREA = (8.9, 3.3)
PLOT_AREA_BESIDE = (6.2, 4.0)
#: Where a legend beside the plot area goes (right of it, off the data).
BESIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}
_TEXT_PATH = TextToPath()  # measures text in points without a figure


def _rank_list(ranks: Sequence[int]) -> str:
    """``rank 2``, ``ranks 1 and 2`` or ``ranks 0, 1 and 3``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def _figure(columns: int = 1, size_in: tuple[float, float] = FIGSIZE, reuse: Figure | None = None):
    """``columns`` styled axes side by side (one Axes, else a list); ``reuse`` of that shape is emptied."""
    if reuse is not None and len(reuse.axes) == columns and tuple(reuse.get_size_inches()) == size_in:
        for ax in reuse.axes:  # emptied of every drawn thing, its axis and ticks kept
            for container in list(ax.containers):
                container.remove()
            for artist in [*ax.patches, *ax.lines, *ax.texts, *ax.collections]:
                artist.remove()
            legend = ax.get_legend()
            if legend is not None:
                legend.remove()
            for loc in ("left", "center", "right"):
                ax.set_title("", loc=loc)
            ax.relim()
            ax.autoscale()
        for text in [text for text in reuse.texts if text.get_text() != reuse.get_suptitle()]:
            text.remove()  # a note (the suptitle is kept: the chart sets it again)
        return reuse, reuse.axes[0] if columns == 1 else reuse.axes
    fig = Figure(figsize=size_in)
    with rc_context({"axes.titley": 1.0}):
        axes = fig.subplots(1, columns)
    for ax in [axes] if columns == 1 else axes:
        _style(ax)
    return fig, axes


def _style(ax: Axes) -> None:
    ax.tick_params(labelsize=FONT_SIZE)
    ax.xaxis.label.set_fontsize(FONT_SIZE)
    ax.yaxis.label.set_fontsize(FONT_SIZE)
    ax.title.set_fontsize(FONT_SIZE + 1)
    ax.spines[["top", "right"]].set_visible(False)


def _rank_colors(ranks: Sequence[int], limiting_rank: int) -> list[str]:
    return [LIMITING_COLOR if rank == limiting_rank else RANK_COLOR for rank in ranks]


def _outline_bars(
    ax: Axes, labels: Sequence[str], sizes_bytes: Sequence[int], label: str, linewidth: float
) -> None:
    """Dashed grey outlines of ``sizes_bytes`` per rank [GiB]: what the filled bars are read against."""
    outline: dict[str, Any] = {
        "fill": False,
        "edgecolor": REFERENCE_COLOR,
        "linewidth": linewidth,
        "linestyle": "--",
    }
    ax.bar(labels, [bytes_to_gib(size) for size in sizes_bytes], width=0.6, label=label, **outline)


@lru_cache(maxsize=4096)
def _text_width_pt(text: str, fontsize: float) -> float:
    """Width [pt] of ``text``'s widest line in the default font: ``_text_width_pt("12 GiB", 10)`` is 33."""
    font = FontProperties(size=fontsize)
    return max(
        _TEXT_PATH.get_text_width_height_descent(line, font, ismath=False)[0] for line in text.split("\n")
    )


def _slot_pt(count: int, width_in: float = PLOT_AREA[0]) -> float:
    """Width [pt] of one of ``count`` bar slots across ``width_in``."""
    return width_in * 72 / max(1, count)


def _upright(texts: Sequence[str], fontsize: float, slot_pt: float) -> bool:
    """Whether every text fits across its slot."""
    return all(_text_width_pt(text, fontsize) <= slot_pt * 0.95 for text in texts)


def _headroom(tallest: float, texts: Sequence[str], fontsize: float, upright: bool) -> float:
    """The y-axis top leaving room for labels over the tallest bar."""
    label_pt = fontsize * 1.6 if upright else max(_text_width_pt(t, fontsize) for t in texts) + 10
    share = min(0.6, label_pt / (PLOT_AREA[1] * 72))
    return max(tallest, 1e-9) / (1 - share)


def _annotate_bars(
    ax: Axes, bars, texts: Sequence[str], inside: bool | str = False, slot_pt: float = 0, fontsize=FONT_SIZE
) -> bool:
    """Label each bar above it, white at its middle (``inside``) or foot (``"base"``), upright when too wide
    for ``slot_pt`` (default: the plot area's share); returns whether the labels stayed level."""
    level = _upright(texts, fontsize, slot_pt or _slot_pt(len(texts))) and inside is not True
    rotation = 0 if level else 90
    for bar, text in zip(bars, texts):
        x = bar.get_x() + bar.get_width() / 2
        place: dict[str, Any]
        if inside == "base":
            place = {"xy": (x, 0), "xytext": (0, 6), "color": "white", "fontweight": "bold"}
            place["rotation"] = rotation
        elif inside:
            place = {"xy": (x, bar.get_height() / 2), "va": "center", "color": "white", "rotation": 90}
        else:
            place = {"xy": (x, max(0.0, bar.get_height())), "xytext": (0, 4), "rotation": rotation}
        offset = {"textcoords": "offset points"} if "xytext" in place else {}
        ax.annotate(text, ha="center", **{"va": "bottom", "fontsize": fontsize, **offset, **place})
    return level


def _mark_limiting_tick(
    ax: Axes, ranks: Sequence[int], limiting: int | Sequence[int], totals: Sequence[int | None] = ()
) -> str:
    """Rank numbers as tick labels, the limiting one(s) coloured and bold; returns the x-axis label."""
    marked = [limiting] if isinstance(limiting, int) else list(limiting)
    ax.set_xticks(range(len(ranks)), [str(rank) for rank in ranks])
    plain = (
        rcParams["xtick.color"] if rcParams["xtick.labelcolor"] == "inherit" else rcParams["xtick.labelcolor"]
    )
    for rank, label in zip(ranks, ax.get_xticklabels()):  # every label set: a reused axes' may be marked
        label.set_color(LIMITING_COLOR if rank in marked else plain)
        label.set_fontweight("bold" if rank in marked else rcParams["font.weight"])
    known = {total for total in totals if total is not None}
    if len(known) == 1:
        return f"rank (every GPU {format_size(known.pop())}: the black line)"
    return "rank (black line: the GPU's total memory)" if known else "rank"


def _legend_below(ax: Axes, handles=None, columns: int = 2) -> None:
    """The legend under the plot area, in ``columns`` columns."""
    handles = handles if handles is not None else ax.get_legend_handles_labels()[0]
    place: dict[str, Any] = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.16), "ncols": columns}
    ax.legend(handles=handles, fontsize=FONT_SIZE - 1, frameon=False, **place)


def _label_segments(
    ax: Axes, bars, sizes_bytes: Sequence[int], dark: bool, pt_per_gib: float, budgets: bool = False
) -> None:
    """Each stacked segment's size at its middle: level, upright or not at all, as it fits."""
    fontsize = FONT_SIZE - 1
    box = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"}
    shade = {"color": "white", "bbox": None} if dark else {"color": "black", "bbox": box}
    for bar, size in zip(bars, sizes_bytes):
        text = (format_budget if budgets else format_size)(size)
        across_pt = bar.get_width() * _slot_pt(len(bars), PLOT_AREA_BESIDE[0]) * 0.95
        height_pt = bar.get_height() * pt_per_gib
        if _text_width_pt(text, fontsize) <= across_pt and height_pt >= fontsize * 1.25:
            rotation = 0
        elif _text_width_pt(text, fontsize) + 6 <= height_pt and across_pt >= fontsize * 1.5:
            rotation = 90
        else:
            continue
        middle = (bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2)
        ax.annotate(text, middle, ha="center", va="center", fontsize=fontsize, rotation=rotation, **shade)


def _note_figure(title: str) -> Figure:
    """A figure of one sentence: a chart whose answer is a sentence."""
    fig = Figure(figsize=(FIGSIZE[0], 1.6))
    fig.suptitle(title, fontsize=FONT_SIZE + 1, y=0.5, va="center")
    return fig
