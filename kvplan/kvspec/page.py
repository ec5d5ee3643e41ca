"""The per-rank arithmetic of a layout: what a release serves of a model, KV bytes per token of one layer on
one rank (``vllm/v1/kv_cache_interface.py``: ``2 × kv_heads_per_rank × head_dim × dtype_bytes``; MLA one
latent of ``kv_lora_rank + qk_rope_head_dim`` values), KV cache groups and pipeline stages."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvplan.kvspec.arch import (
    DTYPE_BYTES,
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    ModelArch,
    parse_vllm_version,
)
from kvplan.releases import (
    DCP_FROM,
    FP8_DS_MLA_FROM,
    GROUP_SIZE_RATIO_1_5_FROM,
    GROUP_SIZE_RATIO_FROM,
    HYBRID_KV_MANAGER_FROM,
    HYBRID_MAMBA_FROM,
    MAMBA_ALIGN_FROM,
    MLA_FROM,
    OLDEST_KV_ARITHMETIC,
    Release,
)

#: Sub-byte KV dtypes sized as fp8: 1 byte per value is more than their packed pages take
#: (nvfp4: ``head_size / 2 + head_size / 16`` bytes per head and token, ``utils/torch_utils.py``).
SUB_BYTE_KV_DTYPES = ("nvfp4", "nvfp4_4over6")


def unmodelled_kv_dtype(kv_cache_dtype: str) -> tuple[str, str]:
    """The KV dtype kvplan sizes in place of ``kv_cache_dtype``, and why (empty when it is modelled)."""
    if kv_cache_dtype not in SUB_BYTE_KV_DTYPES:
        return kv_cache_dtype, ""
    return "fp8", (
        f"kv_cache_dtype {kv_cache_dtype!r} is not modelled: sized as fp8 (1 byte per value; "
        "nvfp4 pages take 0.5625 bytes per value plus scales), so blocks and tokens are a "
        "lower bound"
    )


def check_release_support(
    arch: ModelArch, version: Release, shown: str | None, *, tp: int, dcp: int, kv_cache_dtype: str
) -> None:
    """Refuse what ``version`` (``shown`` as given) cannot serve, or kvplan does not size there."""
    if version < OLDEST_KV_ARITHMETIC:
        raise KVSpecError(f"vllm_version {shown}: kvplan repeats vLLM's arithmetic from 0.5.0 on")
    if arch.mla_latent_dim is not None and version < MLA_FROM:
        raise KVSpecError(
            f"vLLM {shown} serves {arch.name} without MLA (K and V per head, head "
            "size padded): kvplan sizes MLA models from 0.7.1 on, where one latent per token "
            "is cached"
        )
    if kv_cache_dtype == "fp8_ds_mla" and version < FP8_DS_MLA_FROM:
        raise KVSpecError(
            f"kv_cache_dtype 'fp8_ds_mla' does not exist in vLLM {shown}: its 656-byte "
            "pages came with DeepSeek-V3.2 support in 0.11.0"
        )
    if dcp <= 0:
        raise KVSpecError(f"dcp must be positive, got {dcp}")
    if dcp > 1:
        if tp % dcp:
            raise KVSpecError(f"dcp {dcp} does not divide tp {tp}: vLLM needs tp divisible by the DCP size")
        if version < DCP_FROM:
            raise KVSpecError(f"decode context parallel needs vLLM 0.11 or later, not {shown}")
        if SLIDING_ATTENTION in arch.layer_types:
            raise KVSpecError(f"{arch.name}: vLLM does not support DCP with sliding-window layers")


def pcp_note(pcp: int) -> str:
    """Why a prefill-context-parallel launch is approximate (empty for 1)."""
    if pcp < 1:
        raise KVSpecError(f"pcp must be positive, got {pcp}")
    if pcp == 1:
        return ""
    return (
        f"prefill context parallel (PCP {pcp}) is not modelled: sized without it (whole requests "
        "per rank), a lower bound"
    )


def served_arch(arch: ModelArch, dtype: str | None) -> ModelArch:
    """``arch`` in the dtype vLLM served (``--dtype`` as logged; None or ``auto``: the config's)."""
    if dtype is None or str(dtype) == "auto":
        return arch
    served = str(dtype).removeprefix("torch.")
    if served not in DTYPE_BYTES:
        raise KVSpecError(f"dtype {dtype!r}: expected one of {sorted(DTYPE_BYTES)} (or auto)")
    return replace(arch, dtype_bytes=DTYPE_BYTES[served])


def pp_partition(num_layers: int, pp: int, partition: Sequence[int] | None = None) -> list[int]:
    """Layers per pipeline stage as vLLM's ``get_pp_indices`` splits them (``partition``:
    ``VLLM_PP_LAYER_PARTITION``).

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
    """KV heads each TP rank stores: ``kv // tp``, or 1 (replicated); the layouts vLLM refuses are refused."""
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


#: Bytes per stored value for each ``--kv-cache-dtype``; ``auto`` follows the model dtype.
KV_CACHE_DTYPE_BYTES: dict[str, int | None] = {"auto": None, "bfloat16": 2, "float16": 2}
KV_CACHE_DTYPE_BYTES.update(dict.fromkeys(("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"), 1))
#: ``fp8_ds_mla`` page: 512 fp8 latent values + 4 float32 scales + 64 bf16 rope values per token.
FP8_DS_MLA_BYTES_PER_TOKEN = 656
#: DeepSeek-V3.2's indexer keys are fp8 with one float32 scale per this many values (``deepseek_v2.py``
#: ``quant_block_size``): ``index_head_dim + index_head_dim // 128 × 4`` bytes a token and layer.
INDEXER_QUANT_BLOCK = 128


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int | None, model: str = "model") -> int:
    """Bytes per stored KV value for a ``--kv-cache-dtype``; ``auto`` = the model dtype, refused when unknown."""
    if kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise KVSpecError(f"kv_cache_dtype {kv_cache_dtype!r}: expected one of {list(KV_CACHE_DTYPE_BYTES)}")
    size = KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    if size is not None:
        return size
    if model_dtype_bytes is None:
        raise KVSpecError(
            f"{model}: missing field 'torch_dtype' (the model dtype sizes a kv_cache_dtype 'auto' cache): "
            "add it to the config, or give --kv-cache-dtype (e.g. bfloat16 or fp8) or the logs' dtype"
        )
    return model_dtype_bytes


