"""The notebook package's small helpers, each on a case worked by hand (issue 23: these were docstring examples
of helpers whose docstrings went to the house form; the checks are kept here)."""

import nbformat
import pandas as pd

from kvplan import DATA_DIR, charts
from kvplan.budget import uniform_budget
from kvplan.notebook import (
    Scenario,
    WhatIfPanel,
    add_back_bytes,
    budget_headline,
    co_tenant_bytes,
    evaluate,
    figure_png,
    gib_to_bytes,
    launch_max_model_len,
    launch_snapshots,
    moved_hosts_text,
    parameter_path,
    rows_that_set_the_room,
)
from kvplan.notebook.figures import panel_axes, panel_charts, sentence
from kvplan.notebook.headlines import length_warning, limiting_text, readable_name, readable_value
from kvplan.notebook.pages import (
    notebook_title,
    shown_folder,
    with_parameters,
    without_markers,
    without_roots,
)
from kvplan.notebook.whatif import add_back_limits
from kvplan.units import parse_size

GiB = 2**30


def test_page_helpers():  # issue 23
    titled = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 01 · Logs\ntext")])
    assert notebook_title(titled) == "01 · Logs"
    marked = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(1)")])
    assert without_markers(marked).cells[0].source == "print(1)"
    cell = nbformat.v4.new_code_cell("BUNDLE = None  # a bundle", metadata={"tags": ["parameters"]})
    set_ = with_parameters(nbformat.v4.new_notebook(cells=[cell]), {"BUNDLE": "b/1", "OTHER": 2})
    assert set_.cells[1].source == "BUNDLE = 'b/1'"  # OTHER is not a name of the parameters cell
    roots = {"/tmp/x/": "", "/tmp/": "$TMPDIR/"}  # the longer root first
    assert without_roots("/tmp/x/data/a.log and /tmp/b", roots) == "data/a.log and $TMPDIR/b"
    assert shown_folder("/srv/bundles/2026-12-01-d974eb240843") == "…/2026-12-01-d974eb240843"


def test_launch_helpers():  # issue 23
    assert co_tenant_bytes(pd.DataFrame({"rank": [0, 1, 1], "other_process_bytes": [None, 5, 7]})) == [
        None,
        7,
    ]
    names = [path.name for path in launch_snapshots([DATA_DIR / "boots" / "four-rank" / "boot.log"])]
    assert names == ["nvidia-smi-gpu.csv", "nvidia-smi-apps.csv"]
    assert parameter_path("boots/four-rank", "LOG_DIR", root=DATA_DIR) == DATA_DIR / "boots" / "four-rank"
    ledger = pd.DataFrame({"source": "a.log", "boot": 0, "rank": [0, 1], "max_model_len": 32768})
    assert (launch_max_model_len(ledger), launch_max_model_len(ledger, 8192)) == (32768, 8192)
    rows = rows_that_set_the_room(pd.DataFrame({"rank": [0, 0, 1], "room_bytes": [None, 5, None]}))
    assert rows.index.tolist() == [1, 2]  # rank 0's row with a room; rank 1 shows none: all its rows


def test_headline_helpers():  # issue 23
    assert length_warning(10_000_000, 131_072).startswith("10,000,000 tokens exceeds")
    assert length_warning(32_768, 131_072) == ""
    assert limiting_text([0, 1, 2], [5, 4, 3]) == "2"
    assert limiting_text([0, 1, 2], [3, 5, 3]) == "0 and 2 (tied)"
    assert limiting_text([0, 1], [3, 3]) == "none: every rank the same"
    # safe 12 and 17 GiB: the uniform 12 GiB strands 5 GiB on rank 1
    assert budget_headline(uniform_budget([13 * GiB, 18 * GiB], GiB))["stranded total"] == "5 GiB"
    assert readable_name("peak_kv_cache_usage_pct") == "peak KV cache usage [%]"
    assert (readable_name("safe_bytes"), readable_name("seq_len")) == ("safe", "sequence length")
    assert readable_value("kv_cache_tokens", 155856) == "155,856"
    assert readable_value("room_bytes", 13851156480) == "12.9 GiB"
    assert readable_value("peak_kv_cache_usage_pct", 70.749487) == "70.75"
    assert readable_value("max_concurrency", 4.7998046875) == "4.80"
    assert (readable_value("passed", True), readable_value("preemptions", None)) == ("yes", "n/a")
    assert readable_value("detail", "ok") == "ok"


def test_whatif_helpers():  # issue 23
    assert gib_to_bytes(0.9) == parse_size("0.9GiB") and gib_to_bytes(12) == 12884901888
    co_tenant = 25_845_153_792  # 24.07 GiB (rounded): the slider's top gives back every byte
    assert add_back_bytes(25.0, co_tenant) == co_tenant
    assert (add_back_bytes(2.0, co_tenant), add_back_bytes(2.0, None)) == (2147483648, 0)
    assert add_back_limits(Scenario((10, 10), 1, add_back_bytes=(0, 9)), [5, 7]) == [5, 9]
    outcome = evaluate(Scenario((13 * GiB, 18 * GiB), reserve_bytes=GiB))
    assert (outcome.headline()["uniform budget"], outcome.headline()["limiting rank"]) == ("12 GiB", "0")


