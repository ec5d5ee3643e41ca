"""The figures vLLM logs for a number of blocks, in each release's arithmetic: blocks per request,
"Maximum concurrency" and "GPU KV cache size" (``v1/core/kv_cache_utils.py``
``get_max_concurrency_for_kv_cache_config`` and ``_report_kv_cache_config``).

A request of L tokens needs ``ceil(L / block_size)`` blocks per full-attention group (L / DCP with
decode context parallel), ``ceil(min(W − 1 + in-flight tokens, L) / block_size) + 1`` per
sliding-window group (in flight: ``max_num_batched_tokens`` up to 0.25, × the batches in flight from
0.26) and per Mamba / linear-attention group one state block, 2 in "align" mode (+1 for a FlashInfer
gated-delta-net prefill checkpoint, 0.33) (``v1/kv_cache_interface.py`` ``max_memory_usage_bytes``).
"Maximum concurrency" = blocks / blocks per request (from 0.9.1); "GPU KV cache size" =
``int(max_concurrency × L)`` (from 0.21).

>>> from kvplan.kvspec import kv_spec
>>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
>>> blocks_per_request(spec, 32768), kv_cache_tokens(spec, 9830, 32768)
(2048, 157280)
>>> max_concurrency(spec, 9830, 32768)
4.7998046875
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
    AUTO_FIT_NULL_BLOCK_FROM,
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
    window_len = min((spec.arch.sliding_window or 0) - 1 + spec.launch.in_flight_tokens, max_model_len)
    state_blocks = spec.launch.mamba_blocks_per_request(spec.arch.linear_kind)
    total = 0
    for kind, _layers in spec.groups:
        if kind in (FULL_ATTENTION, MLA_ATTENTION):
            total += math.ceil(full_len / spec.block_size)
        elif kind == SLIDING_ATTENTION:
            total += math.ceil(window_len / spec.block_size) + 1
        else:
            total += state_blocks
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


def auto_fit_max_model_len(spec: KVSpec, kv_bytes: int, max_model_len: int) -> int:
    """The ``max_model_len`` vLLM fits with ``--max-model-len -1`` (``_auto_fit_max_model_len``): the
    longest length up to ``max_model_len`` whose one request fits every stage's ``kv_bytes`` less the
    null block vLLM's block pool holds back (from 0.29); 0 when not even one token fits.

    >>> from kvplan.kvspec import kv_spec
    >>> spec = kv_spec({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"})  # 2 MiB blocks
    >>> auto_fit_max_model_len(spec, 4 * 2**30, 131072)  # 2,047 usable blocks × 16 tokens
    32752
    """
    null_block = parse_vllm_version(spec.vllm_version) >= AUTO_FIT_NULL_BLOCK_FROM
    usable = min(kv_bytes - stage.block_bytes * null_block for stage in spec.stages)
    limit = min(usable // stage.block_bytes for stage in spec.stages)

    def fits(length: int) -> bool:
        return blocks_per_request(spec, length) <= limit

    if not fits(1):
        return 0
    low, high = 1, max_model_len  # fits(low) holds
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low
