""":func:`kv_spec` options completed from the logs' compatibility key, refusing contradictions.

>>> options_for_logs({}, {"tensor_parallel_size": 2})
{'tp': 2, 'pp': 1, 'dcp': 1, 'kv_cache_dtype': 'auto'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvplan.columns import is_known
from kvplan.kvspec.base import KVSpecError

_LOGGED_OPTIONS = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "dcp": "decode_context_parallel_size",
    "kv_cache_dtype": "kv_cache_dtype",
    "dtype": "dtype",
    "max_num_batched_tokens": "max_num_batched_tokens",
}
#: Launch settings the logs show (ledger columns of the same name), taken when not given.
_LAUNCH_OPTIONS = {
    "async_scheduling": bool,
    "mamba_cache_mode": str,
    "hybrid_kv_cache_manager": bool,
    "num_gpu_blocks_override": int,
    "kv_cache_group_block_sizes": str,
    "gpu_name": str,
    "host_pool": tuple,
}
#: Defaults of the layout options when neither the caller nor the logs give them.
_OPTION_DEFAULTS = {"pp": 1, "dcp": 1, "kv_cache_dtype": "auto"}
#: Spellings of one KV cache dtype: vLLM's "fp8" is e4m3 on CUDA.
_KV_DTYPE_ALIASES = {"fp8_e4m3": "fp8"}


def _same_setting(name: str, given: Any, logged: Any) -> bool:
    if name in ("tp", "pp", "dcp", "max_num_batched_tokens"):
        return int(given) == int(logged)
    if name == "dtype":
        return str(given).removeprefix("torch.") == str(logged).removeprefix("torch.")
    return _KV_DTYPE_ALIASES.get(str(given), str(given)) == _KV_DTYPE_ALIASES.get(str(logged), str(logged))


def options_for_logs(options: Mapping[str, object], key: Mapping[str, object]) -> dict:
    """:func:`kv_spec` options completed from the logs' compatibility key, refusing contradictions.

    ``tp``, ``pp``, ``dcp``, ``kv_cache_dtype`` and ``dtype`` left None are the logs' (else 1, 1,
    ``auto`` and the config's); given ones must equal the logs', else :class:`KVSpecError` names both,
    since their bytes per token would describe another deployment. ``vllm_version`` and
    ``block_size`` left None are the logs'; ``logged_model`` carries the logs' model name so that
    :func:`kv_spec` can refuse a config of another model.

    >>> options_for_logs({"tp": 4, "block_size": None}, {"vllm_version": "0.26.0", "block_size": 16,
    ...     "tensor_parallel_size": 4, "kv_cache_dtype": "fp8", "pipeline_parallel_size": 1})
    {'tp': 4, 'block_size': 16, 'pp': 1, 'dcp': 1, 'kv_cache_dtype': 'fp8', 'vllm_version': '0.26.0'}
    >>> options_for_logs({"kv_cache_dtype": "auto"}, {"kv_cache_dtype": "fp8"})
    Traceback (most recent call last):
    ...
    kvplan.kvspec.KVSpecError: kv_cache_dtype 'auto' given, but the logs show kv_cache_dtype 'fp8'
    """
    completed = dict(options)
    for name, column in _LOGGED_OPTIONS.items():
        given: Any = completed.get(name)
        logged: Any = key.get(column)
        if not is_known(logged):
            if given is None and name in _OPTION_DEFAULTS:
                completed[name] = _OPTION_DEFAULTS[name]
            continue
        if given is not None and not _same_setting(name, given, logged):
            raise KVSpecError(f"{name} {given!r} given, but the logs show {column} {logged!r}")
        if given is None:
            completed[name] = str(logged) if name in ("kv_cache_dtype", "dtype") else int(logged)
    for name, kind in (("vllm_version", str), ("block_size", int), *_LAUNCH_OPTIONS.items()):
        if completed.get(name) is None and is_known(key.get(name)):
            completed[name] = kind(key[name])
    if is_known(key.get("model")):
        completed["logged_model"] = str(key["model"])
    return completed
