"""The vLLM log reader: every line family with exact values, rank attribution, boots, robustness.

Sizes vLLM prints in GiB become bytes by ``parse_size(f"{x}GiB")`` (nearest byte): ``gib("10.2")``.
"""

import io
import string

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan import DATA_DIR
from kvplan.columns import LEDGER_COLUMNS
from kvplan.io import LogParseError
from kvplan.io.vllm import families, values
from kvplan.io.vllm.families import read_message
from kvplan.io.vllm.records import split_records
from kvplan.io.vllm.values import key_values
from kvplan.ledger import LedgerError
from kvplan.room import read_vllm_log_rooms, read_vllm_logs_rooms
from kvplan.units import parse_size
from tests.conftest import TESTS_DATA_DIR, GiB, MiB
from tests.test_io_vllm_families import SAMPLE_LINES as FIDELITY_LINES
from tests.test_io_vllm_scan import candidates
from tests.test_ledger import budget_from_ledger

LOGS = TESTS_DATA_DIR / "logs"
HEAD = "INFO 08-14 14:07:22 [gpu_worker.py:227] "


def gib(text):
    return parse_size(f"{text}GiB")


def one_row(text):
    ledger, _meta = read_vllm_log_rooms(text)
    assert len(ledger) == 1
    return ledger.iloc[0]


# --- line families, one line each (no prefix, so the single rank 0) ---------------------------

FAMILIES = [
    # weights: V0/V1 0.5–0.7.3 "GB" (meant GiB), very old MB, 0.8.0–0.8.2, 0.8.3–0.11.0, 0.11.1–0.13, 0.14+
    ("Loading model weights took 14.9888 GB", {"weights_bytes": gib("14.9888")}),
    ("Loading model weights took 512.0000 MB", {"weights_bytes": 512 * MiB}),
    ("Model loading took 15.2683 GB and 10.128719 seconds", {"weights_bytes": gib("15.2683")}),
    ("Model loading took 14.9889 GiB and 5.365113 seconds", {"weights_bytes": gib("14.9889")}),
    ("Model loading took 14.9889 GiB memory and 5.365113 seconds", {"weights_bytes": gib("14.9889")}),
    ("Model loading took 10.2 GiB memory and 4.781181 seconds", {"weights_bytes": gib("10.2")}),
    # V0 0.6.4 one-line summary: kv = 79.15 × 0.90 − 16.53 − 0.14 = 54.565 → printed 54.56
    (
        "Memory profiling results: total_gpu_memory=79.15GiB initial_memory_usage=15.45GiB peak_torch_memory=16.53GiB "
        "memory_usage_post_profile=15.61Gib non_torch_memory=0.14GiB kv_cache_size=54.56GiB gpu_memory_utilization=0.90",
        {"total_bytes": gib("79.15"), "non_torch_bytes": gib("0.14"), "available_kv_bytes": gib("54.56")},
    ),
    ("Available KV cache memory: 61.52 GiB", {"available_kv_bytes": gib("61.52")}),
    # DEBUG, 0.9.1–0.10.0 and 0.10.1+ (0.14+ prints util as %f)
    (
        "Initial free memory: 78.47 GiB, free memory: 62.31 GiB, requested GPU memory: 71.27 GiB",
        {"init_free_bytes": gib("78.47"), "requested_bytes": gib("71.27")},
    ),
    (
        "Initial free memory: 78.47 GiB; Requested memory: 0.90 (util), 71.27 GiB",
        {"init_free_bytes": gib("78.47"), "requested_bytes": gib("71.27")},
    ),
    (
        "Initial free memory: 78.47 GiB; Requested memory: 0.900000 (util), 71.27 GiB",
        {"init_free_bytes": gib("78.47"), "requested_bytes": gib("71.27")},
    ),
    # profile result up to 0.26: 17.5 = 15.7 + 1.65 + 0.15
    (
        "Memory profiling takes 6.21 seconds. Total non KV cache memory: 17.5GiB; torch peak memory increase: 1.65GiB; "
        "non-torch forward increase memory: 0.15GiB; weights memory: 15.7GiB.",
        {"weights_bytes": gib("15.7"), "activation_peak_bytes": gib("1.65"), "non_torch_bytes": gib("0.15")},
    ),
    # 0.27+: consumed 16.3 = weights 15.7 + non-torch 0.6; headroom = 18.1 − 16.3 = 1.8
    (
        "Memory profiling takes 6.21 seconds. Total non KV cache memory: 18.1GiB; torch peak memory increase: 1.65GiB; "
        "total consumed (from mem_get_info): 16.3GiB; weights memory: 15.7GiB.",
        {
            "weights_bytes": gib("15.7"),
            "non_torch_bytes": gib("16.3") - gib("15.7"),
            "activation_peak_bytes": gib("18.1") - gib("16.3"),
        },
    ),
    (
        "worker init memory snapshot: torch_peak=0.0GiB, free_memory=78.47GiB, total_memory=79.19GiB, "
        "cuda_memory=0.72GiB, torch_memory=0.0GiB, non_torch_memory=0.72GiB, timestamp=1755160000.1, auto_measure=True",
        {"init_free_bytes": gib("78.47"), "total_bytes": gib("79.19")},
    ),
    ("worker requested memory: 71.27GiB", {"requested_bytes": gib("71.27")}),
    ("Graph capturing finished in 12 secs, took 0.53 GiB", {"cuda_graph_bytes": gib("0.53")}),
    ("Graph capturing finished in 9 secs, took -9.96 GiB", {"cuda_graph_bytes": -gib("9.96")}),
    ("Estimated CUDA graph memory: 0.97 GiB total", {"cuda_graph_estimate_bytes": gib("0.97")}),
    (
        "CUDA graph pool memory: 0.91 GiB (actual), 0.97 GiB (estimated), difference: 0.06 GiB (6.9%).",
        {"cuda_graph_bytes": gib("0.91"), "cuda_graph_estimate_bytes": gib("0.97")},
    ),
    # engine lines: 42,656 tokens = 2,666 blocks × 16; 42,656 / 8,192 = 5.21x
    ("GPU KV cache size: 42,656 tokens", {"kv_cache_tokens": 42656}),
    ("Maximum concurrency for 8,192 tokens per request: 5.21x", {"max_concurrency": 5.21}),
    ("Maximum concurrency for 8192 tokens per request: 5.21x", {"max_concurrency": 5.21}),
    (
        "GPU KV cache size: 42,656 tokens, Maximum concurrency for 8,192 tokens per request: 5.21x",
        {"kv_cache_tokens": 42656, "max_concurrency": 5.21, "max_model_len": 8192},
    ),
    (
        "GPU + host KV cache size: 42,656 tokens, Maximum concurrency for 8,192 tokens per request: 5.21x",
        {"kv_cache_tokens": 42656, "max_concurrency": 5.21},
    ),
    ("# GPU blocks: 2666, # CPU blocks: 2048", {"num_gpu_blocks": 2666}),
    ("# CUDA blocks: 2666, # CPU blocks: 2048", {"num_gpu_blocks": 2666}),
    ("# cuda blocks: 2666, # CPU blocks: 2048", {"num_gpu_blocks": 2666}),
    ("# GPU blocks: 2666", {"num_gpu_blocks": 2666}),
    # 0.10.2 suggestion, plain ints: non_kv = 15.7 + 1.65 + 0.15 + 0.53 = 18.03 GiB;
    # full = 78.47 GiB − 18.03 GiB − 150 MiB = 64739669441, fit = 71.27 GiB − 18.03 GiB − 150 MiB = 57008728308,
    # in use = 71.27 − 17.5 GiB = 57735097875 bytes
    (
        "Free memory on device (78.47/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). "
        "Actual usage is 15.7 GiB for weight, 1.65 GiB for peak activation, 0.15 GiB for non-torch memory, and 0.53 GiB "
        "for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=57008728308` to fit into "
        "requested memory, or `--kv-cache-memory=64739669441` to fully utilize gpu memory. Current kv cache memory in "
        "use is 57735097875 bytes.",
        {
            "init_free_bytes": gib("78.47"),
            "total_bytes": gib("79.19"),
            "requested_bytes": gib("71.27"),
            "weights_bytes": gib("15.7"),
            "activation_peak_bytes": gib("1.65"),
            "non_torch_bytes": gib("0.15"),
            "cuda_graph_bytes": gib("0.53"),
            "suggested_fit_bytes": 57008728308,
            "suggested_full_bytes": 64739669441,
            "kv_in_use_bytes": 57735097875,
            "room_bytes": 64739669441,
        },
    ),
    # 0.11–0.26 text, (X GiB) after each value, in use in GiB
    (
        "Free memory on device (78.47/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). "
        "Actual usage is 15.7 GiB for weight, 1.65 GiB for peak activation, 0.15 GiB for non-torch memory, and 0.53 GiB "
        "for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=57008728308` (53.09 GiB) "
        "to fit into requested memory, or `--kv-cache-memory=64739669441` (60.29 GiB) to fully utilize gpu memory. "
        "Current kv cache memory in use is 53.77 GiB.",
        {"suggested_full_bytes": 64739669441, "kv_in_use_bytes": gib("53.77")},
    ),
    # 0.27+: consumed memory (weights + non-torch); suggestions can be negative (vllm#57936)
    (
        "Free memory on device (78.47/79.19 GiB) on startup. Desired GPU memory utilization is (0.92, 72.85 GiB). "
        "Actual usage is 16.3 GiB for consumed memory (weights + non-torch), 1.8 GiB for peak activation, and 61.0 GiB "
        "for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=-6868172800` (-6.4 GiB) "
        "to fit into requested memory, or `--kv-cache-memory=-849899929` (-0.79 GiB) to fully utilize gpu memory. "
        "Current kv cache memory in use is 53.05 GiB.",
        {
            "activation_peak_bytes": gib("1.8"),
            "cuda_graph_bytes": gib("61.0"),
            "suggested_full_bytes": -849899929,
        },
    ),
    # manual boots: 0.10.2 (unrounded free, "8.00GiB" without a space, "does does"), 0.14+
    (
        "Initial free memory 78.53466796875 GiB, reserved 8.00GiB memory for KV Cache as specified by "
        "kv_cache_memory_bytes config and skipped memory profiling. This does does not respect the "
        "gpu_memory_utilization config.",
        {"init_free_bytes": int(78.53466796875 * GiB), "manual_kv_bytes": 8 * GiB},
    ),
    (
        "Initial free memory 31.16 GiB, reserved 4.25 GiB memory for KV Cache as specified by kv_cache_memory_bytes "
        "config and skipped memory profiling. This does not respect the gpu_memory_utilization config.",
        {"init_free_bytes": gib("31.16"), "manual_kv_bytes": gib("4.25")},
    ),
    (
        "Applying persisted startup plan (fingerprint 3f2a9c): kv_cache_memory_bytes=12884901888 (12.00 GiB), "
        "recorded free-memory baseline 54.50 GiB, current 54.48 GiB. Memory profiling will be skipped.",
        {"manual_kv_bytes": 12 * GiB, "init_free_bytes": gib("54.48")},
    ),
    (
        "Startup plan not applied: current free memory (52.25 GiB) is below the recorded baseline (54.50 GiB); "
        "falling back to full memory profiling.",
        {"init_free_bytes": gib("52.25")},
    ),
    # the comma-separated variant of the one-line V0 summary (with duration)
    (
        "Memory profiling results: duration=4.91 seconds, total_gpu_memory=79.15GiB, "
        "initial_memory_usage=15.45GiB, peak_torch_memory=16.53GiB, memory_usage_post_profile=15.61GiB, "
        "non_torch_memory=0.14GiB, kv_cache_size=54.56GiB, gpu_memory_utilization=0.90.",
        {"total_bytes": gib("79.15"), "non_torch_bytes": gib("0.14"), "available_kv_bytes": gib("54.56")},
    ),
    # V0 three-line form (0.6.x): 79.19 × 0.90 = 71.27; 71.27 − 7.48 − 0.42 − 1.23 = 62.14
    (
        "the current vLLM instance can use total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) = 71.27GiB",
        {"total_bytes": gib("79.19"), "requested_bytes": gib("71.27")},
    ),
    (
        "model weights take 7.48GiB; non_torch_memory takes 0.42GiB; PyTorch activation peak memory takes 1.23GiB; "
        "the rest of the memory reserved for KV Cache is 62.14GiB.",
        {
            "weights_bytes": gib("7.48"),
            "activation_peak_bytes": gib("1.23"),
            "available_kv_bytes": gib("62.14"),
        },
    ),
    # DEBUG 0.10.1+: within requested = 62.31 − (78.47 − 71.27) = 55.11 (free after − unrequested)
    (
        "Free memory after profiling: 62.31 GiB (total), 55.11 GiB (within requested)",
        {"profiled_free_bytes": gib("62.31")},
    ),
]


