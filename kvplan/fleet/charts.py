"""Charts of a fleet plan (:meth:`kvplan.fleet.planner.FleetPlan.to_dict`), one question each: from one class
to fifty, a row per class, titles wrapped to the width, legends under the plot, bars from zero.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from kvplan.charts.style import LIMITING_COLOR, RANK_COLOR, REFERENCE_COLOR, TARGET_COLOR
from kvplan.units import bytes_to_gib, format_size

#: Width [in] of every fleet chart, and its font size [pt].
WIDTH_IN = 10
_FONT_PT = 10
OUTLIER_COLOR = "#E69F00"


def _wrap(text: str, fontsize: float = _FONT_PT + 1, width_in: float = WIDTH_IN) -> str:
    """``text`` wrapped to the figure's width (DejaVu Sans: about 0.6 em a character)."""
    return "\n".join(textwrap.wrap(text, int(width_in * 72 * 0.9 / (fontsize * 0.6))))


def _figure(rows: int, row_in: float, extra_in: float) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(WIDTH_IN, extra_in + row_in * max(1, rows)))
    axes = figure.subplots()
    axes.spines[["top", "right"]].set_visible(False)
    return figure, axes


def _title_and_legend(figure: Figure, title: str, handles, columns: int = 3) -> None:
    """The figure's wrapped title, and its legend (``handles``, or colours by label) under the plot."""
    if isinstance(handles, Mapping):
        handles = [Patch(color=colour, label=label) for label, colour in handles.items()]
    figure.suptitle(_wrap(title), fontsize=_FONT_PT + 1)
    figure.legend(handles=handles, loc="lower center", ncols=columns, fontsize=_FONT_PT - 1, frameon=False)
    rows = -(-len(handles) // columns)
    figure.tight_layout(rect=(0, (0.1 + 0.25 * rows) / figure.get_size_inches()[1], 1, 1))


def _class_label(name: str) -> str:
    """A class name on two lines at most: the GPU, then the driver and release (``a / b / c``)."""
    first, _, rest = name.partition(" / ")
    return f"{first}\n{rest}" if rest else first


def classes_chart(plan: Mapping) -> Figure:
    """Which classes are there and how big are they: clean hosts per class, and the excluded hosts."""
    names = [_class_label(c["class"]) for c in plan["classes"]] + ["excluded"]
    counts = [c["clean_hosts"] for c in plan["classes"]] + [len(plan["excluded"])]
    colours = [RANK_COLOR if c["approved"] else OUTLIER_COLOR for c in plan["classes"]] + [REFERENCE_COLOR]
    figure, axes = _figure(len(names), 0.45, 1.8)
    positions = range(len(names))[::-1]  # the first class on top
    axes.barh(list(positions), counts, color=colours)
    axes.set_yticks(list(positions), names, fontsize=_FONT_PT - 1)
    for y, count in zip(positions, counts):
        axes.text(count, y, f" {count}", va="center", fontsize=_FONT_PT - 1)
    axes.set_xlim(0, max([*counts, 1]) * 1.12)
    axes.set_xlabel("hosts", fontsize=_FONT_PT)
    classes, excluded = len(plan["classes"]), len(plan["excluded"])
    title = (
        f"Host classes and their size: {classes} class{'es' if classes != 1 else ''}, "
        f"{excluded} host{'s' if excluded != 1 else ''} excluded"
    )
    kinds = {"approved class": RANK_COLOR, "not approved": OUTLIER_COLOR, "excluded hosts": REFERENCE_COLOR}
    _title_and_legend(figure, title, kinds)
    return figure


def host_budgets_chart(plan: Mapping) -> Figure:
    """Per-host budgets of each class on one scale from zero: the class value as a bar, each host a dot (the
    limiting host's in :data:`LIMITING_COLOR`, outliers in orange)."""
    classes = plan["classes"]
    figure, axes = _figure(len(classes), 0.5, 1.9)
    positions = list(range(len(classes)))[::-1]
    values = [bytes_to_gib(c["uniform_budget_bytes"]) for c in classes]
    axes.barh(positions, values, color="#CFE3F1", height=0.6)
    for y, c, value in zip(positions, classes, values):
        outliers = {o["host"] for o in c["outliers"]}
        budgets = c["host_budgets"]
        hosts = sorted(budgets, key=lambda host: budgets[host])
        kinds = {**{host: OUTLIER_COLOR for host in outliers}, c["limiting_host"]: LIMITING_COLOR}
        colours = [kinds.get(host, RANK_COLOR) for host in hosts]
        axes.scatter([bytes_to_gib(budgets[h]) for h in hosts], [y] * len(hosts), c=colours, s=28, zorder=3)
        shown = format_size(c["uniform_budget_bytes"])
        axes.text(value / 2, y, shown, ha="center", va="center", fontsize=_FONT_PT - 1)
    tops = [bytes_to_gib(b) for c in classes for b in c["host_budgets"].values()] + values
    axes.set_xlim(0, max([*tops, 1.0]) * 1.05)
    axes.set_yticks(positions, [_class_label(c["class"]) for c in classes], fontsize=_FONT_PT - 1)
    axes.set_xlabel("KV budget per GPU [GiB]", fontsize=_FONT_PT)
    dots = {"limiting host": LIMITING_COLOR, "outlier": OUTLIER_COLOR, "other hosts": RANK_COLOR}
    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=name) for name, c in dots.items()]
    title = "Per-host budgets: who holds each class down (bar: the class value; dots: each host)"
    _title_and_legend(figure, title, [Patch(color="#CFE3F1", label="class value"), *handles], columns=4)
    return figure


