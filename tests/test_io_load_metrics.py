"""Saved /metrics snapshots: names V0 and V1, engine labels, scrape splitting, rates and counter resets.

The expositions are written in prometheus_client's text format with vLLM's names and HELP texts
(shared/vllm-load-formats.md §6); every expected rate is worked out in a comment.
"""

import glob
import importlib.util
import itertools
import json
import re
import sys
from datetime import datetime

import pytest

from kvplan import DATA_DIR
from kvplan.io.load import LoadFormatError
from kvplan.io.load.metrics import (
    is_metrics_lines,
    parse_metrics_snapshots,
    parse_metrics_text,
    read_metrics_snapshots,
    split_scrapes,
)
from kvplan.load import load_timeline, run_preemptions
from tests.load_rows import rows_of

MODEL = 'model_name="meta-llama/Llama-3.1-70B-Instruct"'


def v1_scrape(
    stamp: str,
    running: int,
    waiting: int,
    usage: float,
    prompt: float,
    generation: float,
    preemptions: float,
    hits: float = 0.0,
    queries: float = 0.0,
    engine: str = "0",
    created: str = "1.7952345e+09",
) -> str:
    """One V1 (0.9.2+) scrape with a time comment, `_created` gauges included as V1 exports them.

    A value given as text (``"NaN"``, ``"+Inf"``, ``"-Inf"``: prometheus_client's spelling) is written as is.
    """
    labels = f'engine="{engine}",{MODEL}'
    lines = [f"# {stamp}"]
    families = [
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage),
        ("vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine.", preemptions),
        ("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", prompt),
        ("vllm:generation_tokens", "counter", "Number of generation tokens processed.", generation),
        (
            "vllm:prefix_cache_hits",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            hits,
        ),
        (
            "vllm:prefix_cache_queries",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            queries,
        ),
    ]
    for name, kind, text, value in families:
        exposed = f"{name}_total" if kind == "counter" else name
        lines += [
            f"# HELP {exposed} {text}",
            f"# TYPE {exposed} {kind}",
            f"{exposed}{{{labels}}} {value if isinstance(value, str) else float(value)}",
        ]
        if kind == "counter":
            lines += [
                f"# HELP {name}_created {text}",
                f"# TYPE {name}_created gauge",
                f"{name}_created{{{labels}}} {created}",
            ]
    return "\n".join(lines) + "\n"


def test_one_v1_scrape_ignores_created():
    text = v1_scrape("2026-11-29T10:00:00Z", 23, 41, 0.984, 1000, 500, 7)
    [scrape] = parse_metrics_text(text, "one.prom")
    assert scrape.time == datetime(2026, 11, 29, 10, 0, 0)
    assert not any(name.endswith("_created") for name in scrape.values[0])
    [row] = rows_of(parse_metrics_snapshots([("one.prom", text)]))
    d = row.to_dict()
    # 0.984 → 98.4 %; one scrape: no interval, so no rates and no per-interval preemptions
    assert (d["kv_cache_usage_pct"], d["running"], d["waiting"], d["engine"]) == (98.4, 23, 41, 0)
    assert (d["prompt_tokens_per_s"], d["preemptions"], d["preemptions_total"]) == (None, None, 7)


