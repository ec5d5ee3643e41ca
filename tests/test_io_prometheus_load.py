"""kvplan load --prometheus against a real Prometheus, backfilled with the same samples as the files (issue 28).

One server per module: every case's samples go into one TSDB under its own ``kvplan_case`` label (the
readers sum over labels they do not read, so the extra label changes no value) and each case is read back
with ``--match``.
"""

import json
import re
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest
import requests

from kvplan import DATA_DIR, PROJECT_DIR, evidence
from kvplan.cli import main
from kvplan.io import prometheus as prometheus_api
from kvplan.io.load import read_metrics_snapshots
from kvplan.io.model_config import resolve_model_config
from kvplan.io.prometheus import PrometheusError, parse_time, read_prometheus_load, save_prometheus_load
from kvplan.units import parse_size
from tests.conftest import approve_args
from tests.prometheus_server import needs_prometheus, openmetrics_of, running_prometheus, samples_of
from tests.test_io_load_metrics import V0_SCRAPE
from tests.test_running_value import FOUR_RANK, RUNNING_CHECK

pytestmark = needs_prometheus
LOAD = DATA_DIR / "load"
V1_RESTART = """\
# 2026-11-20T08:00:00Z
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:num_preemptions_total{engine="0"} 7.0
vllm:num_preemptions_created{engine="0"} 1795420000.0
vllm:prompt_tokens_total{engine="0"} 1000.0
vllm:prompt_tokens_created{engine="0"} 1795420000.0
# 2026-11-20T08:00:15Z
vllm:kv_cache_usage_perc{engine="0"} NaN
vllm:num_preemptions_total{engine="0"} 9.0
vllm:num_preemptions_created{engine="0"} 1795420000.0
vllm:prompt_tokens_total{engine="0"} 1600.0
vllm:prompt_tokens_created{engine="0"} 1795420000.0
# 2026-11-20T08:00:30Z
vllm:kv_cache_usage_perc{engine="0"} 1.5
vllm:num_preemptions_total{engine="0"} 12.0
vllm:num_preemptions_created{engine="0"} 1795420025.0
vllm:prompt_tokens_total{engine="0"} 300.0
vllm:prompt_tokens_created{engine="0"} 1795420025.0
"""
SERIES_10K, POINTS_10K = 10_000, 20  # the bounded-memory answer: 10,000 series × 20 scrapes 15 s apart
START_10K = 1795000000.0


def _cases(tmp: Path) -> dict[str, list[Path]]:
    (tmp / "v0.prom").write_text("".join(f"# 2026-11-21T10:00:{s:02d}Z\n{V0_SCRAPE}" for s in (0, 10, 20)))
    (tmp / "v1-restart.prom").write_text(V1_RESTART)
    overload = (LOAD / "manual-canary-overload" / "metrics.prom").read_text()
    (tmp / "other-value.prom").write_text(
        overload.replace('kv_cache_memory_bytes="12884377600"', 'kv_cache_memory_bytes="16106127360"')
    )
    return {
        "manual-canary": sorted((LOAD / "manual-canary" / "metrics").glob("*.prom")),
        "manual-canary-overload": [LOAD / "manual-canary-overload" / "metrics.prom"],
        "profiled-canary": [LOAD / "profiled-canary" / "federate.prom"],
        "v0": [tmp / "v0.prom"],
        "v1-restart": [tmp / "v1-restart.prom"],
        "other-value": [tmp / "other-value.prom"],
    }


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    cases = _cases(tmp)
    series = None
    for case, files in cases.items():
        series = samples_of(files, {"kvplan_case": case}, series)
    for instance in ("a:8000", "b:8000"):  # one run seen from two scrape targets
        series = samples_of(cases["v0"], {"kvplan_case": "two-targets", "instance": instance}, series)
    running = series["vllm:num_requests_running"]
    for i in range(SERIES_10K):  # 10,000 series of one gauge: each scrape's rows sum them
        points = [(START_10K + 15 * k, float(i % 7)) for k in range(POINTS_10K)]
        running[(("kvplan_case", "10k"), ("model_name", f"m{i}"))] = points
    with running_prometheus(openmetrics_of(series), tmp) as url:
        yield url, cases


def _span(reading) -> tuple[float, float]:
    times = reading.frame["time"].dropna()
    return times.min().tz_localize("UTC").timestamp(), times.max().tz_localize("UTC").timestamp()


