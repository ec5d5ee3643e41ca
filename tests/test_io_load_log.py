"""The server-log reader pins every stats-line form, the preemption warning, OOM/error events and tolerances.

Each message below is written from the format strings in shared/vllm-load-formats.md (§2–§5), with numbers
chosen by hand; each expected value is read straight off the line it comes from.
"""

import re
from datetime import datetime

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.io.load import (
    LoadFormatError,
    parse_stats_message,
    parse_stats_text,
    read_load_evidence,
    read_vllm_stats,
)
from kvplan.load import load_timeline, run_preemptions
from tests.load_rows import rows_of

V1 = "(APIServer pid=7) INFO 11-29 10:{:02d}:{:02d} [loggers.py:{}] "


def v1_line(minute: int, second: int, message: str, lineno: int = 310) -> str:
    return V1.format(minute, second, lineno) + message


# --- one stats message per form -----------------------------------------------------------------

FORMS = {
    # ≤0.2.x and 0.3.x–0.4.1: f-strings, no trailing period
    "v0 0.2-0.4.1": (
        "Avg prompt throughput: 1024.4 tokens/s, Avg generation throughput: 126.3 tokens/s, Running: 5 reqs, "
        "Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 3.1%, CPU KV cache usage: 0.0%",
        {
            "prompt_tokens_per_s": 1024.4,
            "generation_tokens_per_s": 126.3,
            "running": 5,
            "swapped": 0,
            "waiting": 2,
            "kv_cache_usage_pct": 3.1,
            "engine": None,
            "form": "v0",
        },
    ),
    # ≥0.4.3: %-format with the trailing period; the CPU value (swap space) is not the KV usage
    "v0 0.4.3+": (
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 210.3 tokens/s, Running: 12 reqs, "
        "Swapped: 1 reqs, Pending: 4 reqs, GPU KV cache usage: 97.1%, CPU KV cache usage: 2.5%.",
        {
            "prompt_tokens_per_s": 0.0,
            "generation_tokens_per_s": 210.3,
            "running": 12,
            "swapped": 1,
            "waiting": 4,
            "kv_cache_usage_pct": 97.1,
            "engine": None,
            "form": "v0",
        },
    ),
    # a patched V0 build with extra fields (vllm#2731)
    "v0 patched": (
        "Avg prompt throughput: 382.6 tokens/s, Avg generation throughput: 118.5 tokens/s, Max "
        "iteration time: "
        "386.7 ms, Avg time/tok:149.4 ms, Running: 35 reqs, Swapped: 0 reqs, Pending: 115 reqs, GPU KV cache "
        "usage: 99.0%, CPU KV cache usage: 0.0%",
        {"running": 35, "waiting": 115, "kv_cache_usage_pct": 99.0, "swapped": 0},
    ),
    # 0.7.0: two fields only
    "v1 0.7.0": ("Running: 4 reqs, Waiting: 0 reqs ", {"running": 4, "waiting": 0, "form": "v1"}),
    # 0.7.1–0.7.2: no comma after "Waiting: N reqs", trailing period
    "v1 0.7.1": (
        "Avg prompt throughput: 512.0 tokens/s, Avg generation throughput: 96.3 tokens/s, Running: 4 reqs, "
        "Waiting: 1 reqs GPU KV cache usage: 5.2%.",
        {"running": 4, "waiting": 1, "kv_cache_usage_pct": 5.2, "generation_tokens_per_s": 96.3},
    ),
    # 0.7.3–0.8.2: adds the prefix cache hit rate
    "v1 0.7.3": (
        "Avg prompt throughput: 512.0 tokens/s, Avg generation throughput: 96.3 tokens/s, Running: 4 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 5.2%, Prefix cache hit rate: 12.5%",
        {"kv_cache_usage_pct": 5.2, "prefix_cache_hit_pct": 12.5, "engine": None},
    ),
    # 0.8.3–0.11.0: "Engine %03d: "
    "v1 0.8.3": (
        "Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 880.0 tokens/s, "
        "Running: "
        "28 reqs, Waiting: 0 reqs, GPU KV cache usage: 61.0%, Prefix cache hit rate: 0.0%",
        {"engine": 1, "running": 28, "kv_cache_usage_pct": 61.0},
    ),
    # 0.11.1–0.19: Preemptions only when > 0 in the interval
    "v1 0.11.1 preemptions": (
        "Engine 000: Avg prompt throughput: 6531.3 tokens/s, Avg generation throughput: 806.4 tokens/s, "
        "Running: "
        "23 reqs, Waiting: 41 reqs, Preemptions: 2, GPU KV cache usage: 98.4%, Prefix cache hit rate: 0.0%",
        {"engine": 0, "waiting": 41, "preemptions": 2, "kv_cache_usage_pct": 98.4},
    ),
    # 0.20–0.29: Deferred after Waiting (already counted in Waiting)
    "v1 0.20 deferred": (
        "Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, "
        "Running: "
        "3 reqs, Waiting: 5 reqs, Deferred: 2 reqs, GPU KV cache usage: 9.9%, Prefix cache hit rate: 1.0%",
        {"waiting": 5, "kv_cache_usage_pct": 9.9, "prefix_cache_hit_pct": 1.0},
    ),
    # 0.30: the device name in front of "KV cache usage"
    "v1 0.30 device": (
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.5 tokens/s, Running: "
        "1 reqs, Waiting: 0 reqs, XPU KV cache usage: 0.7%, Prefix cache hit rate: 0.0%",
        {"kv_cache_usage_pct": 0.7},
    ),
    # 0.31+: KV usage right after Waiting, then Preemptions; external hit rate must not be read as ours
    "v1 0.31 order": (
        "Engine 002: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 300.0 tokens/s, "
        "Running: "
        "9 reqs, Waiting: 2 reqs, GPU KV cache usage: 88.8%, Preemptions: 3, Prefix cache hit rate: 20.0%, "
        "External prefix cache hit rate: 75.0%",
        {"engine": 2, "kv_cache_usage_pct": 88.8, "preemptions": 3, "prefix_cache_hit_pct": 20.0},
    ),
    # --aggregate-engine-logging: no single engine
    "v1 aggregated": (
        "2 Engines Aggregated: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 40.0 "
        "tokens/s, "
        "Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.5%, Prefix cache hit rate: 0.0%",
        {"engine": None, "running": 2},
    ),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_stats_message_forms(form):
    message, expected = FORMS[form]
    fields = parse_stats_message(message)
    assert {key: fields.get(key) for key in expected} == expected


# the record header each form was printed with: ≤0.7.x without brackets, 0.8+ with; the stats call's line
# number per release from the formats file (0.7.0's is not listed, so its line is a bare message)
HEADERS = {
    "v0 0.2-0.4.1": "INFO 11-29 10:00:10 metrics.py:229] ",
    "v0 0.4.3+": "INFO 11-29 10:00:10 metrics.py:467] ",
    "v0 patched": "INFO 11-29 10:00:10 llm_engine.py:921] ",
    "v1 0.7.0": "",
    "v1 0.7.1": "INFO 11-29 10:00:10 loggers.py:69] ",
    "v1 0.7.3": "INFO 11-29 10:00:10 loggers.py:78] ",
    "v1 0.8.3": "INFO 11-29 10:00:10 [loggers.py:87] ",
    "v1 0.11.1 preemptions": "(APIServer pid=7) INFO 11-29 10:00:10 [loggers.py:236] ",
    "v1 0.20 deferred": "(APIServer pid=7) INFO 11-29 10:00:10 [loggers.py:271] ",
    "v1 0.30 device": "(APIServer pid=7) INFO 11-29 10:00:10 [loggers.py:315] ",
    "v1 0.31 order": "(APIServer pid=7) INFO 11-29 10:00:10 [loggers.py:320] ",
    "v1 aggregated": "(APIServer pid=7) INFO 11-29 10:00:10 [loggers.py:259] ",
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_timeline_row_per_form(form):
    message, expected = FORMS[form]
    reading = parse_stats_text(HEADERS[form] + message, f"{form}.log", year=2026)
    timeline = load_timeline(reading)
    assert len(timeline) == 1
    row = timeline.iloc[0]
    for key, value in expected.items():
        if key != "form":
            assert pd.isna(row[key]) if value is None else row[key] == value, key
    timed = bool(HEADERS[form])
    assert (timeline.index[0] == pd.Timestamp("2026-11-29 10:00:10")) if timed else pd.isna(timeline.index[0])
    # the interval's preemptions: stated, 0 when the release omits a zero (0.11.1+, loggers.py ≥ 236),
    # unknown for V0 lines and older V1 lines
    lineno = re.search(r"loggers\.py:(\d+)", HEADERS[form])
    if lineno and int(lineno.group(1)) >= 236:
        assert row["preemptions"] == expected.get("preemptions", 0)
    else:
        assert pd.isna(row["preemptions"])


def test_not_a_stats_message():
    assert parse_stats_message("Prefix cache hit rate: GPU: 12.34%, CPU: 0.00%") is None
    assert parse_stats_message("Dumping scheduler stats: SchedulerStats(num_running_reqs=3, …)") is None


# --- whole logs -------------------------------------------------------------------------------------

V0_LOG = """\
INFO 11-29 10:00:05 metrics.py:467] Avg prompt throughput: 2048.0 tokens/s, Avg generation throughput: 96.0 \
tokens/s, Running: 8 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 40.5%, CPU KV cache\
 usage: 0.0%.
INFO 11-29 10:00:05 metrics.py:483] Prefix cache hit rate: GPU: 12.34%, CPU: 0.00%
WARNING 11-29 10:00:07 scheduler.py:1560] Sequence group 17 is preempted by PreemptionMode.RECOMPUTE\
 mode because \
there is not enough KV cache space. This can affect the end-to-end performance. Increase\
 gpu_memory_utilization or \
tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1
INFO 11-29 10:00:10 metrics.py:467] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 310.2 \
tokens/s, Running: 11 reqs, Swapped: 0 reqs, Pending: 6 reqs, GPU KV cache usage: 99.2%, CPU KV cache\
 usage: 0.0%.
WARNING 11-29 10:00:13 scheduler.py:1560] Sequence group 90 is preempted by PreemptionMode.SWAP mode because \
there is not enough KV cache space. This can affect the end-to-end performance. Increase\
 gpu_memory_utilization or \
tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51
ERROR 11-29 10:00:14 engine.py:160] OutOfMemoryError('CUDA out of memory. Tried to allocate 150.00 MiB.\
 GPU 0 has \
a total capacity of 79.14 GiB of which 112.75 MiB is free.')
ERROR 11-29 10:00:14 engine.py:160] Traceback (most recent call last):
ERROR 11-29 10:00:14 engine.py:160]   File\
 "/usr/lib/python3/site-packages/vllm/engine/multiprocessing/engine.py"
ERROR 11-29 10:00:14 engine.py:160] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB.
INFO 11-29 10:00:20 launcher.py:57] Shutting down FastAPI HTTP server.
"""


def test_v0_log_timeline():
    reading = parse_stats_text(V0_LOG, "v0.log", year=2026)
    rows = [row.to_dict() for row in rows_of(reading)]
    assert [(r["line"], r["event"]) for r in rows] == [
        (1, None),
        (3, "preemption"),
        (4, None),
        (5, "preemption"),
        (6, "oom"),
    ]
    assert rows[0]["prefix_cache_hit_pct"] == 12.34  # the companion line's GPU value
    assert rows[0]["time"] == "2026-11-29T10:00:05"
    assert rows[0]["preemptions"] is None  # V0 stats lines carry no preemption count
    assert [r["preemptions_total"] for r in rows] == [None, 1, None, 51, None]
    timeline = load_timeline(reading)
    # the warning's total is exact where printed and carried forward: 1 at line 3, 51 at line 5
    assert timeline["preemptions_cum"].tolist() == [pd.NA, 1, 1, 51, 51]
    assert run_preemptions(reading) == 51
    assert any("51st" in w for w in reading.warnings)


def test_oom_block_is_one_event():
    # four ERROR records in a row (the exception and its traceback) are one OOM, not four
    reading = parse_stats_text(V0_LOG, "v0.log", year=2026)
    assert sum(row.event == "oom" for row in rows_of(reading)) == 1


V1_CRASH = """\
(APIServer pid=1) INFO 11-29 10:00:10 [loggers.py:310] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg \
generation throughput: 1020.0 tokens/s, Running: 30 reqs, Waiting: 0 reqs, GPU KV cache usage: 92.0%,\
 Prefix cache \
hit rate: 0.0%
(EngineCore pid=9) ERROR 11-29 10:00:12 [dump_input.py:72] Dumping input data for V1 LLM engine\
 (v0.26.0) with \
config: model='meta-llama/Llama-3.1-70B-Instruct'
(EngineCore pid=9) ERROR 11-29 10:00:12 [dump_input.py:79] Dumping scheduler stats: SchedulerStats(\
num_running_reqs=31, num_waiting_reqs=2, step_counter=0, kv_cache_usage=0.9375, prefix_cache_stats=None)
(EngineCore pid=9) ERROR 11-29 10:00:12 [core.py:868] EngineCore encountered a fatal error.
(EngineCore pid=9) ERROR 11-29 10:00:12 [core.py:868] torch.OutOfMemoryError: CUDA out of memory. Tried to \
allocate 2.00 GiB.
(APIServer pid=1) ERROR 11-29 10:00:12 [async_llm.py:480] AsyncLLM output_handler failed.
(APIServer pid=1) INFO:     Shutting down
"""


def test_v1_crash_is_one_oom_event_with_last_state():
    rows = rows_of(parse_stats_text(V1_CRASH, "crash.log", year=2026))
    assert [(row.line, row.event) for row in rows] == [(1, None), (2, "oom")]
    crash = rows[1]
    # SchedulerStats(num_running_reqs=31, num_waiting_reqs=2, kv_cache_usage=0.9375) → 93.75 %
    assert (crash.running, crash.waiting, crash.kv_cache_usage_pct) == (31, 2, 93.75)
    assert crash.raw.startswith("torch.OutOfMemoryError: CUDA out of memory")  # the evidence quoted


def test_error_without_oom():
    text = "(APIServer pid=1) ERROR 11-29 10:00:12 [serving_chat.py:201] Error in preprocessing prompt inputs"
    assert [row.event for row in rows_of(parse_stats_text(text, "e.log"))] == ["error"]


DP_LOG = "\n".join(
    [
        v1_line(
            0,
            10,
            "Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 50.0 "
            "tokens/s, "
            "Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, Prefix cache hit rate: 0.0%",
        ),
        v1_line(
            0,
            10,
            "Engine 001: Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 50.0 "
            "tokens/s, "
            "Running: 3 reqs, Waiting: 1 reqs, Preemptions: 2, GPU KV cache usage: 99.0%, Prefix cache "
            "hit rate: "
            "0.0%",
        ),
        v1_line(
            0,
            20,
            "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 60.0 "
            "tokens/s, "
            "Running: 3 reqs, Waiting: 0 reqs, Preemptions: 1, GPU KV cache usage: 12.0%, Prefix cache "
            "hit rate: "
            "0.0%",
        ),
        v1_line(
            0,
            20,
            "Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 60.0 "
            "tokens/s, "
            "Running: 4 reqs, Waiting: 0 reqs, Preemptions: 3, GPU KV cache usage: 98.0%, Prefix cache "
            "hit rate: "
            "0.0%",
        ),
    ]
)


def test_v1_engines_and_interval_preemptions():
    reading = parse_stats_text(DP_LOG, "dp.log", year=2026)
    assert [(r.engine, r.preemptions) for r in rows_of(reading)] == [(0, 0), (1, 2), (0, 1), (1, 3)]
    timeline = load_timeline(reading)
    # cumulative per engine: engine 0 → 0, 1; engine 1 → 2, 5
    assert timeline["preemptions_cum"].tolist() == [0, 2, 1, 5]
    assert timeline.index[0] == datetime(2026, 11, 29, 10, 0, 10)
    assert run_preemptions(reading) == 6  # 1 + 5, summed over engines


def test_v1_before_0_11_1_cannot_count_preemptions():
    # loggers.py:127 is 0.11.0's stats call: no "Preemptions" field exists, so absence means unknown
    text = v1_line(0, 10, FORMS["v1 0.8.3"][0], lineno=127)
    reading = parse_stats_text(text, "old.log")
    assert rows_of(reading)[0].preemptions is None
    assert run_preemptions(reading) is None
    assert any("before vLLM 0.11.1" in w for w in reading.warnings)


def test_time_without_year_and_rollover():
    late = v1_line(0, 0, FORMS["v1 0.8.3"][0]).replace("11-29 10:00:00", "12-31 23:59:55")
    early = v1_line(0, 0, FORMS["v1 0.8.3"][0]).replace("11-29 10:00:00", "01-01 00:00:05")
    unknown = parse_stats_text(late + "\n" + early, "ny.log")
    assert [r.to_dict()["time"] for r in rows_of(unknown)] == ["12-31 23:59:55", "01-01 00:00:05"]
    assert any("no year" in w for w in unknown.warnings)
    known = parse_stats_text(late + "\n" + early, "ny.log", year=2025)
    assert [r.time for r in rows_of(known)] == [
        datetime(2025, 12, 31, 23, 59, 55),
        datetime(2026, 1, 1, 0, 0, 5),
    ]
    # the 10 s between them survive the year change
    assert load_timeline(known)["elapsed_s"].tolist() == [0.0, 10.0]


STATS_0_26 = FORMS["v1 0.11.1 preemptions"][0]


@pytest.mark.parametrize(
    ("name", "text", "time"),
    [
        # docker --timestamps: the outer UTC stamp gives the year, vLLM's own stamp the time
        ("docker", f"2026-11-29T10:00:10.758564289Z {v1_line(0, 10, STATS_0_26)}", "2026-11-29T10:00:10"),
        # outer bracketed stamp (vllm#6206), 8 h ahead of vLLM's local time
        (
            "bracketed",
            f"[2026-11-29 18:00:10] INFO 11-29 10:00:10 metrics.py:334] {STATS_0_26}",
            "2026-11-29T10:00:10",
        ),
        # VLLM_LOGGING_CONFIG_PATH format (vllm#11517): its own full stamp
        (
            "custom",
            f"2026-11-29 10:00:10 - vllm.v1.metrics.loggers - INFO - {STATS_0_26}",
            "2026-11-29T10:00:10",
        ),
        # a Ray actor prefix in front
        (
            "ray",
            f"(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=20874) INFO 11-29 10:00:10 [loggers.py:310] "
            f"{STATS_0_26}",
            "11-29 10:00:10",
        ),
        # a tqdm bar on the same physical line
        (
            "tqdm",
            f"Processed prompts:   0%|  | 34/10000 [00:05<27:41, 6.00it/s]{v1_line(0, 10, STATS_0_26)}",
            "11-29 10:00:10",
        ),
        # colours
        (
            "ansi",
            "\x1b[0;36m(APIServer pid=7)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-29 10:00:10 "
            f"[loggers.py:310]\x1b[0m {STATS_0_26}",
            "11-29 10:00:10",
        ),
    ],
)
def test_tolerated_wrappers(name, text, time):
    rows = rows_of(parse_stats_text(text, f"{name}.log"))
    assert len(rows) == 1
    assert rows[0].to_dict()["time"] == time
    assert (rows[0].waiting, rows[0].preemptions, rows[0].kv_cache_usage_pct) == (41, 2, 98.4)


def test_debug_stats_lines_are_read():
    # at VLLM_LOGGING_LEVEL=DEBUG a stalled server's demoted line (0 tok/s, Running > 0) is still a row
    message = (
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, "
        "Running: 5 reqs, Waiting: 9 reqs, GPU KV cache usage: 99.9%, Prefix cache hit rate: 0.0%"
    )
    text = "(APIServer pid=7) DEBUG 11-29 10:00:10 [v1/metrics/loggers.py:310] " + message
    [row] = rows_of(parse_stats_text(text, "debug.log"))
    assert (row.running, row.waiting, row.generation_tokens_per_s, row.preemptions) == (5, 9, 0.0, 0)


def test_glued_records_on_one_line():
    first = v1_line(0, 10, FORMS["v1 0.8.3"][0])
    second = v1_line(0, 20, STATS_0_26)
    rows = rows_of(parse_stats_text(first + second, "glued.log"))
    assert [(r.line, r.engine, r.kv_cache_usage_pct) for r in rows] == [(1, 1, 61.0), (1, 0, 98.4)]


def test_hard_wrap_at_column_159_is_joined():
    record = v1_line(0, 10, STATS_0_26)
    assert len(record) > 159
    wrapped = record[:159] + "\n" + record[159:] + "\n" + v1_line(0, 20, STATS_0_26)
    rows = rows_of(parse_stats_text(wrapped, "wrapped.log"))
    assert [(r.line, r.kv_cache_usage_pct, r.preemptions) for r in rows] == [(1, 98.4, 2), (3, 98.4, 2)]


def test_bare_message_has_no_time():
    reading = parse_stats_text(STATS_0_26 + "\n", "copied.log")
    assert rows_of(reading)[0].time is None and rows_of(reading)[0].running == 23
    assert any("lost their log header" in w for w in reading.warnings)


def test_idle_gap_is_reported():
    lines = [v1_line(0, s, STATS_0_26) for s in (10, 20, 30)] + [v1_line(5, 0, STATS_0_26)]
    warnings = parse_stats_text("\n".join(lines), "idle.log").warnings
    # gaps 10, 10, 270 s; 270 > 3 × the usual 10 s
    assert any("between lines 3 and 4 (270 s; usual interval 10 s)" in w for w in warnings)


def test_startup_only_log_gives_capacity_and_a_warning():
    text = (
        "(EngineCore pid=48467) INFO 11-24 09:16:03 [kv_cache_utils.py:1733] GPU KV cache size: 155,856 "
        "tokens\n"
    )
    reading = parse_stats_text(text, "boot.log")
    assert reading.frame.empty and reading.kv_cache_tokens == 155_856
    assert any("startup lines only" in w for w in reading.warnings)


def test_not_a_log_is_refused():
    with pytest.raises(LoadFormatError, match=r"notes\.txt: no vLLM stats line"):
        parse_stats_text("just some notes\n", "notes.txt")


# --- the sample data --------------------------------------------------------------------------------

OVERLOAD = DATA_DIR / "load" / "manual-canary-overload"


def test_sample_overload_log_and_metrics_agree():
    log = read_vllm_stats(OVERLOAD / "server.log", year=2026)
    metrics = read_load_evidence([OVERLOAD / "metrics.prom"])
    # the log's Preemptions fields and the counter's reset-safe increases count the same preemptions
    assert run_preemptions(log) == run_preemptions(metrics) == 30
    assert log.sources[0].kv_cache_tokens == 157_280  # "GPU KV cache size: 157,280 tokens" = 9,830 × 16
    assert log.sources[0].kv_cache_memory_bytes == 9_830 * 1_310_720  # the manual value in non-default args


def test_year_comes_from_metrics_of_the_same_run():
    both = read_load_evidence([OVERLOAD / "server.log", OVERLOAD / "metrics.prom"])
    assert all(row.year_known for row in rows_of(both))
    assert rows_of(both)[0].source.endswith("server.log")  # file order as given
    assert any("year is taken from the /metrics" in w for w in both.warnings)


# --- restarts and lower bounds in V0 logs (total_num_cumulative_preemption) ------------------------

V0_PREEMPTED = (
    "WARNING 11-29 10:{:02d}:00 scheduler.py:1560] Sequence group {} is preempted by "
    "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
    "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV "
    "cache memory. total_num_cumulative_preemption={}"
)
V0_RESTART_LOG = "\n".join(
    [
        "INFO 11-29 09:59:00 api_server.py:712] vLLM API server version 0.6.6",
        V0_PREEMPTED.format(1, 7, 1),
        V0_PREEMPTED.format(2, 80, 51),
        "INFO 11-29 10:03:00 launcher.py:57] Shutting down FastAPI HTTP server.",
        "INFO 11-29 10:04:00 api_server.py:712] vLLM API server version 0.6.6",
        "INFO 11-29 10:04:01 llm_engine.py:234] Initializing an LLM engine (v0.6.6) with config: model='llama'",
        V0_PREEMPTED.format(5, 3, 1),
    ]
)


def test_v0_counter_restarts_from_zero_after_a_server_restart():
    reading = parse_stats_text(V0_RESTART_LOG, "restart.log", year=2026)
    # the second start (lines 5 and 6, one boot) comes after rows: rows after it have restarts = 1
    assert [(row.line, row.preemptions_total, row.restarts) for row in rows_of(reading)] == [
        (2, 1, 0),
        (3, 51, 0),
        (7, 1, 1),
    ]
    # 51 preemptions before the restart + 1 after = 52 (the counter restarted at 1, it did not go back)
    assert load_timeline(reading)["preemptions_cum"].tolist() == [1, 51, 52]
    assert run_preemptions(reading) == 52
    assert any("restart.log:5: the server restarted" in w for w in reading.warnings)


def test_v0_totals_come_from_the_counter_not_line_counts_and_are_a_lower_bound():
    from kvplan.load import load_checks, preemptions_lower_bound

    reading = parse_stats_text(V0_RESTART_LOG, "restart.log", year=2026)
    # three warning lines, but 52 preemptions (51 + 1); up to 49 more may follow each printed warning
    assert run_preemptions(reading) == 52 and preemptions_lower_bound(reading)
    assert any(
        "lower bound" in w and "line 7 (total_num_cumulative_preemption=1)" in w for w in reading.warnings
    )
    check = load_checks(reading)[1]
    assert check.passed is False and check.detail.startswith("at least 52 preemption(s)")
    # a policy of 60 cannot be judged from a lower bound of 52: the true count may be up to 52 + 49
    assert load_checks(reading, max_preemptions=60)[1].passed is None
    # V1's per-interval counts are exact
    assert not preemptions_lower_bound(parse_stats_text(DP_LOG, "dp.log", year=2026))


# --- time zones ----------------------------------------------------------------------------------------


def test_log_and_metrics_times_need_an_offset(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(v1_line(0, 10, STATS_0_26) + "\n")
    prom = tmp_path / "metrics.prom"
    prom.write_text('# 2026-11-29T17:00:10Z\nvllm:num_requests_running{engine="0"} 23.0\n')
    mixed = read_load_evidence([log, prom])
    assert any("without a known offset" in w for w in mixed.warnings)
    # the server runs on UTC−7 (PDT): its 10:00:10 local is 17:00:10 UTC, the scrape's time
    aligned = read_load_evidence([log, prom], utc_offset=-7)
    assert not any("without a known offset" in w for w in aligned.warnings)
    assert [row.time for row in rows_of(aligned)] == [datetime(2026, 11, 29, 17, 0, 10)] * 2
    with pytest.raises(ValueError, match="UTC offset 20 h is out of range"):
        read_load_evidence([log], utc_offset=20)


def test_docker_stamps_give_the_offset(tmp_path):
    # docker --timestamps writes UTC (17:00:10.76Z) in front of vLLM's local 10:00:10: the server is at UTC−7,
    # (10:00:10 − 17:00:10.76 = −7 h 0 min 0.76 s, rounded to the quarter hour)
    log = tmp_path / "server.log"
    log.write_text(f"2026-11-29T17:00:10.758564289Z {v1_line(0, 10, STATS_0_26)}\n")
    prom = tmp_path / "metrics.prom"
    prom.write_text('# 2026-11-29T17:00:10Z\nvllm:num_requests_running{engine="0"} 23.0\n')
    reading = read_load_evidence([log, prom])
    assert [row.time for row in rows_of(reading)] == [datetime(2026, 11, 29, 17, 0, 10)] * 2
    assert reading.sources[1].utc_offset_hours == -7
    assert not any("without a known offset" in w for w in reading.warnings)
    assert any("UTC-7 h, read from the docker" in w for w in reading.warnings)
    # an offset given that contradicts the stamps is used, with a warning
    given = read_load_evidence([log], utc_offset=-8)
    assert rows_of(given)[0].time == datetime(2026, 11, 29, 18, 0, 10)
    assert any("not the -8 h given" in w for w in given.warnings)


# --- recognising /metrics files ---------------------------------------------------------------------------


def test_stripped_metrics_dump_with_a_python_sample_first_is_read_as_metrics(tmp_path):
    # a V1 /metrics dump saved with its comment lines stripped: prometheus_client's python_gc_* family
    # comes before the vllm: ones, so the first sample is no vllm: name
    prom = tmp_path / "nocomment.prom"
    prom.write_text(
        'python_gc_objects_collected_total{generation="0"} 12345.0\n'
        "process_cpu_seconds_total 10.5\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
    )
    [row] = rows_of(read_load_evidence([prom]))
    # read as a scrape (kind metrics, 0.25 → 25 %), not refused as a log without stats lines
    assert (row.kind, row.engine, row.running, row.kv_cache_usage_pct) == ("metrics", 0, 3, 25.0)


def test_kv_usage_outside_zero_to_hundred_percent_is_unknown_with_a_warning():
    # issue 11 item 21, the log's figure
    # vLLM prints "GPU KV cache usage: %.1f%%" of 100 × (1 − free / total blocks): never below 0 or above 100
    line = (
        "(APIServer pid=3) INFO 11-29 10:00:{s} [loggers.py:310] Engine 000: Running: 4 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: {usage}%, Prefix cache hit rate: 0.0%\n"
    )
    text = "".join(line.format(s=f"{10 * i:02d}", usage=u) for i, u in enumerate(("-5.0", "100.0", "150.2")))
    reading = parse_stats_text(text, "bad.log", year=2026)
    assert [row.kv_cache_usage_pct for row in rows_of(reading)] == [None, 100.0, None]
    notes = [w for w in reading.warnings if "outside 0–100%" in w]
    assert [(note.code, note.line) for note in notes] == [
        ("kv-usage-out-of-range", 1),
        ("kv-usage-out-of-range", 3),
    ]
