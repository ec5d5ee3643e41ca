"""KV-cache bytes per token per rank from a Hugging Face model config and the parallel layout, and
what vLLM will print for a budget: "GPU KV cache size" and "Maximum concurrency", release by release.

One concept per module:

- :mod:`~kvplan.kvspec.arch`, :mod:`~kvplan.kvspec.layers`: model config → architecture (layer kinds,
  heads, window, recurrent-state dimensions);
- :mod:`~kvplan.kvspec.layout`: PP layer split, KV heads per TP rank;
- :mod:`~kvplan.kvspec.page`: bytes per token of one layer on one rank (KV dtype, MLA, Mamba state);
- :mod:`~kvplan.kvspec.groups`, :mod:`~kvplan.kvspec.block_size`, :mod:`~kvplan.kvspec.figures`:
  vLLM's per-release arithmetic (KV cache groups, block size, blocks per request, logged figures);
- :mod:`~kvplan.kvspec.spec`: :class:`KVSpec` and :func:`kv_spec`, its capacity
  (:class:`kvplan.capacity.Capacity`);
- :mod:`~kvplan.kvspec.options`, :mod:`~kvplan.kvspec.model_name`: options from the logs'
  compatibility key, and whether a config describes the logged model;
- :mod:`~kvplan.kvspec.log_check`: the config against the figures a log printed.

The release each rule starts in is a named constant in :mod:`kvplan.releases`.

>>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
>>> spec.bytes_per_token, spec.capacity(12 * 2**30, 32768).max_concurrency
(81920, 4.7998046875)
"""

from kvplan.capacity import Capacity
from kvplan.kvspec.arch import ModelArch, model_arch
from kvplan.kvspec.base import (
    DEFAULT_VLLM_VERSION,
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    MLA_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    parse_vllm_version,
)
from kvplan.kvspec.block_size import MLA_BLOCK_SIZE
from kvplan.kvspec.groups import kv_cache_groups
from kvplan.kvspec.layout import kv_heads_per_rank, pp_partition
from kvplan.kvspec.log_check import GIB_2DP_HALF_STEP_BYTES, cross_check, cross_check_verdict
from kvplan.kvspec.model_name import check_model_name, model_base_name
from kvplan.kvspec.options import options_for_logs
from kvplan.kvspec.page import (
    FP8_DS_MLA_BYTES_PER_TOKEN,
    KV_CACHE_DTYPE_BYTES,
    attention_bytes_per_token_per_layer,
    kv_dtype_bytes,
    linear_state_bytes,
)
from kvplan.kvspec.spec import KVSpec, StageSpec, kv_spec

#: The capacity type of a model spec: one :class:`kvplan.capacity.Capacity` for both paths.
KVCapacity = Capacity

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
    "KVCapacity",
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
