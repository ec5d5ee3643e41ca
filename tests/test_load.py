"""The load timeline, summary and gate checks, on hand-made rows and on the scenario A sample runs.

Scenario A (data/load/): Llama-3.1-70B TP=4 on vLLM 0.26.0, 1,310,720 B per block per rank. The profiled
canary is the boot of data/boots/four-rank (GPU KV cache size 155,856 tokens = 9,741 blocks × 16); the
manual-value canary runs the approved 12 GiB = 9,830 blocks (12 GiB // 1,310,720 B) = 157,280 tokens.
"""

import csv
import glob
import io
import json
from datetime import datetime

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import _print_json, main
from kvplan.columns import LOAD_ROW_KEYS as ROW_KEYS
from kvplan.io.load import LoadSource, read_load_evidence
from kvplan.load import (
    capacity_loss,
    load_checks,
    load_summary,
    load_timeline,
    run_preemptions,
)
from tests.load_rows import load_reading, load_row

LOAD = DATA_DIR / "load"
PROFILED_TOKENS = 9_741 * 16  # 155,856
MANUAL_TOKENS = 9_830 * 16  # 157,280


def run_files(name: str) -> list[str]:
    paths = glob.glob(str(LOAD / name / "**" / "*.*"), recursive=True)
    return sorted(path for path in paths if not path.endswith(".py"))


def row(line, second, **values):
    return load_row("s.log", line, datetime(2026, 11, 27, 10, 0, second), values.pop("engine", 0), **values)


# --- timeline ---------------------------------------------------------------------------------------


def test_timeline_columns_and_index():
    reading = load_reading(
        (
            row(1, 0, kv_cache_usage_pct=50.0, preemptions=0),
            row(2, 10, kv_cache_usage_pct=99.5, preemptions=3, waiting=7),
        )
    )
    timeline = load_timeline(reading)
    assert timeline.index.name == "time"
    assert timeline.index[1] == pd.Timestamp("2026-11-27 10:00:10")
    assert list(timeline.columns) == [k for k in ROW_KEYS if k != "time"] + [
        "kind",
        "preemptions_cum",
        "elapsed_s",
    ]
    assert timeline["preemptions_cum"].tolist() == [0, 3]
    assert timeline["elapsed_s"].tolist() == [0.0, 10.0]
    assert timeline["waiting"].tolist() == [pd.NA, 7]


def test_logs_and_metrics_of_one_run_are_not_added():
    log = row(1, 10, preemptions=4)
    metric = load_row("m.prom", 1, datetime(2026, 11, 27, 10, 0, 30), 0, preemptions_total=3, kind="metrics")
    # the log saw 4, the counter 3 (scraped earlier): the same preemptions, so the run had 4, not 7
    assert run_preemptions(load_reading((log, metric))) == 4


def test_preemptions_unknown_without_evidence():
    reading = load_reading(
        (row(1, 0, kv_cache_usage_pct=5.0),), sources=(LoadSource("s.log", "log", reports_preemptions=False),)
    )
    assert run_preemptions(reading) is None


# --- summary ----------------------------------------------------------------------------------------


def test_summary_of_the_overload_run():
    summary = load_summary(read_load_evidence(run_files("manual-canary-overload")))
    assert summary["kv_cache_tokens"] == MANUAL_TOKENS
    assert summary["kv_cache_memory_bytes"] == 9_830 * 1_310_720  # 12,884,377,600 B, the manual value
    assert summary["preemptions"] == 30  # 16 before the restart + 14 after, as the counter shows
    # the gauge's peak: 7 of the 9,829 usable blocks free (block 0 is the null block) → 1 − 7/9,829
    assert summary["peak_kv_cache_usage_pct"] == 99.928782
    assert summary["peak_at"]["source"].endswith("metrics.prom")  # the log prints it rounded, 99.9 %
    assert summary["peak_kv_cache_tokens"] == 157_167  # 157,280 × 0.99928782 = 157,167.99, rounded down
    assert summary["max_waiting"] == 42
    assert summary["oom_events"] == 0
    json.dumps(summary)  # JSON-ready


