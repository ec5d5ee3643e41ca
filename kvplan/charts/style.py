"""The charts' shared look: colours, sizes, figure set-up and bar annotations (no chart of its own).

The limiting rank is always drawn in :data:`LIMITING_COLOR`, the other ranks in :data:`RANK_COLOR`.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvplan.units import bytes_to_gib, format_size

# Okabe–Ito colours: distinguishable with colour-vision deficiency and on projectors.
RANK_COLOR = "#0072B2"


LIMITING_COLOR = "#D55E00"


AVERAGE_COLOR = "#CC79A7"


REFERENCE_COLOR = "#999999"


TARGET_COLOR = "#009E73"


FONT_SIZE = 12


FIGSIZE = (10, 5.5)


def _rank_list(ranks: Sequence[int]) -> str:
    """``rank 2`` or ``ranks 1 and 2`` or ``ranks 0, 1 and 3``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    _style(ax)
    return fig, ax


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
    """Dashed grey outlines of ``sizes_bytes`` per rank, drawn in GiB: the reference filled bars are read against."""
    ax.bar(
        labels,
        [bytes_to_gib(size) for size in sizes_bytes],
        width=0.6,
        fill=False,
        edgecolor=REFERENCE_COLOR,
        linewidth=linewidth,
        linestyle="--",
        label=label,
    )


def _annotate_bars(ax: Axes, bars, sizes_bytes: Sequence[int], inside: bool | str = False) -> None:
    """Label each bar with its size: above it, in white at its middle (``inside``) or at its foot (``"base"``).

    At the foot, the label sits below every horizontal line drawn at or above the lowest bar (a uniform
    value, an average), so no line strikes through it.
    """
    for bar, size in zip(bars, sizes_bytes):
        x = bar.get_x() + bar.get_width() / 2
        if inside == "base":
            ax.annotate(
                format_size(size),
                (x, 0),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                va="bottom",
                color="white",
                fontsize=FONT_SIZE,
                fontweight="bold",
            )
        elif inside:
            ax.annotate(
                format_size(size),
                (x, bar.get_height() / 2),
                ha="center",
                va="center",
                color="white",
                fontsize=FONT_SIZE,
                rotation=90,
            )
        else:
            ax.annotate(
                format_size(size),
                (x, bar.get_height()),
                textcoords="offset points",
                xytext=(0, 4),
                ha="center",
                va="bottom",
                fontsize=FONT_SIZE,
            )


def _mark_limiting_tick(
    ax: Axes, ranks: Sequence[int], limiting: int | Sequence[int], totals: Sequence[int | None] = ()
) -> None:
    """Rank tick labels, the limiting one coloured, with each GPU's total memory under the rank when known."""
    totals = list(totals) or [None] * len(ranks)
    marked = [limiting] if isinstance(limiting, int) else list(limiting)
    labels = [
        (f"{rank} (limiting)" if rank in marked else str(rank))
        + (f"\nof {format_size(total)}" if total is not None else "")
        for rank, total in zip(ranks, totals)
    ]
    ax.set_xticks(range(len(ranks)), labels)
    for rank in marked:
        ax.get_xticklabels()[list(ranks).index(rank)].set_color(LIMITING_COLOR)


def _label_segments(ax: Axes, bars, sizes_bytes: Sequence[int], min_height: float, dark: bool) -> None:
    """Each stacked segment at least ``min_height`` [GiB] tall, labelled with its size at its middle."""
    for bar, size in zip(bars, sizes_bytes):
        if bar.get_height() < min_height:
            continue
        ax.annotate(
            format_size(size),
            (bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2),
            ha="center",
            va="center",
            fontsize=FONT_SIZE - 1,
            color="white" if dark else "black",
            bbox=None if dark else {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
        )
