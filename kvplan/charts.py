"""Charts for planners and review meetings: each takes computed results and returns a Figure.

Nothing here computes a budget: the numbers come from :mod:`kvplan.budget`, :mod:`kvplan.capacity`,
:mod:`kvplan.drift` and the ledger, and are only converted to GiB for the axes. Every chart answers
one question, says it in its title, and annotates the numbers a reviewer would ask about. Figures
are sized and lettered to stay readable on a projector; they are plain ``matplotlib.figure.Figure``
objects, never registered with pyplot, so a drawing in one thread cannot be closed or flushed by another.

The limiting rank is always drawn in :data:`LIMITING_COLOR`, the other ranks in :data:`RANK_COLOR`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator

from kvplan.budget import Budget
from kvplan.drift import Drift
from kvplan.units import GiB, bytes_to_gib, format_size

# Okabe–Ito colours: distinguishable with colour-vision deficiency and on projectors.
RANK_COLOR = "#0072B2"
LIMITING_COLOR = "#D55E00"
AVERAGE_COLOR = "#CC79A7"
REFERENCE_COLOR = "#999999"
TARGET_COLOR = "#009E73"

#: Ledger segments bottom to top: (ledger column or budget part, legend label, colour).
LEDGER_SEGMENTS = (
    ("other_process_bytes", "other processes", "#000000"),
    ("weights_bytes", "weights", "#56B4E9"),
    ("non_torch_bytes", "non-torch (NCCL, context)", "#E69F00"),
    ("activation_peak_bytes", "activation peak", "#F0E442"),
    ("cuda_graph_bytes", "CUDA graphs", "#CC79A7"),
    ("not_itemised", "not itemised in the log", "#DDDDDD"),
    ("uniform", "uniform KV budget", RANK_COLOR),
    ("stranded", "stranded", "white"),
    ("reserve", "reserve", TARGET_COLOR),
)

#: Ledger segments labelled with their size where tall enough to hold the text.
SIZED_SEGMENTS = ("other_process_bytes", "weights_bytes", "uniform", "stranded")

FONT_SIZE = 12
FIGSIZE = (10, 5.5)


def ledger_chart(ledger: pd.DataFrame, budget: Budget, title: str | None = None) -> Figure:
    """Where each GPU's memory goes: the ledger parts, reserve, uniform budget and stranded bytes.

    One stacked bar per rank, against that GPU's total memory (black tick). ``ledger`` has the
    glossary columns; where it holds several boots, each rank is drawn from its boot with the lowest
    ``room_bytes`` (the one that set its budget). A missing part counts as zero, negative CUDA-graph
    bytes (free memory rose during capture) draw as zero, and ``cuda_graph_estimate_bytes`` stands
    in where no capture was logged. What the log does not itemise (CUDA context, vLLM's 150 MiB
    margin) fills the bar up to ``room_bytes`` below the KV part, so ``uniform + stranded + reserve``
    is exactly the budget's room for the rank. Segment heights are in GiB.

    >>> from kvplan.budget import uniform_budget
    >>> ledger = pd.DataFrame({"rank": [0, 1], "total_bytes": [20 * GiB] * 2, "weights_bytes": [5 * GiB] * 2})
    >>> fig = ledger_chart(ledger, uniform_budget([13 * GiB, 15 * GiB], GiB))
    >>> # weights, not itemised (20 − 5 − room), uniform KV, stranded, reserve
    >>> [[float(p.get_height()) for p in c] for c in fig.axes[0].containers]
    [[5.0, 5.0], [2.0, 0.0], [12.0, 12.0], [0.0, 2.0], [1.0, 1.0]]
    """
    rows = _one_row_per_rank(ledger, budget.ranks)
    labels = [str(rank) for rank in budget.ranks]
    heights: dict[str, list[float]] = {}
    sizes: dict[str, list[int]] = {}  # exact bytes of the segments labelled with their size
    for column, _, _ in LEDGER_SEGMENTS[:5]:
        sizes[column] = [max(0, _part_bytes(rows.loc[rank], column)) for rank in budget.ranks]
        heights[column] = [bytes_to_gib(value) for value in sizes[column]]
    totals = [_optional_int(rows.loc[rank].get("total_bytes")) for rank in budget.ranks]
    sizes["uniform"] = [budget.uniform_budget_bytes] * len(labels)
    sizes["stranded"] = list(budget.stranded_bytes)
    kv_parts = {
        "uniform": [bytes_to_gib(size) for size in sizes["uniform"]],
        "stranded": [bytes_to_gib(size) for size in sizes["stranded"]],
        "reserve": [bytes_to_gib(budget.reserve_bytes)] * len(labels),
    }
    itemised = [sum(heights[column][i] for column in heights) for i in range(len(labels))]
    room = [bytes_to_gib(room) for room in budget.room_bytes]
    heights["not_itemised"] = [
        max(0.0, bytes_to_gib(total) - done - kv) if total is not None else 0.0
        for total, done, kv in zip(totals, itemised, room)
    ]
    heights.update(kv_parts)

    fig, ax = _figure()
    bottom = [0.0] * len(labels)
    tallest = max(
        max(sum(h[i] for h in heights.values()) for i in range(len(labels))),
        max((bytes_to_gib(t) for t in totals if t is not None), default=0.0),
    )
    for column, label, color in LEDGER_SEGMENTS:
        values = heights[column]
        if not any(values):
            continue
        stranded = column == "stranded"
        bars = ax.bar(
            labels,
            values,
            bottom=bottom,
            color=color,
            label=label,
            width=0.6,
            edgecolor=RANK_COLOR if stranded else "white",
            hatch="//" if stranded else None,
        )
        if column in SIZED_SEGMENTS:
            _label_segments(ax, bars, sizes[column], tallest * 0.04, dark=color in ("#000000", RANK_COLOR))
        bottom = [b + v for b, v in zip(bottom, values)]
    for i, total in enumerate(totals):
        if total is not None:
            ax.hlines(bytes_to_gib(total), i - 0.38, i + 0.38, color="black", linewidth=2.5)
    limiting = list(budget.ranks).index(budget.limiting_rank)
    ax.add_patch(
        Rectangle(
            (limiting - 0.33, 0),
            0.66,
            bottom[limiting],
            fill=False,
            edgecolor=LIMITING_COLOR,
            linewidth=3,
            label="_limiting outline",
        )
    )
    ax.annotate(
        "limits the budget",
        (limiting, max(bottom[limiting], bytes_to_gib(totals[limiting] or 0))),
        textcoords="offset points",
        xytext=(0, 5),
        ha="center",
        va="bottom",
        color=LIMITING_COLOR,
        fontsize=FONT_SIZE - 1,
        fontweight="bold",
    )
    ax.set_ylim(0, tallest * 1.1)
    _mark_limiting_tick(ax, budget.ranks, budget.limiting_rank, totals)
    ax.set_xlabel("rank")
    ax.set_ylabel("GPU memory [GiB]")
    ax.set_title(
        title
        or f"Where each GPU's memory goes: {format_size(budget.uniform_budget_bytes)} KV on every rank, "
        f"{format_size(budget.stranded_total_bytes)} stranded"
    )
    handles, names = ax.get_legend_handles_labels()
    ax.legend(
        handles[::-1],
        names[::-1],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=FONT_SIZE - 1,
        frameon=False,
    )
    fig.tight_layout()
    return fig


def limiting_ranks(budget: Budget) -> list[int]:
    """Every rank whose safe budget is the minimum (several when ranks tie; all when every rank does).

    >>> from kvplan.budget import uniform_budget
    >>> limiting_ranks(uniform_budget([13 * GiB, 18 * GiB, 13 * GiB], GiB))
    [0, 2]
    """
    return [rank for rank, safe in zip(budget.ranks, budget.safe_bytes) if safe == budget.min_safe_bytes]


def safe_budget_chart(
    budget: Budget, title: str | None = None, top_gib: float | None = None, previous: Budget | None = None
) -> Figure:
    """Why the minimum: safe budget per rank, the uniform value, and the tempting (unsafe) average.

    Bars are ``safe_bytes`` per rank in GiB; the limiting rank(s) in :data:`LIMITING_COLOR`. The uniform
    budget is a solid line; the average of the safe budgets is a dashed line labelled as the wrong answer,
    because the limiting rank cannot allocate it. When every rank holds the same safe budget the average
    is the uniform value: no average line is drawn and no rank is named as limiting. ``top_gib`` fixes the
    y axis (a what-if panel keeps it while its controls move); ``previous`` draws that budget's bars and
    uniform value faintly, so a change is seen against the state before it.

    >>> from kvplan.budget import uniform_budget
    >>> fig = safe_budget_chart(uniform_budget([13 * GiB, 18 * GiB], GiB))
    >>> [float(bar.get_height()) for bar in fig.axes[0].containers[0]]
    [12.0, 17.0]
    >>> tied = safe_budget_chart(uniform_budget([31 * GiB] * 4, GiB))
    >>> [text for text in tied.axes[0].get_legend().get_texts() if "unsafe" in text.get_text()]
    []
    """
    labels = [str(rank) for rank in budget.ranks]
    safe_gib = [bytes_to_gib(safe) for safe in budget.safe_bytes]
    weakest = limiting_ranks(budget)
    tied = len(weakest) == len(budget.ranks)
    average_bytes = sum(budget.safe_bytes) // len(budget.safe_bytes)
    fig, ax = _figure()
    if previous is not None:
        ax.bar(
            labels,
            [bytes_to_gib(safe) for safe in previous.safe_bytes],
            width=0.6,
            fill=False,
            edgecolor=REFERENCE_COLOR,
            linestyle="--",
            linewidth=1.5,
            label="before the last change",
        )
        ax.axhline(
            bytes_to_gib(previous.uniform_budget_bytes),
            color=REFERENCE_COLOR,
            linewidth=1.5,
            alpha=0.6,
            label=f"uniform before: {format_size(previous.uniform_budget_bytes)}",
        )
    colors = [LIMITING_COLOR if rank in weakest and not tied else RANK_COLOR for rank in budget.ranks]
    bars = ax.bar(labels, safe_gib, color=colors, width=0.6)
    # labels sit inside the bar tops: the uniform and average lines run above or across bars, not labels
    _annotate_bars(ax, bars, budget.safe_bytes, inside="top")
    ax.axhline(
        bytes_to_gib(budget.uniform_budget_bytes),
        color="black",
        linewidth=2,
        label=f"uniform budget {format_size(budget.uniform_budget_bytes)} (safe on every rank)",
    )
    if not tied:
        names = _rank_list(weakest)
        ax.axhline(
            bytes_to_gib(average_bytes),
            color=AVERAGE_COLOR,
            linestyle="--",
            linewidth=2,
            label=f"average {format_size(average_bytes)}: unsafe, {names} cannot hold it",
        )
    _mark_limiting_tick(ax, budget.ranks, [] if tied else weakest)
    ax.set_xlabel("rank")
    ax.set_ylabel("safe KV budget (room − reserve) [GiB]")
    ax.set_ylim(0, top_gib or max(safe_gib) * 1.3)
    uniform = format_size(budget.uniform_budget_bytes)
    ax.set_title(
        title
        or (
            f"Every rank holds the same safe budget: {uniform}, none limits alone"
            if tied
            else f"One value for every rank: the minimum, {uniform}"
        )
    )
    handles, _ = ax.get_legend_handles_labels()
    if not tied:
        handles.append(Patch(color=LIMITING_COLOR, label=f"limiting: {_rank_list(weakest)}"))
    ax.legend(handles=handles, loc="upper right", fontsize=FONT_SIZE - 1)
    fig.tight_layout()
    return fig


def _rank_list(ranks: Sequence[int]) -> str:
    """``rank 2`` or ``ranks 1 and 2`` or ``ranks 0, 1 and 3``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def stranded_chart(budget: Budget, title: str | None = None, top_gib: float | None = None) -> Figure:
    """What the uniform value leaves unused: stranded bytes per rank and their total.

    Bar heights are ``budget.stranded_bytes`` in GiB (including block rounding, which the title
    states separately when there is any). ``top_gib`` fixes the y axis.

    >>> from kvplan.budget import uniform_budget
    >>> fig = stranded_chart(uniform_budget([13 * GiB, 18 * GiB], GiB))
    >>> fig.axes[0].get_title()
    'Stranded on the stronger ranks: 5 GiB in total'
    """
    labels = [str(rank) for rank in budget.ranks]
    fig, ax = _figure()
    bars = ax.bar(
        labels,
        [bytes_to_gib(s) for s in budget.stranded_bytes],
        color=_rank_colors(budget.ranks, budget.limiting_rank),
        width=0.6,
    )
    _annotate_bars(ax, bars, budget.stranded_bytes)
    limiting = list(budget.ranks).index(budget.limiting_rank)
    stranded_there = budget.stranded_bytes[limiting]
    ax.texts[limiting].set_text(f"limits: {format_size(stranded_there) if stranded_there else '0'} stranded")
    ax.texts[limiting].set_color(LIMITING_COLOR)
    ax.texts[limiting].set_fontweight("bold")
    rounding = (
        f" ({format_size(budget.rounding_loss_bytes)} per rank from block rounding)"
        if budget.rounding_loss_bytes
        else ""
    )
    ax.set_title(
        title
        or f"Stranded on the stronger ranks: {format_size(budget.stranded_total_bytes)} in total{rounding}"
    )
    _mark_limiting_tick(ax, budget.ranks, budget.limiting_rank)
    ax.set_xlabel("rank")
    ax.set_ylabel("stranded KV memory [GiB]")
    ax.set_ylim(0, top_gib or max(1.0, max(bytes_to_gib(s) for s in budget.stranded_bytes)) * 1.2)
    fig.tight_layout()
    return fig


