"""Drift: free memory at startup and the adjusted budget per rank, reference against a later boot."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvplan.charts.style import (
    FIGSIZE,
    FONT_SIZE,
    _annotate_bars,
    _figure,
    _headroom,
    _legend_below,
    _outline_bars,
    _rank_colors,
    _slot_pt,
    _upright,
)
from kvplan.drift import Drift
from kvplan.units import bytes_to_gib, format_size

#: Width [in] of each of the drift chart's two plot areas.
PANE_WIDTH_IN = 5.2


def drift_chart(drift: Drift, title: str | None = None, top_gib: float | None = None) -> Figure:
    """Which rank moved: reference vs boot free memory (left) and the adjusted budget (right).

    Left: the free memory each rank lost at startup since the reference (``drift_bytes``, on its own
    scale so a 0.1 GiB drift shows), with both free-memory figures under the rank. Right:
    ``adjusted_bytes`` per rank (limiting rank highlighted) with the reference budget as a grey outline
    and the uniform adjusted value as a line. All in GiB. Free memory lost since the reference is
    positive ("lost 1.25 GiB", as ``drift_bytes`` and the drift table count it), gained is "gained".
    ``top_gib`` fixes the right axis.

    >>> from kvplan.drift import drift_budget
    >>> from kvplan.units import GiB
    >>> fig = drift_chart(drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 42 * GiB]))
    >>> [float(bar.get_height()) for bar in fig.axes[1].containers[0]]  # 30 − (42 − 41), 30
    [29.0, 30.0]
    """
    labels = [str(rank) for rank in drift.ranks]
    positions = list(range(len(labels)))
    fig, (left, right) = _figure(2, (FIGSIZE[0] + 3, FIGSIZE[1]))
    # the loss itself, on its own scale: a 0.1–1.25 GiB drift is invisible against 0–50 GiB of free memory
    lost_gib = [bytes_to_gib(moved) for moved in drift.drift_bytes]
    bars = left.bar(labels, lost_gib, color=_rank_colors(drift.ranks, drift.limiting_rank), width=0.6)
    texts = [
        f"lost {bytes_to_gib(moved):.2f} GiB"
        if moved > 0
        else (f"gained {bytes_to_gib(-moved):.2f} GiB" if moved else "same")
        for moved in drift.drift_bytes
    ]
    slot = _slot_pt(len(labels), PANE_WIDTH_IN)
    level = _upright(texts, FONT_SIZE - 1, slot)
    for bar, text in zip(bars, texts):
        left.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, max(0.0, bar.get_height())),
            textcoords="offset points",
            xytext=(0, 4),
            ha="center",
            va="bottom",
            fontsize=FONT_SIZE - 1,
            rotation=0 if level else 90,
        )
    left.axhline(0, color="black", linewidth=1)
    free = [
        f"{rank}\n{format_size(ref)} →\n{format_size(now)}"
        for rank, ref, now in zip(labels, drift.ref_free_bytes, drift.boot_free_bytes)
    ]
    shown = _upright(free, FONT_SIZE - 2, slot)  # the free memory under each rank where it fits
    left.set_xticks(positions, free if shown else labels, fontsize=FONT_SIZE - 2 if shown else FONT_SIZE)
    biggest = max([abs(value) for value in lost_gib] + [0.1])
    top = _headroom(biggest, texts, FONT_SIZE - 1, level)
    left.set_ylim(min(0.0, min(lost_gib)) * 1.4 - 0.05 * biggest, top)
    left.set_xlabel(
        "rank (free memory at startup: reference → this boot)"
        if shown
        else "rank (free memory: the drift table)"
    )
    left.set_ylabel("free memory lost since the reference [GiB]")
    left.set_title("Free memory lost at startup (gained: below 0)")

    adjusted = right.bar(
        labels,
        [bytes_to_gib(a) for a in drift.adjusted_bytes],
        color=_rank_colors(drift.ranks, drift.limiting_rank),
        width=0.6,
        label="adjusted budget",
    )
    _outline_bars(right, labels, drift.ref_budget_bytes, "reference budget", linewidth=2)
    _annotate_bars(right, adjusted, drift.adjusted_bytes, inside=True, slot_pt=slot)
    right.axhline(
        bytes_to_gib(drift.adjusted_uniform_bytes),
        color="black",
        linewidth=2,
        label=f"uniform {format_size(drift.adjusted_uniform_bytes)}",
    )
    tallest = max(bytes_to_gib(b) for b in drift.ref_budget_bytes + drift.adjusted_bytes)
    right.set_ylim(0, max(top_gib or 0.0, tallest * 1.05))
    right.set_xlabel("rank")
    right.set_ylabel("KV budget [GiB]")
    right.set_title(f"Adjusted budget (guard {format_size(drift.guard_bytes)})")
    _legend_below(right, columns=2)
    raise_note = "; a rank gained free memory: re-profile to raise" if drift.reprofile_to_raise else ""
    fig.suptitle(
        title
        or f"Rank {drift.limiting_rank} lost the most: {format_size(drift.adjusted_uniform_bytes)} "
        f"is safe on this boot{raise_note}",
        fontsize=FONT_SIZE + 2,
    )
    fig.set_layout_engine("tight")  # laid out when drawn
    return fig
