"""Every memory line vLLM prints, failures included: one line per format string and per release.

Each line is built from vLLM's own format string (the release file and line are named per family;
checked against the released wheels, ``pip download --no-deps vllm==X.Y.Z``) with that release's
record format and process prefix (:mod:`tests.fidelity_lines`). Sizes printed in GiB become bytes
by ``parse_size(f"{x}GiB")`` (nearest byte): ``gib("10.2")``.
"""

import pytest

from kvplan.room import read_vllm_log_rooms
from kvplan.units import parse_size
from tests.fidelity_lines import engine_config, engine_process, log, release, v0_engine_config, vllm_line

#: Releases of each family, from the released wheels (first .. last that holds the format string).
V1_ALL = ["0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.14.0", "0.18.0", "0.26.0", "0.30.0", "0.31.0", "0.33.0"]
V0_ALL = ["0.5.0", "0.5.5", "0.6.0", "0.6.3", "0.6.6", "0.7.3", "0.8.5", "0.9.2", "0.10.2"]
FROM_0_27 = ["0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"]


def gib(text):
    return parse_size(f"{text}GiB")


def single_rank(version, *messages, process=None, pid=123, level="INFO"):
    """A TP=1 V1 boot of ``version``: engine config, then ``messages`` printed by EngineCore (the worker
    at TP=1), then its weights line, so that the rank has a row whatever the messages are."""
    process = process or engine_process(version)
    lines = [vllm_line(version, engine_config(version), process, pid, where="core.py:139")]
    lines += [vllm_line(version, message, process, pid, level, "kv_cache_utils.py:1") for message in messages]
    lines += [
        vllm_line(
            version,
            "Model loading took 10.2 GiB memory and 4.781181 seconds",
            process,
            pid,
            where="gpu_model_runner.py:1",
        )
    ]
    return log(*lines)


def boot_row(text):
    ledger, meta = read_vllm_log_rooms(text)
    assert len(ledger) == 1, ledger
    return ledger.iloc[0], meta


def provenance_line(meta, column):
    rows = meta["provenance"][meta["provenance"]["column"] == column]
    assert len(rows) >= 1, f"no provenance for {column}"
    return int(rows["line"].iloc[-1])


# --- failed boots ------------------------------------------------------------------------------

TRACEBACK_CAPTURE = [
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 574, in compile_or_warm_up_model',
    "    self.model_runner.capture_model()",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 4211, in capture_model',
    "    self._capture_cudagraphs(",
]
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 79.17 GiB memory in use."
)


@pytest.mark.parametrize("version", ["0.10.2", "0.14.0", "0.26.0", "0.33.0"])
def test_oom_in_graph_capture_alone_is_a_failed_boot_out_of_memory_while_capturing(version):
    # v1/engine/core.py run_engine_core: logger.exception("EngineCore failed to start.") (0.7.0–0.33.0),
    # the traceback repeated under the same header (NewLineFormatter), the worker's torch OOM last
    process = engine_process(version)
    lines = [vllm_line(version, "EngineCore failed to start.", process, 7, "ERROR", "core.py:1584")]
    lines += [vllm_line(version, text, process, 7, "ERROR", "core.py:1584") for text in TRACEBACK_CAPTURE]
    lines += [vllm_line(version, OOM, process, 7, "ERROR", "core.py:1584")]
    row, meta = boot_row(log(*lines))
    assert row["outcome"] == "oom"
    assert row["error"] == OOM
    assert row["failed_in"] == "capture_model"
    assert meta["lines"][("<text>", 0, 0, "outcome")] == len(lines)


@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.18.0", "0.33.0"])
def test_engine_core_failed_to_start_with_a_plain_error_is_an_error(version):
    process = engine_process(version)
    error = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    lines = [
        vllm_line(version, "EngineCore failed to start.", process, 7, "ERROR", "core.py:1584"),
        vllm_line(version, "Traceback (most recent call last):", process, 7, "ERROR", "core.py:1584"),
        vllm_line(version, error, process, 7, "ERROR", "core.py:1584"),
    ]
    row, _meta = boot_row(log(*lines))
    assert (row["outcome"], row["error"]) == ("error", error)