def concurrency_chart(
    curves: pd.DataFrame | Mapping[str, pd.DataFrame],
    max_model_len: int,
    target_concurrency: float | None = None,
    title: str | None = None,
    crossings: Mapping[str, int] | None = None,
    note: str = "",
    limits: tuple[float, float, float, float] | None = None,
    previous: pd.DataFrame | None = None,
) -> Figure:
    """What a budget buys: full-length sequences held at once against sequence length (log–log).

    ``curves`` is one :func:`kvplan.capacity.concurrency_curve` frame, or several keyed by a label
    (e.g. ``{"uniform 12 GiB": ..., "rank 2 fixed": ...}``); each legend entry states its tokens at
    ``max_model_len`` (vLLM ≥ 0.21 logs tokens that depend on the length for sliding-window and
    hybrid models). ``max_model_len`` is marked with a vertical line and the concurrency there is
    annotated left of it; a target concurrency is a horizontal line. ``crossings`` maps a curve's
    label to the longest length at which it still holds the target (e.g.
    :attr:`kvplan.notebook.scenario.Outcome.target_length`), marked on the target line when shorter than
    ``max_model_len``. ``note`` (e.g. why a spec is approximate) is printed under the plot. ``limits``
    ``(x_min, x_max, y_min, y_max)`` fixes the axes (a what-if panel keeps them while its controls move);
    ``previous`` (a curve of the state before the last change) is drawn faintly.

    >>> from kvplan.capacity import concurrency_curve
    >>> fig = concurrency_chart(concurrency_curve(12 * GiB, 256 * 1024, [4096, 8192]), 8192, 8)
    >>> fig.axes[0].get_lines()[0].get_ydata().tolist()
    [12.0, 6.0]
    """
    if isinstance(curves, pd.DataFrame):
        curves = {"budget": curves}
    crossings = crossings or {}
    fig, ax = _figure()
    colors = [RANK_COLOR, "#E69F00", AVERAGE_COLOR, REFERENCE_COLOR]
    if previous is not None:
        ax.plot(
            previous["seq_len"],
            previous["max_concurrency"],
            color=REFERENCE_COLOR,
            linewidth=1.5,
            linestyle="--",
            alpha=0.7,
            label="before the last change",
        )
    at_max_values = []
    for index, ((label, curve), color) in enumerate(zip(curves.items(), colors * len(curves))):
        row = _row_at_length(curve, max_model_len)
        ax.plot(
            curve["seq_len"],
            curve["max_concurrency"],
            marker="o",
            color=color,
            linewidth=2,
            label=f"{label}: {int(row['tokens']):,} tokens at {int(row['seq_len']):,}",
        )
        if int(row["seq_len"]) == max_model_len:
            at_max_values.append((float(row["max_concurrency"]), color))
        crossing = crossings.get(label)
        if target_concurrency is not None and crossing and crossing < max_model_len:
            # marked on the target line; the label sits in the empty lower left, below every curve
            ax.plot(
                [crossing],
                [target_concurrency],
                marker="D",
                markersize=9,
                color=color,
                markeredgecolor="black",
                linestyle="",
                label="_crossing",
            )
            ax.annotate(
                f"{target_concurrency:g} sequences up to {crossing:,} tokens",
                (crossing, target_concurrency),
                xycoords="data",
                textcoords="axes fraction",
                xytext=(0.03, 0.05 + 0.08 * index),
                ha="left",
                va="bottom",
                fontsize=FONT_SIZE - 1,
                color=color,
                fontweight="bold",
                arrowprops={"arrowstyle": "->", "color": color, "linewidth": 1.2},
            )
    # concurrency at max_model_len: right of the marker line (the axis extends to hold it)
    for value, color in at_max_values:
        ax.annotate(
            f"{value:.2f}×",
            (max_model_len, value),
            textcoords="offset points",
            xytext=(8, 0),
            ha="left",
            va="center",
            fontsize=FONT_SIZE - 1,
            color=color,
            fontweight="bold",
        )
    ax.axvline(max_model_len, color="black", linestyle=":", label=f"max_model_len {max_model_len:,}")
    if target_concurrency is not None:
        ax.axhline(
            target_concurrency,
            color=TARGET_COLOR,
            linestyle="--",
            linewidth=2,
            label=f"target {target_concurrency:g} sequences",
        )
    if note:
        fig.text(
            0.01,
            0.01,
            f"approximate: {note}",
            fontsize=FONT_SIZE - 2,
            color="#555555",
            wrap=True,
            va="bottom",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    lowest = min(
        [float(curve["max_concurrency"].min()) for curve in curves.values()]
        + ([target_concurrency] if target_concurrency else [])
    )
    highest = max(float(curve["max_concurrency"].max()) for curve in curves.values())
    if limits is None:
        ax.set_ylim(lowest / 4, highest * 4)  # room for the crossing labels below and the legend above
        ax.set_xlim(right=max_model_len * 2.2)
    else:
        ax.set_xlim(limits[0], limits[1])
        ax.set_ylim(limits[2], limits[3])
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("sequence length [tokens]")
    ax.set_ylabel("full-length sequences at once")
    ax.set_title(title or "What the budget buys: concurrency against sequence length")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper right", fontsize=FONT_SIZE - 1)
    fig.tight_layout(rect=(0, 0.06 if note else 0, 1, 1))
    return fig


def drift_chart(drift: Drift, title: str | None = None, top_gib: float | None = None) -> Figure:
    """Which rank moved: reference vs boot free memory (left) and the adjusted budget (right).

    Left: grouped bars of ``ref_free_bytes`` and ``boot_free_bytes`` per rank with the drift
    annotated. Right: ``adjusted_bytes`` per rank (limiting rank highlighted) with the reference
    budget as a grey outline and the uniform adjusted value as a line. All in GiB. Free memory lost since
    the reference is positive ("lost 1.25 GiB", as ``drift_bytes`` and the drift table count it), gained
    is "gained". ``top_gib`` fixes the right axis.

    >>> from kvplan.drift import drift_budget
    >>> fig = drift_chart(drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 42 * GiB]))
    >>> [float(bar.get_height()) for bar in fig.axes[1].containers[0]]  # 30 − (42 − 41), 30
    [29.0, 30.0]
    """
    labels = [str(rank) for rank in drift.ranks]
    positions = list(range(len(labels)))
    fig = Figure(figsize=(FIGSIZE[0] + 3, FIGSIZE[1]))
    left, right = fig.subplots(1, 2)
    for ax in (left, right):
        _style(ax)
    width = 0.38
    left.bar(
        [p - width / 2 for p in positions],
        [bytes_to_gib(f) for f in drift.ref_free_bytes],
        width,
        color=REFERENCE_COLOR,
        label="reference boot",
    )
    boot_bars = left.bar(
        [p + width / 2 for p in positions],
        [bytes_to_gib(f) for f in drift.boot_free_bytes],
        width,
        color=_rank_colors(drift.ranks, drift.limiting_rank),
        label="this boot",
    )
    for bar, moved in zip(boot_bars, drift.drift_bytes):
        text = (
            f"lost {bytes_to_gib(moved):.2f} GiB"
            if moved > 0
            else (f"gained {bytes_to_gib(-moved):.2f} GiB" if moved else "same")
        )
        left.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            textcoords="offset points",
            xytext=(0, 4),
            ha="center",
            fontsize=FONT_SIZE - 1,
        )
    left.set_xticks(positions, labels)
    left.set_ylim(0, max(bytes_to_gib(f) for f in drift.ref_free_bytes + drift.boot_free_bytes) * 1.3)
    left.set_xlabel("rank")
    left.set_ylabel("free GPU memory at startup [GiB]")
    left.set_title("Free memory at startup")
    left.legend(loc="upper left", ncols=2, fontsize=FONT_SIZE - 1)

    adjusted = right.bar(
        labels,
        [bytes_to_gib(a) for a in drift.adjusted_bytes],
        color=_rank_colors(drift.ranks, drift.limiting_rank),
        width=0.6,
        label="adjusted budget",
    )
    right.bar(
        labels,
        [bytes_to_gib(b) for b in drift.ref_budget_bytes],
        width=0.6,
        fill=False,
        edgecolor=REFERENCE_COLOR,
        linewidth=2,
        linestyle="--",
        label="reference budget",
    )
    _annotate_bars(right, adjusted, drift.adjusted_bytes, inside=True)
    right.axhline(
        bytes_to_gib(drift.adjusted_uniform_bytes),
        color="black",
        linewidth=2,
        label=f"uniform {format_size(drift.adjusted_uniform_bytes)}",
    )
    tallest = max(bytes_to_gib(b) for b in drift.ref_budget_bytes + drift.adjusted_bytes)
    right.set_ylim(0, top_gib or tallest * 1.25)
    right.set_xlabel("rank")
    right.set_ylabel("KV budget [GiB]")
    right.set_title(f"Adjusted budget (guard {format_size(drift.guard_bytes)})")
    right.legend(loc="upper right", fontsize=FONT_SIZE - 1)
    raise_note = "; a rank gained free memory: re-profile to raise" if drift.reprofile_to_raise else ""
    fig.suptitle(
        title
        or f"Rank {drift.limiting_rank} lost the most: {format_size(drift.adjusted_uniform_bytes)} "
        f"is safe on this boot{raise_note}",
        fontsize=FONT_SIZE + 2,
    )
    fig.tight_layout()
    return fig


