"""HiSparse's host pool (vLLM 0.32+): flagged, not modelled, and the capacity held to what the log shows.

With HiSparse, vLLM keeps the sparse-MLA source cache in a host pool and prints "GPU + host KV cache
size": its concurrency is ``min(GPU pool limit, host pool limit)`` (``get_max_concurrency_for_kv_cache_config``),
and its device groups (indexer, resident, hot) are not the ones kvplan sizes. kvplan's GPU-pool figure can
then be higher than what vLLM allocates, so the capacity is capped at the lower bound the logged figure
gives: ``logged tokens / logged L`` (≤ the logged concurrency, ``tokens = int(c × L)``), scaled down for a
smaller budget (the GPU limit shrinks at most in proportion, less one block) and a longer length (blocks
per request grow at most as ``ceil(L / block_size)``); the host limit does not shrink with the GPU budget.

>>> from kvplan.capacity import Capacity
>>> gpu = Capacity(kv_bytes=20 * 2**30, bytes_per_token=70_272, block_size=64, block_bytes=4_497_408,
...                blocks=4774, tokens=305_536, max_model_len=131_072, max_concurrency=2.33)
>>> capped = host_pool_bound(gpu, LoggedHostPool(tokens=262_144, max_model_len=131_072,
...                                              available_bytes=20 * 2**30))
>>> capped.tokens, round(capped.max_concurrency, 4), capped.approximate  # 2.0 × (20 GiB − 1 block) / 20 GiB
(262089, 1.9996, True)
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

from kvplan.capacity import Capacity

HOST_POOL_NOTE = (
    "HiSparse keeps KV cache in a host pool too ('GPU + host KV cache size', vLLM 0.32+): vLLM's concurrency "
    "is the lower of the GPU and host pools' and the host pool is not modelled; capacity is capped at the lower "
    "bound the logged figure gives (logged tokens ÷ length, scaled down to a smaller budget or a longer length)"
)


class LoggedHostPool(NamedTuple):
    """A "GPU + host KV cache size" line: its tokens, the ``max_model_len`` it was printed for, and the
    available KV memory per rank [bytes] it was sized from."""

    tokens: int
    max_model_len: int
    available_bytes: int


def host_pool_bound(capacity: Capacity, logged: LoggedHostPool) -> Capacity:
    """``capacity`` no higher than the lower bound the logged GPU + host figure gives, marked approximate."""
    if min(logged) <= 0:
        raise ValueError(f"a logged GPU + host figure needs positive tokens, length and memory, got {logged}")
    room = max(0, capacity.kv_bytes - capacity.block_bytes)  # one block lost to rounding
    budget_scale = min(1.0, room / logged.available_bytes)
    length_scale = min(
        1.0,
        math.ceil(logged.max_model_len / capacity.block_size)
        / math.ceil(capacity.max_model_len / capacity.block_size),
    )
    bound = logged.tokens / logged.max_model_len * budget_scale * length_scale
    reason = capacity.approximate_reason
    if HOST_POOL_NOTE not in reason:
        reason = "; ".join(filter(None, (reason, HOST_POOL_NOTE)))
    if capacity.max_concurrency <= bound:
        return replace(capacity, approximate=True, approximate_reason=reason)
    return replace(
        capacity,
        max_concurrency=bound,
        tokens=min(capacity.tokens, int(bound * capacity.max_model_len)),
        approximate=True,
        approximate_reason=reason,
    )
