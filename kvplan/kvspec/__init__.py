"""KV-cache bytes per token per rank from a Hugging Face model config and the parallel layout, and
what vLLM will print for a budget: "GPU KV cache size" and "Maximum concurrency", release by release.

The modules, bottom up:

- :mod:`~kvplan.kvspec.layers`: the words (:class:`KVSpecError`, the layer kinds, the release) and the kind
  of every decoder layer; :mod:`~kvplan.kvspec.arch`: model config → architecture (heads, window,
  recurrent-state dimensions) and whether a config describes the logged model;
- :mod:`~kvplan.kvspec.page`: the layout's split (PP layers, KV heads per TP rank), bytes per token of one
  layer on one rank (KV dtype, MLA, Mamba state), what a release can size, KV cache groups, pipeline stages;
- :mod:`~kvplan.kvspec.launch`: launch settings (tokens in flight, Mamba mode), the block size vLLM
  chooses, HiSparse's host pool;
- :mod:`~kvplan.kvspec.spec`: :class:`KVSpec` and :func:`kv_spec`, what a budget buys in vLLM's
  per-release arithmetic (blocks per request, logged figures, :class:`kvplan.capacity.Capacity`);
- :mod:`~kvplan.kvspec.log_check`: options from the logs' compatibility key, and the config against the
  figures a log printed.

The release each rule starts in is a named constant in :mod:`kvplan.releases`.

>>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
>>> spec.bytes_per_token, spec.capacity(12 * 2**30, 32768).max_concurrency
(81920, 4.7998046875)
"""

from kvplan.kvspec.arch import ModelArch, check_model_name, model_arch, model_base_name
from kvplan.kvspec.launch import MLA_BLOCK_SIZE
from kvplan.kvspec.layers import (
    DEFAULT_VLLM_VERSION,
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    MLA_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    parse_vllm_version,
)
from kvplan.kvspec.log_check import (
    GIB_2DP_HALF_STEP_BYTES,
    cross_check,
    cross_check_verdict,
    options_for_logs,
)
from kvplan.kvspec.page import (
    FP8_DS_MLA_BYTES_PER_TOKEN,
    KV_CACHE_DTYPE_BYTES,
    StageSpec,
    attention_bytes_per_token_per_layer,
    kv_cache_groups,
    kv_dtype_bytes,
    kv_heads_per_rank,
    linear_state_bytes,
    pp_partition,
)
from kvplan.kvspec.spec import KVSpec, kv_spec

__all__ = [
    "DEFAULT_VLLM_VERSION",
    "FP8_DS_MLA_BYTES_PER_TOKEN",
    "FULL_ATTENTION",
    "GIB_2DP_HALF_STEP_BYTES",
    "KV_CACHE_DTYPE_BYTES",
    "LINEAR_ATTENTION",
    "MLA_ATTENTION",
    "MLA_BLOCK_SIZE",
    "SLIDING_ATTENTION",
    "KVSpec",
    "KVSpecError",
    "ModelArch",
    "StageSpec",
    "attention_bytes_per_token_per_layer",
    "check_model_name",
    "cross_check",
    "cross_check_verdict",
    "kv_cache_groups",
    "kv_dtype_bytes",
    "kv_heads_per_rank",
    "kv_spec",
    "linear_state_bytes",
    "model_arch",
    "model_base_name",
    "options_for_logs",
    "parse_vllm_version",
    "pp_partition",
]
