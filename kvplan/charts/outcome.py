"""Charts beyond one boot's bars: what the budget buys, its spread over boots and a later boot's drift."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from kvplan.budget import Budget
from kvplan.charts.style import (
    AVERAGE_COLOR,
    FIGSIZE,
    FONT_SIZE,
    LIMITING_COLOR,
    RANK_COLOR,
    REFERENCE_COLOR,
    TARGET_COLOR,
    _annotate_bars,
    _figure,
    _headroom,
    _legend_below,
    _note_figure,
    _outline_bars,
    _rank_colors,
    _slot_pt,
    _upright,
)
from kvplan.drift import Drift
from kvplan.units import bytes_to_gib, format_budget, format_size

#: Width [in] of each of the drift chart's two plot areas.
PANE_WIDTH_IN = 5.2


@dataclass(frozen=True)
class ConcurrencyMarks:
    """A concurrency chart's marks: ``crossings`` (label → longest length holding the target), a ``note``
    (why approximate), fixed axis ``limits`` and a faint ``previous`` curve."""

    crossings: Mapping[str, int] = field(default_factory=dict)
    note: str = ""
    limits: tuple[float, float, float, float] | None = None
    previous: pd.DataFrame | None = None


def concurrency_chart(
    curves: pd.DataFrame | Mapping[str, pd.DataFrame],
    max_model_len: int,
    target_concurrency: float | None = None,
    title: str | None = None,
    marks: ConcurrencyMarks | None = None,
    figure: Figure | None = None,
) -> Figure:
    """Full-length sequences at once against length (log–log) of one capacity table or several by label."""
    curves = {"budget": curves} if isinstance(curves, pd.DataFrame) else curves
    marks = marks or ConcurrencyMarks()
    fig, ax = _figure(reuse=figure)
    if marks.previous is not None:
        previous, label = marks.previous, "at the notebook's parameters"
        ax.plot(previous["seq_len"], previous["max_concurrency"], label=label, **_FAINT)
    colors = [RANK_COLOR, "#E69F00", AVERAGE_COLOR, REFERENCE_COLOR]
    for index, ((label, curve), color) in enumerate(zip(curves.items(), colors * len(curves))):
        row = _row_at_length(curve, max_model_len)
        at_max = f" ({float(row['max_concurrency']):.2f}×)" if int(row["seq_len"]) == max_model_len else ""
        tokens = f"{label}: {int(row['tokens']):,} tokens at {int(row['seq_len']):,}{at_max}"
        ax.plot(curve["seq_len"], curve["max_concurrency"], color=color, label=tokens, **_CURVE)
        crossing = marks.crossings.get(label)
        if target_concurrency is not None and crossing and crossing < max_model_len:
            _mark_crossing(ax, crossing, target_concurrency, color, index)
    ax.axvline(max_model_len, color="black", linestyle=":", label=f"max_model_len {max_model_len:,}")
    if target_concurrency is not None:
        ax.axhline(target_concurrency, label=f"target {target_concurrency:g} sequences", **_TARGET)
    if marks.note:
        fig.text(0.01, 0.01, f"approximate: {marks.note}", **_NOTE)
    _concurrency_axes(ax, curves, max_model_len, target_concurrency, marks.limits)
    ax.set_title(title or "What the budget buys: concurrency against sequence length")
    _legend_below(ax, columns=1 if len(curves) > 1 or marks.previous is not None else 2)
    fig.set_layout_engine("tight", rect=(0, 0.06 if marks.note else 0, 1, 1))  # laid out when drawn
    return fig


#: How the concurrency chart draws its curves, the faint previous one, the target, a crossing and a note.
_CURVE = {"marker": "o", "linewidth": 2}
_FAINT = {"color": REFERENCE_COLOR, "linewidth": 1.5, "linestyle": "--", "alpha": 0.7}
_TARGET = {"color": TARGET_COLOR, "linestyle": "--", "linewidth": 2}
_DIAMOND = {"marker": "D", "markersize": 9, "markeredgecolor": "black", "linestyle": "", "label": "_crossing"}
_NOTE = {"fontsize": FONT_SIZE - 2, "color": "#555555", "wrap": True, "va": "bottom"}


def _mark_crossing(ax, crossing: int, target: float, color: str, index: int) -> None:
    """A diamond where a curve crosses the target, labelled in the empty lower left."""
    ax.plot([crossing], [target], color=color, **_DIAMOND)
    text = f"{target:g} sequences up to {crossing:,} tokens"
    arrow = {"arrowstyle": "->", "color": color, "linewidth": 1.2}
    place = {"xytext": (0.03, 0.05 + 0.08 * index), "ha": "left", "va": "bottom", "fontsize": FONT_SIZE - 1}
    font = {"color": color, "fontweight": "bold", "arrowprops": arrow}
    ax.annotate(text, (crossing, target), textcoords="axes fraction", **place, **font)


def _concurrency_axes(ax, curves: Mapping[str, pd.DataFrame], max_model_len: int, target, limits) -> None:
    """Log–log axes, x just past ``max_model_len``; ``limits`` fixed, widened where a curve leaves them."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    lowest = min([float(c["max_concurrency"].min()) for c in curves.values()] + ([target] if target else []))
    highest = max(float(curve["max_concurrency"].max()) for curve in curves.values())
    if limits is None:
        ax.set_ylim(lowest / 4, highest * 2)
        ax.set_xlim(right=max_model_len * 1.08)
    else:
        ax.set_xlim(limits[0], limits[1])
        ax.set_ylim(min(limits[2], lowest / 4), max(limits[3], highest * 2))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("sequence length [tokens]")
    ax.set_ylabel("full-length sequences at once")
    ax.grid(True, which="major", alpha=0.3)