def test_many_scrapes_rates_and_counter_reset():
    text = (
        v1_scrape("2026-11-29T10:00:00Z", 20, 0, 0.50, 10_000, 2_000, 5, hits=100, queries=10_000)
        + v1_scrape("2026-11-29T10:00:30Z", 22, 4, 0.97, 70_000, 26_000, 9, hits=700, queries=70_000)
        # the server restarted: every counter starts again from zero, created anew (issue 28: without a new
        # _created time a counter that goes down is no restart but scrapes that disagree)
        + v1_scrape(
            "2026-11-29T10:01:30Z",
            3,
            0,
            0.10,
            12_000,
            600,
            2,
            hits=0,
            queries=12_000,
            created="1.7952346e+09",
        )
    )
    reading = parse_metrics_snapshots([("run.prom", text)])
    rows = [row.to_dict() for row in rows_of(reading)]
    # a scrape is 40 lines (its time comment, 3 gauges × 3 lines, 5 counters × 6 with `_created`)
    assert [row["line"] for row in rows] == [1, 41, 81]
    # prompt (70,000 − 10,000) / 30 s = 2,000 tok/s; after the reset 12,000 / 60 s = 200 tok/s, never negative
    assert [row["prompt_tokens_per_s"] for row in rows] == [None, 2000.0, 200.0]
    # generation (26,000 − 2,000) / 30 = 800; 600 / 60 = 10
    assert [row["generation_tokens_per_s"] for row in rows] == [None, 800.0, 10.0]
    # hits 600 of 60,000 queried tokens = 1 %; after the reset 0 of 12,000
    assert [row["prefix_cache_hit_pct"] for row in rows] == [None, 1.0, 0.0]
    assert [row["preemptions"] for row in rows] == [None, 4, 2]
    assert [row["preemptions_total"] for row in rows] == [5, 9, 2]
    # the run total: 5 before the first scrape + 4 + 2 after the restart = 11
    assert load_timeline(reading)["preemptions_cum"].tolist() == [5, 9, 11]
    assert run_preemptions(reading) == 11
    assert any("run.prom:81: counters went down" in w for w in reading.warnings)


def test_scrapes_split_by_repeated_help_without_time():
    one = v1_scrape("x", 1, 0, 0.1, 10, 10, 0).split("\n", 1)[1]  # drop the comment line
    reading = parse_metrics_snapshots([("twice.prom", one + one)])
    assert (
        len(rows_of(reading)) == 2 and rows_of(reading)[1].line == 40
    )  # 39 lines per scrape without the comment
    assert rows_of(reading)[1].prompt_tokens_per_s is None  # no times, no rates
    assert any("without a time" in w for w in reading.warnings)


def test_federate_dump_with_sample_timestamps_and_two_engines():
    # /federate output: TYPE untyped, no HELP, timestamps in ms, extra labels, one series per DP engine
    text = "".join(
        f"# TYPE vllm:num_requests_running untyped\n"
        f'vllm:num_requests_running{{engine="0",{MODEL},instance="a:8000",job="vllm"}} {r0} {ms}\n'
        f'vllm:num_requests_running{{engine="1",{MODEL},instance="a:8000",job="vllm"}} {r1} {ms}\n'
        f"# TYPE vllm:num_preemptions_total untyped\n"
        f'vllm:num_preemptions_total{{engine="1",{MODEL},instance="a:8000",job="vllm"}} {p1} {ms}\n'
        for ms, r0, r1, p1 in [(1795511850000, 4.0, 6.0, 0.0), (1795511880000, 5.0, 7.0, 3.0)]
    )
    rows = rows_of(parse_metrics_snapshots([("fed.prom", text)]))
    # 1795511850 s = 2026-11-24T09:17:30Z; one row per scrape and engine
    assert [(r.time.isoformat(), r.engine, r.running, r.preemptions) for r in rows] == [
        ("2026-11-24T09:17:30", 0, 4, None),
        ("2026-11-24T09:17:30", 1, 6, None),
        ("2026-11-24T09:18:00", 0, 5, None),
        ("2026-11-24T09:18:00", 1, 7, 3),
    ]