def line_of(family, containing=""):
    """The one line above that vLLM's family ``family`` (as kvplan.io.vllm.families names it) reads and holds ``containing``."""
    (line,) = [
        line
        for line, _expected in FAMILIES
        if containing in line and family in {fact.family for fact in read_message(line)}
    ]
    return line


@pytest.mark.parametrize(
    ("line", "expected"), FAMILIES, ids=[f"{i}-{line[:30]}" for i, (line, _e) in enumerate(FAMILIES)]
)
def test_line_family_exact_values(line, expected):
    row = one_row(HEAD + line + "\n")
    assert {name: row[name] for name in expected} == expected


def test_every_line_family_is_also_read_without_its_header():
    """Logs pasted by hand lose the header; the bare message still counts."""
    for line, expected in FAMILIES:
        row = one_row(line)
        assert {name: row[name] for name in expected} == expected


@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 1.02 GiB is free.",
            "oom",
        ),
        ("RuntimeError: CUDA error: out of memory", "oom"),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.",
            "error",
        ),
        (
            "ValueError: To serve at least one request with the models's max seq len (131072), (16.0 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (6.91 GiB). Based on the available memory, the "
            "estimated maximum model length is 56576.",
            "error",
        ),
        (
            "AssertionError: Error in memory profiling. Initial free memory 78.5 GiB, current free memory 80.1 GiB. This "
            "happens when other processes sharing the same container release GPU memory while vLLM is profiling.",
            "error",
        ),
        (
            "ValueError: Free memory on device cuda:0 (67.24/79.25 GiB) on startup is less than desired GPU memory "
            "utilization (0.9, 71.33 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
            "error",
        ),
    ],
)
def test_startup_failures(line, outcome):
    row = one_row(HEAD.replace("INFO", "ERROR") + "Available KV cache memory: 1.0 GiB\n" + line + "\n")
    assert (row["outcome"], row["error"]) == (outcome, line)


def test_free_memory_below_request_keeps_its_values():
    row = one_row(
        "ValueError: Free memory on device cuda:0 (67.24/79.25 GiB) on startup is less than desired GPU "
        "memory utilization (0.9, 71.33 GiB). Decrease GPU memory utilization."
    )
    assert (row["init_free_bytes"], row["total_bytes"], row["requested_bytes"]) == (
        gib("67.24"),
        gib("79.25"),
        gib("71.33"),
    )


def test_a_log_that_stops_before_the_kv_cache_is_sized_is_incomplete():
    row = one_row(HEAD + "Model loading took 10.2 GiB memory and 4.781181 seconds\n")
    assert row["outcome"] == "incomplete" and "before the KV cache was sized" in row["error"]


def test_info_lines_that_mention_errors_are_not_failures():
    row = one_row(
        HEAD + "Available KV cache memory: 1.0 GiB\n"
        "WARNING 08-14 14:07:22 [x.py:1] ValueError: fallback used\n"
        "INFO:     Application startup complete.\n"
    )
    assert row["outcome"] == "ok"


# --- configuration and the compatibility key --------------------------------------------------


def test_key_values_scanner_respects_brackets_and_quotes():
    text = (
        'model=\'a,b\', compilation_config={"sizes": [1, 2], "x": {"y": 1}}, '
        "decoding_config=DecodingConfig(backend='x', n=1), max_seq_len=8192"
    )
    assert key_values(text) == {
        "model": "a,b",
        "compilation_config": {"sizes": [1, 2], "x": {"y": 1}},
        "decoding_config": "DecodingConfig(backend='x', n=1)",
        "max_seq_len": 8192,
    }


def test_version_non_default_args_and_engine_config_make_the_key():
    text = (
        "(APIServer pid=1) INFO 08-14 14:00:01 [api_server.py:1] vLLM API server version 0.26.0\n"
        "(APIServer pid=1) INFO 08-14 14:00:01 [utils.py:1] non-default args: {'model': 'm/x', 'block_size': 32, "
        "'gpu_memory_utilization': 0.85, 'kv_cache_dtype': 'fp8', 'tensor_parallel_size': 2}\n"
        "(EngineCore_DP0 pid=2) INFO 08-14 14:00:05 [core.py:1] Initializing a V1 LLM engine (v0.26.0) with config: "
        "model='m/x', revision='abc', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=2, "
        "pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=1, quantization=fp8, "
        'enforce_eager=True, kv_cache_dtype=fp8, compilation_config={"level": 0}\n'
        "(Worker_TP0 pid=3) INFO 08-14 14:01:00 [gpu_worker.py:1] Available KV cache memory: 5.0 GiB\n"
    )
    ledger, meta = read_vllm_log_rooms(text)
    key = meta["boots"][0]["compatibility_key"]
    assert {
        k: key[k]
        for k in (
            "vllm_version",
            "model",
            "revision",
            "dtype",
            "quantization",
            "kv_cache_dtype",
            "max_model_len",
            "block_size",
            "tensor_parallel_size",
            "enforce_eager",
            "gpu_memory_utilization",
            "decode_context_parallel_size",
        )
    } == {
        "vllm_version": "0.26.0",
        "model": "m/x",
        "revision": "abc",
        "dtype": "torch.bfloat16",
        "quantization": "fp8",
        "kv_cache_dtype": "fp8",
        "max_model_len": 4096,
        "block_size": 32,
        "tensor_parallel_size": 2,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.85,
        "decode_context_parallel_size": 1,
    }
    assert ledger.loc[0, "block_size"] == 32
    # enforce_eager: no CUDA graphs, so the available KV needs no correction
    assert (ledger.loc[0, "room_bytes"], ledger.loc[0, "room_source"]) == (5 * GiB, "available_kv")
    line = meta["provenance"].query("column == 'block_size'")["line"].tolist()
    assert line == [2]