def attention_bytes_per_token_per_layer(arch: ModelArch, tp: int, kv_cache_dtype: str = "auto") -> int:
    """KV bytes one token takes in one attention layer of one TP rank.

    >>> from kvplan.kvspec.arch import model_arch
    >>> attention_bytes_per_token_per_layer(model_arch({"num_hidden_layers": 80,
    ...     "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    ...     "torch_dtype": "bfloat16"}), tp=4)
    1024
    """
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype, arch.dtype_bytes, arch.name)
    heads = kv_heads_per_rank(arch.num_kv_heads, arch.num_attention_heads, tp)  # validates the TP layout
    if arch.mla_latent_dim is not None:
        index_dim = arch.index_head_dim or 0  # the sparse indexer's keys share the latent's page
        indexer = index_dim + index_dim // INDEXER_QUANT_BLOCK * 4
        if kv_cache_dtype == "fp8_ds_mla":
            if not arch.sparse_indexer:
                raise KVSpecError(
                    f"kv_cache_dtype 'fp8_ds_mla' is the FlashMLA-sparse format of DeepSeek-V3.2-style "
                    f"models (config field 'index_topk'); {arch.name} has none, and vLLM has no attention "
                    "backend that serves it with fp8_ds_mla (use fp8 or auto)"
                )
            return FP8_DS_MLA_BYTES_PER_TOKEN + indexer
        return arch.mla_latent_dim * dtype_bytes + indexer
    if kv_cache_dtype == "fp8_ds_mla":
        raise KVSpecError(
            f"kv_cache_dtype 'fp8_ds_mla' is for MLA models only; {arch.name} has no kv_lora_rank"
        )
    return 2 * heads * arch.head_dim * dtype_bytes


def linear_state_bytes(arch: ModelArch, tp: int) -> int:
    """Bytes of one request's recurrent state in one linear-attention / Mamba layer of a TP rank, in the
    model dtype: gated delta net ``(2·k_heads·k_dim + v_heads·v_dim) / tp × (kernel − 1)`` (conv) ``+ v_heads
    / tp × k_dim × v_dim`` (temporal); Mamba-1 ``d_inner / tp × (d_conv − 1 + d_state)``."""
    if arch.dtype_bytes is None:
        raise KVSpecError(f"{arch.name}: missing field 'torch_dtype' (it sizes the recurrent state)")

    def shard(total: int, what: str) -> int:
        if total % tp:
            raise KVSpecError(
                f"tp {tp} does not divide {what} {total} of {arch.name}: vLLM refuses this layout"
            )
        return total // tp

    if arch.linear_kind == "gated_delta_net":
        k_heads, v_heads, k_dim, v_dim, kernel = arch.linear_dims
        conv_dim = shard(2 * k_heads * k_dim + v_heads * v_dim, "the linear-attention conv dimension")
        conv = conv_dim * (kernel - 1)
        temporal = shard(v_heads, "linear_num_value_heads") * k_dim * v_dim
        return (conv + temporal) * arch.dtype_bytes
    if arch.linear_kind == "mamba":
        d_inner, d_conv, d_state = arch.linear_dims
        return shard(d_inner, "the Mamba inner dimension") * (d_conv - 1 + d_state) * arch.dtype_bytes
    raise KVSpecError(f"{arch.name}: no linear-attention layers")