def test_profiled_summary_has_no_manual_value():
    summary = load_summary(read_load_evidence(run_files("profiled-canary")))
    assert (summary["kv_cache_tokens"], summary["kv_cache_memory_bytes"]) == (PROFILED_TOKENS, None)


def test_summary_peak_tokens_round_down():
    summary = load_summary(load_reading((row(1, 0, kv_cache_usage_pct=70.1),)), kv_cache_tokens=MANUAL_TOKENS)
    assert summary["peak_kv_cache_tokens"] == 110_253  # 157,280 × 0.701 = 110,253.28


# --- gate checks ------------------------------------------------------------------------------------


def test_checks_pass_on_the_steady_manual_canary():
    checks = load_checks(
        read_load_evidence(run_files("manual-canary")),
        profiled_kv_cache_tokens=PROFILED_TOKENS,
        max_capacity_loss_pct=5,
    )
    assert [c.name for c in checks] == [
        "no OOM under load",
        "preemptions ≤ 0",
        "peak KV cache usage reported",
        "capacity vs profiled canary (loss ≤ 5%)",
    ]
    assert [c.passed for c in checks] == [True, True, True, True]
    # 157,280 − 155,856 = 1,424 tokens more than profiled: 1,424 / 155,856 = 0.914 %
    assert "gain of 1,424 tokens (0.914%)" in checks[3].detail


def test_checks_fail_where_preemptions_occur():
    checks = load_checks(read_load_evidence(run_files("manual-canary-overload")))
    preemption = checks[1]
    assert preemption.passed is False
    assert preemption.detail.startswith("30 preemption(s) in the run, first seen at ")
    assert "policy allows 0" in preemption.detail
    # a looser policy admits them
    assert load_checks(read_load_evidence(run_files("manual-canary-overload")), max_preemptions=30)[1].passed


def test_oom_fails_and_unknown_preemptions_cannot_be_judged():
    rows = (row(1, 0, kv_cache_usage_pct=99.0), row(2, 5, event="oom", raw="torch.OutOfMemoryError: CUDA …"))
    reading = load_reading(rows, sources=(LoadSource("s.log", "log", reports_preemptions=False),))
    oom, preemption, peak = load_checks(reading)
    assert oom.passed is False and "s.log:2" in oom.detail
    assert preemption.passed is None and "/metrics" in preemption.detail
    assert peak.passed is True and "99.0%" in peak.detail


def test_capacity_loss_bound():
    # a manual canary with 157,280 tokens against a profiled 163,840 (10,240 blocks): 6,560 tokens = 4.004 %
    assert capacity_loss(MANUAL_TOKENS, 163_840) == (6_560, 4.004)
    reading = load_reading((row(1, 0, kv_cache_usage_pct=10.0, preemptions=0),))
    check = load_checks(
        reading, kv_cache_tokens=MANUAL_TOKENS, profiled_kv_cache_tokens=163_840, max_capacity_loss_pct=2
    )[3]
    assert check.passed is False and "loss of 6,560 tokens (4.004%)" in check.detail
    unknown = load_checks(reading, profiled_kv_cache_tokens=163_840)[3]
    assert unknown.passed is None


# --- the command ------------------------------------------------------------------------------------


