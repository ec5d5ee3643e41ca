"""Charts hold at TP 1–16 and fleets of 1–50 classes: no text overlaps another or leaves the figure,
legends sit outside the data, bars start at zero (issue 27).

Each chart is rendered as a notebook shows it (:func:`kvplan.notebook.figure_png`'s size and dpi, through
Agg), then every drawn text's box (matplotlib's ``get_window_extent``) is checked against the figure and
against every other text. The launches are the sample's own ranks, repeated to 8 and 16 ranks with the
weakest rank kept weakest, so the labels are those a real TP 8 or TP 16 launch prints.
"""

from __future__ import annotations

import copy
import itertools
from functools import lru_cache

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from kvplan import DATA_DIR, charts
from kvplan.budget import uniform_budget
from kvplan.drift import drift_budget
from kvplan.fleet import FleetPolicy, list_fleet, plan_readings, read_fleet
from kvplan.fleet import charts as fleet_charts
from kvplan.kvspec.capacity import FlatSpec, capacity_table
from kvplan.load.charts import canary_comparison_chart
from kvplan.notebook import read_launch
from kvplan.notebook.figures import PANEL_DPI, sentence
from kvplan.units import parse_size

TOLERANCE_PX = 1.0  # antialiasing: boxes may touch


def _drawn_texts(figure: Figure) -> list[Text]:
    """Every non-empty visible text Agg draws: titles, labels, annotations, legend entries, tick labels in view."""
    hidden = set()  # tick labels of ticks outside the view: made but not drawn
    for ax in figure.axes:
        for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = min(low, high), max(low, high)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    hidden.update({id(tick.label1), id(tick.label2)})
    return [
        text
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip() and id(text) not in hidden
    ]


def layout_problems(figure: Figure) -> list[str]:
    """Texts that overlap or leave the figure, legends over an axes' data area, bar axes not from zero."""
    canvas = FigureCanvasAgg(figure)
    figure.set_dpi(PANEL_DPI)
    canvas.draw()
    renderer = canvas.get_renderer()
    box = figure.bbox
    texts = [(t, t.get_window_extent(renderer)) for t in _drawn_texts(figure)]
    problems = []
    for text, extent in texts:
        if (
            extent.x0 < box.x0 - TOLERANCE_PX
            or extent.y0 < box.y0 - TOLERANCE_PX
            or extent.x1 > box.x1 + TOLERANCE_PX
            or extent.y1 > box.y1 + TOLERANCE_PX
        ):
            problems.append(f"outside the figure: {text.get_text()!r}")
    for (one, a), (two, b) in itertools.combinations(texts, 2):
        if (
            min(a.x1, b.x1) - max(a.x0, b.x0) > TOLERANCE_PX
            and min(a.y1, b.y1) - max(a.y0, b.y0) > TOLERANCE_PX
        ):
            problems.append(f"overlap: {one.get_text()!r} and {two.get_text()!r}")
    legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None] + list(figure.legends)
    for legend in legends:
        if legend is not None:
            frame = legend.get_window_extent(renderer)
            for other in figure.axes:
                area = other.get_window_extent(renderer)
                if frame.overlaps(area) and not (
                    frame.x0 >= area.x1 - TOLERANCE_PX
                    or frame.x1 <= area.x0 + TOLERANCE_PX
                    or frame.y0 >= area.y1 - TOLERANCE_PX
                    or frame.y1 <= area.y0 + TOLERANCE_PX
                ):
                    problems.append(f"legend over data: {[t.get_text() for t in legend.get_texts()][:2]}")
    for ax in figure.axes:
        for container in ax.containers:
            horizontal = getattr(container, "orientation", "vertical") == "horizontal"
            low = min(ax.get_xlim() if horizontal else ax.get_ylim())
            if low > 0:
                problems.append(f"bars not from zero ({low:g}): {ax.get_title()!r}")
                break
    return problems


# --- launches of 1, 8 and 16 ranks from the sample ----------------------------------------------------


@lru_cache(maxsize=1)
def _sample():
    ledger, _ = read_launch(DATA_DIR / "fleet" / "small" / "gpu-00019")  # TP 8, a co-tenant on rank 0
    return ledger.sort_values("rank").reset_index(drop=True)


