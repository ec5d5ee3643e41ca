"""vLLM's KV cache groups: how the hybrid KV cache manager splits layers of several kinds into groups
of equal size that share one pool of blocks (``v1/core/kv_cache_utils.py``
``_get_kv_cache_groups_uniform_page_size``; ``kv_cache_planning.py`` from 0.33).

>>> [len(layers) for _kind, layers in kv_cache_groups(["full_attention"] * 3)]
[3]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvplan.kvspec.base import parse_vllm_version
from kvplan.releases import GROUP_SIZE_RATIO_1_5_FROM, GROUP_SIZE_RATIO_FROM, Release


def group_size_ratio(version: Release) -> float | None:
    """How much larger than the smallest kind the largest may be and still set the group size:
    none up to 0.11 (the group size is the smallest kind's count), 1.25 in 0.12–0.17, 1.5 from 0.18.

    >>> group_size_ratio((0, 11, 0)), group_size_ratio((0, 12, 0)), group_size_ratio((0, 33, 0))
    (None, 1.25, 1.5)
    """
    if version >= GROUP_SIZE_RATIO_1_5_FROM:
        return 1.5
    return 1.25 if version >= GROUP_SIZE_RATIO_FROM else None


def kv_cache_groups(
    layer_types: Sequence[str], vllm_version: str | None = None
) -> list[tuple[str, tuple[int, ...]]]:
    """vLLM's KV cache groups: ``(kind, layer indices)``, every group the same size (hybrid manager).

    One kind → one group of all layers. Several kinds → group size = the smallest kind's layer
    count (or the largest, when it is under :func:`group_size_ratio` × the smallest), each kind
    split round-robin into ``ceil(count / group size)`` groups (``layers[i::n]``, so 52 layers in 6
    groups are 9, 9, 9, 9, 8, 8; vLLM sizes memory by the largest group). Later releases' smarter
    group-size search (vLLM PRs #49472, #58175, open when this was written) is not modelled.

    >>> [(kind, len(layers)) for kind, layers in kv_cache_groups(["sliding_attention"] * 5
    ...                                                          + ["full_attention"])]
    [('sliding_attention', 1), ('sliding_attention', 1), ('sliding_attention', 1), \
('sliding_attention', 1), ('sliding_attention', 1), ('full_attention', 1)]
    """
    by_kind: dict[str, list[int]] = {}
    for index, kind in enumerate(layer_types):
        by_kind.setdefault(kind, []).append(index)
    if len(by_kind) == 1:
        kind, layers = next(iter(by_kind.items()))
        return [(kind, tuple(layers))]
    counts = [len(layers) for layers in by_kind.values()]
    ratio = group_size_ratio(parse_vllm_version(vllm_version))
    group_size = max(counts) if ratio is not None and max(counts) < min(counts) * ratio else min(counts)
    groups = []
    for kind, layers in by_kind.items():
        num_groups = math.ceil(len(layers) / group_size)
        groups += [(kind, tuple(layers[i::num_groups])) for i in range(num_groups)]
    return groups
