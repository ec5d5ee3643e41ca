"""The report of ``make demo``: the index leads with the decision; pages hide code, need no network, keep alt text.

The slow part (executing the notebooks) runs in ``make demo`` only; here the index is built from the sample
decision and a page is exported from a notebook whose outputs are set by hand, as a kernel would send them.
"""

import base64
import re
from pathlib import Path

import nbformat
import pytest

from kvplan import DATA_DIR
from kvplan.budget import uniform_budget
from kvplan.charts import safe_budget_chart
from kvplan.notebook import ParameterError, parameter_path
from kvplan.notebook.figures import figure_png
from kvplan.notebook.pages import Page, write_pages
from kvplan.notebook.report import build_report, decision_facts, index_html, show_bundle
from kvplan.plan import AdmissionPlan, ModelLayout, Policy, decide, decide_rooms
from kvplan.units import GiB, parse_size

SAMPLE = DATA_DIR / "boots" / "four-rank"


@pytest.fixture(scope="module")
def sample_decision():
    # the decision `make demo` approves: four-rank boot, 0.9 GiB reserve, Llama-3.1-70B at TP 4, 4 × 32,768
    return decide(
        [SAMPLE / "boot.log"],
        Policy(parse_size("0.9GiB")),
        ModelLayout("llama-3.1-70b", {"tp": 4}),
        AdmissionPlan(4, 32768),
    )


def test_the_index_opens_with_the_decision_of_the_sample(sample_decision):
    pages = [
        Page("02-rank-headroom", "02 · Rank headroom", "02-rank-headroom.html", "code/02-rank-headroom.html")
    ]
    page = index_html(sample_decision, pages, "2026-12-02T00:22:11Z", "0.1.0", {"digest": "sha256:abc"})
    text = re.sub(r"<[^>]+>", " ", page)
    # rank 2's room 12.9 GiB − 0.9 GiB reserve = 12 GiB = 9,830.4 blocks of 16 × 81,920 B → 9,830 blocks
    # = 12,884,377,600 B; 9,830 × 16 = 157,280 tokens; 157,280 / 32,768 = 4.80 sequences
    assert "--kv-cache-memory-bytes=12884377600" in text
    assert re.search(r"limiting rank\s+2\b", text)
    assert "157,280 tokens in 9,830 blocks of 1.25 MiB" in text
    assert "4.80× at 32,768 tokens" in text
    # stranded: (17.9 + 16.7 + 15.5 − 3 × 12 GiB) + 4 × 512 KiB of block rounding = 14.1 GiB
    assert "14.1 GiB on the stronger ranks" in text
    assert "2026-12-02T00:22:11Z" in text and "kvplan 0.1.0" in text
    # the decision comes before the links to the notebooks
    assert text.index("12884377600") < text.index("02 · Rank headroom")
    assert 'href="02-rank-headroom.html"' in page and 'href="code/02-rank-headroom.html"' in page


def test_a_tie_names_no_limiting_rank():
    facts = decision_facts(decide_rooms([31 * GiB] * 4, Policy(GiB)))
    assert facts["limiting rank"] == "none: every rank the same"


def test_a_page_hides_code_shows_the_panel_snapshot_and_needs_no_network(tmp_path):
    chart = safe_budget_chart(uniform_budget([13 * GiB, 18 * GiB], GiB))
    png = base64.b64encode(figure_png(chart)).decode()
    panel = nbformat.v4.new_output(
        "display_data",
        data={
            "application/vnd.jupyter.widget-view+json": {
                "model_id": "abc",
                "version_major": 2,
                "version_minor": 0,
            },
            "text/html": '<div class="kvplan-snapshot"><b>FITS on every rank</b></div>',
            "text/plain": "What-if panel",
        },
    )
    image = nbformat.v4.new_output(
        "display_data",
        data={"image/png": png, "text/plain": "Chart"},
        metadata={"image/png": {"alt": "Chart: ranks"}},
    )
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# 02 · Rank headroom"),
            nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nsecret_code()", outputs=[image]),
            nbformat.v4.new_code_cell("WhatIfPanel()", outputs=[panel]),
        ]
    )
    page = write_pages(notebook, "02-rank-headroom", tmp_path)
    assert page.title == "02 · Rank headroom"
    reader = (tmp_path / "02-rank-headroom.html").read_text()
    assert "secret_code" not in reader and "NBVAL" not in reader
    assert '<div class="kvplan-snapshot"><b>FITS on every rank</b></div>' in reader  # not the widget view
    assert "jupyter-widgets" not in reader and not re.search(r"<script[^>]+src=", reader)
    assert 'alt="Chart: ranks"' in reader
    assert list((tmp_path / "02-rank-headroom_files").glob("*.png"))  # the chart as a PNG file
    auditor = (tmp_path / "code" / "02-rank-headroom.html").read_text()
    assert "secret_code" in auditor and "NBVAL" not in auditor


