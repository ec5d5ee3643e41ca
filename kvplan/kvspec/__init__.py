"""KV-cache bytes per token per rank from a Hugging Face model config and the parallel layout, and what
a budget buys as vLLM prints it ("GPU KV cache size", "Maximum concurrency"), release by release.

Bottom up: :mod:`~kvplan.kvspec.capacity` (bytes → blocks → tokens → concurrency), :mod:`~kvplan.kvspec.arch`
(config → architecture), :mod:`~kvplan.kvspec.page` (what a release serves, the layout's split, bytes per
token of a layer, KV cache groups, stages), :mod:`~kvplan.kvspec.launch` (launch settings, block size,
HiSparse's host pool), :mod:`~kvplan.kvspec.spec` (:class:`KVSpec`, :func:`kv_spec`),
:mod:`~kvplan.kvspec.log_check` (the config against the logs). The names below are imported on first use,
so that ``kvplan --help`` and the light commands load none of it. The release each rule starts in is in
:mod:`kvplan.releases`.
"""

from typing import TYPE_CHECKING

from kvplan import lazy_names

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from kvplan.kvspec.arch import (
        DEFAULT_VLLM_VERSION,
        FULL_ATTENTION,
        LINEAR_ATTENTION,
        MLA_ATTENTION,
        SLIDING_ATTENTION,
        KVSpecError,
        ModelArch,
        check_model_name,
        model_arch,
        model_base_name,
        parse_vllm_version,
    )
    from kvplan.kvspec.capacity import Capacity
    from kvplan.kvspec.launch import MLA_BLOCK_SIZE
    from kvplan.kvspec.log_check import cross_check, cross_check_verdict, options_for_logs
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

#: The module of :mod:`kvplan.kvspec` each name is imported from on first use.
_MODULES = {
    "arch": "DEFAULT_VLLM_VERSION FULL_ATTENTION LINEAR_ATTENTION MLA_ATTENTION SLIDING_ATTENTION KVSpecError "
    "ModelArch check_model_name model_arch model_base_name parse_vllm_version",
    "capacity": "Capacity",
    "launch": "MLA_BLOCK_SIZE",
    "log_check": "cross_check cross_check_verdict options_for_logs",
    "page": "FP8_DS_MLA_BYTES_PER_TOKEN KV_CACHE_DTYPE_BYTES StageSpec attention_bytes_per_token_per_layer "
    "kv_cache_groups kv_dtype_bytes kv_heads_per_rank linear_state_bytes pp_partition",
    "spec": "KVSpec kv_spec",
}
__getattr__ = lazy_names(
    __name__, {name: module for module, names in _MODULES.items() for name in names.split()}
)

__all__ = [
    "DEFAULT_VLLM_VERSION",
    "FP8_DS_MLA_BYTES_PER_TOKEN",
    "FULL_ATTENTION",
    "KV_CACHE_DTYPE_BYTES",
    "LINEAR_ATTENTION",
    "MLA_ATTENTION",
    "MLA_BLOCK_SIZE",
    "SLIDING_ATTENTION",
    "Capacity",
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
