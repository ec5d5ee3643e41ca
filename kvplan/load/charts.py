"""Charts of a load test from a timeline or summaries: occupancy, requests, and canaries side by side. Time is
minutes since the run's first timed row, so runs made at different times line up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kvplan.charts.style import (
    AVERAGE_COLOR,
    BESIDE,
    FONT_SIZE,
    LIMITING_COLOR,
    RANK_COLOR,
    REFERENCE_COLOR,
    _figure,
    _style,
    _text_width_pt,
)

CAPACITY_COLOR = LIMITING_COLOR
PREEMPTION_COLOR = AVERAGE_COLOR  # not a series colour, so never mistaken for one
OOM_COLOR = "black"
#: One colour per quantity; the evidence kind is the line style (log solid, /metrics dashed with dots).
QUANTITY_COLORS = {"kv_cache_usage_pct": RANK_COLOR, "running": RANK_COLOR, "waiting": "#E69F00"}
KIND_STYLES: dict[str, dict[str, Any]] = {
    "log": {"linestyle": "-"},
    "metrics": {"linestyle": "--", "marker": ".", "markersize": 5},
}
#: The two runs a comparison puts side by side: the profiled canary grey (the reference), the manual one blue.
RUN_COLORS = (REFERENCE_COLOR, RANK_COLOR)
GAP_FACTOR = 3  # a gap longer than this many usual intervals breaks a line
PANEL_WIDTH_PT = 120  # the least width of a comparison panel [pt]: run labels take the rest of 12 in
COMPARISON_PANELS = (
    ("mean_generation_tokens_per_s", "generation throughput", "tokens/s"),
    ("preemptions", "preemptions", "count"),
    ("peak_kv_cache_usage_pct", "peak KV cache usage", "%"),
    ("kv_cache_tokens", "KV cache capacity", "tokens"),
)


def _series(timeline: pd.DataFrame, column: str) -> list[tuple[str, pd.Series, pd.Series, str]]:
    """(label, minutes, values, kind) per engine and evidence kind of ``column``, a line broken at long gaps."""
    known = timeline[timeline[column].notna() & timeline["elapsed_s"].notna()]
    groups = []
    for (engine, kind), rows in known.groupby(["engine", "kind"], dropna=False, sort=True):
        rows = rows.sort_values("elapsed_s", kind="stable")
        minutes = (rows["elapsed_s"] / 60).reset_index(drop=True)
        values = rows[column].astype(float).reset_index(drop=True)
        gaps = minutes.diff()
        breaks = gaps[gaps > GAP_FACTOR * gaps.median()].index
        for offset, index in enumerate(breaks):  # a NaN point between two rows lifts the pen
            at = index + offset - 0.5
            minutes.loc[at], values.loc[at] = float("nan"), float("nan")
        order = minutes.index.argsort()
        name = "all engines" if pd.isna(engine) else f"engine {engine}"
        groups.append((f"{name} ({kind})", minutes.iloc[order], values.iloc[order], str(kind)))
    return groups


def _finish(fig: Figure, ax, ylabel: str, title: str) -> Figure:
    """A timeline chart's labels, its title and its legend right of the plot, laid out."""
    ax.set_xlabel("minutes since the first row")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=FONT_SIZE - 2, frameon=False, **BESIDE)
    fig.tight_layout()
    return fig


def _preemption_minutes(timeline: pd.DataFrame) -> pd.Series:
    """Minutes of rows with preemptions, from the evidence kind that counts them most often."""
    timed = timeline[timeline["elapsed_s"].notna()]
    known = timed[timed["preemptions"].notna() | (timed["event"] == "preemption")]
    if known.empty:
        return pd.Series(dtype=float)
    kind = known["kind"].value_counts().idxmax()
    rows = known[known["kind"] == kind]
    return rows[(rows["preemptions"].fillna(0) > 0) | (rows["event"] == "preemption")]["elapsed_s"] / 60