@pytest.mark.parametrize("version", ["0.8.5", "0.18.0", "0.33.0"])
def test_engine_core_failed_to_start_without_any_exception_line_is_still_an_error(version):
    # the traceback was not captured (stderr elsewhere): the one line still says the boot failed
    row, _meta = boot_row(
        log(
            vllm_line(
                version, "EngineCore failed to start.", engine_process(version), 7, "ERROR", "core.py:1584"
            )
        )
    )
    assert (row["outcome"], row["error"]) == ("error", "EngineCore failed to start.")


@pytest.mark.parametrize("version", ["0.5.5", "0.6.6", "0.7.3", "0.8.5", "0.10.2"])
def test_exception_in_a_v0_worker_while_sizing_the_kv_cache(version):
    # executor/multiproc_worker_utils.py: "Exception in worker %s while processing method %s." (0.5.x–0.10.2)
    message = "Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks."
    lines = [
        vllm_line(version, v0_engine_config(version, tp=2), where="llm_engine.py:1"),
        vllm_line(version, message, "VllmWorkerProcess", 902, "ERROR", "multiproc_worker_utils.py:226"),
        vllm_line(
            version,
            "Traceback (most recent call last):",
            "VllmWorkerProcess",
            902,
            "ERROR",
            "multiproc_worker_utils.py:226",
        ),
        vllm_line(version, OOM, "VllmWorkerProcess", 902, "ERROR", "multiproc_worker_utils.py:226"),
    ]
    ledger, _meta = read_vllm_log_rooms(log(*lines))
    worker = ledger[ledger["pid"] == 902].iloc[0]
    assert worker["outcome"] == "oom"
    assert worker["failed_in"] == "determine_num_available_blocks"


def test_exception_in_a_v0_worker_without_the_exception_text_is_an_error():
    message = "Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks."
    text = log(
        vllm_line("0.6.6", v0_engine_config("0.6.6", tp=2), where="llm_engine.py:1"),
        vllm_line("0.6.6", message, "VllmWorkerProcess", 902, "ERROR", "multiproc_worker_utils.py:226"),
    )
    ledger, _meta = read_vllm_log_rooms(text)
    worker = ledger[ledger["pid"] == 902].iloc[0]
    assert (worker["outcome"], worker["error"]) == ("error", message)