def _row_at_length(curve: pd.DataFrame, seq_len: int) -> pd.Series:
    """The curve's row at ``seq_len``, else the longest below it, else its shortest."""
    upto = curve[curve["seq_len"] <= seq_len]
    rows = upto if len(upto) else curve
    return rows.loc[rows["seq_len"].idxmax()] if len(upto) else rows.loc[rows["seq_len"].idxmin()]


def drift_chart(
    drift: Drift, title: str | None = None, top_gib: float | None = None, figure: Figure | None = None
) -> Figure:
    """Free memory each rank lost since the reference (left) and the adjusted budget (right, ``top_gib``)."""
    labels = [str(rank) for rank in drift.ranks]
    fig, (left, right) = _figure(2, (FIGSIZE[0] + 3, FIGSIZE[1]), figure)
    slot = _slot_pt(len(labels), PANE_WIDTH_IN)
    _drift_lost(left, drift, labels, slot)
    colors = _rank_colors(drift.ranks, drift.limiting_rank)
    adjusted_gib = [bytes_to_gib(a) for a in drift.adjusted_bytes]
    adjusted = right.bar(labels, adjusted_gib, color=colors, width=0.6, label="adjusted budget")
    _outline_bars(right, labels, drift.ref_budget_bytes, "reference budget", linewidth=2)
    _annotate_bars(right, adjusted, [format_budget(size) for size in drift.adjusted_bytes], True, slot)
    uniform = format_budget(drift.adjusted_uniform_bytes)
    right.axhline(
        bytes_to_gib(drift.adjusted_uniform_bytes), color="black", linewidth=2, label=f"uniform {uniform}"
    )
    tallest = max(bytes_to_gib(b) for b in drift.ref_budget_bytes + drift.adjusted_bytes)
    right.set_ylim(0, max(top_gib or 0.0, tallest * 1.05))
    right.set_xlabel("rank")
    right.set_ylabel("KV budget [GiB]")
    right.set_title(f"Adjusted budget (guard {format_size(drift.guard_bytes)})")
    _legend_below(right, columns=2)
    raise_note = "; a rank gained free memory: re-profile to raise" if drift.reprofile_to_raise else ""
    fig.suptitle(
        title or f"Rank {drift.limiting_rank} lost the most: {uniform} is safe on this boot{raise_note}",
        fontsize=FONT_SIZE + 2,
    )
    fig.set_layout_engine("tight")  # laid out when drawn
    return fig