def _ledger(ranks: int) -> pd.DataFrame:
    """The TP 8 sample's rows repeated (or cut) to ``ranks`` ranks; rank 0 (the co-tenant's) stays weakest."""
    sample = _sample()
    rows = pd.concat([sample] * (ranks // len(sample) + 1), ignore_index=True).iloc[:ranks].copy()
    rows["rank"] = range(ranks)
    return rows


def _budget(ranks: int):
    ledger = _ledger(ranks)
    # the sample's block: Llama-3.1-70B at TP 8, 16 tokens × 40,960 B per token per rank
    return uniform_budget(ledger["room_bytes"].tolist(), parse_size("0.9GiB"), block_bytes=16 * 40_960)


RANKS = (1, 4, 8, 16)


def _rank_charts(ranks: int) -> dict[str, Figure]:
    ledger, budget = _ledger(ranks), _budget(ranks)
    moved = uniform_budget([room + parse_size("1GiB") for room in budget.room_bytes], budget.reserve_bytes)
    free = [int(total) - int(parse_size("20GiB")) for total in ledger["total_bytes"]]
    boot = [value - (i % 3) * parse_size("0.7GiB") for i, value in enumerate(free)]
    curve = capacity_table(FlatSpec(40_960), budget.uniform_budget_bytes, [1024 * 2**k for k in range(8)])
    fixed = capacity_table(FlatSpec(40_960), budget.median_safe_bytes, [1024 * 2**k for k in range(8)])
    return {
        "ledger": charts.ledger_chart(ledger, budget),
        "safe budget": charts.safe_budget_chart(budget),
        "safe budget against the notebook's": charts.safe_budget_chart(moved, previous=budget),
        "stranded": charts.stranded_chart(budget),
        "spread over 3 boots": charts.spread_chart({f"boot {i}": budget for i in range(3)}),
        "concurrency": charts.concurrency_chart(
            {"uniform": curve, "rank 0 raised to the median": fixed},
            131_072,
            4,
            marks=charts.ConcurrencyMarks(
                {"uniform": 65_536}, "sliding-window layers are counted at full length"
            ),
        ),
        "drift": charts.drift_chart(drift_budget(list(budget.safe_bytes), free, boot, parse_size("0.5GiB"))),
    }


@pytest.mark.parametrize("ranks", RANKS)
def test_rank_charts_hold_at_tp(ranks):  # issue 27
    problems = [f"{name}: {p}" for name, fig in _rank_charts(ranks).items() for p in layout_problems(fig)]
    assert not problems, "\n".join(problems)


def test_one_boot_spread_and_nothing_stranded_are_sentences():  # issue 27
    budget = _budget(8)
    one = sentence(charts.spread_chart({"boot 0": budget}))
    assert one is not None and "1 boot" in one and "rank 0" in one
    tied = uniform_budget([parse_size("50GiB")] * 8, parse_size("1GiB"))
    assert sentence(charts.stranded_chart(tied)).startswith("Nothing stranded")
    assert sentence(charts.stranded_chart(budget)) is None  # a chart with axes stays a chart


# --- fleets of 1, 3 and 50 classes ----------------------------------------------------------------------


@lru_cache(maxsize=1)
def _fleet_plan() -> dict:
    fleet = str(DATA_DIR / "fleet" / "small")
    readings = read_fleet(list_fleet(fleet), scheduler="synchronous")
    return plan_readings(fleet, readings, FleetPolicy(parse_size("1GiB")), ["llama-3.1-70b"]).to_dict()


def _plan_of(classes: int) -> dict:
    """The sample's plan with its classes repeated (renamed) or cut to ``classes``, waves likewise."""
    plan = copy.deepcopy(_fleet_plan())
    sample = plan["classes"]
    plan["classes"] = []
    for index in range(classes):
        entry = copy.deepcopy(sample[index % len(sample)])
        if index >= len(sample):
            entry["class"] = f"{entry['class']} / zone-{index:02d}"
        plan["classes"].append(entry)
    waves = plan["waves"]
    plan["waves"] = [
        {**waves[i % len(waves)], "wave": i + 1, "class": plan["classes"][i % classes]["class"]}
        for i in range(min(2 * classes, 2 * len(waves)) if classes < len(sample) else 2 * classes)
    ]
    return plan


@pytest.mark.parametrize("classes", (1, 3, 50))
def test_fleet_charts_hold_at_classes(classes):  # issue 27
    plan = _plan_of(classes)
    figures = {
        "classes": fleet_charts.classes_chart(plan),
        "host budgets": fleet_charts.host_budgets_chart(plan),
        "split gain": fleet_charts.split_gain_chart(plan),
        "waves": fleet_charts.waves_chart(plan),
    }
    problems = [f"{name}: {p}" for name, fig in figures.items() for p in layout_problems(fig)]
    assert not problems, "\n".join(problems)


def test_the_layout_check_finds_overlaps_and_clipping():  # issue 27: the check itself sees a bad chart
    figure = Figure(figsize=(4, 2))
    ax = figure.subplots()
    ax.bar(["0", "1"], [5, 6])
    ax.set_ylim(4, 7)
    ax.text(0, 6, "a label that runs far past the figure's right edge")
    ax.text(0, 6.05, "a second label on top of it")
    ax.legend(["bars"], loc="center")
    problems = layout_problems(figure)
    assert any(p.startswith("outside the figure") for p in problems)
    assert any(p.startswith("overlap") for p in problems)
    assert any(p.startswith("legend over data") for p in problems)
    assert any(p.startswith("bars not from zero") for p in problems)


# --- the load comparison of notebook 06, with two runs and with many -------------------------------------


@pytest.mark.parametrize("runs", (2, 12))
def test_load_comparison_holds_with_many_runs(runs):  # issue 27: its turned run labels overlapped
    summary = {"mean_generation_tokens_per_s": 1234.5678, "preemptions": 12, "peak_kv_cache_usage_pct": 97.25}
    summaries = [{**summary, "kv_cache_tokens": 157_280}, {**summary, "preemptions": None}] * (runs // 2)
    labels = ["profiled canary", "manual-value canary"] if runs == 2 else [f"canary, boot {i} of the overload mix" for i in range(runs)]  # fmt: skip
    assert layout_problems(canary_comparison_chart(summaries, labels)) == []