def occupancy_chart(timeline: pd.DataFrame, kv_cache_tokens: int | None = None, title: str = "") -> Figure:
    """KV cache usage [%] of a :func:`kvplan.load.load_timeline` against minutes: capacity at 100 %, a line per
    interval with preemptions (from the kind counting them most often), OOMs as crosses."""
    fig, ax = _figure(1, (11, 4.5))
    for label, minutes, values, kind in _series(timeline, "kv_cache_usage_pct"):
        style = {"color": QUANTITY_COLORS["kv_cache_usage_pct"], **KIND_STYLES.get(kind, {})}
        ax.plot(minutes, values, label=label, **style)
    capacity = "capacity" + (f" = {kv_cache_tokens:,} tokens" if kv_cache_tokens is not None else "")
    ax.axhline(100, color=CAPACITY_COLOR, linestyle="--", label=capacity)
    timed = timeline[timeline["elapsed_s"].notna()]
    for position, minutes in enumerate(_preemption_minutes(timeline)):
        shown = "interval with preemptions" if position == 0 else None
        ax.axvline(minutes, color=PREEMPTION_COLOR, alpha=0.6, linewidth=1, label=shown)
    ooms = timed[timed["event"] == "oom"]
    if len(ooms):
        ax.plot(ooms["elapsed_s"] / 60, [100] * len(ooms), "x", color=OOM_COLOR, markersize=10, label="OOM")
    ax.set_ylim(0, 105)
    return _finish(fig, ax, "KV cache usage [%]", title or "KV cache occupancy under load")


def requests_chart(timeline: pd.DataFrame, title: str = "") -> Figure:
    """Running and waiting requests against minutes, one pair of lines per engine and evidence kind."""
    fig, ax = _figure(1, (11, 4.5))
    for column in ("running", "waiting"):
        for label, minutes, values, kind in _series(timeline, column):
            style = {"color": QUANTITY_COLORS[column], **KIND_STYLES.get(kind, {})}
            ax.plot(minutes, values, label=f"{column}, {label}", **style)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # requests are counted
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, "requests", title or "Running vs waiting requests")


def canary_comparison_chart(
    summaries: Sequence[dict],
    labels: Sequence[str] = ("profiled canary", "manual-value canary"),
    title: str = "",
) -> Figure:
    """Runs' :func:`kvplan.load.load_summary` dicts side by side, a row each and its value beside each bar."""
    if len(summaries) != len(labels):
        raise ValueError(f"{len(summaries)} summaries but {len(labels)} labels")
    fig = Figure(figsize=(12, 1.6 + 0.45 * len(summaries)))
    axes = fig.subplots(1, len(COMPARISON_PANELS), sharey=True)
    rows, small = list(range(len(summaries)))[::-1], FONT_SIZE - 2  # the first run on top
    colors = [RUN_COLORS[index % len(RUN_COLORS)] for index in range(len(summaries))]
    for ax, (key, name, unit) in zip(axes, COMPARISON_PANELS):
        _style(ax)
        values = [summary.get(key) for summary in summaries]
        widths = [0 if value is None else value for value in values]
        texts = ["n/a" if v is None else f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" for v in values]
        ax.barh(rows, widths, color=colors, height=0.6)
        for y, width, text in zip(rows, widths, texts):
            ax.annotate(
                text, (width, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=small
            )
        widest = max(_text_width_pt(text, small) for text in texts) + 8
        ax.set_xlim(0, (max(widths) or 1) / (1 - min(0.6, widest / PANEL_WIDTH_PT)))  # room for the values
        ax.set_xticks([])  # each bar says its value
        ax.set_xlabel(unit, fontsize=FONT_SIZE - 1)
        ax.set_title(name, fontsize=FONT_SIZE - 1)
    axes[0].set_yticks(rows, labels, fontsize=small)
    fig.suptitle(title or "Same request mix: profiled vs manual-value canary", fontsize=FONT_SIZE + 1)
    fig.tight_layout()
    return fig
