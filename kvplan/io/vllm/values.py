"""Values as vLLM prints them: sizes in GiB (bytes here, and only here), config literals, key=value lists."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Mapping
from typing import Any

import pandas as pd

from kvplan.units import parse_size

#: Units as vLLM prints them, as :func:`kvplan.units.parse_size` reads them: "GB"/"Gib" meant GiB, "MB" MiB.
_UNITS = {"GiB": "GiB", "GB": "GiB", "Gib": "GiB", "MiB": "MiB", "MB": "MiB"}


def gib_bytes(text: str, unit: str = "GiB") -> int:
    """Bytes in a number vLLM printed in GiB ("GB"/"Gib" meant GiB, "MB" MiB), exact to the nearest byte.

    >>> gib_bytes("10.2"), gib_bytes("-9.96"), gib_bytes("14.9864", "GB"), gib_bytes("512", "MB")
    (10952166605, -10694468567, 16091524471, 536870912)
    """
    return parse_size(f"{text}{_UNITS[unit]}")


_INT_RE = re.compile(r"-?(?:0|[1-9]\d*)")


def literal_value(text: str) -> object:
    """A configuration value as :func:`ast.literal_eval` reads it; anything else (``torch.bfloat16``, ``auto``)
    stays text; an integer of more digits than Python converts is refused (``ValueError``)."""
    text = text.strip()
    if _INT_RE.fullmatch(text):
        return int(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text


_SPLIT_RE = re.compile(r"[\"'()\[\]{},]")


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and quotes (engine-config and dict literals)."""
    parts, depth, quote, start = [], 0, "", 0
    for match in _SPLIT_RE.finditer(text):
        char = match.group()
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0:
            parts.append(text[start : match.start()])
            start = match.end()
    if start < len(text):
        parts.append(text[start:])
    return parts


#: Configuration names as vLLM logs them (engine config, ``non-default args``, ``Namespace``) →
#: glossary names; only these are read.
CONFIG_NAMES = {
    "model": "model",
    "model_tag": "model",
    "revision": "revision",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "max_seq_len": "max_model_len",
    "max_model_len": "max_model_len",
    "block_size": "block_size",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "decode_context_parallel_size": "decode_context_parallel_size",
    "enforce_eager": "enforce_eager",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "vllm_version": "vllm_version",
    "cudagraph_mode": "cudagraph_mode",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "async_scheduling": "async_scheduling",
    "mamba_cache_mode": "mamba_cache_mode",
    "hybrid_kv_cache_manager": "hybrid_kv_cache_manager",
    # ``--disable-hybrid-kv-cache-manager``: its value is negated into hybrid_kv_cache_manager
    "disable_hybrid_kv_cache_manager": "hybrid_kv_cache_manager",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "kv_cache_group_block_sizes": "kv_cache_group_block_sizes",
    "kv_cache_pools": "kv_cache_pools",
    # the exact bytes of --kv-cache-memory-bytes (non-default args), for the ranks' printed figure (manual.py)
    "kv_cache_memory_bytes": "manual_kv_bytes",
}

#: ``compilation_config``'s ``cudagraph_mode`` as logged: an enum repr (0.11+), a number or a pair (0.10).
_CUDAGRAPH_MODE_RE = re.compile(
    r"""['"]cudagraph_mode['"]\s*:\s*(?:<CUDAGraphMode\.(\w+)|[\[(]\s*(\d)\s*,\s*(\d)\s*[\])]|(\d)\b|['"](\w+)['"])"""
)
#: vLLM's ``CUDAGraphMode`` values: NONE 0, PIECEWISE 1, FULL 2, and the (decode, mixed) pairs.
_CUDAGRAPH_MODES = {
    ("0",): "NONE",
    ("1",): "PIECEWISE",
    ("2",): "FULL",
    ("2", "0"): "FULL_DECODE_ONLY",
    ("2", "1"): "FULL_AND_PIECEWISE",
}


@functools.lru_cache(maxsize=512)
def cudagraph_mode(config_text: str) -> str | None:
    """The CUDA graph mode a config line states, by its enum name; None when it states none."""
    m = _CUDAGRAPH_MODE_RE.search(config_text)
    if m is None:
        return None
    name, first, second, single, quoted = m.groups()
    if name or quoted:
        return name or quoted
    return _CUDAGRAPH_MODES.get((first, second) if first else (single,))


@functools.lru_cache(maxsize=512)
def config_items(text: str, separator: str = "=") -> tuple[tuple[str, object], ...]:
    """The :data:`CONFIG_NAMES` items of a configuration line (:func:`key_values`), parsed once per text."""
    return tuple(key_values(text, separator, names=CONFIG_NAMES).items())


def key_values(text: str, separator: str = "=", names: Collection[str] | None = None) -> dict[str, object]:
    """``key=value, …`` (engine config, ``Namespace(...)``) or a dict literal's items; only ``names`` if given."""
    values: dict[str, object] = {}
    for part in split_top_level(text):
        name, sep, value = part.partition(separator)
        name = name.strip().strip("'\"")
        if sep and (name in names if names is not None else re.fullmatch(r"\w+", name)):
            values[name] = literal_value(value)
    return values


#: Configuration columns held as whole numbers, and as booleans.
INT_CONFIG = ("max_model_len", "block_size", "max_num_batched_tokens", "num_gpu_blocks_override")
PARALLEL_COLUMNS = frozenset(column for column in CONFIG_NAMES.values() if column.endswith("_parallel_size"))
_INT_COLUMNS = frozenset(INT_CONFIG) | PARALLEL_COLUMNS
_FLAG_COLUMNS = frozenset(("enforce_eager", "async_scheduling", "hybrid_kv_cache_manager"))


def config_columns(values: Mapping) -> tuple[tuple[str, object], ...]:
    """The :data:`CONFIG_NAMES` items of a config fact's ``values`` as ``(column, ledger value)``, in order."""
    columns = []
    for name, value in values.items():
        column = CONFIG_NAMES.get(name)
        if column is not None:
            negated = name == "disable_hybrid_kv_cache_manager" and isinstance(value, bool)
            columns.append((column, _config_value(column, not value if negated else value)))
    return tuple(columns)


def _config_value(column: str, value: Any) -> object:
    """A configuration value as the ledger holds it (``NA`` for None, "None" or "")."""
    if value is None or (isinstance(value, str) and value in ("None", "")):
        return pd.NA
    if column in _INT_COLUMNS:
        try:
            number = int(value)
        except (TypeError, ValueError):
            return pd.NA
        # --max-model-len -1 (0.27+) asks vLLM to fit the length: the length is the one it fitted
        # (an 'Auto-fit max_model_len' or KV cache line), not -1 (issue 26)
        return pd.NA if column == "max_model_len" and number < 1 else number
    if column == "gpu_memory_utilization":
        try:
            return float(value)
        except (TypeError, ValueError):
            return pd.NA
    if column in _FLAG_COLUMNS:
        return value if isinstance(value, bool) else str(value) == "True"
    return str(value)