def test_defaults_fill_what_the_log_does_not_say():
    ledger, meta = read_vllm_log_rooms("vLLM API server version 0.20.1\nAvailable KV cache memory: 5.0 GiB\n")
    assert (ledger.loc[0, "gpu_memory_utilization"], ledger.loc[0, "block_size"]) == (0.92, 16)
    default = meta["provenance"].query("column == 'block_size'").iloc[0]
    assert pd.isna(default["line"]) and default["raw"] == "default of vLLM 0.20.1"


def test_forced_block_size_line():
    row = one_row(
        "vLLM API server version 0.9.0\nForcing kv cache block size to 64 for FlashMLA backend.\n"
        "Available KV cache memory: 5.0 GiB\n"
    )
    assert row["block_size"] == 64


# --- rank attribution -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "tp", "pp", "rank"),
    [
        ("(Worker_TP1 pid=11) ", 4, 1, 1),
        ("(Worker_PP1_TP0 pid=11) ", 2, 2, 2),  # rank = tp + TP × pp = 0 + 2 × 1
        ("(Worker_PP1_TP1 pid=11) ", 2, 2, 3),
        ("(VllmWorker TP1 pid=11) ", 2, 1, 1),
        ("(VllmWorker PP1_TP0 pid=11) ", 2, 2, 2),
        ("(VllmWorker rank=1 pid=11) ", 2, 1, 1),
        ("(Worker_TP1_EP1 pid=11) ", 2, 1, 1),
    ],
)
def test_rank_from_prefix(prefix, tp, pp, rank):
    config = (
        f"Initializing a V1 LLM engine (v0.12.0) with config: model='m', tensor_parallel_size={tp}, "
        f"pipeline_parallel_size={pp}, data_parallel_size=1\n"
    )
    ledger, _ = read_vllm_log_rooms(config + prefix + HEAD + "Available KV cache memory: 5.0 GiB\n")
    row = ledger.dropna(subset=["available_kv_bytes"]).iloc[0]
    assert row["rank"] == rank and row["tp_rank"] == rank % tp and row["pp_rank"] == rank // tp


def test_dp_prefixes_and_the_rank_assignment_line():
    # DP=2, TP=2: Worker_DP1_TP0_EP2 is global rank 2 = tp 0 + TP 2 × (pp 0 + PP 1 × dp 1)
    text = (
        "Initializing a V1 LLM engine (v0.12.0) with config: model='m', tensor_parallel_size=2, "
        "pipeline_parallel_size=1, data_parallel_size=2\n"
        "(Worker_DP1_TP0_EP2 pid=21) " + HEAD + "Available KV cache memory: 5.0 GiB\n"
        "(Worker pid=22) INFO 08-14 14:00:00 [parallel_state.py:1] rank 3 in world size 4 is assigned as "
        "DP rank 1, PP rank 0, PCP rank 0, TP rank 1, EP rank 3, EPLB rank N/A\n"
        "(Worker_DP1_TP1_EP3 pid=22) " + HEAD + "Available KV cache memory: 6.0 GiB\n"
    )
    ledger, _ = read_vllm_log_rooms(text)
    rows = ledger.set_index("rank")
    assert rows.loc[2, "available_kv_bytes"] == 5 * GiB and rows.loc[2, "dp_rank"] == 1
    assert rows.loc[3, "available_kv_bytes"] == 6 * GiB and rows.loc[3, "tp_rank"] == 1


def test_engine_core_prefix_is_the_worker_when_tp_is_one():
    text = (
        "Initializing a V1 LLM engine (v0.26.0) with config: model='m', tensor_parallel_size=1, "
        "pipeline_parallel_size=1, data_parallel_size=3\n"
        "(EngineCore_DP2 pid=5) " + HEAD + "Available KV cache memory: 5.0 GiB\n"
        "(EngineCore_DP2 pid=5) " + HEAD + "GPU KV cache size: 1,000 tokens\n"
    )
    ledger, _ = read_vllm_log_rooms(text)
    assert ledger[["rank", "dp_rank", "available_kv_bytes", "kv_cache_tokens"]].values.tolist() == [
        [2, 2, 5 * GiB, 1000]
    ]


def test_v0_three_line_log_two_ranks(tmp_path):
    ledger, meta = read_vllm_log_rooms(LOGS / "v0.6.6-tp2-three-line.log")
    assert meta["warnings"] == []
    assert ledger[["rank", "process", "pid"]].astype(object).where(ledger.notna(), None).values.tolist() == [
        [0, None, None],
        [1, "VllmWorkerProcess", 4102],
    ]
    assert ledger["available_kv_bytes"].tolist() == [gib("62.14"), gib("62.21")]
    assert ledger["non_torch_bytes"].tolist() == [gib("0.42"), gib("0.35")]
    assert ledger["total_bytes"].tolist() == [gib("79.19")] * 2
    # V0 sizes KV before capturing graphs: room = available − captured graph memory
    assert ledger["room_bytes"].tolist() == [gib("62.14") - gib("0.48"), gib("62.21") - gib("0.47")]
    assert ledger["room_source"].tolist() == ["available_kv"] * 2
    # once from the driver, the minimum over workers: 62.14 GiB // 1 MiB per block = 63,631 blocks
    assert ledger["num_gpu_blocks"].tolist() == [63631] * 2
    assert ledger["max_concurrency"].tolist() == [124.28] * 2  # 63,631 × 16 / 8,192
    key = meta["boots"][0]["compatibility_key"]
    assert (key["vllm_version"], key["tensor_parallel_size"], key["max_model_len"], key["model"]) == (
        "0.6.6.post1",
        2,
        8192,
        "meta-llama/Llama-3.1-8B-Instruct",
    )
    assert ledger["outcome"].tolist() == ["ok", "ok"]


def test_v0_worker_processes_without_rank_lines_get_ranks_in_pid_order_with_a_warning():
    text = (
        "Initializing an LLM engine (v0.6.3) with config: model='m', tensor_parallel_size=3, "
        "pipeline_parallel_size=1\n"
        "(VllmWorkerProcess pid=9) " + HEAD + "Loading model weights took 1.0 GB\n"
        "(VllmWorkerProcess pid=8) " + HEAD + "Loading model weights took 2.0 GB\n"
    )
    ledger, meta = read_vllm_log_rooms(text)
    assert ledger[["rank", "pid", "weights_bytes"]].values.tolist() == [[1, 8, 2 * GiB], [2, 9, 1 * GiB]]
    assert "pid (spawn) order" in meta["warnings"][0]


def test_per_worker_kv_lines_of_0_9_to_0_11_go_to_ranks_in_order():
    ledger, _ = read_vllm_log_rooms(LOGS / "v0.9.2-tp2-oom-then-restart.log")
    second = ledger[ledger["boot"] == 1]
    # 57.88 GiB // 1 MiB per block = 59,269 blocks × 16 = 948,304 tokens; 57.5 GiB → 58,880 → 942,080
    assert second["kv_cache_tokens"].tolist() == [948304, 942080]
    assert second["max_concurrency"].tolist() == [57.88, 57.5]


