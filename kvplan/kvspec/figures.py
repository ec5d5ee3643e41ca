"""The figures vLLM logs for a number of blocks, in each release's arithmetic: blocks per request,
"Maximum concurrency" and "GPU KV cache size" (``v1/core/kv_cache_utils.py``
``get_max_concurrency_for_kv_cache_config`` and ``_report_kv_cache_config``).

A request of L tokens needs ``ceil(L / block_size)`` blocks per full-attention group (L / DCP with
decode context parallel), ``ceil(min(W − 1 + batched, L) / block_size) + 1`` per sliding-window group
and one block per Mamba / linear-attention group. "Maximum concurrency" = blocks / blocks per request
(from 0.9.1); "GPU KV cache size" = ``int(max_concurrency × L)`` (from 0.21).

>>> from kvplan.kvspec import kv_spec
>>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
>>> blocks_per_request(spec, 32768), max_concurrency(spec, 9830, 32768), kv_cache_tokens(spec, 9830, 32768)
(2048, 4.7998046875, 157280)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kvplan.kvspec.base import (
    FULL_ATTENTION,
    MLA_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    parse_vllm_version,
)
from kvplan.releases import (
    CONCURRENCY_FROM_BLOCKS_FROM,
    DCP_FROM,
    TOKENS_FROM_CONCURRENCY_FROM,
    TOKENS_PER_GROUP_FROM,
)

if TYPE_CHECKING:
    from kvplan.kvspec.spec import KVSpec


def blocks_per_request(spec: KVSpec, max_model_len: int) -> int:
    """Blocks one request of ``max_model_len`` tokens needs, summed over vLLM's KV cache groups."""
    if max_model_len <= 0:
        raise KVSpecError(f"max_model_len must be positive, got {max_model_len}")
    full_len = math.ceil(max_model_len / spec.dcp)
    window_len = min((spec.arch.sliding_window or 0) - 1 + spec.max_num_batched_tokens, max_model_len)
    total = 0
    for kind, _layers in spec.groups:
        if kind in (FULL_ATTENTION, MLA_ATTENTION):
            total += math.ceil(full_len / spec.block_size)
        elif kind == SLIDING_ATTENTION:
            total += math.ceil(window_len / spec.block_size) + 1
        else:
            total += 1
    return total


def max_concurrency(spec: KVSpec, num_blocks: int, max_model_len: int) -> float:
    """vLLM's "Maximum concurrency" for ``num_blocks`` blocks: before 0.9.1 ``tokens / L`` with that
    release's "GPU KV cache size" (0.9.0 hybrid: the blocks split across the KV cache groups); from
    0.9.1 ``blocks / blocks per request``."""
    if parse_vllm_version(spec.vllm_version) < CONCURRENCY_FROM_BLOCKS_FROM:
        return kv_cache_tokens(spec, num_blocks, max_model_len) / max_model_len
    return num_blocks / blocks_per_request(spec, max_model_len)


def kv_cache_tokens(spec: KVSpec, num_blocks: int, max_model_len: int) -> int:
    """vLLM's "GPU KV cache size" in tokens for ``num_blocks`` blocks: up to 0.20
    ``blocks // groups × block_size`` (× dcp from 0.11); from 0.21 ``int(max_concurrency × L)``."""
    version = parse_vllm_version(spec.vllm_version)
    if version >= TOKENS_FROM_CONCURRENCY_FROM:
        return int(max_concurrency(spec, num_blocks, max_model_len) * max_model_len)
    groups = len(spec.groups) if version >= TOKENS_PER_GROUP_FROM else 1
    dcp = spec.dcp if version >= DCP_FROM else 1
    return num_blocks // groups * spec.block_size * dcp