@pytest.mark.parametrize("version", ["0.5.0", "0.6.6", "0.7.3", "0.9.2", "0.10.2"])
def test_v0_max_seq_len_larger_than_the_kv_cache_is_an_error_with_its_numbers(version):
    # worker/worker.py raise_if_cache_size_invalid: max_num_tokens = num_gpu_blocks × block_size
    # = 1345 × 16 = 21520 tokens for a max seq len of 32768
    error = (
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
        "stored in KV cache (21520). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    )
    text = log(
        vllm_line(version, v0_engine_config(version, max_seq_len=32768), where="llm_engine.py:1"),
        vllm_line(version, error, level="ERROR", where="engine.py:1"),
    )
    row, meta = boot_row(text)
    assert (row["outcome"], row["error"]) == ("error", error)
    assert row["kv_cache_tokens"] == 21520
    assert provenance_line(meta, "kv_cache_tokens") == 2


@pytest.mark.parametrize("version", ["0.9.2", "0.11.0", "0.20.0", "0.33.0"])
def test_v1_available_memory_inside_the_too_small_error(version):
    # v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.9–0.32) / kv_cache_planning.py (0.33)
    error = (
        "ValueError: To serve at least one request with the models's max seq len (131072), (16.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (6.91 GiB). Based on the available memory, the "
        "estimated maximum model length is 56576. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )
    row, meta = boot_row(single_rank(version, error, level="ERROR"))
    assert row["outcome"] == "error"
    assert row["available_kv_bytes"] == gib("6.91")
    assert provenance_line(meta, "available_kv_bytes") == 2


@pytest.mark.parametrize("version", ["0.14.0", "0.26.0", "0.33.0"])
def test_negative_available_kv_memory_is_read_as_printed(version):
    # gpu_worker.py: "Available KV cache memory: %s GiB" with format_gib(available) < 0
    row, _meta = boot_row(single_rank(version, "Available KV cache memory: -2.35 GiB"))
    assert row["available_kv_bytes"] == -gib("2.35")


@pytest.mark.parametrize("version", ["0.12.0", "0.20.0", "0.33.0"])
def test_manual_boot_on_xpu_reads_the_reserved_bytes(version):
    # v1/worker/xpu_worker.py determine_available_memory (0.12+): the same sentence as gpu_worker.py
    message = (
        "Initial free memory 60.12 GiB, reserved 8.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes "
        "config and skipped memory profiling. This does not respect the gpu_memory_utilization config. Only use "
        "kv_cache_memory_bytes config when you want manual control of KV cache memory size."
    )
    row, _meta = boot_row(single_rank(version, message))
    assert (row["manual_kv_bytes"], row["init_free_bytes"]) == (gib("8.0"), gib("60.12"))


def test_nixl_error_after_kv_sizing_is_an_error():
    # a KV-transfer failure after the KV cache was sized (vllm.distributed.kv_transfer…nixl, 0.9+)
    version = "0.33.0"
    error = "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND"
    text = single_rank(version, "Available KV cache memory: 30.0 GiB", "GPU KV cache size: 100,000 tokens")
    text += log(vllm_line(version, error, engine_process(version), 123, "ERROR", "core.py:1584"))
    row, _meta = boot_row(text)
    assert (row["outcome"], row["error"]) == ("error", error)


def test_ucx_error_line_is_an_error():
    # UCX's own logger: "[time] [host:pid:thread]  file.c:N  UCX  ERROR message"
    version = "0.33.0"
    ucx = "[1764410400.123456] [gpu-node-1:123  :0]          ib_iface.c:1046 UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory"
    text = single_rank(
        version, "Available KV cache memory: 30.0 GiB", "GPU KV cache size: 100,000 tokens"
    ) + log(ucx)
    row, _meta = boot_row(text)
    assert row["outcome"] == "error" and "UCX  ERROR" in row["error"]


def test_traceback_through_capture_model_without_memory_numbers_is_an_error_in_capture_model():
    version = "0.26.0"
    error = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    lines = [vllm_line(version, engine_config(version), "EngineCore", 7, where="core.py:139")]
    lines += [
        vllm_line(version, text, "EngineCore", 7, "ERROR", "core.py:1584") for text in TRACEBACK_CAPTURE
    ]
    lines += [vllm_line(version, error, "EngineCore", 7, "ERROR", "core.py:1584")]
    row, _meta = boot_row(log(*lines))
    assert (row["outcome"], row["error"], row["failed_in"]) == ("error", error, "capture_model")


# --- numbers inside messages ------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.0", "0.6.6", "0.7.3"])
def test_gpu_blocks_whose_hash_was_lost_in_copy_paste(version):
    # executor/gpu_executor.py "# GPU blocks: %d, # CPU blocks: %d": a pasted bare line that starts with
    # '#' renders as a Markdown heading, so the copy reads "GPU blocks: 1345, # CPU blocks: 2048"
    row, _meta = boot_row(log(v0_engine_config(version), "GPU blocks: 1345, # CPU blocks: 2048"))
    assert row["num_gpu_blocks"] == 1345


@pytest.mark.parametrize(
    ("version", "message"),
    [
        # v1/metrics/loggers.py log_engine_initialized: DEBUG "Engine %03d: …" (0.10–0.33), INFO "%d Engines: …" (0.11+, DP > 1)
        ("0.9.0", "vllm cache_config_info with initialization after num_gpu_blocks is: 105604"),
        ("0.9.2", "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 105604"),
        ("0.11.0", "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 105604"),
        ("0.33.0", "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 105604"),
        ("0.11.1", "2 Engines: vllm cache_config_info with initialization after num_gpu_blocks is: 105604"),
        ("0.27.0", "2 Engines: vllm cache_config_info with initialization after num_gpu_blocks is: 105604"),
        ("0.33.0", "2 Engines: vllm cache_config_info with initialization after num_gpu_blocks is: 105604"),
    ],
)
def test_the_api_servers_num_gpu_blocks(version, message):
    # INFO up to 0.11.0, DEBUG for "Engine NNN:" from 0.11.1
    level = "DEBUG" if message.startswith("Engine") and release(version) >= (0, 11, 1) else "INFO"
    text = single_rank(version, "Available KV cache memory: 30.0 GiB") + log(
        vllm_line(version, message, "APIServer", 100, level, "loggers.py:350")
    )
    row, _meta = boot_row(text)
    assert row["num_gpu_blocks"] == 105604


@pytest.mark.parametrize("version", ["0.9.0", "0.9.2"])
def test_nixl_num_blocks_debug_line(version):
    # distributed/kv_transfer/kv_connector/v1/nixl_connector.py register_kv_caches: DEBUG "num_blocks: %s, block_shape: %s"
    text = single_rank(version, "num_blocks: 21760, block_shape: torch.Size([16, 8, 128])")
    row, _meta = boot_row(text)
    assert row["num_gpu_blocks"] == 21760


@pytest.mark.parametrize("separator", ["\t", "     ", "\t\t"])
def test_the_0_6_5_development_profiling_table(separator):
    # vllm PR #10511 (development line before 0.6.5): one "key<TAB>value" field per line, each with the
    # header. available_kv_cache_memory = 71.29 − 14.96 − 1.79 − 1.26 = 53.28 (vLLM printed 53.29: unrounded)
    fields = [
        ("duration", "0.75 seconds"),
        ("total_gpu_memory", "79.22GiB"),
        ("gpu_memory_utilization", "0.90"),
        ("the current vLLM instance can use", "71.29GiB"),
        ("model weights take", "14.96GiB"),
        ("non_torch_memory", "1.79GiB"),
        ("PyTorch activation peak memory", "1.26GiB"),
        ("available_kv_cache_memory", "53.29GiB"),
    ]
    lines = [
        v0_engine_config("0.6.4.post1"),
        vllm_line("0.6.4", "Memory profiling results:", where="worker.py:243"),
    ]
    lines += [vllm_line("0.6.4", f"{key}{separator}{value}", where="worker.py:243") for key, value in fields]
    row, meta = boot_row(log(*lines))
    assert row["total_bytes"] == gib("79.22")
    assert row["requested_bytes"] == gib("71.29")
    assert row["weights_bytes"] == gib("14.96")
    assert row["non_torch_bytes"] == gib("1.79")
    assert row["activation_peak_bytes"] == gib("1.26")
    assert row["available_kv_bytes"] == gib("53.29")
    assert provenance_line(meta, "available_kv_bytes") == 10


# --- 0.26–0.33 lines that change the arithmetic -----------------------------------------------


@pytest.mark.parametrize("version", ["0.5.5", "0.6.6", "0.10.2", "0.11.1", "0.20.0", *FROM_0_27])
def test_block_override(version):
    # V0 engine/llm_engine.py (0.5–0.10.2), V1 kv_cache_utils.py (0.6.4–0.32) / kv_cache_planning.py:1525 (0.33):
    # "Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d"
    message = "Overriding num_gpu_blocks=24576 with num_gpu_blocks_override=4096"
    if release(version) < (0, 8, 0):
        text = log(
            v0_engine_config(version),
            vllm_line(version, message, where="llm_engine.py:395"),
            "Loading model weights took 14.9888 GB",
        )
    else:
        text = single_rank(version, message)
    row, meta = boot_row(text)
    assert row["num_gpu_blocks_override"] == 4096
    assert provenance_line(meta, "num_gpu_blocks_override") == 2


@pytest.mark.parametrize(
    ("version", "message"),
    [
        *[
            (
                v,
                "Auto-fit max_model_len: reduced from 131072 to 98304 to fit in available GPU memory (30.0 GiB available for KV cache)",
            )
            for v in ("0.14.0", "0.20.0", "0.27.0", "0.30.0", "0.31.0")
        ],
        *[
            (
                v,
                "Auto-fit max_model_len: reduced from 131072 to 98304 to fit in available KV cache memory (30.0 GiB GPU)",
            )
            for v in ("0.32.0", "0.33.0")
        ],
        (
            "0.33.0",
            "Auto-fit max_model_len: reduced from 131072 to 98304 to fit in available KV cache memory (30.0 GiB GPU + 60.0 GiB host)",
        ),
    ],
)
def test_auto_fit_reduced_length_wins_over_the_engine_config(version, message):
    text = single_rank(version, message)  # engine config says max_seq_len=32768 (the original)
    row, meta = boot_row(text)
    assert row["max_model_len"] == 98304
    assert provenance_line(meta, "max_model_len") == 2


@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.14.0", "0.20.0", "0.26.0", *FROM_0_27])
def test_chunked_prefill_max_num_batched_tokens(version):
    # config/scheduler.py __post_init__: info_once "Chunked prefill is enabled with max_num_batched_tokens=%d."
    text = log(
        vllm_line(
            version,
            "Chunked prefill is enabled with max_num_batched_tokens=8192.",
            "APIServer",
            100,
            where="scheduler.py:311",
        ),
    ) + single_rank(version)
    row, meta = boot_row(text)
    assert row["max_num_batched_tokens"] == 8192
    assert provenance_line(meta, "max_num_batched_tokens") == 1


def test_non_default_args_give_max_num_batched_tokens_and_async_scheduling():
    version = "0.33.0"
    args = "non-default args: {'model': 'Qwen/Qwen3-8B', 'max_num_batched_tokens': 16384, 'async_scheduling': False, 'mamba_cache_mode': 'align', 'disable_hybrid_kv_cache_manager': True}"
    text = log(vllm_line(version, args, "APIServer", 100, where="startup.py:96")) + single_rank(version)
    row, _meta = boot_row(text)
    assert row["max_num_batched_tokens"] == 16384
    assert not row["async_scheduling"]
    assert row["mamba_cache_mode"] == "align"
    assert not row["hybrid_kv_cache_manager"]


@pytest.mark.parametrize(
    ("version", "state"), [("0.14.0", "enabled"), ("0.20.0", "disabled"), ("0.26.0", "enabled")]
)
def test_asynchronous_scheduling(version, state):
    # config/vllm.py __post_init__: info_once "Asynchronous scheduling is %s." (0.14–0.26)
    text = log(
        vllm_line(version, f"Asynchronous scheduling is {state}.", "APIServer", 100, where="vllm.py:1110")
    )
    row, _meta = boot_row(text + single_rank(version))
    assert row["async_scheduling"] == (state == "enabled")


@pytest.mark.parametrize(
    ("version", "message"),
    [
        # config/vllm.py warning_once (0.26: 1094/1101; 0.32: 1622/1629/1639; 0.33: 1697/1706/1713)
        *[
            (
                v,
                "Async scheduling will be disabled because it is not supported with the `ray` distributed executor backend. ",
            )
            for v in ["0.26.0", *FROM_0_27]
        ],
        *[
            (
                v,
                "Async scheduling is disabled for ROCm DeepEP high-throughput DBO because that combination can corrupt DP+EP generation accuracy.",
            )
            for v in ["0.26.0", "0.30.0", "0.33.0"]
        ],
        (
            "0.32.0",
            "Async scheduling is disabled because the V1 model runner does not support it with pipeline parallelism.",
        ),
        (
            "0.33.0",
            "Async scheduling is disabled because the V1 model runner does not support it with pipeline parallelism.",
        ),
    ],
)
def test_async_scheduling_turned_off(version, message):
    # from 0.27 async scheduling is on by default and only turning it off is printed
    text = log(vllm_line(version, message, "APIServer", 100, "WARNING", "vllm.py:1697"))
    row, meta = boot_row(text + single_rank(version))
    assert not row["async_scheduling"]  # read (pd.NA would raise here), False
    assert provenance_line(meta, "async_scheduling") == 1


@pytest.mark.parametrize("version", ["0.15.0", "0.20.0", "0.26.0", *FROM_0_27])
def test_mamba_cache_mode(version):
    # model_executor/models/config.py: "Mamba cache mode is set to '%s' for %s by default when prefix caching is enabled"
    message = "Mamba cache mode is set to 'align' for Qwen3NextForCausalLM by default when prefix caching is enabled"
    row, _meta = boot_row(single_rank(version, message))
    assert row["mamba_cache_mode"] == "align"


@pytest.mark.parametrize(
    "message",
    [
        # kv_cache_planning.py:870 / kv_cache_utils.py (0.27–0.32)
        "Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding window). The compute of layers like sliding window is still saved.",
        # kv_cache_planning.py:845
        "KV cache page sizes cannot be unified; treating sliding-window layers as full attention for cache allocation. Sliding-window attention compute is unchanged.",
        # config/vllm.py:2266
        "Turning off hybrid kv cache manager because `--kv-transfer-config` selects a KV connector that does not support it. Impact: hybrid SSM models (e.g. Jamba, Bamba) require HMA and will fail at startup without it; models with sliding window attention will run with reduced performance.",
        # config/vllm.py:2247
        "There is a latency regression when using chunked local attention with the hybrid KV cache manager. Disabling it, by default. To enable it, set the environment VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1.",
    ],
)
@pytest.mark.parametrize("version", ["0.27.0", "0.30.0", "0.33.0"])
def test_hybrid_kv_cache_manager_off(version, message):
    row, meta = boot_row(single_rank(version, message))
    assert row["hybrid_kv_cache_manager"] is False or not row["hybrid_kv_cache_manager"]
    assert provenance_line(meta, "hybrid_kv_cache_manager") == 2


@pytest.mark.parametrize(
    ("version", "message", "logged"),
    [
        ("0.30.0", "kv cache group sizes [544, 544]", "[544, 544]"),
        ("0.31.0", "kv cache group sizes [16]", "[16]"),
        ("0.32.0", "kv cache group sizes (576, 576)", "(576, 576)"),
        ("0.33.0", "kv cache group sizes (32,)", "(32,)"),
    ],
)
def test_kv_cache_group_sizes(version, message, logged):
    row, _meta = boot_row(single_rank(version, message))
    assert row["kv_cache_group_block_sizes"] == logged


@pytest.mark.parametrize("version", ["0.31.0", "0.32.0", "0.33.0"])
def test_encoder_graph_capture_memory_is_graph_memory(version):
    # v1/worker/mm_encoder_model_runner.py:94 (0.31+); on top of the decoder's graphs
    text = single_rank(
        version,
        "Available KV cache memory: 30.0 GiB",
        "Graph capturing finished in 12 secs, took 0.5 GiB",
        "Encoder graph capturing finished in 3 secs, took 0.42 GiB (8 graphs)",
    )
    row, _meta = boot_row(text)
    assert row["encoder_cuda_graph_bytes"] == gib("0.42")


#: (family, message, releases that print it: first, one between, last; from the released wheels)
ROOM_CAVEAT_LINES = [
    # v1/worker/utils.py (0.32–0.33)
    (
        "weights_outside",
        "Weights are held outside this process: of the 128.63 GiB utilization budget, 60.2 GiB is externally held and 68.43 GiB remains for the engine's own allocations.",
        ["0.32.0", "0.33.0"],
    ),
    # v1/worker/gpu_worker.py (0.14–0.33)
    (
        "sleep_mode",
        "Sleep mode freed 120.5 GiB memory, 1.2 GiB memory is still in use.",
        ["0.14.0", "0.26.0", "0.33.0"],
    ),
    # device_allocator/cumem.py sleep (0.11–0.33) and discard (0.32–0.33)
    (
        "sleep_mode",
        "CuMemAllocator: sleep freed 120.50 GiB memory in total, of which 15.27 GiB is backed up in CPU and the rest 105.23 GiB is discarded directly.",
        ["0.11.0", "0.26.0", "0.33.0"],
    ),
    ("sleep_mode", "CuMemAllocator: discarded 105.23 GiB for tags ('kv_cache',).", ["0.32.0", "0.33.0"]),
    # v1/worker/gpu_worker.py ROCm fallback (0.29–0.33)
    (
        "rocm_free_grew",
        "Free memory grew by 1.25 GiB during profiling (initial 130.2 GiB, current 131.45 GiB). Sizing the KV cache from the 3.5 GiB torch reserved instead of the profiling difference.",
        ["0.29.0", "0.31.0", "0.33.0"],
    ),
    # distributed/elastic_ep/elastic_state.py (0.17–0.33)
    ("elastic_ep", "[Elastic EP] Synced KV cache memory size to new workers", ["0.17.0", "0.26.0", "0.33.0"]),
    # v1/executor/abstract.py (0.33: 409/427/449): fall asleep, wake up (0.26–0.33), discard (0.32–0.33)
    ("sleep_mode", "It took 1.234567 seconds to fall asleep.", ["0.26.0", "0.30.0", "0.33.0"]),
    (
        "sleep_mode",
        "It took 0.456789 seconds to wake up tags ['weights', 'kv_cache'].",
        ["0.26.0", "0.30.0", "0.33.0"],
    ),
    ("sleep_mode", "It took 0.012345 seconds to discard tags ['kv_cache'].", ["0.32.0", "0.33.0"]),
    # distributed/kv_transfer/kv_connector/v1/hisparse/connector.py:252 (0.32–0.33) and the pools line
    (
        "hisparse",
        "HiSparse steady-state maximum concurrency for 131,072 tokens per request: 35.20x (running requests reading from host).",
        ["0.32.0", "0.33.0"],
    ),
    (
        "hisparse",
        "GPU + host KV cache size: 2,869,120 tokens, Maximum concurrency for 131,072 tokens per request: 21.89x",
        ["0.32.0", "0.33.0"],
    ),
]


@pytest.mark.parametrize(
    ("family", "message", "version"),
    [(family, message, version) for family, message, versions in ROOM_CAVEAT_LINES for version in versions],
)
def test_lines_that_change_what_the_room_means_are_flagged_with_their_line(family, message, version):
    text = single_rank(version, "Available KV cache memory: 30.0 GiB", message)
    _row, meta = boot_row(text)
    notes = [w for w in meta["warnings"] if getattr(w, "code", None) == family]
    assert notes and notes[0].line == 3


def test_weights_outside_the_process_reads_the_engine_budget():
    version = "0.33.0"
    message = "Weights are held outside this process: of the 128.63 GiB utilization budget, 60.2 GiB is externally held and 68.43 GiB remains for the engine's own allocations."
    row, _meta = boot_row(single_rank(version, message))
    assert row["requested_bytes"] == gib("68.43")
    assert row["external_weights_bytes"] == gib("60.2")


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_weights_outside_the_process_value_errors_read_their_numbers(version):
    # v1/worker/utils.py request_memory (0.32+): the engine's budget is requested memory − external weights
    budget = (
        "ValueError: Free memory on device cuda:0 (60.12/79.25 GiB) on startup is less than the engine's "
        "budget after excluding external process's weights (0.9, 62.4 GiB). Decrease GPU memory utilization "
        "or reduce GPU memory used by other processes."
    )
    row, _meta = boot_row(single_rank(version, budget, level="ERROR"))
    assert (row["outcome"], row["error"]) == ("error", budget)
    assert (row["init_free_bytes"], row["total_bytes"]) == (gib("60.12"), gib("79.25"))
    assert (row["gpu_memory_utilization"], row["requested_bytes"]) == (0.9, gib("62.4"))
    over = (
        "ValueError: Externally held weights on device cuda:0 (75.5/79.25 GiB) exceed the desired GPU memory "
        "utilization (0.9, 71.33 GiB). Increase GPU memory utilization or reduce GPU memory used by other "
        "processes."
    )
    row, _meta = boot_row(single_rank(version, over, level="ERROR"))
    assert (row["outcome"], row["error"]) == ("error", over)
    assert (row["external_weights_bytes"], row["requested_bytes"]) == (gib("75.5"), gib("71.33"))


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_hisparse_gpu_plus_host_size_is_not_a_gpu_figure(version):
    text = single_rank(
        version,
        "GPU + host KV cache size: 2,869,120 tokens, Maximum concurrency for 131,072 tokens per request: 21.89x",
    )
    row, _meta = boot_row(text)
    assert row["kv_cache_pools"] == "GPU + host"
    assert row["kv_cache_tokens"] == 2869120


@pytest.mark.parametrize("version", ["0.15.0", "0.20.0", "0.27.0", "0.33.0"])
def test_server_version_line(version):
    # entrypoints/… (0.15–0.26) / serve/utils/api_utils.py (0.27–0.32) / common/startup.py:18 (0.33)
    text = log(
        vllm_line(
            version,
            f"vLLM server version {version}, serving model Qwen/Qwen3-8B",
            "APIServer",
            100,
            where="startup.py:36",
        )
    )
    text += single_rank(version).replace(f"(v{version}) ", "")
    row, _meta = boot_row(text)
    assert row["vllm_version"] == version


def test_server_version_logo():
    # the logo of startup.py log_version_and_model: the message opens with "\n", so every logo line
    # carries the record header (NewLineFormatter), monochrome in a file
    version = "0.33.0"
    head = vllm_line(version, "", "APIServer", 100, where="startup.py:36")
    logo = [
        head,
        head + "       █     █     █▄   ▄█",
        head + " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0",
        head + "  █▄█▀ █     █     █     █  model   Qwen/Qwen3-8B",
        head + "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
    ]
    text = log(*logo) + single_rank(version).replace(f"(v{version}) ", "")
    row, _meta = boot_row(text)
    assert row["vllm_version"] == "0.33.0"


#: One bare line (no header) of each family these tests add, for the every-family sample check of
#: tests/test_io_vllm_log.py (each must pass the byte pre-filter and match its family).
SAMPLE_LINES = [
    "EngineCore failed to start.",
    "EngineCore hit an exception: Traceback (most recent call last):",
    "Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks.",
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (21520).",
    "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND",
    "[1764410400.123456] [gpu-node-1:123  :0]          ib_iface.c:1046 UCX  ERROR ibv_create_cq(cqe=4096) failed",
    'File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 4211, in capture_model',
    "num_blocks: 21760, block_shape: torch.Size([16, 8, 128])",
    "Overriding num_gpu_blocks=24576 with num_gpu_blocks_override=4096",
    "Auto-fit max_model_len: reduced from 131072 to 98304 to fit in available KV cache memory (30.0 GiB GPU)",
    "Chunked prefill is enabled with max_num_batched_tokens=8192.",
    "Mamba cache mode is set to 'align' for Qwen3NextForCausalLM by default when prefix caching is enabled",
    "Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any optimizations for saving KV cache memory.",
    "KV cache page sizes cannot be unified; treating sliding-window layers as full attention for cache allocation.",
    "kv cache group sizes (576, 576)",
    "GPU + host KV cache size: 2,869,120 tokens, Maximum concurrency for 131,072 tokens per request: 21.89x",
    "Encoder graph capturing finished in 3 secs, took 0.42 GiB (8 graphs)",
    "Weights are held outside this process: of the 128.63 GiB utilization budget, 60.2 GiB is externally held and 68.43 GiB remains for the engine's own allocations.",
    "2 Engines: vllm cache_config_info with initialization after num_gpu_blocks is: 105604",
    "vLLM server version 0.33.0, serving model Qwen/Qwen3-8B",
    " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0",
    "model weights take\t14.96GiB",
    "the current vLLM instance can use    71.29GiB",
    "Sleep mode freed 120.5 GiB memory, 1.2 GiB memory is still in use.",
    "Free memory grew by 1.25 GiB during profiling (initial 130.2 GiB, current 131.45 GiB). Sizing the KV cache from the 3.5 GiB torch reserved instead of the profiling difference.",
    "[Elastic EP] Synced KV cache memory size to new workers",
    "HiSparse steady-state maximum concurrency for 131,072 tokens per request: 35.20x (running requests reading from host).",
    "Asynchronous scheduling is enabled.",
    "ValueError: Externally held weights on device cuda:0 (75.5/79.25 GiB) exceed the desired GPU memory utilization (0.9, 71.33 GiB).",
    "It took 1.234567 seconds to fall asleep.",
    "CuMemAllocator: discarded 105.23 GiB for tags ('kv_cache',).",
    "Async scheduling will be disabled because it is not supported with the `ray` distributed executor backend. ",
]