def test_several_boots_in_one_file_and_outcomes():
    ledger, meta = read_vllm_log_rooms(LOGS / "v0.9.2-tp2-oom-then-restart.log")
    assert ledger[["boot", "rank", "outcome"]].values.tolist() == [
        [0, 0, "error"],
        [0, 1, "oom"],
        [1, 0, "ok"],
        [1, 1, "ok"],
    ]
    assert ledger.loc[1, "error"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    # rank 0 logged no failure of its own: it carries the API server's, said to be not its own
    assert ledger.loc[0, "error"] == (
        f"not this rank's own failure: APIServer failed, at {LOGS / 'v0.9.2-tp2-oom-then-restart.log'}:10: "
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    )
    assert ledger.loc[0, "gpu_memory_utilization"] == 0.85
    assert [b["first_line"] for b in meta["boots"]] == [1, 11]
    assert meta["lines"][(str(LOGS / "v0.9.2-tp2-oom-then-restart.log"), 0, 1, "outcome")] == 8
    # 0.9.2: every rank captures graphs after the KV cache is sized; room = available − graphs
    assert ledger.loc[2:, "room_bytes"].tolist() == [gib("57.88") - gib("0.54"), gib("57.5") - gib("0.53")]


def test_rank_zero_only_log_warns_how_to_get_per_rank_numbers():
    ledger, meta = read_vllm_log_rooms(LOGS / "v0.14.0-tp2-rank0-only.log")
    assert ledger["rank"].tolist() == [0, 1]
    # 0.14 does not estimate graphs first: 52.3 − 0.62 GiB
    assert ledger["room_bytes"].tolist()[0] == gib("52.3") - gib("0.62")
    assert pd.isna(ledger["room_bytes"].tolist()[1])
    # engine line once, after the minimum: the same for both ranks
    assert ledger["kv_cache_tokens"].tolist() == [761664, 761664]
    (warning,) = meta["warnings"]
    assert warning.startswith(f"{LOGS / 'v0.14.0-tp2-rank0-only.log'}:7:")
    assert "VLLM_LOGGING_LEVEL=DEBUG" in warning and "--assume-uniform" in warning


def test_suggestion_double_count_is_flagged_for_0_27_and_later():
    text = (
        "vLLM API server version 0.27.0\n(EngineCore pid=2) Initializing a V1 LLM engine (v0.27.0) with config: "
        "model='m', tensor_parallel_size=1\n" + line_of("suggestion", "consumed memory") + "\n"
    )
    ledger, meta = read_vllm_log_rooms(text)
    assert ledger.loc[0, "room_bytes"] == -849899929
    assert any("vllm#57936" in warning for warning in meta["warnings"])


def test_estimating_releases_subtract_only_what_the_pool_exceeded_the_estimate_by():
    text = (
        "vLLM API server version 0.22.0\n"
        + HEAD
        + "Available KV cache memory: 20.0 GiB\n"
        + HEAD
        + "CUDA graph pool memory: 1.5 GiB (actual), 1.0 GiB (estimated), difference: 0.5 GiB (50.0%).\n"
    )
    assert one_row(text)["room_bytes"] == 20 * GiB - (gib("1.5") - gib("1.0"))


def test_room_from_parts_when_only_debug_lines_are_there():
    text = (
        "vLLM API server version 0.15.0\n"
        + HEAD
        + "Initial free memory: 78.47 GiB; Requested memory: 0.900000 (util), 71.27 GiB\n"
        + HEAD
        + line_of("profile_result", "non-torch forward")
        + "\n"
        + HEAD
        + "Estimated CUDA graph memory: 0.53 GiB total\n"
    )
    row = one_row(text)
    # 78.47 − (15.7 + 1.65 + 0.15 + 0.53) GiB − 150 MiB: vLLM's own suggestion arithmetic
    expected = gib("78.47") - (gib("15.7") + gib("1.65") + gib("0.15") + gib("0.53")) - 150 * MiB
    assert (row["room_bytes"], row["room_source"]) == (expected, "parts")


def test_available_kv_without_graph_memory_is_not_used_as_room():
    ledger, meta = read_vllm_log_rooms(
        "vLLM API server version 0.10.0\n" + HEAD + "Available KV cache memory: 9.0 GiB\n"
    )
    assert pd.isna(ledger.loc[0, "room_bytes"])
    assert "Graph capturing finished" in meta["warnings"][0]


# --- robustness -------------------------------------------------------------------------------


def test_split_records_handles_relays_interleaving_and_wrappers():
    (ray,) = split_records(
        "(EngineCore_DP0 pid=1) (RayWorkerWrapper pid=77, ip=10.0.0.2) INFO 08-14 14:00:00 "
        "[x.py:1] Hello [repeated 3x across cluster]"
    )
    # the innermost prefix names the printer
    assert ray == ("Hello", "RayWorkerWrapper", 77, "10.0.0.2", "INFO", 3)
    first, second = split_records(
        "(Worker_TP0 pid=1) INFO 08-14 14:00:00 [a.py:1] Available KV cac"
        "(Worker_TP1 pid=2) INFO 08-14 14:00:00 [a.py:1] Available KV cache memory: 2.0 GiB"
    )
    assert (first[2], first[0], second[2]) == (1, "Available KV cac", 2)
    (docker,) = split_records(
        "2026-04-19 12:59:18.350 | (EngineCore pid=196) INFO 04-19 10:59:18 [a.py:1] hi"
    )
    assert (docker[1], docker[0]) == ("EngineCore", "hi")


def test_ansi_crlf_cr_interleaving_bad_bytes_and_a_cut_off_end():
    text = (
        b"Initializing a V1 LLM engine (v0.10.0) with config: model='m', tensor_parallel_size=2, "
        b"pipeline_parallel_size=1, data_parallel_size=1\r\n"
        # coloured prefix (always coloured up to 0.11) and coloured level
        b"\x1b[1;36m(VllmWorker rank=0 pid=10)\x1b[0;0m \x1b[32mINFO\x1b[0m 08-14 14:00:00 [gpu_worker.py:1] "
        b"Available KV cache memory: 3.0 GiB\r\n"
        # a progress bar overwritten with \r, then a record; a bad byte \xff in the same line
        b"Loading \xff shards: 50%\r(VllmWorker rank=1 pid=11) INFO 08-14 14:00:00 [gpu_worker.py:1] "
        b"Available KV cache memory: 4.0 GiB\n"
        # two processes' output in one line: rank 0's cut-off text, then rank 1's whole record
        b"(VllmWorker rank=0 pid=10) INFO 08-14 14:00:01 [a.py:1] Graph capturing finished in 5 se"
        b"(VllmWorker rank=1 pid=11) INFO 08-14 14:00:01 [a.py:1] Graph capturing finished in 5 secs, took 0.25 GiB\n"
        b"(VllmWorker rank=0 pid=10) INFO 08-14 14:00:02 [a.py:1] Graph capturing finished in 5 secs, took 0.5 GiB\n"
        b"(VllmWorker rank=0 pid=10) INFO 08-14 14:00:03 [a.py:1] Available KV cache memory: 9"
    )
    ledger, meta = read_vllm_log_rooms(text, source="mixed.log")
    assert ledger["available_kv_bytes"].tolist() == [3 * GiB, 4 * GiB]
    assert ledger["cuda_graph_bytes"].tolist() == [GiB // 2, GiB // 4]
    assert ledger["room_bytes"].tolist() == [3 * GiB - GiB // 2, 4 * GiB - GiB // 4]
    assert meta["warnings"] == ["mixed.log:6: the file ends mid-line (the log was cut off)"]
    assert meta["provenance"].query("rank == 1 and column == 'cuda_graph_bytes'")["line"].tolist() == [4]


def test_lost_prefix_in_a_multi_rank_log_is_not_guessed():
    text = (
        "Initializing a V1 LLM engine (v0.10.0) with config: model='m', tensor_parallel_size=2\n"
        "(VllmWorker rank=1 pid=11) "
        + HEAD
        + "Available KV cache memory: 4.0 GiB\n"
        + HEAD
        + "Available KV cache memory: 3.0 GiB\n"
    )
    ledger, meta = read_vllm_log_rooms(text, source="x.log")
    assert ledger["rank"].tolist() == [1]
    assert meta["warnings"][0].startswith("x.log:3: 1 line(s) with per-rank values carry no process prefix")


def test_ray_prefixes_use_the_rank_line_and_repeated_lines_warn():
    text = (
        "Initializing a V1 LLM engine (v0.10.0) with config: model='m', tensor_parallel_size=2\n"
        "(RayWorkerWrapper pid=300, ip=10.0.0.5) INFO 08-14 14:00:00 [parallel_state.py:1] rank 1 in world size 2 "
        "is assigned as DP rank 0, PP rank 0, TP rank 1, EP rank 1\n"
        "(RayWorkerWrapper pid=300, ip=10.0.0.5) " + HEAD + "Available KV cache memory: 4.0 GiB "
        "[repeated 1x across cluster]\n"
    )
    ledger, meta = read_vllm_log_rooms(text, source="ray.log")
    assert ledger[["rank", "pid", "available_kv_bytes"]].values.tolist() == [[1, 300, 4 * GiB]]
    assert meta["warnings"][0].startswith("ray.log:3: Ray collapsed 1 similar lines")


def test_a_claimed_rank_outside_the_world_is_dropped():
    text = (
        "Initializing a V1 LLM engine (v0.12.0) with config: model='m', tensor_parallel_size=2, "
        "pipeline_parallel_size=1, data_parallel_size=1\n"
        "(Worker_TP7 pid=11) " + HEAD + "Available KV cache memory: 5.0 GiB\n"
    )
    ledger, meta = read_vllm_log_rooms(text, source="w.log")
    assert ledger.empty and "claims rank 7 but the world size is 2" in meta["warnings"][0]


def test_a_binary_file_is_the_documented_parse_error():
    with pytest.raises(LogParseError, match=r"z\.gz: line 1: NUL byte"):
        read_vllm_log_rooms(b"\x1f\x8b\x08\x00\x00", source="z.gz")


def test_errors_after_startup_make_the_outcome_and_say_when():
    text = (
        HEAD + "Available KV cache memory: 5.0 GiB\n"
        "INFO:     Application startup complete.\n"
        "ERROR 08-14 14:09:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.0 GiB.\n"
    )
    ledger, meta = read_vllm_log_rooms(text, source="s.log")
    assert (ledger.loc[0, "outcome"], ledger.loc[0, "error"]) == (
        "oom",
        "after startup completed, at s.log:3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.0 GiB.",
    )
    assert meta["lines"][("s.log", 0, 0, "outcome")] == 3
    assert meta["warnings"][0].startswith(
        "s.log:3: out-of-memory or error after startup completed (1 line(s))"
    )


FOUR_RANK_LOG = DATA_DIR / "boots" / "four-rank" / "boot.log"


def test_a_worker_oom_after_startup_marks_that_rank_oom_and_no_other():
    # the four-rank sample has 87 lines; the appended OOM of Worker_TP2 (rank 2) is line 88
    text = FOUR_RANK_LOG.read_text() + (
        "(Worker_TP2 pid=48604) ERROR 11-24 10:31:02 [core.py:900] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 79.19 GiB of which 1.10 GiB is free.\n"
    )
    ledger, _ = read_vllm_log_rooms(text, source="late.log")
    assert ledger["outcome"].tolist() == ["ok", "ok", "oom", "ok"]
    assert ledger.loc[2, "error"].startswith(
        "after startup completed, at late.log:88: torch.OutOfMemoryError"
    )


def test_an_engine_fatal_error_after_startup_fails_every_rank_as_the_engines():
    text = FOUR_RANK_LOG.read_text() + (
        "(EngineCore pid=48467) ERROR 11-24 10:31:02 [core.py:958] EngineCore encountered a fatal error.\n"
    )
    ledger, _ = read_vllm_log_rooms(text, source="fatal.log")
    assert ledger["outcome"].tolist() == ["error"] * 4
    assert set(ledger["error"]) == {
        "not this rank's own failure: EngineCore failed after startup completed, at fatal.log:88: "
        "EngineCore encountered a fatal error."
    }


def test_a_log_cut_after_kv_sizing_is_incomplete_and_the_diagnosis_knows_the_release():
    # four-rank cut after line 63 ("Maximum concurrency"): KV sized, no graph capture, no suggestion,
    # no "init engine … took": startup did not complete on any rank
    lines = FOUR_RANK_LOG.read_text().splitlines(keepends=True)
    ledger, meta = read_vllm_log_rooms("".join(lines[:63]), source="cut.log")
    assert ledger["outcome"].tolist() == ["incomplete"] * 4
    assert "after the KV cache was sized but before startup completed" in ledger.loc[0, "error"]
    (warning,) = meta["warnings"]
    # line 57 is rank 0's "Available KV cache memory"; 0.26 prints the suggestion on every rank
    assert warning.startswith("cut.log:57: boot 0: this log shows the room of rank(s) 0 only")
    assert "vLLM 0.26.0 prints the --kv-cache-memory suggestion on every rank" in warning
    assert "rerun with" not in warning


#: The line of the four-rank sample that completes startup (v0.26, EngineCore):
#: "(EngineCore pid=48467) … init engine (profile, create kv cache, warmup model) took 97.36 seconds"
FOUR_RANK_STARTUP_LINE = 75


def test_every_cut_of_the_four_rank_log_is_incomplete_on_every_rank_until_startup_completes():
    lines = FOUR_RANK_LOG.read_text().splitlines(keepends=True)
    assert "init engine (profile, create kv cache, warmup model) took" in lines[FOUR_RANK_STARTUP_LINE - 1]
    for cut in range(1, len(lines) + 1):
        ledger, _ = read_vllm_log_rooms("".join(lines[:cut]), source="cut.log")
        if cut >= FOUR_RANK_STARTUP_LINE:
            assert ledger["outcome"].tolist() == ["ok"] * 4, cut
            continue
        # graph capture, graph pool and suggestion lines (66–74) do not complete a 0.26 boot
        assert set(ledger["outcome"]) <= {"incomplete"}, cut
        # lines 1–7: the boot has begun but no rank has printed yet, so the ledger is empty
        with pytest.raises(LedgerError, match="incomplete" if len(ledger) else "empty") as refused:
            budget_from_ledger(ledger, parse_size("0.9GiB"))
        assert "rank(s) 0 only" not in str(refused.value), cut


def test_an_old_release_boot_completes_when_every_rank_captured_its_graphs():
    # 0.5.x V0, TP=2, no "init engine … took": graph capture is each rank's last startup step
    text = (
        "Initializing an LLM engine (v0.5.4) with config: model='m', tensor_parallel_size=2\n"
        + HEAD
        + "# GPU blocks: 2666, # CPU blocks: 2048\n"
        + "(VllmWorkerProcess pid=7) "
        + HEAD
        + "Graph capturing finished in 5 secs.\n"
    )
    ledger, _ = read_vllm_log_rooms(text)
    # rank 1 is through, but the driver (rank 0) has not finished: the boot has not
    assert ledger[["rank", "outcome"]].values.tolist() == [[1, "incomplete"]]
    ledger, _ = read_vllm_log_rooms(text + HEAD + "Graph capturing finished in 6 secs.\n")
    assert ledger["outcome"].tolist() == ["ok"] * 2


def test_old_graph_capture_line_completes_a_v0_boot():
    # 0.5.x V0, one GPU: no "init engine … took"; graph capture is the last step of startup
    text = (
        "Initializing an LLM engine (v0.5.4) with config: model='m', tensor_parallel_size=1\n"
        + HEAD
        + "# GPU blocks: 2666, # CPU blocks: 2048\n"
        + HEAD
        + "Graph capturing finished in 5 secs.\n"
    )
    assert (one_row(text)["outcome"], one_row(text)["num_gpu_blocks"]) == ("ok", 2666)
    cut = text.rsplit(HEAD, 1)[0]
    assert one_row(cut)["outcome"] == "incomplete"


def test_cr_only_file_counts_each_cr_as_a_line():
    text = FOUR_RANK_LOG.read_text() + (
        "(Worker_TP2 pid=48604) ERROR 11-24 10:31:02 [core.py:900] torch.OutOfMemoryError: CUDA out of memory.\n"
    )
    lf, lf_meta = read_vllm_log_rooms(text, source="x.log")
    cr, cr_meta = read_vllm_log_rooms(text.replace("\n", "\r").encode(), source="x.log")
    pd.testing.assert_frame_equal(lf, cr)
    # the OOM is line 88 either way, and no "ends mid-line" warning for the trailing \r
    assert cr_meta["warnings"] == lf_meta["warnings"] and cr_meta["warnings"][0].startswith("x.log:88:")
    assert cr_meta["lines"][("x.log", 0, 2, "outcome")] == 88


#: One line of each family not in FAMILIES above (configuration, ranks, flags, failures).
OTHER_LINES = [
    "vLLM API server version 0.26.0",
    "Initializing a V1 LLM engine (v0.26.0) with config: model='m', tensor_parallel_size=2",
    "non-default args: {'model': 'm', 'tensor_parallel_size': 2}",
    "args: Namespace(model='m', tensor_parallel_size=2)",
    "Forcing kv cache block size to 64 for FlashMLA backend.",
    "rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 1, EP rank 1",
    "world_size=2 rank=1 local_rank=1 distributed_init_method=tcp://127.0.0.1:1 backend=nccl",
    "init engine (profile, create kv cache, warmup model) took 38.11 seconds",
    "Application startup complete.",
    "Graph capturing finished in 5 secs.",
    "CUDA graph memory profiling is enabled (default since v0.21.0).",
    "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0).",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.0 GiB.",
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.0 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (6.91 GiB).",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.",
    "ValueError: Free memory on device cuda:0 (67.24/79.25 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 71.33 GiB).",
    "EngineCore encountered a fatal error.",
    "AssertionError: Error in memory profiling. Initial free memory 78.5 GiB, current free memory 80.1 GiB.",
    "RuntimeError: Engine core initialization failed.",
]


def test_every_family_has_a_sample_line_and_every_sample_line_passes_the_prefilter():
    lines = [line for line, _expected in FAMILIES] + OTHER_LINES + FIDELITY_LINES
    for line in lines:
        assert candidates(line.encode() + b"\n") == [(1, 0, line.encode())], line
    matched = {fact.family for line in lines for fact in read_message(line)}
    assert matched == {family for family, *_rest in families.FAMILIES}


# --- files, folders, globs and the frame ------------------------------------------------------


def test_read_many_logs_by_folder_glob_or_list(tmp_path):
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text(HEAD + "Available KV cache memory: 5.0 GiB\n")
    by_folder, meta = read_vllm_logs_rooms(tmp_path)
    by_glob, _ = read_vllm_logs_rooms(str(tmp_path / "*.log"))
    by_list, _ = read_vllm_logs_rooms([tmp_path / "a.log", tmp_path / "b.log"])
    assert by_folder["source"].tolist() == [str(tmp_path / "a.log"), str(tmp_path / "b.log")]
    assert by_glob.equals(by_folder) and by_list.equals(by_folder)
    assert set(meta["provenance"]["source"]) == {str(tmp_path / "a.log"), str(tmp_path / "b.log")}
    with pytest.raises(FileNotFoundError):
        read_vllm_logs_rooms(str(tmp_path / "none*.log"))


def test_ledger_columns_dtypes_and_streams():
    ledger, _ = read_vllm_log_rooms(
        io.BytesIO((HEAD + "Available KV cache memory: 5.0 GiB\n").encode()), source="s"
    )
    assert list(ledger.columns) == LEDGER_COLUMNS
    assert (
        str(ledger["available_kv_bytes"].dtype) == "Int64"
        and str(ledger["max_concurrency"].dtype) == "Float64"
    )
    assert ledger.loc[0, "source"] == "s"


def test_small_chunks_give_the_same_ledger(monkeypatch):
    """Lines cut across read blocks are put back together."""
    path = LOGS / "v0.6.6-tp2-three-line.log"
    whole, _ = read_vllm_log_rooms(path)
    monkeypatch.setattr("kvplan.io.vllm.scan.CHUNK_BYTES", 37)
    pieces, _ = read_vllm_log_rooms(path)
    pd.testing.assert_frame_equal(whole, pieces)


def test_a_ledger_built_in_frames_of_few_rows_is_the_ledger_built_at_once(monkeypatch):
    # the reader turns every FRAME_ROWS rows into a frame (less memory than the rows' dicts) and joins
    # them at the end: with one row a frame, the dense sample's ledger and line index are unchanged
    from kvplan import DATA_DIR
    from kvplan.io.vllm import read

    path = DATA_DIR / "boots" / "four-rank" / "boot.log"
    text = path.read_text()
    log = "".join(text.replace("pid=", f"pid={copy}") for copy in range(1, 4))  # three boots, new pids
    whole, whole_meta = read.read_vllm_log(log)
    monkeypatch.setattr(read, "FRAME_ROWS", 1)
    framed, framed_meta = read.read_vllm_log(log)
    assert len(whole) == 12  # 3 boots x 4 ranks
    pd.testing.assert_frame_equal(framed, whole)
    assert dict(framed_meta.lines) == dict(whole_meta.lines)
    pd.testing.assert_frame_equal(framed_meta.compact_provenance(), whole_meta.compact_provenance())


# --- property: arbitrary bytes, truncation, shuffled lines --------------------------------------

SAMPLE_LINES = (LOGS / "v0.9.2-tp2-oom-then-restart.log").read_bytes().splitlines(keepends=True)


def _check_never_invents(data: bytes) -> None:
    try:
        ledger, _ = read_vllm_log_rooms(data, source="p.log")
    except LogParseError:
        return
    ranks = set(ledger["rank"].dropna().astype(int))
    tp = ledger["tensor_parallel_size"].dropna()
    world = int(tp.iloc[0]) if not tp.empty else 1
    # the only ranks are those the text names: 0 and 1 in the sample (TP=2), or 0 alone
    assert ranks <= set(range(max(world, 2)))
    assert set(ledger["outcome"].dropna()) <= {"ok", "oom", "error", "incomplete"}


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes(data):
    _check_never_invents(data)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=sum(len(line) for line in SAMPLE_LINES)))
def test_truncated_logs(cut):
    _check_never_invents(b"".join(SAMPLE_LINES)[:cut])


@settings(max_examples=40, deadline=None)
@given(st.permutations(SAMPLE_LINES))
def test_shuffled_lines(lines):
    _check_never_invents(b"".join(lines))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.sampled_from([*SAMPLE_LINES, b"(Worker_TP9 pid=5) INFO x\n", b"\r", b"\x1b[0m"]), max_size=30
    ),
    st.text(string.printable, max_size=40),
)
def test_sample_lines_mixed_with_noise(lines, noise):
    _check_never_invents(b"".join(lines) + noise.encode())


