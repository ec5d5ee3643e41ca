"""Concurrency against request length: what a per-GPU KV budget buys, with the target marked."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from kvplan.charts.style import (
    AVERAGE_COLOR,
    FONT_SIZE,
    RANK_COLOR,
    REFERENCE_COLOR,
    TARGET_COLOR,
    _figure,
    _legend_below,
)


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

    ``curves`` is one :func:`kvplan.kvspec.capacity.concurrency_curve` frame, or several keyed by a label
    (e.g. ``{"uniform 12 GiB": ..., "rank 2 fixed": ...}``); each legend entry states its tokens at
    ``max_model_len`` (vLLM ≥ 0.21 logs tokens that depend on the length for sliding-window and
    hybrid models) and the concurrency there. ``max_model_len`` is marked with a vertical line (the x
    axis ends just past it); a target concurrency is a horizontal line. ``crossings`` maps a curve's
    label to the longest length at which it still holds the target (e.g.
    :attr:`kvplan.notebook.scenario.Outcome.target_length`), marked on the target line when shorter than
    ``max_model_len``. ``note`` (e.g. why a spec is approximate) is printed under the plot. ``limits``
    ``(x_min, x_max, y_min, y_max)`` fixes the axes (a what-if panel keeps them while its controls move);
    ``previous`` (a panel's curve at the notebook's parameters) is drawn faintly.

    >>> from kvplan.kvspec.capacity import concurrency_curve
    >>> from kvplan.units import GiB
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
            label="at the notebook's parameters",
        )
    for index, ((label, curve), color) in enumerate(zip(curves.items(), colors * len(curves))):
        row = _row_at_length(curve, max_model_len)
        # the concurrency at max_model_len is in the legend, where no curve runs through it
        at_max = f" ({float(row['max_concurrency']):.2f}×)" if int(row["seq_len"]) == max_model_len else ""
        ax.plot(
            curve["seq_len"],
            curve["max_concurrency"],
            marker="o",
            color=color,
            linewidth=2,
            label=f"{label}: {int(row['tokens']):,} tokens at {int(row['seq_len']):,}{at_max}",
        )
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
        ax.set_ylim(lowest / 4, highest * 2)  # room for the crossing labels below
        ax.set_xlim(right=max_model_len * 1.08)  # no lengths past max_model_len: vLLM admits none
    else:  # fixed, widened only where this state's curves would leave them
        ax.set_xlim(limits[0], limits[1])
        ax.set_ylim(min(limits[2], lowest / 4), max(limits[3], highest * 2))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("sequence length [tokens]")
    ax.set_ylabel("full-length sequences at once")
    ax.set_title(title or "What the budget buys: concurrency against sequence length")
    ax.grid(True, which="major", alpha=0.3)
    _legend_below(ax, columns=1 if len(curves) > 1 or previous is not None else 2)
    fig.set_layout_engine("tight", rect=(0, 0.06 if note else 0, 1, 1))  # laid out when drawn
    return fig


def _row_at_length(curve: pd.DataFrame, seq_len: int) -> pd.Series:
    """The curve's row at ``seq_len``, else its longest length below it (else its shortest)."""
    upto = curve[curve["seq_len"] <= seq_len]
    rows = upto if len(upto) else curve
    return rows.loc[rows["seq_len"].idxmax()] if len(upto) else rows.loc[rows["seq_len"].idxmin()]
