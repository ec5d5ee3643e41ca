"""Charts draw exactly the computed numbers: bar heights in GiB, the limiting rank highlighted."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from kvplan import charts
from kvplan.budget import uniform_budget
from kvplan.drift import drift_budget
from kvplan.kvspec.capacity import FlatSpec, capacity_table
from kvplan.ledger import room_per_rank
from kvplan.units import parse_size
from tests.conftest import GiB, KiB

# Two H100-like ranks, 80 GiB each. Rank 1 shares its GPU with a 5 GiB co-tenant.
# rank 0: 33 weights + 1 non-torch + 2 activation + 1 graphs = 37 GiB non-KV, room 40 GiB
# rank 1: 5 other + 37 non-KV = 42 GiB, room 35 GiB
# not itemised (CUDA context, vLLM's margin) = 80 − 37 − 40 = 3 GiB and 80 − 42 − 35 = 3 GiB
LEDGER = pd.DataFrame(
    {
        "rank": [0, 1],
        "total_bytes": [80 * GiB, 80 * GiB],
        "other_process_bytes": [pd.NA, 5 * GiB],
        "weights_bytes": [33 * GiB, 33 * GiB],
        "non_torch_bytes": [GiB, GiB],
        "activation_peak_bytes": [2 * GiB, 2 * GiB],
        "cuda_graph_bytes": [GiB, pd.NA],
        "cuda_graph_estimate_bytes": [pd.NA, GiB],
        "room_bytes": [40 * GiB, 35 * GiB],
    }
)
# reserve 1 GiB → safe 39 and 34 GiB → uniform 34 GiB, rank 1 limits, 5 GiB stranded on rank 0
BUDGET = uniform_budget([40 * GiB, 35 * GiB], GiB)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _bars(ax, label):
    (container,) = [c for c in ax.containers if c.get_label() == label]
    return [patch.get_height() for patch in container.patches]


def _line_y(ax, label_start):
    (line,) = [line for line in ax.get_lines() if line.get_label().startswith(label_start)]
    return line.get_ydata()[0]


def test_ledger_chart_stacks_parts_and_budget_up_to_total():
    fig = charts.ledger_chart(LEDGER, BUDGET)
    ax = fig.axes[0]
    assert _bars(ax, "uniform KV budget") == [34.0, 34.0]
    assert _bars(ax, "stranded") == [5.0, 0.0]  # 39 − 34, 34 − 34
    assert _bars(ax, "reserve") == [1.0, 1.0]
    assert _bars(ax, "other processes") == [0.0, 5.0]  # NA counts as zero
    assert _bars(ax, "CUDA graphs") == [1.0, 1.0]  # rank 1 falls back to the estimate
    assert _bars(ax, "not itemised in the log") == [3.0, 3.0]
    # every bar reaches the GPU's total: 37 + 3 + 40 = 80 and 42 + 3 + 35 = 80
    tops = [0.0, 0.0]
    for container in ax.containers:
        for i, patch in enumerate(container.patches):
            tops[i] += patch.get_height()
    assert tops == [80.0, 80.0]
    limiting_tick = ax.get_xticklabels()[1]
    assert limiting_tick.get_text() == "1"  # issue 27: rank numbers only, so 16 ranks fit
    assert to_rgba(limiting_tick.get_color()) == to_rgba(charts.LIMITING_COLOR)
    assert ax.get_xlabel() == "rank (every GPU 80 GiB: the black line)"  # the GPUs' one total, said once
    # the limiting rank is outlined on the bar itself, full height (42 + 3 + 35 = 80 GiB), and in the legend
    (outline,) = [patch for patch in ax.patches if patch.get_label() == "limits the budget: rank 1"]
    assert (outline.get_x() + outline.get_width() / 2, outline.get_height()) == (1.0, 80.0)
    assert to_rgba(outline.get_edgecolor()) == to_rgba(charts.LIMITING_COLOR)
    assert "limits the budget: rank 1" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_ledger_chart_labels_the_big_segments_with_their_sizes():
    ax = charts.ledger_chart(LEDGER, BUDGET).axes[0]
    labels = [(t.get_text(), round(t.xy[0], 6), round(t.xy[1], 6)) for t in ax.texts]
    # segments tall enough for a line of text (1.25 × 11 pt at 4 × 72 pt per 84 GiB of axis: 4 GiB) carry
    # their size at their middle:
    # rank 1's 5 GiB co-tenant (0–5), weights 33 GiB (0–33 and 5–38), KV 34 GiB (40–74, 45–79 after
    # 1 + 2 + 1 + 3 GiB of small parts), rank 0's 5 GiB stranded (74–79); the 1 GiB parts are not labelled
    assert labels == [
        ("5 GiB", 1.0, 2.5),
        ("33 GiB", 0.0, 16.5),
        ("33 GiB", 1.0, 21.5),
        ("34 GiB", 0.0, 57.0),
        ("34 GiB", 1.0, 62.0),
        ("5 GiB", 0.0, 76.5),
    ]


def test_ledger_chart_draws_each_rank_from_its_worst_boot():
    # a second boot where rank 0 had 1 GiB less room (39 GiB) and 1 GiB more weights
    second = LEDGER.assign(room_bytes=[39 * GiB, 36 * GiB], weights_bytes=[34 * GiB, 30 * GiB])
    budget = uniform_budget([39 * GiB, 35 * GiB], GiB)  # worst room per rank: 39, 35 GiB
    ax = charts.ledger_chart(pd.concat([LEDGER, second], ignore_index=True), budget).axes[0]
    assert _bars(ax, "weights") == [34.0, 33.0]  # rank 0 from the second boot, rank 1 from the first
    assert _bars(ax, "stranded") == [4.0, 0.0]  # 38 − 34


def test_ledger_chart_draws_the_boot_the_pipeline_takes_when_rooms_tie():
    # two boots with the same room on every rank (40 and 35 GiB) but 1 GiB more weights in the second:
    # room_per_rank takes the first of the lowest (boot 0), and the chart must draw that boot's parts
    first = LEDGER.assign(source="a.log", boot=0, model="m", tensor_parallel_size=2)
    second = first.assign(boot=1, weights_bytes=[34 * GiB, 34 * GiB])
    ledger = pd.concat([first, second], ignore_index=True)
    assert room_per_rank(ledger)["boot"].tolist() == [0, 0]
    ax = charts.ledger_chart(ledger, uniform_budget([40 * GiB, 35 * GiB], GiB)).axes[0]
    assert _bars(ax, "weights") == [33.0, 33.0]  # boot 0's weights, not boot 1's 34 GiB


def test_ledger_chart_refuses_several_boots_without_room():
    with pytest.raises(ValueError, match=r"several rows for rank\(s\) \[0, 1\]"):
        charts.ledger_chart(pd.concat([LEDGER, LEDGER]).drop(columns="room_bytes"), BUDGET)


def test_ledger_chart_refuses_a_missing_rank():
    with pytest.raises(ValueError, match=r"no row for rank\(s\) \[1\]"):
        charts.ledger_chart(LEDGER.iloc[:1], BUDGET)


def test_safe_budget_chart_highlights_the_limiting_rank_and_the_unsafe_average():
    fig = charts.safe_budget_chart(BUDGET)
    ax = fig.axes[0]
    bars = ax.containers[0].patches
    assert [bar.get_height() for bar in bars] == [39.0, 34.0]
    assert [bar.get_facecolor() for bar in bars] == [
        to_rgba(charts.RANK_COLOR),
        to_rgba(charts.LIMITING_COLOR),
    ]
    assert _line_y(ax, "uniform budget 34 GiB") == 34.0
    assert _line_y(ax, "average 36.5 GiB: unsafe, rank 1") == 36.5  # (39 + 34) / 2
    assert [t.get_text() for t in ax.texts] == ["39 GiB", "34 GiB"]
    # labels sit at the bars' feet, 6 points above the axis: every line (uniform 34, average 36.5 GiB) runs
    # far above them, so none strikes a label (at their tops, the 36.5 GiB average crossed the 39 GiB label's
    # neighbourhood and, on the sample, the 15.52 GiB average struck rank 1's "16.7 GiB")
    assert [(t.xy[1], t.get_va(), t.xyann[1]) for t in ax.texts] == [(0, "bottom", 6), (0, "bottom", 6)]
    fig.canvas.draw()
    line_pixels = ax.transData.transform((0, 34.0))[1]
    assert all(t.get_window_extent().y1 < line_pixels for t in ax.texts)


def test_founding_example_safe_budget_in_gib():
    # rooms 18.8, 17.6, 12.9, 16.4 GiB − 0.9 GiB → 17.9, 16.7, 12.0, 15.5 GiB; rank 2 limits
    rooms = [parse_size(f"{gib}GiB") for gib in ("18.8", "17.6", "12.9", "16.4")]
    budget = uniform_budget(rooms, parse_size("0.9GiB"))
    ax = charts.safe_budget_chart(budget).axes[0]
    assert [round(bar.get_height(), 6) for bar in ax.containers[0].patches] == [17.9, 16.7, 12.0, 15.5]
    assert ax.containers[0].patches[2].get_facecolor() == to_rgba(charts.LIMITING_COLOR)
    assert _line_y(ax, "uniform budget 12 GiB") == 12.0
    stranded = charts.stranded_chart(budget)
    assert "14.1 GiB in total" in stranded.axes[0].get_title()  # 5.9 + 4.7 + 0 + 3.5
    # rank 3 at 15.5 GiB, the average (17.9 + 16.7 + 12 + 15.5) / 4 = 15.525 GiB: its label sits at the bar's
    # foot, below the uniform 12 GiB line, so the average cannot strike it
    (rank3,) = [t for t in ax.texts if t.get_text() == "15.5 GiB"]
    ax.figure.canvas.draw()
    assert rank3.get_window_extent().y1 < ax.transData.transform((0, 12.0))[1]


def test_stranded_chart_heights_and_rounding_note():
    # 1 GiB blocks cannot split 34 GiB further; with 3 GiB blocks 34 → 33 GiB: 1 GiB lost to rounding
    budget = uniform_budget([40 * GiB, 35 * GiB], GiB, block_bytes=3 * GiB)
    ax = charts.stranded_chart(budget).axes[0]
    assert [bar.get_height() for bar in ax.containers[0].patches] == [6.0, 1.0]  # 39 − 33, 34 − 33
    # the limiting rank 1 strands only the rounding: its label and tick in the limiting colour
    assert [t.get_text() for t in ax.texts] == ["6 GiB", "1 GiB"]
    assert to_rgba(ax.texts[1].get_color()) == to_rgba(charts.LIMITING_COLOR)
    assert to_rgba(ax.get_xticklabels()[1].get_color()) == to_rgba(charts.LIMITING_COLOR)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["limiting: rank 1"]
    assert ax.get_title() == (
        "Stranded on the stronger ranks: 7 GiB in total (1 GiB per rank from block rounding)"
    )


def test_stranded_chart_marks_a_limiting_rank_with_nothing_stranded():
    ax = charts.stranded_chart(BUDGET).axes[0]  # stranded 5 GiB on rank 0, 0 on the limiting rank 1
    assert [bar.get_height() for bar in ax.containers[0].patches] == [5.0, 0.0]
    assert [t.get_text() for t in ax.texts] == ["5 GiB", "0 B"]
    assert to_rgba(ax.texts[1].get_color()) == to_rgba(charts.LIMITING_COLOR)


def test_concurrency_chart_draws_the_curve_target_and_max_model_len():
    # 12 GiB at 256 KiB per token: 3072 blocks of 16 → 49,152 tokens; 12, 6, 3 sequences at 4k, 8k, 16k
    curve = capacity_table(FlatSpec(256 * KiB), 12 * GiB, [4096, 8192, 16384])
    ax = charts.concurrency_chart({"uniform 12 GiB": curve}, max_model_len=8192, target_concurrency=8).axes[0]
    (line,) = [line for line in ax.get_lines() if line.get_label().startswith("uniform")]
    assert line.get_label() == "uniform 12 GiB: 49,152 tokens at 8,192 (6.00×)"  # 49,152 / 8,192
    assert list(line.get_ydata()) == [12.0, 6.0, 3.0]
    assert list(_line_x(ax, "max_model_len 8,192")) == [8192, 8192]
    assert _line_y(ax, "target 8 sequences") == 8
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    # the concurrency at max_model_len is in the legend (no label on the curves); the axis ends just past
    # it (1.08 × 8192): no request longer than max_model_len is admitted, so the chart shows none
    assert list(ax.texts) == [] and ax.get_xlim()[1] == pytest.approx(8192 * 1.08)


def test_concurrency_chart_labels_tokens_at_max_model_len():
    # vLLM ≥ 0.21 logs tokens = int(concurrency × length); for a sliding-window model that grows with the
    # length: 2.0 × 4096 = 8192 tokens at 4k, 0.5 × 32,768 = 16,384 tokens at 32k
    curve = pd.DataFrame({"seq_len": [4096, 32768], "tokens": [8192, 16384], "max_concurrency": [2.0, 0.5]})
    fig = charts.concurrency_chart(
        {"uniform": curve}, 32768, marks=charts.ConcurrencyMarks(note="sliding-window layers: 8192 assumed")
    )
    (line,) = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("uniform")]
    assert line.get_label() == "uniform: 16,384 tokens at 32,768 (0.50×)"
    assert [t.get_text() for t in fig.texts] == ["approximate: sliding-window layers: 8192 assumed"]


def test_concurrency_chart_marks_where_a_curve_crosses_the_target():
    # 12 GiB / (16 × 256 KiB) = 3072 blocks; 8 sequences fit while one needs ≤ 384 blocks = 6144 tokens
    curve = capacity_table(FlatSpec(256 * KiB), 12 * GiB, [4096, 8192])
    ax = charts.concurrency_chart(
        {"uniform": curve}, 8192, 8, marks=charts.ConcurrencyMarks({"uniform": 6144})
    ).axes[0]
    (marker,) = [line for line in ax.get_lines() if line.get_label() == "_crossing"]
    assert (list(marker.get_xdata()), list(marker.get_ydata())) == ([6144], [8])
    assert "8 sequences up to 6,144 tokens" in [t.get_text() for t in ax.texts]
    # a crossing at max_model_len (the target fits at full length) is not marked
    ax = charts.concurrency_chart(
        {"uniform": curve}, 8192, 4, marks=charts.ConcurrencyMarks({"uniform": 8192})
    ).axes[0]
    assert not [line for line in ax.get_lines() if line.get_label() == "_crossing"]


def _line_x(ax, label):
    (line,) = [line for line in ax.get_lines() if line.get_label() == label]
    return line.get_xdata()


def test_drift_chart_shows_free_memory_and_adjusted_budget():
    # Scenario C: B_ref 30 GiB, F_ref 42 GiB, boots 41.8, 42.1, 40.75, 41.9 GiB, guard 0.5 GiB
    boot = [parse_size(f"{gib}GiB") for gib in ("41.8", "42.1", "40.75", "41.9")]
    drift = drift_budget(30 * GiB, 42 * GiB, boot, guard_bytes=GiB // 2, ranks=[0, 1, 2, 3])
    fig = charts.drift_chart(drift)
    left, right = fig.axes
    # left: the loss itself, 42 − boot: 0.2, −0.1, 1.25, 0.1 GiB, on an axis that shows it (not 0–50 GiB)
    assert [round(bar.get_height(), 6) for bar in left.containers[0].patches] == [0.2, -0.1, 1.25, 0.1]
    assert left.get_ylim()[1] < 2  # 1.25 × 1.35
    assert left.get_xticklabels()[2].get_text() == "2\n42 GiB →\n40.75 GiB"
    adjusted = right.containers[0].patches
    # 30 − 0.2 − 0.5 = 29.3; 30 − 0 − 0.5 = 29.5 (never raised); 30 − 1.25 − 0.5 = 28.25; 29.4
    assert [round(bar.get_height(), 6) for bar in adjusted] == [29.3, 29.5, 28.25, 29.4]
    assert adjusted[2].get_facecolor() == to_rgba(charts.LIMITING_COLOR)
    assert _line_y(right, "uniform 28.25 GiB") == 28.25
    assert "re-profile to raise" in fig._suptitle.get_text()
    # one sign convention (issue 14, item 5): free memory lost is positive "lost", as drift_bytes and the
    # drift table count it (rank 2: 42 − 40.75 = 1.25 GiB lost), in one unit, GiB (0.1 GiB = 102.4 MiB)
    assert [t.get_text() for t in left.texts][1:3] == ["gained 0.10 GiB", "lost 1.25 GiB"]


def test_spread_chart_marks_min_median_max_and_a_stable_weak_rank():
    # boot a: safe 39, 34 GiB; boot b: safe 38, 33, 36 GiB → median 36 GiB; rank 1 limits both
    budgets = {
        "a": uniform_budget([40 * GiB, 35 * GiB], GiB),
        "b": uniform_budget([39 * GiB, 34 * GiB, 37 * GiB], GiB),
    }
    ax = charts.spread_chart(budgets).axes[0]
    points = [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.get_lines() if len(line.get_xdata())]
    # per boot: max, median, min
    assert points == [(0, 39.0), (0, 36.5), (0, 34.0), (1, 38.0), (1, 36.0), (1, 33.0)]
    assert ax.get_title() == "Safe budget spread over 2 boots: rank 1 limits every boot"
    assert [t.get_text() for t in ax.texts] == ["rank 1\n34 GiB", "rank 1\n33 GiB"]


def test_spread_chart_needs_a_boot():
    with pytest.raises(ValueError, match="at least one boot"):
        charts.spread_chart({})


def test_ledger_chart_without_total_draws_no_total_and_nothing_unitemised():
    ax = charts.ledger_chart(LEDGER.drop(columns="total_bytes"), BUDGET).axes[0]
    labels = [container.get_label() for container in ax.containers]
    assert "not itemised in the log" not in labels
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
    assert ax.get_xlabel() == "rank"  # no total to show
    # 37 GiB of parts + 40 GiB room on rank 0; 42 + 35 on rank 1: 77 GiB tall each
    tops = [sum(c.patches[i].get_height() for c in ax.containers) for i in range(2)]
    assert tops == [77.0, 77.0]


def test_ledger_chart_draws_negative_graph_memory_as_zero():
    # vLLM can log "took -0.5 GiB" when free memory rose during capture: drawn as 0, the rest not itemised
    ledger = LEDGER.assign(cuda_graph_bytes=[-GiB // 2, pd.NA])
    ax = charts.ledger_chart(ledger, BUDGET).axes[0]
    assert _bars(ax, "CUDA graphs") == [0.0, 1.0]
    assert _bars(ax, "not itemised in the log") == [4.0, 3.0]  # 80 − 36 − 40 on rank 0


def test_budget_labels_never_round_above_their_bytes():
    # issue 27: a budget shown in a chart is floored at its shown precision. Rooms 12 GiB + 511 MiB and
    # 12 GiB + 799 MiB, reserve 512 MiB (no block rounding): rank 0 is safe for 12 GiB − 1 MiB = 11.999 GiB,
    # which format_size rounds up to "12 GiB"; as a budget it reads "11.99 GiB" (the bar, the uniform line, the
    # title and the KV segment alike). Rank 1's 12.28 GiB is already exact at two decimals.
    MiB = GiB // 1024
    budget = uniform_budget([12 * GiB + 511 * MiB, 12 * GiB + 799 * MiB], 512 * MiB)
    assert budget.uniform_budget_bytes == 12 * GiB - MiB
    ax = charts.safe_budget_chart(budget).axes[0]
    texts = [t.get_text() for t in ax.texts] + ax.get_legend_handles_labels()[1]
    assert "11.99 GiB" in texts and "uniform budget 11.99 GiB (safe on every rank)" in texts
    assert not any("12 GiB" in text for text in texts)
    ledger = LEDGER.assign(room_bytes=[12 * GiB + 511 * MiB, 12 * GiB + 799 * MiB])
    ax = charts.ledger_chart(ledger, budget).axes[0]
    assert "11.99 GiB KV on every rank" in ax.get_title(loc="left")