# --- the bundled samples (data/boots, inputs in data/README.md) --------------------------------

BOOTS = DATA_DIR / "boots"


def sample(name):
    ledger, meta = read_vllm_logs_rooms(BOOTS / name)
    return ledger, meta


def test_sample_four_rank():
    ledger, meta = sample("four-rank")
    assert meta["warnings"] == []
    assert ledger["process"].tolist() == ["Worker_TP0", "Worker_TP1", "Worker_TP2", "Worker_TP3"]
    # to_gpu = init_free − (W + P + NT + cg) − 150 MiB per rank, printed as exact ints in the suggestion
    assert ledger["room_bytes"].tolist() == [20186346291, 18897856102, 13851269530, 17609365914]
    assert ledger["suggested_fit_bytes"].tolist() == [12686186087, 12701914727, 12676748903, 12696671847]
    assert ledger["init_free_bytes"].tolist() == [gib(x) for x in ("54.5", "53.28", "48.61", "52.09")]
    # "Available KV cache memory" from Worker_TP0 only; engine lines once, from min blocks 9,741 (rank 2)
    assert ledger["available_kv_bytes"].tolist()[0] == gib("11.9")
    assert ledger["available_kv_bytes"].isna().tolist() == [False, True, True, True]
    assert ledger["kv_cache_tokens"].tolist() == [155856] * 4  # 9,741 × 16
    assert ledger["max_concurrency"].tolist() == [4.76] * 4  # 9,741 / 2,048
    row = ledger.iloc[0]
    assert (
        row["vllm_version"],
        row["model"],
        row["max_model_len"],
        row["tensor_parallel_size"],
        row["gpu_memory_utilization"],
        row["block_size"],
    ) == ("0.26.0", "meta-llama/Llama-3.1-70B-Instruct", 32768, 4, 0.6, 16)


