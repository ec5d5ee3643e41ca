"""KV-cache bytes per token per rank from a Hugging Face model config and the parallel layout, and what a
budget buys as vLLM prints it ("GPU KV cache size", "Maximum concurrency"); names imported on first use."""

from typing import TYPE_CHECKING

from kvplan import lazy_names

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from kvplan.kvspec.arch import (
        FULL_ATTENTION,
        LINEAR_ATTENTION,
        SLIDING_ATTENTION,
        KVSpecError,
        check_model_name,
        model_arch,
        model_base_name,
        parse_vllm_version,
    )
    from kvplan.kvspec.log_check import cross_check, cross_check_verdict, options_for_logs
    from kvplan.kvspec.page import KV_CACHE_DTYPE_BYTES, kv_cache_groups, pp_partition
    from kvplan.kvspec.spec import KVSpec, kv_spec

#: The module of :mod:`kvplan.kvspec` each name is imported from on first use.
_MODULES = {
    "arch": "FULL_ATTENTION LINEAR_ATTENTION SLIDING_ATTENTION KVSpecError check_model_name model_arch "
    "model_base_name parse_vllm_version",
    "log_check": "cross_check cross_check_verdict options_for_logs",
    "page": "KV_CACHE_DTYPE_BYTES kv_cache_groups pp_partition",
    "spec": "KVSpec kv_spec",
}
__getattr__ = lazy_names(
    __name__, {name: module for module, names in _MODULES.items() for name in names.split()}
)

__all__ = [
    "FULL_ATTENTION",
    "KV_CACHE_DTYPE_BYTES",
    "LINEAR_ATTENTION",
    "SLIDING_ATTENTION",
    "KVSpec",
    "KVSpecError",
    "check_model_name",
    "cross_check",
    "cross_check_verdict",
    "kv_cache_groups",
    "kv_spec",
    "model_arch",
    "model_base_name",
    "options_for_logs",
    "parse_vllm_version",
    "pp_partition",
]