def spread_chart(budgets: Mapping[str, Budget], title: str | None = None) -> Figure:
    """Is the weak rank stable? Min / median / max safe budget per boot, min labelled with its rank.

    ``budgets`` maps a boot label to that boot's :class:`Budget`. Each boot is a vertical range from
    ``min_safe_bytes`` to ``max_safe_bytes`` with the median as a white dot and the minimum in
    :data:`LIMITING_COLOR`, annotated with the limiting rank. All in GiB.

    >>> from kvplan.budget import uniform_budget
    >>> fig = spread_chart({"boot 0": uniform_budget([13 * GiB, 18 * GiB], GiB)})
    >>> fig.axes[0].get_title()
    'Safe budget spread over 1 boot: rank 0 limits every boot'
    """
    if not budgets:
        raise ValueError("spread_chart needs at least one boot's budget")
    labels = list(budgets)
    fig, ax = _figure()
    for i, label in enumerate(labels):
        budget = budgets[label]
        low, mid, high = (
            bytes_to_gib(b) for b in (budget.min_safe_bytes, budget.median_safe_bytes, budget.max_safe_bytes)
        )
        ax.vlines(i, low, high, color=RANK_COLOR, linewidth=6, alpha=0.5)
        ax.plot(i, high, marker="_", markersize=22, color=RANK_COLOR, markeredgewidth=3)
        ax.plot(
            i, mid, marker="o", markersize=10, color="white", markeredgecolor=RANK_COLOR, markeredgewidth=2
        )
        ax.plot(i, low, marker="o", markersize=10, color=LIMITING_COLOR)
        ax.annotate(
            f"rank {budget.limiting_rank}\n{format_size(budget.min_safe_bytes)}",
            (i, low),
            textcoords="offset points",
            xytext=(10, -8),
            fontsize=FONT_SIZE - 1,
        )
    ax.plot([], [], marker="o", color=LIMITING_COLOR, linestyle="", label="min (limiting rank)")
    ax.plot([], [], marker="o", color="white", markeredgecolor=RANK_COLOR, linestyle="", label="median")
    ax.plot([], [], marker="_", color=RANK_COLOR, markersize=16, linestyle="", label="max")
    ax.set_xticks(range(len(labels)), labels, rotation=20 if len(labels) > 4 else 0)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.set_ylim(0, max(bytes_to_gib(b.max_safe_bytes) for b in budgets.values()) * 1.2)
    ax.set_xlabel("boot")
    ax.set_ylabel("safe KV budget [GiB]")
    limiting = sorted({b.limiting_rank for b in budgets.values()})
    verdict = (
        f"rank {limiting[0]} limits every boot"
        if len(limiting) == 1
        else f"the limiting rank moves ({', '.join(map(str, limiting))})"
    )
    boots = f"{len(labels)} boot{'s' if len(labels) != 1 else ''}"
    ax.set_title(title or f"Safe budget spread over {boots}: {verdict}")
    ax.legend(loc="upper right", fontsize=FONT_SIZE - 1)
    fig.tight_layout()
    return fig