def test_sample_shared_gpu_dp_ranks_from_engine_core_prefixes():
    ledger, meta = sample("shared-gpu")
    assert meta["warnings"] == []
    assert ledger[["rank", "dp_rank", "process"]].values.tolist() == [
        [0, 0, "EngineCore_DP0"],
        [1, 1, "EngineCore_DP1"],
        [2, 2, "EngineCore_DP2"],
    ]
    assert ledger["room_bytes"].tolist() == [64394135552, 82385707008, 82379497472]
    # DP engines do not take a minimum across each other: only DP0 printed its engine lines
    assert ledger["kv_cache_tokens"].tolist()[0] == 425360  # 26,585 × 16
    assert ledger["kv_cache_tokens"].isna().tolist() == [False, True, True]


def test_sample_drift_reference_and_manual_canary():
    reference, _ = read_vllm_log_rooms(BOOTS / "drift" / "reference.log")
    assert reference["room_bytes"].tolist() == [31 * GiB] * 4
    assert reference["kv_cache_tokens"].tolist() == [761216] * 4  # 47,576 × 16
    canary, _ = read_vllm_log_rooms(BOOTS / "drift" / "canary.log")
    assert canary["manual_kv_bytes"].tolist() == [30 * GiB] * 4
    assert canary["init_free_bytes"].tolist() == [gib(x) for x in ("41.8", "42.1", "40.75", "41.9")]
    assert canary["room_bytes"].isna().all() and canary["outcome"].tolist() == ["ok"] * 4
    assert canary["kv_cache_tokens"].tolist() == [786432] * 4  # 49,152 × 16


def test_sample_v0_three_line():
    ledger, meta = sample("v0-three-line")
    assert meta["warnings"] == []
    assert ledger["available_kv_bytes"].tolist() == [gib("60.43"), gib("60.47")]
    # V0 captures graphs after sizing the KV cache: rank 0 took 0.30 GiB, rank 1 0.28 GiB
    assert ledger["room_bytes"].tolist() == [gib("60.43") - gib("0.30"), gib("60.47") - gib("0.28")]
    assert ledger["num_gpu_blocks"].tolist() == [61884] * 2
    assert ledger["max_concurrency"].tolist() == [30.22] * 2  # 61,884 × 16 / 32,768
    assert ledger["total_bytes"].tolist() == [gib("79.15")] * 2
    assert ledger["pid"].tolist()[1] == 1931


def test_sample_v0_10_2_plain_int_suggestion_and_per_worker_engine_lines():
    ledger, meta = sample("v0.10.2")
    assert meta["warnings"] == []
    assert ledger["room_bytes"].tolist() == [65828691968, 65866260480]
    assert ledger["suggested_fit_bytes"].tolist() == [57968040345, 58005264793]
    assert ledger["kv_in_use_bytes"].tolist() == [58843601305, 58875058585]
    # 0.9–0.11.0: one engine pair per worker, in rank order, before the minimum
    assert ledger["kv_cache_tokens"].tolist() == [718304, 718688]
    assert ledger["max_concurrency"].tolist() == [17.54, 17.55]