def _drift_lost(ax, drift: Drift, labels: list[str], slot: float) -> None:
    """The drift chart's left pane: free memory lost per rank, both free-memory figures under each rank."""
    lost_gib = [bytes_to_gib(moved) for moved in drift.drift_bytes]
    bars = ax.bar(labels, lost_gib, color=_rank_colors(drift.ranks, drift.limiting_rank), width=0.6)
    texts = [
        f"{'lost' if m > 0 else 'gained'} {bytes_to_gib(abs(m)):.2f} GiB" if m else "same"
        for m in drift.drift_bytes
    ]
    level = _annotate_bars(ax, bars, texts, slot_pt=slot, fontsize=FONT_SIZE - 1)
    ax.axhline(0, color="black", linewidth=1)
    free = [
        f"{rank}\n{format_size(ref)} →\n{format_size(now)}"
        for rank, ref, now in zip(labels, drift.ref_free_bytes, drift.boot_free_bytes)
    ]
    shown = _upright(free, FONT_SIZE - 2, slot)  # the free memory under each rank where it fits
    ax.set_xticks(
        range(len(labels)), free if shown else labels, fontsize=FONT_SIZE - 2 if shown else FONT_SIZE
    )
    biggest = max([abs(value) for value in lost_gib] + [0.1])
    ax.set_ylim(
        min(0.0, min(lost_gib)) * 1.4 - 0.05 * biggest, _headroom(biggest, texts, FONT_SIZE - 1, level)
    )
    where = "free memory at startup: reference → this boot" if shown else "free memory: the drift table"
    ax.set_xlabel(f"rank ({where})")
    ax.set_ylabel("free memory lost since the reference [GiB]")
    ax.set_title("Free memory lost at startup (gained: below 0)")


def spread_chart(budgets: Mapping[str, Budget], title: str | None = None) -> Figure:
    """Min (its rank named), median and max safe budget [GiB] per boot label: is the weak rank stable?"""
    if not budgets:
        raise ValueError("spread_chart needs at least one boot's budget")
    labels = list(budgets)
    if len(labels) == 1 and title is None:  # one boot cannot show a spread: say what it shows in one line
        only = budgets[labels[0]]
        sizes = (only.min_safe_bytes, only.median_safe_bytes, only.max_safe_bytes)
        spread = ", ".join(
            f"{name} {format_size(size)}" for name, size in zip(("min", "median", "max"), sizes)
        )
        return _note_figure(
            f"Safe budget spread over 1 boot: rank {only.limiting_rank} limits every boot ({spread});\n"
            "profile two or three boots to see whether the same rank limits each time"
        )
    fig, ax = _figure()
    for i, budget in enumerate(budgets.values()):
        sizes = (budget.min_safe_bytes, budget.median_safe_bytes, budget.max_safe_bytes)
        low, mid, high = (bytes_to_gib(size) for size in sizes)
        ax.vlines(i, low, high, color=RANK_COLOR, linewidth=6, alpha=0.5)
        ax.plot(i, high, **_MAX)
        ax.plot(i, mid, **_MEDIAN)
        ax.plot(i, low, **_MIN)
        text = f"rank {budget.limiting_rank}\n{format_budget(budget.min_safe_bytes)}"
        ax.annotate(text, (i, low), textcoords="offset points", xytext=(10, -8), fontsize=FONT_SIZE - 1)
    ax.plot([], [], marker="o", color=LIMITING_COLOR, linestyle="", label="min (limiting rank)")
    ax.plot([], [], marker="o", color="white", markeredgecolor=RANK_COLOR, linestyle="", label="median")
    ax.plot([], [], marker="_", color=RANK_COLOR, markersize=16, linestyle="", label="max")
    ax.set_xticks(range(len(labels)), labels, rotation=20 if len(labels) > 4 else 0)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.set_ylim(0, max(bytes_to_gib(b.max_safe_bytes) for b in budgets.values()) * 1.2)
    ax.set_xlabel("boot")
    ax.set_ylabel("safe KV budget [GiB]")
    limiting = sorted({b.limiting_rank for b in budgets.values()})
    moves = f"the limiting rank moves ({', '.join(map(str, limiting))})"
    verdict = f"rank {limiting[0]} limits every boot" if len(limiting) == 1 else moves
    ax.set_title(title or f"Safe budget spread over {len(labels)} boots: {verdict}")
    _legend_below(ax, columns=3)
    fig.set_layout_engine("tight")  # laid out when drawn
    return fig


#: The spread chart's marks: the maximum, the median (white dot) and the minimum (the limiting rank's).
_MAX = {"marker": "_", "markersize": 22, "color": RANK_COLOR, "markeredgewidth": 3}
_MIN = {"marker": "o", "markersize": 10, "color": LIMITING_COLOR}
_MEDIAN = {**_MIN, "color": "white", "markeredgecolor": RANK_COLOR, "markeredgewidth": 2}
