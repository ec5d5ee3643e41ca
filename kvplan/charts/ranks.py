"""Per-rank charts: the memory ledger, the safe budget and stranded capacity."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from kvplan.budget import Budget, limiting_ranks
from kvplan.charts.style import (
    AVERAGE_COLOR,
    BESIDE,
    FONT_SIZE,
    LIMITING_COLOR,
    PLOT_AREA_BESIDE,
    RANK_COLOR,
    REFERENCE_COLOR,
    TARGET_COLOR,
    _annotate_bars,
    _figure,
    _headroom,
    _label_segments,
    _legend_below,
    _mark_limiting_tick,
    _note_figure,
    _outline_bars,
    _rank_list,
    _slot_pt,
)
from kvplan.ledger import worst_room_position
from kvplan.units import bytes_to_gib, format_budget, format_size

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
_PARTS = tuple(column for column, _, _ in LEDGER_SEGMENTS[:5])  # the ledger's own parts, below the KV budget


@dataclass(frozen=True)
class LedgerParts:
    """The ledger chart's bytes: per part below the KV budget a tuple by rank (missing or negative: 0), each
    GPU's total (None: unknown), from each rank's boot with the lowest room (the pipeline's rule)."""

    ranks: tuple[int, ...]
    parts: tuple[tuple[int, ...], ...]  # per column of _PARTS
    totals: tuple[int | None, ...]

    @classmethod
    def of(cls, ledger: pd.DataFrame, ranks: Sequence[int]) -> LedgerParts:
        rows = _one_row_per_rank(ledger, ranks)
        parts = tuple(tuple(max(0, _part_bytes(rows, column, rank)) for rank in ranks) for column in _PARTS)
        return cls(tuple(ranks), parts, tuple(_optional_int(rows, "total_bytes", rank) for rank in ranks))

    def with_add_back(self, add_back: Sequence[int] | None) -> LedgerParts:
        """The same parts with ``add_back`` [bytes per rank] taken off the other processes (not below 0)."""
        if not add_back:
            return self
        other = tuple(max(0, held - extra) for held, extra in zip(self.parts[0], add_back))
        return LedgerParts(self.ranks, (other, *self.parts[1:]), self.totals)


def ledger_chart(
    ledger: pd.DataFrame | LedgerParts, budget: Budget, title: str | None = None, figure: Figure | None = None
) -> Figure:
    """Where each GPU's memory goes: a stacked bar per rank [GiB] against its total; ``uniform + stranded +
    reserve`` is the room."""
    shown = ledger if isinstance(ledger, LedgerParts) else LedgerParts.of(ledger, budget.ranks)
    sizes, heights = _ledger_segments(shown, budget)
    totals = shown.totals
    fig, ax = _figure(reuse=figure)
    labels = [str(rank) for rank in budget.ranks]
    tallest = max(
        max(sum(h[i] for h in heights.values()) for i in range(len(labels))),
        max((bytes_to_gib(t) for t in totals if t is not None), default=0.0),
    )
    bottom = [0.0] * len(labels)
    for column, label, color in LEDGER_SEGMENTS:
        values = heights[column]
        if not any(values):
            continue
        edge = {"edgecolor": RANK_COLOR, "hatch": "//"} if column == "stranded" else {"edgecolor": "white"}
        bars = ax.bar(labels, values, bottom=bottom, color=color, label=label, width=0.6, **edge)
        if column in SIZED_SEGMENTS:
            pt_per_gib = PLOT_AREA_BESIDE[1] * 72 / (tallest * 1.05)
            dark = color in ("#000000", RANK_COLOR)
            _label_segments(ax, bars, sizes[column], dark, pt_per_gib, budgets=column == "uniform")
        bottom = [b + v for b, v in zip(bottom, values)]
    _ledger_frame(ax, budget, totals, bottom[labels.index(str(budget.limiting_rank))], tallest)
    ax.set_title(
        title
        or f"Where each GPU's memory goes: {format_budget(budget.uniform_budget_bytes)} KV on every rank, "
        f"{format_size(budget.stranded_total_bytes)} stranded",
        loc="left",
    )
    fig.set_layout_engine("tight")  # laid out when drawn
    return fig


def _ledger_segments(
    shown: LedgerParts, budget: Budget
) -> tuple[dict[str, list[int]], dict[str, list[float]]]:
    """The labelled segments' bytes, and every segment's height per rank [GiB]."""
    sizes = {column: list(values) for column, values in zip(_PARTS, shown.parts)}
    sizes["uniform"] = [budget.uniform_budget_bytes] * len(budget.ranks)
    sizes["stranded"] = list(budget.stranded_bytes)
    heights = {column: [bytes_to_gib(value) for value in sizes[column]] for column in _PARTS}
    itemised = [sum(heights[column][i] for column in _PARTS) for i in range(len(budget.ranks))]
    heights["not_itemised"] = [
        max(0.0, bytes_to_gib(total) - done - bytes_to_gib(room)) if total is not None else 0.0
        for total, done, room in zip(shown.totals, itemised, budget.room_bytes)
    ]
    heights |= {column: [bytes_to_gib(size) for size in sizes[column]] for column in ("uniform", "stranded")}
    heights["reserve"] = [bytes_to_gib(budget.reserve_bytes)] * len(budget.ranks)
    return sizes, heights


def _ledger_frame(
    ax, budget: Budget, totals: Sequence[int | None], limiting_top: float, tallest: float
) -> None:
    """The ledger chart's totals, the limiting rank's box, axes and legend."""
    for i, total in enumerate(totals):
        if total is not None:
            ax.hlines(bytes_to_gib(total), i - 0.38, i + 0.38, color="black", linewidth=2.5)
    limiting = list(budget.ranks).index(budget.limiting_rank)
    label = f"limits the budget: rank {budget.limiting_rank}"
    box: dict[str, Any] = {"fill": False, "edgecolor": LIMITING_COLOR, "linewidth": 3, "label": label}
    ax.add_patch(Rectangle((limiting - 0.33, 0), 0.66, limiting_top, **box))
    ax.set_ylim(0, tallest * 1.05)
    ax.set_xlabel(_mark_limiting_tick(ax, budget.ranks, budget.limiting_rank, totals))
    ax.set_ylabel("GPU memory [GiB]")
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], names[::-1], fontsize=FONT_SIZE - 1, frameon=False, **BESIDE)