def test_sample_v0_19_debug():
    ledger, meta = sample("v0.19-debug")
    assert meta["warnings"] == []
    assert ledger["room_bytes"].tolist() == [74240157696, 74254837760]
    assert ledger["init_free_bytes"].tolist() == [gib("78.53"), gib("78.54")]
    assert ledger["kv_cache_tokens"].tolist() == [1022192] * 2  # 63,887 × 16


def test_sample_rank0_only():
    ledger, meta = sample("rank0-only")
    # 0.23 subtracts the graph estimate first; the pool (0.37 GiB) stayed under it (0.4 GiB)
    assert ledger["room_bytes"].tolist()[0] == gib("63.57")
    assert ledger["room_bytes"].isna().tolist() == [False, True]
    assert len(meta["warnings"]) == 1 and "on local rank 0 alone" in meta["warnings"][0]


def test_sample_oom_in_graph_capture():
    ledger, meta = sample("oom")
    assert ledger["outcome"].tolist() == ["error", "oom"]
    assert ledger.loc[1, "error"].startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."
    )
    # rank 0 did not fail itself: the engine's failure (line 84) is named as the engine's
    assert ledger.loc[0, "error"].startswith(
        f"not this rank's own failure: EngineCore_DP0 failed, at {BOOTS / 'oom' / 'boot.log'}:84: "
        "RuntimeError: Worker failed with error 'CUDA out of memory."
    )
    assert meta["lines"][(str(BOOTS / "oom" / "boot.log"), 0, 1, "outcome")] == 65
    assert ledger["kv_cache_tokens"].tolist() == [1087056, 1087200]


@pytest.mark.parametrize(
    ("version", "hint", "room_gib"),
    [
        # 0.19 with the env var unset: the estimate is printed, not subtracted → room = 20 − captured 1.5
        (
            "0.19.0",
            "In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_"
            "ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph memory during KV cache allocation. "
            "To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from "
            "0.9000 to 0.9189 to maintain the same effective KV cache size.",
            "18.5",
        ),
        # 0.18 with the env var on: subtracted first → only the pool's excess over the estimate (0.5 GiB)
        (
            "0.18.0",
            "CUDA graph memory profiling is enabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1). This will "
            "become the default in v0.19. The current --gpu-memory-utilization=0.9000 is equivalent to "
            "--gpu-memory-utilization=0.8811 without CUDA graph memory profiling.",
            "19.5",
        ),
        # 0.22 with the env var off (WARNING): not subtracted
        (
            "0.22.0",
            "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Consider "
            "re-enabling it (the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.9000 to 0.9189.",
            "18.5",
        ),
    ],
)
def test_graph_estimate_hints_decide_the_correction(version, hint, room_gib):
    text = (
        f"vLLM API server version {version}\n"
        + HEAD
        + "Available KV cache memory: 20.0 GiB\n"
        + HEAD
        + hint
        + "\n"
        + HEAD
        + "CUDA graph pool memory: 1.5 GiB (actual), 1.0 GiB (estimated), difference: 0.5 GiB (50.0%).\n"
    )
    # 20, 1.5 and 1.0 GiB are exact in binary, so the differences are exact too
    assert one_row(text)["room_bytes"] == gib(room_gib)


def test_suggestion_double_count_is_flagged_for_0_18_with_the_estimate_on():
    text = (
        "vLLM API server version 0.18.0\n" + HEAD + "CUDA graph memory profiling is enabled "
        "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1). This will become the default in v0.19.\n"
        + HEAD
        + line_of("suggestion", "(60.29 GiB)")
        + "\n"
    )
    ledger, meta = read_vllm_log_rooms(text)
    assert ledger.loc[0, "room_bytes"] == 64739669441
    assert any("vllm#57936" in warning for warning in meta["warnings"])
    _, meta = read_vllm_log_rooms(text.replace("0.18.0", "0.19.0"))
    assert not any("vllm#57936" in warning for warning in meta["warnings"])


# --- Ray workers, the V0 engine-config form, colour codes without ESC, Ray's log dedup -------------


def test_v0_ray_worker_without_a_rank_line_is_the_rank_after_the_driver():
    # vLLM 0.7.2, TP 2 over Ray: the driver (no prefix) is rank 0, the one Ray worker can only be rank 1.
    # V0 summary: total 79.19 × 0.90 = 71.27 GiB; KV = 71.271 − weights 7.51 − non-torch − peak 1.42:
    # driver 71.271 − 7.51 − 0.68 − 1.42 = 61.66, worker 71.271 − 7.51 − 0.60 − 1.42 = 61.74 GiB
    ledger, meta = read_vllm_log_rooms(LOGS / "v0.7.2-ray-tp2.log", source="ray2.log")
    assert (
        meta["warnings"] == []
    )  # no false "carry no process prefix"; one worker for one free rank: no guess
    rows = ledger[["rank", "process", "pid", "outcome"]].astype(object).where(ledger.notna(), None)
    assert rows.values.tolist() == [[0, None, None, "ok"], [1, "RayWorkerWrapper", 5121, "ok"]]
    assert ledger["available_kv_bytes"].tolist() == [gib("61.66"), gib("61.74")]
    assert ledger["non_torch_bytes"].tolist() == [gib("0.68"), gib("0.60")]
    # V0 sizes KV before capturing graphs: room = available − captured graph memory
    assert ledger["room_bytes"].tolist() == [gib("61.66") - gib("0.29"), gib("61.74") - gib("0.34")]
    # Llama-3.1-8B at TP 2: 2 (K, V) × 16 tokens × 4 heads × 128 × 2 bytes × 32 layers = 1 MiB per block;
    # the minimum over workers, 61.66 GiB // 1 MiB = 63,139 blocks; 63,139 × 16 / 8,192 = 123.32x
    assert ledger["num_gpu_blocks"].tolist() == [63139] * 2
    assert ledger["max_concurrency"].tolist() == [123.32] * 2
    budget = budget_from_ledger(ledger, reserve_bytes=GiB)
    assert budget.uniform_budget_bytes <= gib("61.66") - gib("0.29") - GiB  # the driver is the weaker rank


def test_ray_workers_without_rank_lines_are_numbered_by_first_appearance_with_one_warning():
    # vLLM 0.7.2, TP 4 over Ray with Ray's log dedup on: pid 6203 prints first, pid 6201's lines are
    # the '[repeated 2x across cluster]' ones (its own values, and the collapsed line of one more worker)
    source = str(LOGS / "v0.7.2-ray-tp4-dedup.log")
    ledger, meta = read_vllm_log_rooms(source)
    rows = ledger[["rank", "pid"]].astype(object).where(ledger.notna(), None)
    assert rows.values.tolist() == [[0, None], [1, 6203], [2, 6201]]  # appearance order, not pid order
    # KV: driver 71.271 − 3.76 − 0.74 − 1.42 = 65.35; 6203: − 0.63 → 65.46; 6201: − 0.61 → 65.48 GiB
    assert ledger["available_kv_bytes"].tolist() == [gib("65.35"), gib("65.46"), gib("65.48")]
    # the value shown on a collapsed line stays on the pid that printed it
    assert ledger["cuda_graph_bytes"].tolist() == [gib("0.29"), gib("0.30"), gib("0.31")]
    order = [warning for warning in meta["warnings"] if "first appearance" in warning]
    assert len(order) == 1 and order[0].startswith(f"{source}:6: ")
    assert "pid 6203 → rank 1, pid 6201 → rank 2" in order[0] and "not vLLM's own rank" in order[0]
    assert "uniform budget (a minimum over all ranks) is unaffected" in order[0]
    assert not any("carry no process prefix" in warning for warning in meta["warnings"])


def test_rank_assignment_lines_win_over_the_order_of_appearance_for_ray_workers():
    text = (
        "Initializing a V1 LLM engine (v0.10.0) with config: model='m', tensor_parallel_size=2, "
        "pipeline_parallel_size=1\n"
        "(RayWorkerWrapper pid=41, ip=10.0.0.5) " + HEAD + "Available KV cache memory: 4.0 GiB\n"
        "(RayWorkerWrapper pid=40, ip=10.0.0.5) " + HEAD + "Available KV cache memory: 3.0 GiB\n"
        "(RayWorkerWrapper pid=41, ip=10.0.0.5) INFO 08-14 14:00:00 [parallel_state.py:1] rank 1 in world size 2 "
        "is assigned as DP rank 0, PP rank 0, TP rank 1, EP rank 1\n"
        "(RayWorkerWrapper pid=40, ip=10.0.0.5) INFO 08-14 14:00:00 [parallel_state.py:1] rank 0 in world size 2 "
        "is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0\n"
    )
    ledger, meta = read_vllm_log_rooms(text)
    assert ledger[["rank", "pid", "available_kv_bytes"]].values.tolist() == [
        [0, 40, 3 * GiB],
        [1, 41, 4 * GiB],
    ]
    assert not any("first appearance" in warning for warning in meta["warnings"])