def served_layers(
    arch: ModelArch, version: Release, tp: int, hybrid_kv_cache_manager: bool | None = None
) -> tuple[tuple[str, ...], int | None, list[str]]:
    """Each layer's kind as ``version`` serves it (sliding windows as full attention before 0.9), one
    request's linear state per layer [bytes] and why the figures are approximate."""
    reasons = []
    linear_bytes = None
    layer_types = arch.layer_types
    if LINEAR_ATTENTION in layer_types:
        if version < HYBRID_MAMBA_FROM:
            raise KVSpecError(
                f"{arch.name}: hybrid Mamba / linear-attention models are sized here from vLLM 0.10"
            )
        linear_bytes = linear_state_bytes(arch, tp)
        if version < MAMBA_ALIGN_FROM:
            reasons.append(
                "linear-attention / Mamba state: its size (state dtypes, prefix-caching mode) and the page "
                "padding vary by release before 0.26; blocks and concurrency are estimates"
            )
    if SLIDING_ATTENTION in layer_types:
        why = None
        if version < HYBRID_KV_MANAGER_FROM:
            why = "vLLM before 0.9 keeps sliding-window layers as full attention (no hybrid KV cache manager)"
        elif hybrid_kv_cache_manager is False:
            why = "vLLM disabled the hybrid KV cache manager (the logs say so)"
        if why:
            layer_types = tuple(FULL_ATTENTION if kind == SLIDING_ATTENTION else kind for kind in layer_types)
            reasons.append(f"{why}; sliding-window layers sized as full attention")
    return layer_types, linear_bytes, reasons


def kv_cache_groups(
    layer_types: Sequence[str], vllm_version: str | None = None
) -> list[tuple[str, tuple[int, ...]]]:
    """vLLM's KV cache groups ``(kind, layer indices)`` (``v1/core/kv_cache_utils.py``
    ``_get_kv_cache_groups_uniform_page_size``): group size = the smallest kind's count (the largest's when
    under 1.25× it from 0.12, 1.5× from 0.18), each kind split round-robin (``layers[i::n]``) into
    ``ceil(count / size)``.

    >>> [len(layers) for _, layers in kv_cache_groups(["sliding_attention"] * 5 + ["full_attention"])]
    [1, 1, 1, 1, 1, 1]
    """
    by_kind: dict[str, list[int]] = {}
    for index, kind in enumerate(layer_types):
        by_kind.setdefault(kind, []).append(index)
    if len(by_kind) == 1:
        kind, layers = next(iter(by_kind.items()))
        return [(kind, tuple(layers))]
    counts = [len(layers) for layers in by_kind.values()]
    version = parse_vllm_version(vllm_version)
    ratio = 1.5 if version >= GROUP_SIZE_RATIO_1_5_FROM else 1.25 if version >= GROUP_SIZE_RATIO_FROM else 0
    group_size = max(counts) if max(counts) < min(counts) * ratio else min(counts)
    groups = []
    for kind, layers in by_kind.items():
        num_groups = math.ceil(len(layers) / group_size)
        groups += [(kind, tuple(layers[i::num_groups])) for i in range(num_groups)]
    return groups


@dataclass(frozen=True)
class StageSpec:
    """One pipeline stage's ranks [bytes per rank]: ``block_bytes = page_bytes × layers_per_group``."""

    pp_rank: int
    first_layer: int
    end_layer: int
    attention_layers: int
    linear_layers: int
    layers_per_group: int
    page_bytes: int
    block_bytes: int
    bytes_per_token: int


def pipeline_stages(
    layer_types: Sequence[str],
    groups: Sequence[tuple[str, tuple[int, ...]]],
    layers_per_stage: Sequence[int],
    page_bytes: int,
    token_bytes: int,
) -> tuple[StageSpec, ...]:
    """What each pipeline stage holds, ``layers_per_stage`` (:func:`pp_partition`) of ``layer_types``."""
    stages = []
    start = 0
    ordered = [sorted(layers) for _kind, layers in groups]  # counted by bisection: O(pp · groups · log L)
    for rank, count in enumerate(layers_per_stage):
        end = start + count
        layers_per_group = max(bisect_left(layers, end) - bisect_left(layers, start) for layers in ordered)
        owned = layer_types[start:end]
        stages.append(
            StageSpec(
                pp_rank=rank,
                first_layer=start,
                end_layer=end,
                attention_layers=sum(kind != LINEAR_ATTENTION for kind in owned),
                linear_layers=sum(kind == LINEAR_ATTENTION for kind in owned),
                layers_per_group=layers_per_group,
                page_bytes=page_bytes,
                block_bytes=page_bytes * layers_per_group,
                bytes_per_token=token_bytes * layers_per_group,
            )
        )
        start = end
    return tuple(stages)