def test_a_relative_parameter_path_is_found_from_the_checkout_or_named_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a notebook runs in notebooks/, not at the checkout's root
    assert parameter_path("data/boots/four-rank", "LOG_DIR").resolve() == SAMPLE.resolve()
    with pytest.raises(ParameterError) as error:
        parameter_path("mylaunch", "LOG_DIR")
    lines = error.value._render_traceback_()  # what IPython shows instead of a traceback
    assert len(lines) == 1 and lines[0].startswith("error: LOG_DIR = 'mylaunch' names nothing")


# --- the report shows the bundle it is given (issue 25) -----------------------------------------------------

LLAMA_8B_LOG = Path(__file__).parent / "data" / "v0.33-llama-3.1-8b-tp1-auto-fit.log"
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.fixture(scope="module")
def llama_8b_bundle(tmp_path_factory):
    """A bundle of another model than the sample's: Llama-3.1-8B at TP 1 (vLLM 0.33), 1 GiB reserve."""
    from kvplan.cli import main

    out = tmp_path_factory.mktemp("bundles")
    assert (
        main(["approve", str(LLAMA_8B_LOG), "--reserve", "1GiB", "--approver", "t", "--out", str(out)]) == 0
    )
    [bundle] = out.iterdir()
    return bundle


def _notebook(tmp_path, name, parameters, code):
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(parameters, metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell(code),
        ]
    )
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(notebook, path)
    return path


def test_the_report_refuses_a_notebook_that_cannot_take_the_bundle(llama_8b_bundle, tmp_path):
    # issue 25: the report of a bundle ran notebooks on the sample data; one that takes no BUNDLE is refused
    path = _notebook(tmp_path, "no-bundle", "LOG_DIR = 'x'", "print(1)")
    _, errors = build_report(tmp_path / "report", llama_8b_bundle, [path])
    assert errors == [f"{path}: takes no BUNDLE parameter: its page would not show the bundle; refused"]


def test_a_page_that_does_not_state_the_bundle_digest_is_refused(llama_8b_bundle, tmp_path):
    path = _notebook(tmp_path, "silent", "BUNDLE = None", "print('a page of something else')")
    index, errors = build_report(tmp_path / "report", llama_8b_bundle, [path])
    assert len(errors) == 1 and "its page does not state the bundle's digest sha256:" in errors[0]
    assert "silent" not in index.read_text()


def test_every_page_shows_the_bundle_it_was_given(llama_8b_bundle, tmp_path):
    # issue 25: the report of a Qwen3-14B bundle showed Llama-3.1-70B; here notebook 01 with a Llama-3.1-8B
    # bundle shows that bundle's model, never the sample's, and states the bundle's digest
    from kvplan.evidence import verify

    digest = verify(llama_8b_bundle).digest
    _, errors = build_report(tmp_path / "report", llama_8b_bundle, [NOTEBOOKS / "01-import-logs.ipynb"])
    assert errors == []
    # issue 27: the index names the bundle's folder from the temporary folder's short name, never as given
    index = (tmp_path / "report" / "index.html").read_text()
    assert str(llama_8b_bundle) not in index and "$TMPDIR/" in index and llama_8b_bundle.name in index
    page = (tmp_path / "report" / "01-import-logs.html").read_text()
    assert f"sha256:{digest}" in page
    # the ledger's model column (the prose names the sample, the outputs name the bundle's model)
    assert "meta-llama/Llama-3.1-8B-Instruct" in page and "meta-llama/Llama-3.1-70B-Instruct" not in page


def test_show_bundle_gives_the_bundles_inputs_and_policy(llama_8b_bundle):
    shown = show_bundle(llama_8b_bundle)
    assert [path.name for path in shown.logs] == [LLAMA_8B_LOG.name]
    assert shown.logs[0].read_bytes() == LLAMA_8B_LOG.read_bytes()
    assert shown.reserve_bytes == GiB and shown.plan == (None, None) and show_bundle(None) is None
    with pytest.raises(ParameterError, match="approved without --model"):
        _ = shown.model
    assert shown.digest in shown._repr_markdown_()
