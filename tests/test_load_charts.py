"""Load charts draw exactly the timeline and summaries they are given."""

from datetime import datetime, timedelta

import matplotlib.pyplot as plt
import pytest

from kvplan.load import charts as load_charts
from kvplan.load import load_timeline
from tests.load_rows import load_reading, load_row


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def at(second: int) -> datetime:
    return datetime(2026, 11, 27, 10, 0, second)


# three stats lines of engine 0 at 0, 30, 60 s; preemptions in the second interval; an OOM at 60 s
ROWS = (
    load_row("s.log", 1, at(0), 0, kv_cache_usage_pct=40.0, running=10, waiting=0, preemptions=0),
    load_row("s.log", 2, at(30), 0, kv_cache_usage_pct=99.5, running=20, waiting=6, preemptions=2),
    load_row("s.log", 3, at(59), 0, kv_cache_usage_pct=97.0, running=18, waiting=3, preemptions=0),
    load_row("s.log", 4, at(59), None, event="oom"),
)
TIMELINE = load_timeline(load_reading(ROWS))


def lines_by_label(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_occupancy_draws_usage_capacity_and_preemptions():
    fig = load_charts.occupancy_chart(TIMELINE, kv_cache_tokens=157_280)
    ax = fig.axes[0]
    lines = lines_by_label(ax)
    usage = lines["engine 0 (log)"]
    assert list(usage.get_xdata()) == [0.0, 0.5, pytest.approx(59 / 60)]  # minutes
    assert list(usage.get_ydata()) == [40.0, 99.5, 97.0]
    capacity = lines["capacity = 157,280 tokens"]
    assert list(capacity.get_ydata()) == [100, 100]
    # one vertical line for the one interval with preemptions, at 0.5 min
    marks = [line for line in ax.get_lines() if line.get_color() == load_charts.PREEMPTION_COLOR]
    assert [list(line.get_xdata()) for line in marks] == [[0.5, 0.5]]
    assert list(lines["OOM"].get_ydata()) == [100]


def test_requests_chart_draws_running_and_waiting():
    fig = load_charts.requests_chart(TIMELINE)
    lines = lines_by_label(fig.axes[0])
    assert list(lines["running, engine 0 (log)"].get_ydata()) == [10, 20, 18]
    assert list(lines["waiting, engine 0 (log)"].get_ydata()) == [0, 6, 3]


def test_canary_comparison_bars():
    profiled = {
        "mean_generation_tokens_per_s": 673.7,
        "preemptions": 0,
        "peak_kv_cache_usage_pct": 70.7,
        "kv_cache_tokens": 155_856,
    }
    manual = {
        "mean_generation_tokens_per_s": 671.0,
        "preemptions": None,
        "peak_kv_cache_usage_pct": 70.1,
        "kv_cache_tokens": 157_280,
    }
    fig = load_charts.canary_comparison_chart([profiled, manual])
    widths = [[bar.get_width() for bar in ax.patches] for ax in fig.axes]
    # unknown preemptions draw no bar (width 0) and say "n/a"
    assert widths == [[673.7, 671.0], [0, 0], [70.7, 70.1], [155_856, 157_280]]
    assert [t.get_text() for t in fig.axes[1].texts] == ["0", "n/a"]
    # runs are rows, the first on top, named once on the left (issue 27: no turned, overlapping labels)
    labels = {t.get_text(): t.get_position()[1] for t in fig.axes[0].get_yticklabels()}
    assert labels == {"profiled canary": 1, "manual-value canary": 0}


def test_comparison_needs_one_label_per_summary():
    with pytest.raises(ValueError, match="2 summaries but 1 labels"):
        load_charts.canary_comparison_chart([{}, {}], labels=["one"])


def test_a_restart_gap_breaks_the_line_and_preemptions_are_marked_once():
    # stats lines at 0, 10, 20 s, then the server restarts and logs again at 300 and 310 s: the 280 s gap
    # is more than 3 × the usual 10 s, so the line lifts between 20 and 300 s
    seconds = [0, 10, 20, 300, 310]
    rows = [
        load_row(
            "s.log",
            i,
            at(0) + timedelta(seconds=s),
            0,
            kv_cache_usage_pct=50.0 + i,
            preemptions=1 if i == 1 else 0,
        )
        for i, s in enumerate(seconds)
    ]
    # the same run's /metrics saw the same preemption once
    rows.append(
        load_row(
            "m.prom",
            1,
            at(10),
            0,
            kv_cache_usage_pct=51.0,
            preemptions=1,
            preemptions_total=1,
            kind="metrics",
        )
    )
    fig = load_charts.occupancy_chart(load_timeline(load_reading(tuple(rows))))
    usage = lines_by_label(fig.axes[0])["engine 0 (log)"]
    ydata = list(usage.get_ydata())
    assert ydata[:3] == [50.0, 51.0, 52.0] and ydata[4:] == [53.0, 54.0]
    assert ydata[3] != ydata[3]  # NaN
    marks = [line for line in fig.axes[0].get_lines() if line.get_color() == load_charts.PREEMPTION_COLOR]
    assert len(marks) == 1  # from the log (5 rows with counts) only, not again from the one scrape