def test_figure_helpers():  # issue 23
    budget = uniform_budget([13 * GiB, 18 * GiB], GiB)
    png = figure_png(charts.safe_budget_chart(budget))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 800  # 10 in × 80 dpi
    same = uniform_budget([13 * GiB] * 2, GiB)
    assert sentence(charts.stranded_chart(same)) == "Nothing stranded: every rank holds the same safe budget"
    axes = panel_axes(evaluate(Scenario((13 * GiB, 18 * GiB), GiB)))
    assert axes.budget_top_gib == 17.85 and axes.stranded_top_gib > 5  # 17 GiB × 1.05; above the 5 GiB
    steps = panel_charts(evaluate(Scenario((13 * GiB, 18 * GiB), GiB)))
    assert [step.name for step in steps] == ["safe budget", "stranded"]
    frame = pd.DataFrame({"rank": [0, 1], "other_process_bytes": [None, 5 * GiB]})
    parts = charts.LedgerParts.of(frame, (0, 1)).with_add_back((GiB, 2 * GiB))
    assert parts.parts[0] == (0, 3 * GiB)  # other processes: missing is 0; 5 − 2 GiB


def test_set_values_sets_every_control():  # issue 23
    panel = WhatIfPanel(Scenario((13 * 2**30, 18 * 2**30), 2**30))
    panel.set_values({"reserve_gib": 2.0})
    assert panel.outcome.budget.uniform_budget_bytes // 2**30 == 11  # 13 − 2


def test_moved_hosts_text_names_the_hosts_moved_and_those_the_fleet_lacks():  # issue 23
    assert (
        moved_hosts_text({"h2": {}, "h9": {}}, ["h1", "h2"])
        == "MOVE moves h2; names no host of this fleet: h9"
    )
    hosts = [f"h{i}" for i in range(7)]  # the first five listed
    assert moved_hosts_text({"h9": {}}, hosts) == (
        "MOVE names no host of this fleet (h9): the plan below is unchanged; its hosts are h0, h1, h2, h3, h4, …"
    )


def test_each_chart_draws_its_numbers_in_gib():  # issue 23: the charts' docstring examples
    from kvplan.drift import drift_budget
    from kvplan.kvspec.capacity import FlatSpec, capacity_table

    # 12 GiB / (256 KiB × 4096 tokens) = 12 sequences at 4096, 6 at 8192
    fig = charts.concurrency_chart(capacity_table(FlatSpec(256 * 1024), 12 * GiB, [4096, 8192]), 8192, 8)
    assert fig.axes[0].get_lines()[0].get_ydata().tolist() == [12.0, 6.0]
    fig = charts.drift_chart(drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 42 * GiB]))
    assert [float(bar.get_height()) for bar in fig.axes[1].containers[0]] == [
        29.0,
        30.0,
    ]  # 30 − (42 − 41), 30
    boot = uniform_budget([13 * GiB, 18 * GiB], GiB)
    title = charts.spread_chart({"boot 0": boot, "boot 1": boot}).axes[0].get_title()
    assert title == "Safe budget spread over 2 boots: rank 0 limits every boot"
    ledger = pd.DataFrame({"rank": [0, 1], "total_bytes": [20 * GiB] * 2, "weights_bytes": [5 * GiB] * 2})
    fig = charts.ledger_chart(ledger, uniform_budget([13 * GiB, 15 * GiB], GiB))
    # weights, not itemised (20 − 5 − room), uniform KV, stranded, reserve
    heights = [[float(p.get_height()) for p in c] for c in fig.axes[0].containers]
    assert heights == [[5.0, 5.0], [2.0, 0.0], [12.0, 12.0], [0.0, 2.0], [1.0, 1.0]]
    fig = charts.safe_budget_chart(boot)
    assert [float(bar.get_height()) for bar in fig.axes[0].containers[0]] == [12.0, 17.0]
    assert charts.stranded_chart(boot).axes[0].get_title() == "Stranded on the stronger ranks: 5 GiB in total"
    fig = charts.stranded_chart(uniform_budget([31 * GiB] * 4, GiB))
    assert fig.get_size_inches().tolist() == [10.0, 1.6]
    assert fig.get_suptitle() == "Nothing stranded: every rank holds the same safe budget"


def test_launch_headline_of_the_sample():  # issue 23
    from kvplan.notebook import format_headline, launch_headline
    from kvplan.room import read_vllm_logs_rooms

    ledger = read_vllm_logs_rooms(DATA_DIR / "boots" / "four-rank")[0]
    assert format_headline(launch_headline(ledger)).splitlines() == [
        "model   meta-llama/Llama-3.1-70B-Instruct",
        "layout  TP 4 × PP 1 (4 ranks)",
        "vLLM    0.26.0",
        "boots   1 in 1 file",
    ]