def _unsourced(warnings) -> list[str]:
    """Warnings without their ``source:line:`` prefix (a file's line, a Prometheus sample's position)."""
    return [re.sub(r"^(?:prometheus )?\S+?:\d+: ", "", str(w)) for w in warnings]


CASES = ["manual-canary", "manual-canary-overload", "profiled-canary", "v0", "v1-restart"]


@pytest.mark.parametrize("case", CASES)
def test_rows_equal_the_files(prometheus, case):  # issue 28
    url, cases = prometheus
    files = read_metrics_snapshots(cases[case])
    start, end = _span(files)
    served = read_prometheus_load(url, start, end, match=f'{{kvplan_case="{case}"}}')
    assert len(served.frame) == len(files.frame) > 0
    columns = [c for c in files.frame.columns if c not in ("source", "line")]
    pd.testing.assert_frame_equal(served.frame[columns], files.frame[columns])
    assert set(served.frame["source"]) == {f"prometheus {url}"}
    assert _unsourced(served.warnings) == _unsourced(files.warnings)
    fields = (
        "kv_cache_tokens",
        "num_gpu_blocks",
        "block_size",
        "kv_cache_memory_bytes",
        "reports_preemptions",
    )
    assert [getattr(served.sources[0], f) for f in fields] == [getattr(files.sources[0], f) for f in fields]


def test_restart_and_unknowns_as_the_file_reader(prometheus):  # issue 28
    url, _ = prometheus
    start, end = parse_time("2026-11-20T08:00:00Z"), parse_time("2026-11-20T08:00:30Z")
    reading = read_prometheus_load(url, start, end, match='{kvplan_case="v1-restart"}')
    rows = reading.frame
    # 0.5 → 50 %; NaN and 1.5 (outside 0–1) unknown; preemptions 9 − 7 = 2, then counted from 0: 12
    assert rows["kv_cache_usage_pct"].tolist()[0] == 50.0
    assert rows["kv_cache_usage_pct"].isna().tolist() == [False, True, True]
    assert rows["preemptions"].tolist()[1:] == [2, 12]
    # prompt tokens: (1600 − 1000) / 15 s = 40/s; after the restart 300 / 15 s = 20/s
    assert rows["prompt_tokens_per_s"].tolist()[1:] == [40.0, 20.0]
    assert any("created anew" in str(w) or "went down" in str(w) for w in reading.warnings)


def test_step_reads_query_range(prometheus):  # issue 28
    url, cases = prometheus
    files = read_metrics_snapshots(cases["manual-canary"])
    start, end = _span(files)
    # scrapes a minute apart: steps of 60 s from the first scrape land on every scrape
    stepped = read_prometheus_load(url, start, end, step=60.0, match='{kvplan_case="manual-canary"}')
    columns = [c for c in files.frame.columns if c not in ("source", "line")]
    pd.testing.assert_frame_equal(stepped.frame[columns], files.frame[columns])


def test_two_targets_refused(prometheus):  # issue 28
    url, cases = prometheus
    start, end = _span(read_metrics_snapshots(cases["v0"]))
    with pytest.raises(PrometheusError, match=r"2 scrape targets.*--match"):
        read_prometheus_load(url, start, end, match='{kvplan_case="two-targets"}')
    one = read_prometheus_load(url, start, end, match='{kvplan_case="two-targets",instance="a:8000"}')
    assert len(one.frame) == 3


def test_unreachable_and_bad_match():  # issue 28
    with pytest.raises(PrometheusError, match="cannot read Prometheus"):
        read_prometheus_load("http://127.0.0.1:9", 0, 60)
    with pytest.raises(PrometheusError, match="--match"):
        read_prometheus_load("http://127.0.0.1:9", 0, 60, match='job="x"')