def safe_budget_chart(
    budget: Budget,
    title: str | None = None,
    top_gib: float | None = None,
    previous: Budget | None = None,
    figure: Figure | None = None,
) -> Figure:
    """Safe budget per rank [GiB], the uniform value and the unsafe average; ``top_gib`` fixes the y axis
    (raised where a bar needs), ``previous`` is drawn faintly."""
    labels = [str(rank) for rank in budget.ranks]
    safe_gib = [bytes_to_gib(safe) for safe in budget.safe_bytes]
    weakest = limiting_ranks(budget)
    tied = len(weakest) == len(budget.ranks)
    fig, ax = _figure(reuse=figure)
    if previous is not None:
        before = format_budget(previous.uniform_budget_bytes)
        _outline_bars(ax, labels, previous.safe_bytes, "at the notebook's parameters", linewidth=1.5)
        ax.axhline(
            bytes_to_gib(previous.uniform_budget_bytes),
            label=f"uniform at the notebook's parameters: {before}",
            **_FAINT,
        )
    colors = [LIMITING_COLOR if rank in weakest and not tied else RANK_COLOR for rank in budget.ranks]
    bars = ax.bar(labels, safe_gib, color=colors, width=0.6)
    # labels at the bars' feet (upright when too wide): the uniform and average lines never cross them
    slot = _slot_pt(len(labels)) * 0.6
    _annotate_bars(ax, bars, [format_budget(size) for size in budget.safe_bytes], "base", slot)
    uniform = format_budget(budget.uniform_budget_bytes)
    label = f"uniform budget {uniform} (safe on every rank)"
    ax.axhline(bytes_to_gib(budget.uniform_budget_bytes), color="black", linewidth=2, label=label)
    if not tied:
        average = sum(budget.safe_bytes) // len(budget.safe_bytes)
        label = f"average {format_budget(average)}: unsafe, {_rank_list(weakest)} cannot hold it"
        ax.axhline(bytes_to_gib(average), color=AVERAGE_COLOR, linestyle="--", linewidth=2, label=label)
    ax.set_xlabel(_mark_limiting_tick(ax, budget.ranks, [] if tied else weakest))
    ax.set_ylabel("safe KV budget\n(room − reserve) [GiB]")
    ax.set_ylim(0, max(top_gib or 0.0, max(safe_gib) * 1.05))
    tie = f"Every rank holds the same safe budget: {uniform}, none limits alone"
    ax.set_title(title or (tie if tied else f"One value for every rank: the minimum, {uniform}"))
    handles, _ = ax.get_legend_handles_labels()
    if not tied:
        handles.append(Patch(color=LIMITING_COLOR, label=f"limiting: {_rank_list(weakest)}"))
    _legend_below(ax, handles)
    fig.set_layout_engine("tight")  # laid out when drawn
    return fig


