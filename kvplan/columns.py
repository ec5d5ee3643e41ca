"""The ledger glossary: one name per quantity, one row per boot × rank; memory columns are ``int`` ``*_bytes``.
Readers produce these names, every other module consumes them: add a column here before using it elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

IDENTITY = {
    "source": "file the row was read from",
    "boot": "index of the boot inside the file (a restart starts a new boot), from 0",
    "rank": "global worker rank",
    "tp_rank": "tensor-parallel rank",
    "pp_rank": "pipeline-parallel rank",
    "dp_rank": "data-parallel rank",
    # issue 26: the other groups of vLLM's worker names; 0 for a group of one member, NA where nothing says
    "pcp_rank": "prefill-context-parallel rank (vLLM ≥ 0.12)",
    "dcp_rank": "decode-context-parallel rank (vLLM ≥ 0.11)",
    "ep_rank": "expert-parallel rank (0 when expert parallelism is off)",
    "process": "process prefix as logged, e.g. 'Worker_TP1'",
    "pid": "process id as logged",
}

#: The compatibility-key fields whose product is the number of ranks.
LAYOUT_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
#: A worker's rank in each of vLLM's parallel groups (vLLM names them DP, PP, PCP, TP, DCP, EP).
GROUP_RANKS = ("tp_rank", "pp_rank", "dp_rank", "pcp_rank", "dcp_rank", "ep_rank")

#: The compatibility key: a budget is reusable only where every one of these is unchanged.
COMPATIBILITY_KEY = {
    "vllm_version": "vLLM release, e.g. '0.11.0'",
    "model": "model name or path",
    "revision": "model revision",
    "dtype": "model dtype, e.g. 'torch.bfloat16'",
    "quantization": "quantization method, or None",
    "kv_cache_dtype": "KV cache dtype, e.g. 'auto' or 'fp8'",
    "max_model_len": "maximum sequence length [tokens]",
    "block_size": "KV cache block size [tokens]",
    "tensor_parallel_size": "TP degree",
    "pipeline_parallel_size": "PP degree",
    "data_parallel_size": "DP degree",
    "decode_context_parallel_size": "DCP degree",
    "enforce_eager": "True when CUDA graphs are off",
    "cudagraph_mode": "V1 CUDA graph mode (compilation_config), e.g. 'FULL_AND_PIECEWISE'",
    "gpu_memory_utilization": "requested fraction of total GPU memory",
    "gpu_name": "GPU type, e.g. 'NVIDIA H100 80GB HBM3'",
    "driver_version": "NVIDIA driver version",
}

MEASUREMENTS = {
    "total_bytes": "total GPU memory",
    "init_free_bytes": "free GPU memory when the worker started",
    "requested_bytes": "total × gpu_memory_utilization",
    "weights_bytes": "memory taken by model weights",
    "non_torch_bytes": "memory outside PyTorch's allocator (NCCL, CUDA context)",
    "activation_peak_bytes": "peak activation memory of the profile run",
    "cuda_graph_bytes": "memory taken by CUDA graph capture (can be negative as logged)",
    "cuda_graph_estimate_bytes": "CUDA graph memory estimated before KV sizing (vLLM ≥ 0.18)",
    "available_kv_bytes": "KV cache memory vLLM computed as available",
    "suggested_fit_bytes": "vLLM's --kv-cache-memory suggestion to fit the requested memory",
    "suggested_full_bytes": "vLLM's --kv-cache-memory suggestion to fully utilize the GPU",
    "kv_in_use_bytes": "KV cache memory in use, as vLLM reported it",
    "manual_kv_bytes": "KV cache bytes set by --kv-cache-memory-bytes on a manual boot (the flag's exact "
    "bytes when the logs show them, else vLLM's figure printed to 0.01 GiB)",
    "manual_kv_max_bytes": "the most --kv-cache-memory-bytes can be: manual_kv_bytes when exact, else the "
    "printed figure + 0.005 GiB",
    "other_process_bytes": "memory used by other processes on the same GPU",
    "room_bytes": "bytes this rank can give to KV cache (best evidence, see room_source)",
    "profiled_free_bytes": "free GPU memory after the profile run (DEBUG 'Free memory after profiling')",
    "encoder_cuda_graph_bytes": "memory taken by the encoder's CUDA graph capture (vLLM ≥ 0.31)",
    "external_weights_bytes": "weights held outside the vLLM process (weight-cache daemon, vLLM ≥ 0.32)",
}

AS_LOGGED = {
    "kv_cache_tokens": "'GPU KV cache size' as logged [tokens]",
    "max_concurrency": "'Maximum concurrency' as logged [full-length sequences]",
    "num_gpu_blocks": "'# GPU blocks' as logged",
}

OUTCOME = {
    "room_source": "where room_bytes came from: suggestion, available_kv, parts (read from a log) or manual "
    "(stated in a ledger CSV by hand)",
    "outcome": "ok, oom, error or incomplete",
    "error": "the error text when outcome is not ok",
    "failed_in": "the vLLM function a failed boot went through (traceback or worker method), "
    "e.g. 'capture_model'",
}

#: Configuration that changes vLLM's KV arithmetic, as the logs state it (NA when they do not); kept out of
#: :data:`COMPATIBILITY_KEY` so that gates and bundles that do not show them compare as before.
SIZING_CONFIG = {
    "max_num_batched_tokens": "scheduler's max_num_batched_tokens ('Chunked prefill is enabled with …')",
    "async_scheduling": "True when async scheduling is on (non-default args)",
    "mamba_cache_mode": "Mamba cache mode, e.g. 'align' (hybrid models with prefix caching)",
    "hybrid_kv_cache_manager": "False when vLLM disabled the hybrid KV cache manager or treats "
    "sliding-window layers as full attention",
    "num_gpu_blocks_override": "num_gpu_blocks_override applied ('Overriding num_gpu_blocks=…')",
    "kv_cache_group_block_sizes": "'kv cache group sizes' as logged, e.g. '(576, 576)'",
    "kv_cache_pools": "pools of the KV cache size line: 'GPU', 'GPU + host' (HiSparse), 'XPU', …",
}

#: ``failed_in`` → what vLLM was doing (the words a refusal uses).
FAILURE_PHASES = {
    name: phase
    for phase, names in {
        "capturing CUDA graphs": ("capture_model", "_capture_cudagraphs"),
        "estimating CUDA graph memory": ("profile_cudagraph_memory",),
        "profiling memory to size the KV cache": (
            "determine_num_available_blocks",
            "determine_available_memory",
            "profile_run",
        ),
        "allocating the KV cache": ("initialize_cache", "initialize_from_config", "initialize_kv_cache"),
        "loading the model weights": ("load_model",),
        "compiling and warming up the model": ("compile_or_warm_up_model",),
        "checking free GPU memory at startup": ("init_device",),
        "checking that the KV cache holds one request of the max model length": (
            "check_enough_kv_cache_memory",
            "_check_enough_kv_cache_memory",
        ),
    }.items()
    for name in names
}


def failure_phase(failed_in: object) -> str:
    """Words for where a boot failed, from its ``failed_in`` ('' when unknown), e.g. ``while capturing CUDA graphs (capture_model)``."""
    if not isinstance(failed_in, str) or not failed_in:
        return ""
    return f"while {FAILURE_PHASES.get(failed_in, 'running')} ({failed_in})"


#: Columns that kvplan 0.1.0 did not write: a bundle whose recorded ledger has none of one of them is
#: verified on the columns it recorded (a reader that learned more lines since must not fail it).
NEWER_THAN_0_1_0 = (
    *SIZING_CONFIG,
    "encoder_cuda_graph_bytes",
    "external_weights_bytes",
    "failed_in",
    "manual_kv_max_bytes",
    "pcp_rank",
    "dcp_rank",
    "ep_rank",
)

GLOSSARY = {**IDENTITY, **COMPATIBILITY_KEY, **MEASUREMENTS, **AS_LOGGED, **OUTCOME, **SIZING_CONFIG}
LEDGER_COLUMNS = list(GLOSSARY)
BYTES_COLUMNS = [name for name in LEDGER_COLUMNS if name.endswith("_bytes")]
KEY_COLUMNS = list(COMPATIBILITY_KEY)
OUTCOMES = ("ok", "oom", "error", "incomplete")
#: Nullable dtypes of the ledger: whole numbers ``Int64``, fractions ``Float64``, flags ``boolean``,
#: every other column ``string``.
INT_COLUMNS = [
    *BYTES_COLUMNS,
    *GROUP_RANKS,
    *LAYOUT_FIELDS,
    "boot",
    "rank",
    "pid",
    "max_model_len",
    "block_size",
]
INT_COLUMNS += ["decode_context_parallel_size", "kv_cache_tokens", "num_gpu_blocks", "max_num_batched_tokens"]
INT_COLUMNS += ["num_gpu_blocks_override"]
FLOAT_COLUMNS = ["gpu_memory_utilization", "max_concurrency"]
BOOL_COLUMNS = ["enforce_eager", "async_scheduling", "hybrid_kv_cache_manager"]
#: Values of ``room_source``: the log reader's evidence, best first, then a room stated by hand (ledger CSV).
ROOM_SOURCES = ("suggestion", "available_kv", "parts", "manual")


#: The load frame (:mod:`kvplan.io.load`): one row per stats line, /metrics scrape and engine, or event, in file
#: order. Usage and hit rates in percent, throughput in tokens/s; ``time`` naive (UTC for /metrics, else the
#: server's local time); ``year_known`` False for vLLM's yearless stamps; ``restarts`` before the row.
LOAD_COLUMNS = {
    "source": "string",
    "line": "Int64",
    "time": "datetime64[us]",
    "engine": "Int64",
    "kv_cache_usage_pct": "Float64",
    "running": "Int64",
    "waiting": "Int64",
    "swapped": "Int64",
    "prompt_tokens_per_s": "Float64",
    "generation_tokens_per_s": "Float64",
    "prefix_cache_hit_pct": "Float64",
    "preemptions": "Int64",
    "preemptions_total": "Int64",
    "event": "string",
    "kind": "string",
    "year_known": "boolean",
    "restarts": "Int64",
    "raw": "string",
}
#: The load rows' keys in ``kvplan load --json`` / ``--csv``, in order.
LOAD_ROW_KEYS = tuple(LOAD_COLUMNS)[:14]


def world_size(key: Mapping[str, Any]) -> int | None:
    """TP × PP × DP of a compatibility key; None when any of the three is not known."""
    world = 1
    for name in LAYOUT_FIELDS:
        value: Any = key.get(name)
        try:
            world *= int(value)  # None, pd.NA and NaN raise: not known
        except (TypeError, ValueError):
            return None
    return world


def is_known(value: object) -> bool:
    """False for a missing ledger cell (None, NaN, ``pd.NA``); lists and dicts count as known."""
    if value is None:
        return False
    try:
        return not bool(pd.isna(value))
    except (TypeError, ValueError):  # array-likes: pd.isna answers element-wise
        return True
