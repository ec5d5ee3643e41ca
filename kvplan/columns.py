"""The ledger glossary: one canonical name per quantity, one row per boot × rank.

Every memory column is ``int`` bytes and ends in ``_bytes``. Readers produce these names,
every other module consumes them; add a column here before using it anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

IDENTITY = {
    "source": "file the row was read from",
    "boot": "index of the boot inside the file (a restart starts a new boot), from 0",
    "rank": "global worker rank",
    "tp_rank": "tensor-parallel rank",
    "pp_rank": "pipeline-parallel rank",
    "dp_rank": "data-parallel rank",
    "process": "process prefix as logged, e.g. 'Worker_TP1'",
    "pid": "process id as logged",
}

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
    "manual_kv_bytes": "KV cache bytes set by --kv-cache-memory-bytes on a manual boot",
    "other_process_bytes": "memory used by other processes on the same GPU",
    "room_bytes": "bytes this rank can give to KV cache (best evidence, see room_source)",
    "profiled_free_bytes": "free GPU memory after the profile run (DEBUG 'Free memory after profiling')",
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
}

GLOSSARY = {**IDENTITY, **COMPATIBILITY_KEY, **MEASUREMENTS, **AS_LOGGED, **OUTCOME}
LEDGER_COLUMNS = list(GLOSSARY)
BYTES_COLUMNS = [name for name in LEDGER_COLUMNS if name.endswith("_bytes")]
KEY_COLUMNS = list(COMPATIBILITY_KEY)
OUTCOMES = ("ok", "oom", "error", "incomplete")
#: Nullable dtypes of the ledger: whole numbers ``Int64``, fractions ``Float64``, flags ``boolean``,
#: every other column ``string``.
INT_COLUMNS = [
    *BYTES_COLUMNS,
    "boot",
    "rank",
    "tp_rank",
    "pp_rank",
    "dp_rank",
    "pid",
    "max_model_len",
    "block_size",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "decode_context_parallel_size",
    "kv_cache_tokens",
    "num_gpu_blocks",
]
FLOAT_COLUMNS = ["gpu_memory_utilization", "max_concurrency"]
BOOL_COLUMNS = ["enforce_eager"]
#: Values of ``room_source``: the log reader's evidence, best first, then a room stated by hand (ledger CSV).
ROOM_SOURCES = ("suggestion", "available_kv", "parts", "manual")


#: The compatibility-key fields whose product is the number of ranks.
LAYOUT_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


def world_size(key: Mapping[str, object]) -> int | None:
    """TP × PP × DP of a compatibility key; None when any of the three is not known.

    >>> world_size({"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "data_parallel_size": 2})
    8
    >>> world_size({"tensor_parallel_size": 4}) is None
    True
    """
    world = 1
    for name in LAYOUT_FIELDS:
        try:
            world *= int(key.get(name))  # None, pd.NA and NaN raise: not known
        except (TypeError, ValueError):
            return None
    return world


def is_known(value: object) -> bool:
    """False for a missing ledger cell (None, NaN, ``pd.NA``); lists and dicts count as known.

    >>> is_known(pd.NA), is_known(float("nan")), is_known(0), is_known([1])
    (False, False, True, True)
    """
    if value is None:
        return False
    try:
        return not bool(pd.isna(value))
    except (TypeError, ValueError):  # array-likes: pd.isna answers element-wise
        return True