def test_ten_thousand_series_in_pages(prometheus, monkeypatch):  # issue 28
    url, _ = prometheus
    end = START_10K + 15 * (POINTS_10K - 1)
    tracemalloc.start()
    whole = requests.get(
        f"{url}/api/v1/query",
        params={"query": f'vllm:num_requests_running{{kvplan_case="10k"}}[{int(end - START_10K) + 1}s]',
                "time": str(end)},
        timeout=60,
    )  # fmt: skip
    assert len(whole.json()["data"]["result"]) == SERIES_10K  # the whole answer at once, read and parsed
    _, whole_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    requests_made = []
    real_get = prometheus_api._get
    monkeypatch.setattr(prometheus_api, "_get", lambda *a: requests_made.append(a) or real_get(*a))
    monkeypatch.setattr(prometheus_api, "PAGE_POINTS", 20_000)  # 2 samples of each of 10,000 series a page
    tracemalloc.start()
    reading = read_prometheus_load(url, START_10K, end, match='{kvplan_case="10k"}')
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"10,000 series × {POINTS_10K}: the whole answer {len(whole.content):,} bytes, peak "
          f"{whole_peak:,} bytes read at once; {len(requests_made)} pages, peak {peak:,} bytes")  # fmt: skip
    # every scrape: the sum over the 10,000 series of i mod 7 = 1,428 full cycles × 21 + (0+…+3) = 29,994
    assert reading.frame["running"].tolist() == [29_994] * POINTS_10K
    assert len(requests_made) > 2  # the series count, then pages
    assert peak < whole_peak / 2  # less than half of what holding the whole answer takes


def test_cli_load_prometheus_json_equals_files(prometheus, capsys):  # issue 28
    url, cases = prometheus
    files = [str(p) for p in cases["manual-canary-overload"]]
    assert main(["load", *files, "--json"]) == 0
    from_files = json.loads(capsys.readouterr().out)
    start, end = "2026-11-27T11:03:28Z", "2026-11-27T11:16:16Z"  # the first and last scrape of the file
    match = '{kvplan_case="manual-canary-overload"}'
    assert (
        main(["load", "--prometheus", url, "--start", start, "--end", end, "--match", match, "--json"]) == 0
    )
    served = json.loads(capsys.readouterr().out)
    drop = ("source", "line")
    assert [{k: v for k, v in r.items() if k not in drop} for r in served["rows"]] == [
        {k: v for k, v in r.items() if k not in drop} for r in from_files["rows"]
    ]
    assert _unsourced(served["warnings"]) == _unsourced(from_files["warnings"])