def test_cli_json_rows(capsys):
    paths = run_files("manual-canary-overload")
    assert main(["load", *paths, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"rows", "warnings"}
    assert all(list(r) == list(ROW_KEYS) for r in data["rows"])
    assert [r["source"] for r in data["rows"]] == sorted(r["source"] for r in data["rows"])  # file order
    preempted = [r for r in data["rows"] if r["source"].endswith("server.log") and r["preemptions"]]
    assert sum(r["preemptions"] for r in preempted) == 30
    assert any("restarted" in w for w in data["warnings"])


def test_cli_csv_and_table(capsys):
    log = str(LOAD / "manual-canary" / "server.log")
    assert main(["load", log, "--year", "2026", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == list(ROW_KEYS)
    assert rows[0]["time"] == "2026-11-27T09:33:08" and rows[0]["swapped"] == ""
    assert main(["load", log]) == 0
    captured = capsys.readouterr()
    assert "preemptions          0" in captured.out
    assert "carry no year" in captured.err


def test_cli_bad_file(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("nothing from vLLM here\n")
    assert main(["load", str(notes)]) == 2
    assert "no vLLM stats line" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--json", "--csv"]])
def test_cli_json_and_csv_exclude_each_other(flags):
    with pytest.raises(SystemExit):
        main(["load", "x.log", *flags])


# --- throughput means per evidence kind ------------------------------------------------------------


def test_throughput_means_do_not_mix_logs_and_metrics():
    # two 10 s log intervals at 1,000 and 600 tok/s; two scrapes 60 s apart give one rate of 780 tok/s
    rows = (
        row(1, 10, generation_tokens_per_s=1000.0, prompt_tokens_per_s=200.0),
        row(2, 20, generation_tokens_per_s=600.0, prompt_tokens_per_s=0.0),
        load_row("m.prom", 1, datetime(2026, 11, 27, 10, 0, 0), 0, kind="metrics"),
        load_row(
            "m.prom",
            40,
            datetime(2026, 11, 27, 10, 1, 0),
            0,
            generation_tokens_per_s=780.0,
            prompt_tokens_per_s=50.0,
            kind="metrics",
        ),
    )
    summary = load_summary(load_reading(rows))
    # the log's own figures: (1,000 + 600) / 2 = 800 and (200 + 0) / 2 = 100; mixing the 780 in would give
    # (1,000 + 600 + 780) / 3 = 793.333
    assert (summary["mean_generation_tokens_per_s"], summary["mean_prompt_tokens_per_s"]) == (800.0, 100.0)
    assert summary["throughput_from"] == "log"
    # without the log: the scrape rates weighted by the seconds they cover; here one 60 s interval
    metrics_only = load_summary(load_reading(rows[2:]))
    assert metrics_only["mean_generation_tokens_per_s"] == 780.0
    assert metrics_only["throughput_from"] == "metrics"


def test_cli_log_utc_offset(capsys):
    paths = run_files("manual-canary-overload")
    assert main(["load", *paths, "--json"]) == 0
    assert any("without a known offset" in w for w in json.loads(capsys.readouterr().out)["warnings"])
    # the sample servers log in UTC: offset 0 aligns them and silences the warning; +1 h moves log times
    # back an hour (10:00 local at UTC+1 is 09:00 UTC), the /metrics times stay
    assert main(["load", *paths, "--json", "--log-utc-offset", "0"]) == 0
    aligned = json.loads(capsys.readouterr().out)
    assert not any("without a known offset" in w for w in aligned["warnings"])
    assert main(["load", *paths, "--json", "--log-utc-offset", "1"]) == 0
    shifted = json.loads(capsys.readouterr().out)
    first_log = next(r for r in aligned["rows"] if r["source"].endswith("server.log") and r["time"])
    where = (first_log["source"], first_log["line"])
    moved = next(r for r in shifted["rows"] if (r["source"], r["line"]) == where)
    assert (first_log["time"], moved["time"]) == ("2026-11-27T11:03:08", "2026-11-27T10:03:08")


# --- NaN / ±Inf: unknown in rows, summary and JSON ---------------------------------------------------


def _strict_json(text):
    """json.loads that refuses NaN / Infinity (Python's json accepts them; JSON does not)."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_values_are_null_and_left_out_of_peaks_and_means():
    nan, inf = float("nan"), float("inf")
    rows = (
        row(1, 0, kv_cache_usage_pct=nan, generation_tokens_per_s=nan, prompt_tokens_per_s=nan),
        row(2, 10, kv_cache_usage_pct=80.0, generation_tokens_per_s=900.0, prompt_tokens_per_s=100.0),
        row(3, 20, kv_cache_usage_pct=inf, generation_tokens_per_s=1100.0, prompt_tokens_per_s=-inf),
    )
    reading = load_reading(rows)
    assert [r["kv_cache_usage_pct"] for r in reading.records()] == [None, 80.0, None]
    assert [r["prompt_tokens_per_s"] for r in reading.records()] == [None, 100.0, None]
    summary = load_summary(reading, kv_cache_tokens=MANUAL_TOKENS)
    # peak of the finite values: 80 % at line 2, 80 % of 157,280 = 125,824 tokens
    assert (summary["peak_kv_cache_usage_pct"], summary["peak_at"]["line"]) == (80.0, 2)
    assert summary["peak_kv_cache_tokens"] == 125_824
    # means of the finite log figures: (900 + 1,100) / 2 = 1,000; prompt 100 alone
    assert (summary["mean_generation_tokens_per_s"], summary["mean_prompt_tokens_per_s"]) == (1000.0, 100.0)
    json.dumps({"rows": reading.records(), "summary": summary}, allow_nan=False)
    assert load_checks(reading)[2].passed is True  # the peak check reports 80.0 %


def test_cli_json_has_no_nan_for_non_finite_metrics(tmp_path, capsys):
    # vLLM V1 exposition with NaN / +Inf samples (legal Prometheus values) in two scrapes 10 s apart
    prom = tmp_path / "nan.prom"
    labels = 'engine="0",model_name="m"'
    prom.write_text(
        "# 2026-11-29T10:00:00Z\n"
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} NaN\n"  # line 4
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.25\n"
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        f"vllm:prompt_tokens_total{{{labels}}} 100.0\n"
        "# 2026-11-29T10:00:10Z\n"  # line 11
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} 2.0\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} NaN\n"  # line 17
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        f"vllm:prompt_tokens_total{{{labels}}} +Inf\n"  # line 20
    )
    assert main(["load", str(prom), "--json"]) == 0
    data = _strict_json(capsys.readouterr().out)
    assert [(r["running"], r["kv_cache_usage_pct"], r["prompt_tokens_per_s"]) for r in data["rows"]] == [
        (None, 25.0, None),
        (2, None, None),
    ]
    assert [w.split(" (")[0] for w in data["warnings"]] == [
        f"{prom}:4: vllm:num_requests_running is NaN",
        f"{prom}:17: vllm:kv_cache_usage_perc is NaN",
        f"{prom}:20: vllm:prompt_tokens_total is +Inf",
    ]
    assert main(["load", str(prom)]) == 0  # the table and summary too
    assert "peak KV cache usage  25.0%" in capsys.readouterr().out


def test_cli_json_prints_non_finite_floats_as_null(capsys):
    assert _print_json({"a": float("nan"), "b": [1.5, float("-inf")], "c": {"d": float("inf")}}) == 0
    assert _strict_json(capsys.readouterr().out) == {"a": None, "b": [1.5, None], "c": {"d": None}}


def test_comparison_table_and_capacity_headline_of_the_sample_canaries():
    from kvplan.load import COMPARISON_ROWS, canary_capacity_headline, load_comparison_table

    load_dir = DATA_DIR / "load"
    profiled = load_summary(read_load_evidence([load_dir / "profiled-canary" / "server.log"]))
    canary = load_summary(read_load_evidence([load_dir / "manual-canary" / "server.log"]))
    table = load_comparison_table({"profiled": profiled, "canary": canary})
    assert list(table.index) == list(COMPARISON_ROWS) and list(table.columns) == ["profiled", "canary"]
    assert table.loc["kv_cache_tokens"].tolist() == [155_856, 157_280]
    headline = canary_capacity_headline(profiled, canary)
    assert headline["manual-value canary"] == "157,280 tokens (--kv-cache-memory-bytes=12884377600)"
    assert headline["capacity change"].startswith("gain of 1,424 tokens")
    with pytest.raises(ValueError, match="profiled canary"):
        canary_capacity_headline({**profiled, "kv_cache_tokens": None}, canary)