#: A faint line: what a what-if panel's state is read against.
_FAINT = {"color": REFERENCE_COLOR, "linewidth": 1.5, "alpha": 0.6}


def stranded_chart(
    budget: Budget, title: str | None = None, top_gib: float | None = None, figure: Figure | None = None
) -> Figure:
    """Stranded bytes per rank [GiB] (all the same: a sentence); ``top_gib``: the y axis while bars fit."""
    rounding = (
        f" ({format_size(budget.rounding_loss_bytes)} per rank from block rounding)"
        if budget.rounding_loss_bytes
        else ""
    )
    if len(set(budget.stranded_bytes)) == 1:
        return _note_figure(title or f"Nothing stranded: every rank holds the same safe budget{rounding}")
    labels = [str(rank) for rank in budget.ranks]
    weakest = limiting_ranks(budget)
    fig, ax = _figure(reuse=figure)
    colors = [LIMITING_COLOR if rank in weakest else RANK_COLOR for rank in budget.ranks]
    stranded_gib = [bytes_to_gib(s) for s in budget.stranded_bytes]
    bars = ax.bar(labels, stranded_gib, color=colors, width=0.6)
    level = _annotate_bars(ax, bars, [format_size(size) for size in budget.stranded_bytes])
    for rank in weakest:  # the limiting rank's label in its colour: it strands nothing but block rounding
        label = ax.texts[list(budget.ranks).index(rank)]
        label.set_color(LIMITING_COLOR)
        label.set_fontweight("bold")
    ax.set_title(
        title
        or f"Stranded on the stronger ranks: {format_size(budget.stranded_total_bytes)} in total{rounding}"
    )
    ax.set_xlabel(_mark_limiting_tick(ax, budget.ranks, weakest))
    ax.set_ylabel("stranded KV memory [GiB]")
    texts = [text.get_text() for text in ax.texts]
    tallest = _headroom(max(1.0, max(stranded_gib)), texts, FONT_SIZE, level)
    # a fixed top is kept while this state's bars and labels fit under it (5 % slack), else raised
    ax.set_ylim(0, top_gib if top_gib and tallest <= top_gib * 1.05 else tallest)
    _legend_below(ax, [Patch(color=LIMITING_COLOR, label=f"limiting: {_rank_list(weakest)}")])
    fig.set_layout_engine("tight")  # laid out when drawn
    return fig


def _one_row_per_rank(ledger: pd.DataFrame, ranks: Sequence[int]) -> pd.DataFrame:
    rows = ledger[ledger["rank"].isin(list(ranks))]
    if rows["rank"].duplicated().any():
        if "room_bytes" not in rows.columns or rows["room_bytes"].isna().any():
            duplicated = sorted(set(rows.loc[rows["rank"].duplicated(), "rank"].astype(int)))
            raise ValueError(
                f"ledger has several rows for rank(s) {duplicated} and no room_bytes to choose by: "
                "select one boot (source, boot) to chart"
            )
        rooms = rows["room_bytes"].astype("int64")
        rows = rows.loc[
            [group.index[worst_room_position(group.tolist())] for _, group in rooms.groupby(rows["rank"])]
        ]
    rows = rows.set_index("rank")
    missing = [rank for rank in ranks if rank not in rows.index]
    if missing:
        raise ValueError(f"ledger has no row for rank(s) {missing} of the budget")
    return rows


def _part_bytes(rows: pd.DataFrame, column: str, rank: int) -> int:
    value = _optional_int(rows, column, rank)
    if value is None and column == "cuda_graph_bytes":
        value = _optional_int(rows, "cuda_graph_estimate_bytes", rank)
    return value or 0


def _optional_int(rows: pd.DataFrame, column: str, rank: int) -> int | None:
    value = rows[column].get(rank) if column in rows.columns else None
    return None if value is None or pd.isna(value) else int(value)