def test_the_v0_engine_config_form_of_0_7_3_to_0_10_is_read():
    # "Initializing a V0 LLM engine (v…)" is what V0 prints from 0.7.3 until it was removed (0.11.0)
    line = (
        "INFO 03-20 10:00:09 [llm_engine.py:232] Initializing a V0 LLM engine (v0.8.1) with config: "
        "model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', "
        "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, override_neuron_config=None, "
        "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=8192, download_dir=None, "
        "load_format=LoadFormat.AUTO, tensor_parallel_size=2, pipeline_parallel_size=1, "
        "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
        "device_config=cuda, seed=0, served_model_name=meta-llama/Llama-3.1-8B-Instruct, enable_prefix_caching=False"
    )
    [fact] = read_message(split_records(line)[0][0])
    assert fact.family == "engine_config" and fact.values["_v1"] is False
    text = (
        line + "\n"
        "INFO 03-20 10:00:24 [worker.py:267] model weights take 7.51GiB; non_torch_memory takes 0.71GiB; PyTorch "
        "activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is 61.63GiB.\n"
        "\x1b[1;36m(VllmWorkerProcess pid=4100)\x1b[0;0m INFO 03-20 10:00:24 [worker.py:267] model weights take "
        "7.51GiB; non_torch_memory takes 0.63GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the "
        "memory reserved for KV Cache is 61.71GiB.\n"
    )
    ledger, meta = read_vllm_log_rooms(text)
    key = meta["boots"][0]["compatibility_key"]
    assert (key["vllm_version"], key["model"], key["tensor_parallel_size"], key["max_model_len"]) == (
        "0.8.1",
        "meta-llama/Llama-3.1-8B-Instruct",
        2,
        8192,
    )
    assert ledger["available_kv_bytes"].tolist() == [gib("61.63"), gib("61.71")]


def test_colour_codes_that_lost_their_esc_byte_are_stripped_around_the_prefix_and_level():
    # vLLM ≤ 0.11 always colours the prefix (\x1b[1;36m … \x1b[0;0m); copy-paste may drop the ESC bytes.
    # V0 0.6.6 TP 2: KV = 71.271 − 7.48 − non-torch − 1.23: driver − 0.42 → 62.14, worker − 0.35 → 62.21 GiB
    text = (
        "INFO 12-19 10:21:09 llm_engine.py:234] Initializing an LLM engine (v0.6.6.post1) with config: "
        "model='meta-llama/Llama-3.1-8B-Instruct', max_seq_len=8192, tensor_parallel_size=2, pipeline_parallel_size=1, "
        "enforce_eager=False\n"
        "INFO 12-19 10:22:01 worker.py:232] model weights take 7.48GiB; non_torch_memory takes 0.42GiB; PyTorch "
        "activation peak memory takes 1.23GiB; the rest of the memory reserved for KV Cache is 62.14GiB.\n"
        "[1;36m(VllmWorkerProcess pid=902)[0;0m INFO 12-19 10:22:01 worker.py:232] model weights take 7.48GiB; "
        "non_torch_memory takes 0.35GiB; PyTorch activation peak memory takes 1.23GiB; the rest of the memory "
        "reserved for KV Cache is 62.21GiB.\n"
    )
    ledger, _meta = read_vllm_log_rooms(text)
    assert ledger[["rank", "pid"]].astype(object).where(ledger.notna(), None).values.tolist() == [
        [0, None],
        [1, 902],
    ]
    assert ledger["available_kv_bytes"].tolist() == [gib("62.14"), gib("62.21")]  # rank 0 keeps its own
    # 0.12+ level and grey codes without ESC, and one mid-line after another record
    [record] = split_records(
        "(Worker_TP1 pid=12) [32mINFO[0m [90m08-14 14:07:22[0m [90m[gpu_worker.py:227][0m "
        "Available KV cache memory: 5.0 GiB"
    )
    assert record == ("Available KV cache memory: 5.0 GiB", "Worker_TP1", 12, None, "INFO", 0)
    records = split_records("50%|## [1;36m(VllmWorkerProcess pid=7)[0;0m " + HEAD + "done")
    assert [(r[2], r[4], r[0]) for r in records] == [(None, None, "50%|##"), (7, "INFO", "done")]
    # never inside a message body, nor on a line without a prefix or level
    assert split_records(HEAD + "[1;36mtext[0;0m [32mINFO[0m")[0][0] == "[1;36mtext[0;0m [32mINFO[0m"
    assert split_records("[1;36mno header")[0][0] == "[1;36mno header"


def test_ranks_whose_lines_ray_deduplicated_are_not_incomplete_and_the_budget_says_why():
    # vLLM 0.11.0 (prints 'Available KV cache memory' on every rank), TP 4 over Ray, eager (no graphs).
    # An excerpt of the workers' lines: pid 24's line stands for 3 lines Ray collapsed (pids 22, 23, 24).
    # KV = 79.19 × 0.90 − (3.76 weights + 1.42 peak + non-torch): rank 0 − 0.71 → 65.38, shown − 0.63 → 65.46
    prefix = "(EngineCore_DP0 pid=5) (RayWorkerWrapper pid={}, ip=10.0.0.7) INFO 10-03 10:00:{} "
    text = (
        "(EngineCore_DP0 pid=5) INFO 10-03 10:00:09 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
        "model='m', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=4, pipeline_parallel_size=1, "
        "data_parallel_size=1, quantization=None, enforce_eager=True, kv_cache_dtype=auto\n"
        + "".join(
            prefix.format(21 + rank, 12)
            + f"[parallel_state.py:1165] rank {rank} in world size 4 is assigned as "
            f"DP rank 0, PP rank 0, TP rank {rank}, EP rank {rank}\n"
            for rank in range(4)
        )
        + prefix.format(21, 27)
        + "[gpu_worker.py:298] Available KV cache memory: 65.38 GiB\n"
        + prefix.format(24, 27)
        + "[gpu_worker.py:298] Available KV cache memory: 65.46 GiB [repeated 3x across cluster]\n"
        "(EngineCore_DP0 pid=5) INFO 10-03 10:00:30 [core.py:210] init engine (profile, create kv cache, warmup "
        "model) took 20.10 seconds\n"
    )
    ledger, meta = read_vllm_log_rooms(text, source="ray.log")
    assert ledger["outcome"].tolist() == ["ok"] * 4  # the boot completed on every rank
    assert ledger["room_bytes"].astype(object).where(ledger["room_bytes"].notna(), None).tolist() == [
        gib("65.38"),
        None,
        None,
        gib("65.46"),  # the shown value stays on pid 24
    ]
    dedup = [warning for warning in meta["warnings"] if "rank(s) 1, 2 show no room" in warning]
    assert len(dedup) == 1 and dedup[0].startswith("ray.log:7: boot 0:")
    assert "Ray deduplicated" in dedup[0] and "RAY_DEDUP_LOGS=0" in dedup[0]
    with pytest.raises(LedgerError, match=r"rank\(s\) 1, 2 show none") as refused:
        budget_from_ledger(ledger, reserve_bytes=GiB)
    assert "RAY_DEDUP_LOGS=0" in str(refused.value)
    # V0 (0.7.2) with one worker never shown: rank 3 has no line at all
    v0_ledger, v0_meta = read_vllm_log_rooms(LOGS / "v0.7.2-ray-tp4-dedup.log", source="v0.log")
    assert v0_ledger["outcome"].tolist() == ["ok"] * 3
    assert any(
        warning.startswith("v0.log:16: boot 0: rank(s) 3 show no room") and "RAY_DEDUP_LOGS=0" in warning
        for warning in v0_meta["warnings"]
    )
    with pytest.raises(LedgerError, match="RAY_DEDUP_LOGS=0"):
        budget_from_ledger(v0_ledger, reserve_bytes=GiB)


@pytest.mark.parametrize(
    ("config", "mode"),
    [
        # 0.11+ engine config prints the enum: FULL_AND_PIECEWISE = (FULL 2, PIECEWISE 1)
        (
            "compilation_config={'level': 3, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}",
            "FULL_AND_PIECEWISE",
        ),
        # 0.10 prints JSON: a pair (decode, mixed) or one number (1 = PIECEWISE)
        ('compilation_config={"level":3,"cudagraph_mode":[2,0]}', "FULL_DECODE_ONLY"),
        ('compilation_config={"level":3,"cudagraph_mode":1,"use_cudagraph":true}', "PIECEWISE"),
        ('compilation_config={"level":3,"use_cudagraph":true}', None),
    ],
)
def test_the_cuda_graph_mode_as_each_release_prints_it(config, mode):
    assert values.cudagraph_mode(config) == mode


@pytest.mark.parametrize(("sample", "mode"), [("four-rank", "FULL_AND_PIECEWISE"), ("v0.10.2", "PIECEWISE")])
def test_the_cuda_graph_mode_joins_the_compatibility_key(sample, mode):
    ledger, _ = read_vllm_log_rooms(BOOTS / sample / "boot.log")
    assert set(ledger["cudagraph_mode"]) == {mode}
