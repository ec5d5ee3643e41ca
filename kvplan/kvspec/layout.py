"""How a parallel layout splits a model: layers per pipeline stage, KV heads per TP rank.

>>> pp_partition(61, 3), kv_heads_per_rank(8, 64, 16)
([20, 21, 20], 1)
"""

from __future__ import annotations

from collections.abc import Sequence

from kvplan.kvspec.base import KVSpecError


def pp_partition(num_layers: int, pp: int, partition: Sequence[int] | None = None) -> list[int]:
    """Layers per pipeline stage as vLLM's ``get_pp_indices`` splits them.

    ``num_layers // pp`` each; the remainder goes one layer each to the stages before the last,
    starting from the second-to-last. ``partition`` is ``VLLM_PP_LAYER_PARTITION``.

    >>> pp_partition(80, 3), pp_partition(61, 3), pp_partition(32, 4)
    ([27, 27, 26], [20, 21, 20], [8, 8, 8, 8])
    """
    if pp <= 0:
        raise KVSpecError(f"pp must be positive, got {pp}")
    if pp > num_layers:
        raise KVSpecError(f"pp {pp} is larger than the {num_layers} layers: vLLM needs a layer per stage")
    if partition is not None:
        partition = [int(p) for p in partition]
        if len(partition) != pp or sum(partition) != num_layers:
            raise KVSpecError(
                f"VLLM_PP_LAYER_PARTITION {partition}: needs {pp} entries summing to {num_layers} layers"
            )
        return partition
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return sizes


def kv_heads_per_rank(num_kv_heads: int, num_attention_heads: int, tp: int) -> int:
    """KV heads each TP rank stores: ``kv // tp``, or 1 (replicated) when ``tp > kv``.

    Refuses the layouts vLLM refuses: TP not dividing the attention heads, or KV heads and TP
    not dividing one another.

    >>> kv_heads_per_rank(8, 64, 4), kv_heads_per_rank(8, 64, 16), kv_heads_per_rank(1, 32, 8)
    (2, 1, 1)
    """
    if tp <= 0:
        raise KVSpecError(f"tp must be positive, got {tp}")
    if num_attention_heads % tp:
        raise KVSpecError(
            f"tp {tp} does not divide num_attention_heads {num_attention_heads}: vLLM refuses this layout "
            f"(total number of attention heads must be divisible by the tensor parallel size)"
        )
    if num_kv_heads >= tp and num_kv_heads % tp:
        raise KVSpecError(
            f"tp {tp} does not divide num_key_value_heads {num_kv_heads}: vLLM refuses this layout"
        )
    if num_kv_heads < tp and tp % num_kv_heads:
        raise KVSpecError(
            f"num_key_value_heads {num_kv_heads} does not divide tp {tp}: vLLM cannot replicate the KV heads"
        )
    return max(1, num_kv_heads // tp)