def test_cli_load_prometheus_refusals(capsys):  # issue 28
    assert main(["load"]) == 2
    assert main(["load", "--prometheus", "http://127.0.0.1:9", "--start", "0"]) == 2
    assert main(["load", "x.log", "--step", "15s"]) == 2
    assert main(["load", "--prometheus", "http://127.0.0.1:9", "--start", "0", "--end", "60"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        "error: give the run's FILEs or --prometheus URL (one of them)",
        "error: --prometheus needs --start TIME and --end TIME (Unix s or ISO 8601)",
        "error: --step: only with --prometheus",
        "error: http://127.0.0.1:9/api/v1/query: cannot read Prometheus (no answer)",
    ]


def test_gate_reads_the_canary_from_prometheus(prometheus, capsys, tmp_path):  # issue 28
    url, cases = prometheus
    layout = evidence.ModelLayout(resolve_model_config("llama-3.1-70b"), {"tp": 4})
    approved = evidence.approve(
        [FOUR_RANK / "boot.log"], tmp_path, evidence.Policy(parse_size("0.9GiB")), "QA", layout=layout
    )
    window = ["--start", "2026-11-27T11:03:28Z", "--end", "2026-11-27T11:16:16Z"]

    def gate(*argv) -> tuple[int, dict]:
        status = main(["gate", "--approved", str(approved), str(FOUR_RANK / "boot.log"), *argv, "--json"])
        return status, json.loads(capsys.readouterr().out)

    files = [str(p) for p in cases["manual-canary-overload"]]
    status_files, from_files = gate("--load", *files, "--metrics", *files)
    status, served = gate("--prometheus", url, *window, "--match", '{kvplan_case="manual-canary-overload"}')
    # the same checks, PASS and FAIL alike (30 preemptions fail the load policy), the evidence named apart
    assert status == status_files == 1
    assert [(c["name"], c["passed"]) for c in served["checks"]] == [
        (c["name"], c["passed"]) for c in from_files["checks"]
    ]
    running = [c for c in served["checks"] if c["name"] == RUNNING_CHECK]
    assert [c["passed"] for c in running] == [True]
    assert running[0]["detail"].startswith(
        f"prometheus {url} {{}} engine 0: kv_cache_memory_bytes=12884377600 ="
    )
    # the canary whose cache_config_info shows another kv_cache_memory_bytes: FAIL, at --at alone
    at = ["--at", "2026-11-27T11:16:16Z", "--match", '{kvplan_case="other-value"}']
    status, other = gate("--prometheus", url, *at)
    running = [c for c in other["checks"] if c["name"] == RUNNING_CHECK]
    assert status == 1 and [c["passed"] for c in running] == [False]
    assert "kv_cache_memory_bytes=16106127360 ≠ the approved 12884377600" in running[0]["detail"]
    # nothing there at that time: the running value cannot be judged
    status, none = gate("--prometheus", url, "--at", "2020-01-01T00:00:00Z")
    assert status == 2
    assert [c["detail"] for c in none["checks"] if c["name"] == RUNNING_CHECK] == [
        f"prometheus {url} at 1577836800 (Unix s) shows no vllm:cache_config_info: the running value is unknown"
    ]


def test_approve_keeps_the_prometheus_samples(prometheus, capsys, tmp_path):  # issue 28
    url, cases = prometheus
    files = [str(p) for p in cases["manual-canary"]]
    window = ["--start", "2026-11-27T09:33:58Z", "--end", "2026-11-27T09:38:58Z"]  # its first and last scrape
    match = ["--match", '{kvplan_case="manual-canary"}']
    sections = []
    for name, load in (("files", ["--load", *files]), ("prometheus", ["--prometheus", url, *window, *match])):
        assert main([*approve_args(tmp_path / name, *load), "--model", "llama-3.1-70b", "--json"]) == 0
        capsys.readouterr()
        [bundle] = (tmp_path / name).iterdir()
        sections.append(json.loads((bundle / "budget.json").read_text())["load"])
        assert main(["verify", str(bundle)]) == 0  # the saved samples read back to the same evidence
        capsys.readouterr()
    assert sections[1].pop("sources") == ["inputs/prometheus-load.prom"]  # one file of every sample
    sections[0].pop("sources")
    named = re.compile(r"(?:prometheus-load|scrape-0\d)\.prom(?::\d+)?")
    assert json.loads(named.sub("F", json.dumps(sections[1]))) == json.loads(
        named.sub("F", json.dumps(sections[0]))
    )
    assert sections[1]["peak_kv_cache_usage_pct"] is not None


def test_saved_samples_read_back_as_the_same_rows(prometheus, tmp_path):  # issue 28
    url, cases = prometheus
    files = read_metrics_snapshots(cases["manual-canary-overload"])
    start, end = _span(files)
    match = '{kvplan_case="manual-canary-overload"}'
    saved = save_prometheus_load(url, start, end, None, match, tmp_path / "saved.prom")
    again = read_metrics_snapshots([saved])
    columns = [c for c in files.frame.columns if c not in ("source", "line")]
    pd.testing.assert_frame_equal(again.frame[columns], files.frame[columns])
    assert not (tmp_path / "saved.prom.partial").exists()


def _checked_outputs(notebook: dict) -> list[str]:
    """The text of the cells whose outputs nbval checks (``# NBVAL_CHECK_OUTPUT``): the notebook's figures."""
    return [
        "".join("".join(output.get("text", "")) for output in cell.get("outputs", ()))
        for cell in notebook["cells"]
        if cell["cell_type"] == "code" and "".join(cell["source"]).startswith("# NBVAL_CHECK_OUTPUT")
    ]


def test_notebook_06_reads_the_runs_from_prometheus(prometheus, tmp_path):  # issue 28
    papermill = pytest.importorskip("papermill")
    url, cases = prometheus
    notebook = PROJECT_DIR / "notebooks" / "06-load-validation.ipynb"
    windows = {}  # each run's first and last scrape, its series chosen by the case label
    for name, case in (("PROFILED", "profiled-canary"), ("CANARY", "manual-canary"),
                       ("OVERLOAD", "manual-canary-overload")):  # fmt: skip
        start, end = _span(read_metrics_snapshots(cases[case]))
        windows[f"{name}_WINDOW"] = [start, end, f'{{kvplan_case="{case}"}}']
    ran = papermill.execute_notebook(
        str(notebook), str(tmp_path / "06.ipynb"), parameters={"PROMETHEUS": url, **windows},
        cwd=str(notebook.parent), progress_bar=False,
    )  # fmt: skip
    # the same figures as from the files: the outputs kept in the notebook, which nbval checks with the defaults
    kept = _checked_outputs(json.loads(notebook.read_text()))
    assert len(kept) == 4 and all(kept)
    assert _checked_outputs(ran) == kept
    shown = json.dumps([cell.get("outputs", []) for cell in ran["cells"]])
    assert (
        f"prometheus {url}" in shown and "metrics.prom" not in shown
    )  # the overload warnings name the server