def split_gain_chart(plan: Mapping) -> Figure:
    """What splitting the weak hosts off buys: tokens per class now, split, and with the outliers fixed."""
    classes = [c for c in plan["classes"] if c["split"].get("gain_split_tokens")]
    if not classes:
        figure = Figure(figsize=(WIDTH_IN, 0.8))
        figure.suptitle("What splitting the weak hosts off buys: nothing (no class below the split bound)")
        return figure
    figure, axes = _figure(len(classes), 0.9, 1.9)
    for y, c in zip(range(len(classes))[::-1], classes):
        now = c["capacity"][-1]["tokens"] * c["clean_hosts"] if c["capacity"] else 0
        split, fixed = now + c["split"]["gain_split_tokens"], now + (c["split"]["gain_fixed_tokens"] or 0)
        for offset, value, colour in zip(
            (0.25, 0, -0.25), (now, split, fixed), (REFERENCE_COLOR, RANK_COLOR, TARGET_COLOR)
        ):
            axes.barh(y + offset, value / 1e6, height=0.25, color=colour)
    axes.set_yticks(
        list(range(len(classes))[::-1]), [_class_label(c["class"]) for c in classes], fontsize=_FONT_PT - 1
    )
    axes.set_xlabel("KV tokens over the class [millions]", fontsize=_FONT_PT)
    split = sum(c["split"]["gain_split_tokens"] for c in classes)
    fixed = sum(c["split"]["gain_fixed_tokens"] or 0 for c in classes)
    title = f"What splitting the weak hosts off buys: +{split:,} tokens (+{fixed:,} with them fixed)"
    kinds = {"now": REFERENCE_COLOR, "outliers split off": RANK_COLOR, "outliers fixed": TARGET_COLOR}
    _title_and_legend(figure, title, kinds)
    return figure


def waves_chart(plan: Mapping) -> Figure:
    """The rollout waves in order: hosts per wave, canaries first, each with its class's value per GPU."""
    waves = plan["waves"]
    figure, axes = _figure(len(waves), 0.5, 1.8)
    positions = list(range(len(waves)))[::-1]
    counts = [len(w["hosts"]) for w in waves]
    axes.barh(
        positions, counts, color=[OUTLIER_COLOR if w["kind"] == "canary" else RANK_COLOR for w in waves]
    )
    labels = [f"wave {w['wave']} · {w['kind']}: {_class_label(w['class'])}" for w in waves]
    axes.set_yticks(positions, labels, fontsize=_FONT_PT - 1)
    for y, wave, count in zip(positions, waves, counts):
        value = wave["flag"].rpartition("=")[2]
        shown = format_size(int(value)) if value.isdigit() else wave["flag"]
        axes.text(count, y, f" {count} · {shown}", va="center", fontsize=_FONT_PT - 1)
    axes.set_xlim(0, max([*counts, 1]) * 1.6)
    axes.set_xlabel("hosts (each wave's class value per GPU beside its bar)", fontsize=_FONT_PT)
    title = f"Rollout waves: {len(waves)} wave{'s' if len(waves) != 1 else ''}, every class's canaries first"
    kinds = {"canaries, gated before the wave": OUTLIER_COLOR, "class wave": RANK_COLOR}
    _title_and_legend(figure, title, kinds, columns=2)
    return figure