V0_SCRAPE = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="9830",swap_space="4"} 1.0
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama"} 12.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="llama"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama"} 4.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="llama"} 0.971
# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="llama"} -1.0
# HELP vllm:avg_prompt_throughput_toks_per_s Average prefill throughput in tokens/s.
# TYPE vllm:avg_prompt_throughput_toks_per_s gauge
vllm:avg_prompt_throughput_toks_per_s{model_name="llama"} 0.0
# HELP vllm:avg_generation_throughput_toks_per_s Average generation throughput in tokens/s.
# TYPE vllm:avg_generation_throughput_toks_per_s gauge
vllm:avg_generation_throughput_toks_per_s{model_name="llama"} 210.3
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="llama"} 51.0
"""


def test_v0_names():
    reading = parse_metrics_snapshots([("v0.prom", V0_SCRAPE)])
    d = rows_of(reading)[0].to_dict()
    # gpu_cache_usage_perc 0.971 → 97.1 %; the avg_* gauges are rates already; −1 = prefix caching off
    assert (d["engine"], d["kv_cache_usage_pct"], d["swapped"], d["waiting"]) == (None, 97.1, 1, 4)
    assert d["generation_tokens_per_s"] == 210.3
    assert (d["prefix_cache_hit_pct"], d["preemptions_total"]) == (None, 51)
    # cache_config_info: 9,830 blocks × 16 = 157,280 tokens
    assert reading.sources[0].kv_cache_tokens == 157_280


def test_is_metrics_lines():
    assert is_metrics_lines(V0_SCRAPE.splitlines())
    assert is_metrics_lines(('vllm:num_requests_running{engine="0"} 3.0\n').splitlines())
    assert not is_metrics_lines(
        ("(APIServer pid=1) INFO 11-29 10:00:10 [loggers.py:310] Engine 000: …\n").splitlines()
    )


def test_is_metrics_text_when_a_later_sample_is_vllm():
    # a V1 dump with its # HELP / # TYPE lines stripped (grep -v '^#'): prometheus_client's own python_* and
    # process_* families come first, the vllm: ones later
    stripped = (
        'python_gc_objects_collected_total{generation="0"} 12345.0\n'
        'python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0\n'
        "process_cpu_seconds_total 10.5\n"
        f'vllm:num_requests_running{{engine="0",{MODEL}}} 3.0\n'
    )
    assert is_metrics_lines(stripped.splitlines())
    [row] = rows_of(parse_metrics_snapshots([("stripped.prom", stripped)]))
    assert (row.engine, row.running) == (0, 3)
    # samples without any vllm: name, or a log line after a well-formed sample, are not a vLLM dump
    assert not is_metrics_lines(("node_load1 0.5\nnode_load5 0.25\n").splitlines())
    assert not is_metrics_lines(
        ("python_info 1.0\nINFO 11-29 10:00:10 [loggers.py:310] vllm: started\n").splitlines()
    )


def test_split_scrapes_drops_a_time_comment_without_samples():
    chunks = split_scrapes("# 1795511850\n# 2026-11-24T09:18:00+02:00\nvllm:x 1.0\n")
    # the first time comment has no sample after it and is dropped; the second, +02:00, is 07:18 UTC
    assert [(line, stamp) for line, stamp, _ in chunks] == [(2, datetime(2026, 11, 24, 7, 18))]


def test_malformed_line_names_file_and_line():
    with pytest.raises(LoadFormatError, match=r"bad\.prom:3: not Prometheus text exposition"):
        parse_metrics_text('# TYPE vllm:x gauge\nvllm:x 1.0\nvllm:x{engine="0" 2.0\n', "bad.prom")


def test_a_counter_below_zero_is_refused_with_its_line(tmp_path, capsys):  # issue 28
    # every vllm:num_preemptions_total of the overload sample set to -1: read as "-1 preemption(s)" it passed
    # "preemptions ≤ 0"; the first such sample is line 30 (lines 1-29: the time comment and the families before)
    from kvplan.cli import main

    sample = (LOAD / "manual-canary-overload" / "metrics.prom").read_text(encoding="utf-8")
    negative = re.sub(r"^(vllm:num_preemptions_total\{[^}]*\}) \S+", r"\1 -1", sample, flags=re.M)
    assert negative.splitlines()[29].endswith(" -1")
    path = tmp_path / "mx.prom"
    path.write_text(negative, encoding="utf-8")
    message = f"{path}:30: vllm:num_preemptions_total is -1, below zero: a counter starts at 0 and only rises"
    with pytest.raises(LoadFormatError) as refused:
        read_metrics_snapshots([path])
    assert str(refused.value) == message
    assert main(["load", str(path)]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    # the same counter from Prometheus (a query_range answer): refused at its position, 2
    from kvplan.io.load import Sample, samples_reading

    samples = [
        Sample("vllm:num_preemptions_total", {"engine": "0"}, t, v) for t, v in ((10.0, 0.0), (20.0, -3.0))
    ]
    with pytest.raises(LoadFormatError, match=r"^prometheus:2: vllm:num_preemptions_total is -3, below zero"):
        samples_reading(samples, "prometheus")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        # 2.5 preemptions: no engine preempts half a request (read as 2 before, so 0.5 would have passed ≤ 0)
        ("2.5", "not a whole number: vLLM's counters count whole tokens and preemptions"),
        # 1e30 > 2^63 − 1: refused at its own line 30, not at the scrape's first line ("mx.prom:1" before)
        ("1e30", "beyond 9,223,372,036,854,775,807: a number too large to hold"),
    ],
)
def test_a_counter_vllm_cannot_export_names_its_line(tmp_path, value, reason):  # issue 28
    sample = (LOAD / "manual-canary-overload" / "metrics.prom").read_text(encoding="utf-8")
    edited = re.sub(r"^(vllm:num_preemptions_total\{[^}]*\}) \S+", rf"\1 {value}", sample, flags=re.M)
    path = tmp_path / "mx.prom"
    path.write_text(edited, encoding="utf-8")
    with pytest.raises(LoadFormatError) as refused:
        read_metrics_snapshots([path])
    assert str(refused.value) == f"{path}:30: vllm:num_preemptions_total is {float(value):g}, {reason}"


def test_no_vllm_metric_is_refused():
    with pytest.raises(LoadFormatError, match=r"node\.prom: no vllm: metric"):
        parse_metrics_text("# TYPE node_load1 gauge\nnode_load1 0.5\n", "node.prom")


def test_sample_one_scrape_per_file():
    paths = sorted(glob.glob(str(DATA_DIR / "load" / "manual-canary" / "metrics" / "*.prom")))
    reading = read_metrics_snapshots(paths)
    assert len(rows_of(reading)) == len(paths) == 6  # a scrape every 60 s over the run
    assert [row.source for row in rows_of(reading)] == paths
    # rates come from counters in consecutive files, 60 s apart
    assert rows_of(reading)[0].generation_tokens_per_s is None
    assert all(row.generation_tokens_per_s > 0 for row in rows_of(reading)[1:])
    assert run_preemptions(reading) == 0
    assert reading.kv_cache_tokens == 157_280


def test_sample_federate_file():
    reading = read_metrics_snapshots([DATA_DIR / "load" / "profiled-canary" / "federate.prom"])
    # the profiled boot of data/boots/four-rank: 155,856 tokens = 9,741 blocks × 16
    assert reading.kv_cache_tokens == 155_856
    times = [row.time for row in rows_of(reading)]
    assert all((b - a).total_seconds() == 30 for a, b in itertools.pairwise(times))


# --- the sample dumps are in vLLM 0.26's and Prometheus' formats ----------------------------------

LOAD = DATA_DIR / "load"


def _sample_lines(path):
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def _label_names(line):
    labels = line[line.index("{") + 1 : line.rindex("}")]
    return [part.split("=", 1)[0] for part in re.findall(r'(\w+="[^"]*")', labels)]


def test_sample_dumps_follow_vllm_0_26_and_prometheus():
    dumps = sorted(LOAD.glob("*/**/*.prom"))
    assert len(dumps) == 8  # 6 single scrapes, the overload file, the /federate file
    for path in dumps:
        lines = _sample_lines(path)
        # prometheus_client and Prometheus federation both print label names sorted
        assert all(_label_names(line) == sorted(_label_names(line)) for line in lines), path
        # vllm:engine_sleep_state is always emitted from 0.11.1: awake 1, both sleep levels 0, per scrape
        states = [line for line in lines if line.startswith("vllm:engine_sleep_state{")]
        scrapes = [line for line in lines if line.startswith("vllm:num_requests_running{")]
        assert len(states) == 3 * len(scrapes) > 0, path
        info = [line for line in lines if line.startswith("vllm:cache_config_info{")]
        # CacheConfig.metrics_info(): every field, is_attention_free among them, plus engine
        assert all(
            {"is_attention_free", "enable_prefix_caching", "sliding_window", "engine"}
            <= set(_label_names(line))
            for line in info
        ), path
    federated = (LOAD / "profiled-canary" / "federate.prom").read_text().splitlines()
    types = [line.split()[2] for line in federated if line.startswith("# TYPE")]
    first_dump = types[: types.index(types[0], 1)]
    assert first_dump == sorted(first_dump)  # /federate sorts series by metric name


def test_sample_gpu_memory_utilization_label_matches_the_boot_args():
    # the profiled canary sets --gpu-memory-utilization 0.6; the manual canaries leave it at vLLM 0.26's
    # default, 0.92 (the default since 0.20.0), which --kv-cache-memory-bytes makes vLLM ignore
    for run, expected in [
        ("profiled-canary", "0.6"),
        ("manual-canary", "0.92"),
        ("manual-canary-overload", "0.92"),
    ]:
        log = (LOAD / run / "server.log").read_text()
        stated = re.findall(r"'gpu_memory_utilization': ([\d.]+)", log)
        assert stated == ([expected] if run == "profiled-canary" else [])
        for path in (LOAD / run).glob("**/*.prom"):
            assert set(re.findall(r'gpu_memory_utilization="([^"]+)"', path.read_text())) == {expected}


def test_generator_and_sample_data_agree(tmp_path, monkeypatch):
    # data/load/make_load_samples.py writes exactly the files in data/load (run it to regenerate them)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    spec = importlib.util.spec_from_file_location("make_load_samples", LOAD / "make_load_samples.py")
    generator = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, generator)  # dataclasses look their module up there
    spec.loader.exec_module(generator)
    monkeypatch.setattr(generator, "HERE", tmp_path)
    generator.main()
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    stored = [p.relative_to(LOAD) for p in LOAD.rglob("*") if p.is_file() and p.suffix in (".log", ".prom")]
    assert written == sorted(stored)
    for relative in written:
        assert (tmp_path / relative).read_text() == (LOAD / relative).read_text(), relative


# --- NaN / ±Inf, concatenated scrapes, _created restarts, series that make no row -------------------------


def test_non_finite_samples_are_unknown_with_a_warning():
    # NaN, +Inf and -Inf are legal sample values (prometheus_client prints them so); each is read as unknown
    text = (
        # line 1: running NaN (sample on line 4), usage +Inf (line 10)
        v1_scrape("2026-11-29T10:00:00Z", "NaN", 4, "+Inf", 10_000, 2_000, 5)
        # line 41: waiting -Inf (line 41 + 6 = 47), prompt counter NaN (line 41 + 18 = 59)
        + v1_scrape("2026-11-29T10:00:30Z", 22, "-Inf", 0.5, "NaN", 26_000, 9)
        + v1_scrape("2026-11-29T10:01:30Z", 20, 1, 0.6, 70_000, 50_000, 9)  # line 81
    )
    reading = parse_metrics_snapshots([("run.prom", text)])
    rows = [row.to_dict() for row in rows_of(reading)]
    assert [row["running"] for row in rows] == [None, 22, 20]
    assert [row["waiting"] for row in rows] == [4, None, 1]
    assert [row["kv_cache_usage_pct"] for row in rows] == [None, 50.0, 60.0]
    # prompt: unknown at 10:00:30, so no increase into or out of it; generation (26,000 − 2,000) / 30 s = 800,
    # (50,000 − 26,000) / 60 s = 400
    assert [row["prompt_tokens_per_s"] for row in rows] == [None, None, None]
    assert [row["generation_tokens_per_s"] for row in rows] == [None, 800.0, 400.0]
    assert [row["preemptions"] for row in rows] == [None, 4, 0]
    notes = [w for w in reading.warnings if "not a finite number" in w]
    assert [w.split(" (")[0] for w in notes] == [
        "run.prom:4: vllm:num_requests_running is NaN",
        "run.prom:10: vllm:kv_cache_usage_perc is +Inf",
        "run.prom:47: vllm:num_requests_waiting is -Inf",
        "run.prom:59: vllm:prompt_tokens_total is NaN",
    ]
    json.dumps(reading.records(), allow_nan=False)  # strict JSON: no NaN / Infinity anywhere


def test_non_finite_sample_in_one_label_series_makes_the_sum_unknown():
    # two series of one engine (a /federate dump of two instances): 3 + NaN is unknown, not 3
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",instance="a:8000",{MODEL}}} 3.0\n'
        f'vllm:num_requests_running{{engine="0",instance="b:8000",{MODEL}}} NaN\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",instance="a:8000",{MODEL}}} 1.0\n'
    )
    reading = parse_metrics_snapshots([("fed.prom", text)])
    [row] = rows_of(reading)
    assert (row.running, row.waiting) == (None, 1)
    assert any(w.startswith("fed.prom:3: vllm:num_requests_running is NaN") for w in reading.warnings)


def _grep_vllm(scrape: str) -> str:
    """What `curl -s …/metrics | grep ^vllm:` keeps of a scrape: the vllm: samples, no comment at all."""
    return "".join(line + "\n" for line in scrape.splitlines() if line.startswith("vllm:"))


def test_concatenated_scrapes_are_split_where_a_series_repeats():
    # `curl -s …/metrics | grep ^vllm: >> dump.prom` twice: 3 gauges + 5 counters with `_created` = 13 lines
    # each, no time comment and no # HELP between; running 3 then 4 must not be summed into 7
    first = _grep_vllm(v1_scrape("x", 3, 0, 0.25, 1_000, 500, 5))
    second = _grep_vllm(v1_scrape("x", 4, 1, 0.5, 2_000, 900, 6))
    reading = parse_metrics_snapshots([("dump.prom", first + second)])
    rows = rows_of(reading)
    assert [(row.line, row.time, row.running, row.waiting) for row in rows] == [
        (1, None, 3, 0),
        (14, None, 4, 1),
    ]
    assert [row.preemptions_total for row in rows] == [5, 6]
    assert [row.preemptions for row in rows] == [None, 1]  # 6 − 5, in the order given
    assert rows[1].generation_tokens_per_s is None  # no times, no rates
    assert any(
        w.startswith("dump.prom:14: the scrapes had no timestamps and were split where a series repeated")
        for w in reading.warnings
    )
    # after a time comment the first scrape has its time; the repeated one (line 2 + 13 = 15) has none
    timed = rows_of(parse_metrics_snapshots([("dump.prom", "# 2026-11-29T10:00:00Z\n" + first + second)]))
    assert [(row.line, row.time) for row in timed] == [(1, datetime(2026, 11, 29, 10)), (15, None)]


def test_series_at_two_sample_timestamps_is_not_a_repeat():
    # a /federate-style dump without TYPE lines: the same series at 1795946400000 ms (10:00:00Z) and
    # 30 s later is two timed scrapes, not a concatenation
    text = (
        f'vllm:generation_tokens_total{{engine="0",{MODEL}}} 1000.0 1795946400000\n'
        f'vllm:generation_tokens_total{{engine="0",{MODEL}}} 4000.0 1795946430000\n'
    )
    reading = parse_metrics_snapshots([("fed.prom", text)])
    # (4,000 − 1,000) / 30 s = 100 tok/s
    assert [row.generation_tokens_per_s for row in rows_of(reading)] == [None, 100.0]
    assert not any("split where a series repeated" in w for w in reading.warnings)


def test_changed_created_time_is_a_restart_even_when_counters_grew():
    # the server started at 09:00:00Z (1795942800 = 1.7959428e+09), restarted at 10:05:00Z (1.7959467e+09)
    # between two scrapes 600 s apart; by 10:10:00Z its new counters had grown past the old values
    text = v1_scrape(
        "2026-11-29T10:00:00Z",
        20,
        0,
        0.5,
        10_000,
        2_000,
        5,
        hits=100,
        queries=10_000,
        created="1.7959428e+09",
    ) + v1_scrape(
        "2026-11-29T10:10:00Z",
        20,
        0,
        0.5,
        70_000,
        62_000,
        8,
        hits=7_000,
        queries=70_000,
        created="1.7959467e+09",
    )
    reading = parse_metrics_snapshots([("run.prom", text)])
    rows = rows_of(reading)
    # counted from zero: prompt 70,000 / 600 s = 116.667 (not (70,000 − 10,000) / 600 = 100),
    # generation 62,000 / 600 = 103.333 (not 100), preemptions 8 (not 3), hits 7,000 of 70,000 = 10 %
    # (not 6,900 of 60,000 = 11.5 %)
    assert rows[1].prompt_tokens_per_s == 116.667
    assert rows[1].generation_tokens_per_s == 103.333
    assert (rows[1].preemptions, rows[1].prefix_cache_hit_pct) == (8, 10.0)
    assert run_preemptions(reading) == 13  # 5 before the first scrape + 8 since the restart
    [note] = [w for w in reading.warnings if "restarted" in w]
    assert note.startswith("run.prom:41: counters were created anew since the previous scrape")
    assert "vllm:num_preemptions_total" in note and "_created time changed" in note


def test_unchanged_created_time_keeps_the_increase():
    # the same _created time in both scrapes: no restart, increases as before
    text = v1_scrape("2026-11-29T10:00:00Z", 20, 0, 0.5, 10_000, 2_000, 5) + v1_scrape(
        "2026-11-29T10:10:00Z", 20, 0, 0.5, 70_000, 62_000, 8
    )
    reading = parse_metrics_snapshots([("run.prom", text)])
    # (62,000 − 2,000) / 600 s = 100; 8 − 5 = 3
    assert (rows_of(reading)[1].generation_tokens_per_s, rows_of(reading)[1].preemptions) == (100.0, 3)
    assert not any("restarted" in w for w in reading.warnings)


def test_series_without_an_engine_and_without_row_fields_make_no_row():
    # V1's LoRA info gauge has no engine label (its value is a Unix time); it is no field of a row
    text = (
        "# 2026-11-29T10:00:00Z\n"
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",{MODEL}}} 3.0\n'
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        "# TYPE vllm:lora_requests_info gauge\n"
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="alpaca",waiting_lora_adapters=""} '
        "1.789828498802105e+09\n"
    )
    rows = rows_of(parse_metrics_snapshots([("lora.prom", text)]))
    assert [(row.engine, row.running) for row in rows] == [(0, 3)]


def test_integer_sample_values_read_as_floats():
    # vLLM 0.2.x (aioprometheus) wrote values without ".0"; prometheus_client's parser returns an int for them
    text = (
        "# TYPE vllm:avg_generation_throughput_toks_per_s gauge\n"
        'vllm:avg_generation_throughput_toks_per_s{model_name="m"} 120\n'
    )
    [row] = rows_of(parse_metrics_snapshots([("v0.prom", text)]))
    assert json.dumps(row.to_dict()["generation_tokens_per_s"]) == "120.0"


def test_kv_usage_outside_zero_to_one_is_unknown_with_a_warning():
    # issue 11 item 21: a /metrics KV usage of -5 read as -500 %
    # vLLM exports KV usage as a 0–1 fraction (1 − free blocks / blocks, BlockPool.get_usage), so -5 (what a
    # broken exporter or a hand edit gives) or 1.5 cannot come from vLLM: unknown, never -500 % or 150 %
    text = (
        v1_scrape("2026-11-29T10:00:00Z", 2, 0, -5, 0, 0, 0)  # usage sample on line 10
        + v1_scrape("2026-11-29T10:00:30Z", 2, 0, 1.5, 0, 0, 0)  # line 41 + 9 = 50
        + v1_scrape("2026-11-29T10:01:00Z", 2, 0, 1.0, 0, 0, 0)
    )  # 1 = 100 %: full, and possible
    reading = parse_metrics_snapshots([("bad.prom", text)])
    assert [row.kv_cache_usage_pct for row in rows_of(reading)] == [None, None, 100.0]
    notes = [w for w in reading.warnings if "outside 0–1" in w]
    assert [(note.code, note.line) for note in notes] == [
        ("kv-usage-out-of-range", 10),
        ("kv-usage-out-of-range", 50),
    ]
    assert notes[0].startswith("bad.prom:10: vllm:kv_cache_usage_perc is -5")