def gib_table(frame: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """A copy for display with every ``*_bytes`` column shown as ``*_gib`` (rounded), others unchanged.

    >>> gib_table(pd.DataFrame({"rank": [0], "safe_bytes": [3 * 2**29]}))
       rank  safe_gib
    0     0       1.5
    """
    shown = frame.copy()
    renames = {}
    for column in frame.columns:
        if str(column).endswith("_bytes"):
            gib = pd.to_numeric(frame[column], errors="coerce").astype("float64") / GiB
            shown[column] = gib.round(decimals)
            renames[column] = str(column).removesuffix("_bytes") + "_gib"
    return shown.rename(columns=renames)


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    _style(ax)
    return fig, ax


def _style(ax: Axes) -> None:
    ax.tick_params(labelsize=FONT_SIZE)
    ax.xaxis.label.set_size(FONT_SIZE)
    ax.yaxis.label.set_size(FONT_SIZE)
    ax.title.set_size(FONT_SIZE + 1)
    ax.spines[["top", "right"]].set_visible(False)


def _rank_colors(ranks: Sequence[int], limiting_rank: int) -> list[str]:
    return [LIMITING_COLOR if rank == limiting_rank else RANK_COLOR for rank in ranks]


def _annotate_bars(ax: Axes, bars, sizes_bytes: Sequence[int], inside: bool | str = False) -> None:
    """Label each bar with its size: above it, in white at its middle (``inside``) or top (``"top"``)."""
    for bar, size in zip(bars, sizes_bytes):
        x = bar.get_x() + bar.get_width() / 2
        if inside == "top":
            ax.annotate(
                format_size(size),
                (x, bar.get_height()),
                textcoords="offset points",
                xytext=(0, -6),
                ha="center",
                va="top",
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


def _row_at_length(curve: pd.DataFrame, seq_len: int) -> pd.Series:
    """The curve's row at ``seq_len``, else its longest length below it (else its shortest)."""
    upto = curve[curve["seq_len"] <= seq_len]
    rows = upto if len(upto) else curve
    return rows.loc[rows["seq_len"].idxmax()] if len(upto) else rows.loc[rows["seq_len"].idxmin()]


def _one_row_per_rank(ledger: pd.DataFrame, ranks: Sequence[int]) -> pd.DataFrame:
    rows = ledger[ledger["rank"].isin(list(ranks))]
    if rows["rank"].duplicated().any():
        if "room_bytes" not in rows.columns or rows["room_bytes"].isna().any():
            duplicated = sorted(set(rows.loc[rows["rank"].duplicated(), "rank"].astype(int)))
            raise ValueError(
                f"ledger has several rows for rank(s) {duplicated} and no room_bytes to choose by: "
                "select one boot (source, boot) to chart"
            )
        lowest = rows["room_bytes"].astype("float64").groupby(rows["rank"]).idxmin()
        rows = rows.loc[lowest.to_numpy()]
    rows = rows.set_index("rank")
    missing = [rank for rank in ranks if rank not in rows.index]
    if missing:
        raise ValueError(f"ledger has no row for rank(s) {missing} of the budget")
    return rows


def _part_bytes(row: pd.Series, column: str) -> int:
    value = _optional_int(row.get(column))
    if value is None and column == "cuda_graph_bytes":
        value = _optional_int(row.get("cuda_graph_estimate_bytes"))
    return value or 0


def _optional_int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)
