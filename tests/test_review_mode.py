"""Review mode and the panel's redraw (issue 27): the decision page first, notebooks served with the bundle,
and a panel that draws again only what a control change touched."""

from __future__ import annotations

import io

import nbformat
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.layout_engine import TightLayoutEngine
from PIL import Image

from kvplan import DATA_DIR
from kvplan.cli import main as kvplan_main
from kvplan.notebook import (
    Scenario,
    WhatIfPanel,
    co_tenant_bytes,
    figure_png,
    launch_max_model_len,
    read_launch,
)
from kvplan.notebook.report import DECISION_PAGE, decision_html, prepare, voila_command
from kvplan.plan import Evidence, ModelLayout, Policy, decide
from kvplan.units import parse_size

SAMPLE = DATA_DIR / "boots" / "four-rank"
NOTEBOOKS = sorted((DATA_DIR.parent / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("evidence")
    code = kvplan_main(
        [
            "approve", str(SAMPLE / "boot.log"), "--reserve", "0.9GiB", "--model", "llama-3.1-70b",
            "--tp", "4", "--approver", "test", "--note", "review mode", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    (folder,) = out.iterdir()
    return folder


def test_the_decision_page_leads_with_the_flag_then_links_each_dashboard(bundle):  # issue 27
    page = decision_html(bundle, ["02-rank-headroom.ipynb", "03-concurrency.ipynb"])
    # rank 2's 12 GiB room − 0.9 GiB, in whole blocks of 1.25 MiB: 9,830 blocks = 12,884,377,600 B
    flag = page.index("--kv-cache-memory-bytes=12884377600")
    assert flag < page.index('href="02-rank-headroom.ipynb"') < page.index('href="03-concurrency.ipynb"')
    assert "verified" in page and "(sha256:" in page  # the digest as kvplan prints it


def test_a_bundle_that_does_not_verify_shows_no_flag(bundle, tmp_path):  # issue 27
    import shutil

    copy = tmp_path / bundle.name
    shutil.copytree(bundle, copy)
    (copy / "ledger.csv").write_text("rank\n0\n")  # tampered
    page = decision_html(copy, ["02-rank-headroom.ipynb"])
    assert "does not verify" in page and "--kv-cache-memory-bytes=" not in page


def test_prepare_writes_the_decision_page_and_each_notebook_with_the_bundle(bundle, tmp_path):  # issue 27
    served = prepare(tmp_path / "served", bundle, NOTEBOOKS)
    assert sorted(path.name for path in served.glob("*.ipynb")) == sorted(
        [DECISION_PAGE, *(path.name for path in NOTEBOOKS)]
    )
    approve = nbformat.read(served / "05-approve-and-export.ipynb", as_version=4)
    injected = [
        cell.source for cell in approve.cells if "injected-parameters" in cell.metadata.get("tags", [])
    ]
    assert injected == [f"BUNDLE = {str(bundle.resolve())!r}"]
    assert voila_command(served, 8866)[-1] == str(served)
    assert "--Voila.ip=127.0.0.1" in voila_command(served) and "--port=8866" in voila_command(served)


def _panel_03() -> WhatIfPanel:
    ledger, _ = read_launch(SAMPLE)
    decision = decide(Evidence(ledger), Policy(parse_size("0.9GiB")), ModelLayout("llama-3.1-70b"))
    scenario = Scenario.from_decision(
        decision, max_model_len=launch_max_model_len(ledger), target_concurrency=4
    )
    return WhatIfPanel(scenario, co_tenant_bytes=co_tenant_bytes(ledger))


def test_a_panel_draws_again_only_the_charts_a_change_touched():  # issue 27
    panel = _panel_03()
    panel.controls["target_concurrency"].value = 5  # away from the notebook's state: drawn against it
    before = dict(panel._drawn)
    panel.controls["target_concurrency"].value = 6  # the budget is the same: only the concurrency chart moves
    assert [name for name in before if panel._drawn[name] is not before[name]] == ["concurrency"]
    shown = panel.images["concurrency"].value
    panel.controls["reserve_gib"].value = 1.0  # every chart moves
    assert all(panel._drawn[name] is not before[name] for name in ("safe budget", "stranded", "concurrency"))
    assert panel.images["concurrency"].value != shown


def _pixels(png: bytes):
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def test_a_panel_lays_a_chart_out_and_draws_its_frame_once_while_its_axes_hold(monkeypatch):  # issue 27
    panel = _panel_03()
    panel.controls["reserve_gib"].value = 1.0
    layouts, draws = [], []
    real_layout, real_draw = TightLayoutEngine.execute, Figure.draw
    monkeypatch.setattr(TightLayoutEngine, "execute", lambda e, f: layouts.append(1) or real_layout(e, f))
    monkeypatch.setattr(Figure, "draw", lambda f, renderer: draws.append(1) or real_draw(f, renderer))
    panel.controls["reserve_gib"].value = 1.1
    # the second state keeps the first's margins and frame (axes, ticks, labels): no layout, no whole drawing,
    # only what moved drawn over the frame; the picture is a new figure's, within antialiasing (the frame
    # is under the bars, where a whole drawing puts the spines over them: a few pixels of the bottom spine)
    assert layouts == [] and draws == []
    redrawn = [step for step in panel.chart_steps(panel.outcome) if step.name in panel._drawn]
    assert redrawn
    for step in redrawn:
        shown, fresh = _pixels(panel._drawn[step.name][2]), _pixels(figure_png(step.draw()))
        assert shown.shape == fresh.shape
        assert (np.abs(shown - fresh).max(axis=2) > 64).mean() < 0.001, step.name


def test_a_panel_raises_its_axes_in_steps_so_moved_states_keep_one_frame(monkeypatch):  # issue 27
    panel = _panel_03()
    layouts = []
    real_layout = TightLayoutEngine.execute
    monkeypatch.setattr(TightLayoutEngine, "execute", lambda e, f: layouts.append(1) or real_layout(e, f))
    for reserve in (
        0.85,
        0.8,
        0.75,
        0.7,
        0.65,
        0.6,
    ):  # below the notebook's 0.9 GiB: bars and curves outgrow its axes
        panel.controls["reserve_gib"].value = reserve
    # the safe budget axis rises by quarters and the concurrency axis doubles, not to each state's bars and
    # curve: at most one new frame per chart over the six states (before: two layouts at every state)
    assert panel.error is None and not panel.chart_errors
    assert len(layouts) <= len(panel._drawn)
    safe = max(panel.outcome.budget.safe_bytes) / 2**30
    top = panel._live["safe budget"].figure.axes[0].get_ylim()[1]
    assert safe * 1.05 <= top <= safe * 1.05 * 1.25  # every bar fits; raised by one quarter at most
