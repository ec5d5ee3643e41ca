"""What a launch decides beside the model: the settings of vLLM's KV arithmetic (tokens in flight, Mamba
blocks, the GPU family; vLLM's defaults noted), the block size vLLM ends up with, HiSparse's host pool."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from kvplan.kvspec.arch import KVSpecError
from kvplan.kvspec.capacity import DEFAULT_BLOCK_SIZE, Capacity
from kvplan.releases import (
    ASYNC_SCHEDULING_DEFAULT_FROM,
    GDN_PREFILL_CHECKPOINT_FROM,
    IN_FLIGHT_TOKENS_FROM,
    MAMBA_ALIGN_FROM,
    MLA_BACKEND_BLOCK_SIZE_FROM,
    MLA_BLOCK_FORCED_FROM,
    MLA_BLOCK_MULTIPLE_KEPT_FROM,
    Release,
)

#: The largest ``max_num_batched_tokens`` vLLM picks by default (``engine/arg_utils.py``), assumed when the
#: logs do not say: more tokens in flight keep more sliding-window blocks, so capacity is a lower bound.
LARGEST_DEFAULT_MAX_NUM_BATCHED_TOKENS = 16384
#: Mamba cache modes (``--mamba-cache-mode``): "align" keeps 2 state blocks per request (+1 checkpoint).
MAMBA_CACHE_MODES = ("none", "align", "all")

_HOPPER = re.compile(r"\b(H100|H200|H800|H20|GH200)\b", re.IGNORECASE)
_BLACKWELL = re.compile(r"\b(B100|B200|B300|GB200|GB300)\b", re.IGNORECASE)


def gpu_family(gpu_name: str | None) -> str | None:
    """``hopper`` (SM90), ``blackwell`` (SM100) or ``other`` for an nvidia-smi GPU name; None when unknown."""
    if not gpu_name:
        return None
    if _HOPPER.search(gpu_name):
        return "hopper"
    if _BLACKWELL.search(gpu_name):
        return "blackwell"
    return "other"


@dataclass(frozen=True)
class LaunchSettings:
    """A launch's KV settings, ``notes`` (assumed values) and ``approximate`` (why a figure is a lower bound)."""

    max_num_batched_tokens: int
    in_flight_tokens: int
    async_scheduling: bool
    mamba_cache_mode: str
    gdn_checkpoint: bool
    notes: tuple[str, ...] = ()
    approximate: tuple[str, ...] = ()

    def mamba_blocks_per_request(self, linear_kind: str | None) -> int:
        """State blocks one request holds per Mamba group: 2 in align mode (+1 for a FlashInfer
        gated-delta-net prefill checkpoint), else 1 (``v1/kv_cache_interface.py`` ``MambaSpec``)."""
        if self.mamba_cache_mode != "align":
            return 1
        return 2 + (self.gdn_checkpoint and linear_kind == "gated_delta_net")


def _in_flight_batches(version: Release, async_scheduling: bool, pp: int) -> tuple[int, str]:
    """Batches in flight (``config/vllm.py`` ``max_concurrent_batches``), and a note when the model
    runner decides it: async with PP is ``pp + 1`` on the V2 runner, ``pp`` on V1 (the larger taken)."""
    if version < IN_FLIGHT_TOKENS_FROM:
        return 1, ""
    if not async_scheduling:
        return pp, ""
    if pp <= 1:
        return 2, ""
    return pp + 1, (
        f"async scheduling with PP {pp}: {pp + 1} batches in flight taken (model runner V2; "
        f"V1 keeps {pp}), a lower bound"
    )


@dataclass(frozen=True)
class SpecOptions:
    """:func:`kv_spec`'s keywords: the layout and the launch settings the logs show (None: the release's
    default); ``pp_layers`` is ``VLLM_PP_LAYER_PARTITION``, ``logged_model`` the logs' model."""

    tp: int = 1
    pp: int = 1
    dcp: int = 1
    pcp: int = 1
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    vllm_version: str | None = None
    max_num_batched_tokens: int | None = None
    async_scheduling: bool | None = None
    mamba_cache_mode: str | None = None
    hybrid_kv_cache_manager: bool | None = None
    num_gpu_blocks_override: int | None = None
    gpu_name: str | None = None
    kv_cache_group_block_sizes: object = None
    host_pool: Sequence[int] | None = None
    pp_layers: Sequence[int] = ()
    dtype: str | None = None
    logged_model: str | None = None


def launch_settings(
    version: Release,
    logged: SpecOptions,
    *,
    sliding: bool = False,
    linear_kind: str | None = None,
    head_k_dim: int | None = None,
) -> LaunchSettings:
    """The settings of a launch in release ``version``, vLLM's defaults where ``logged`` shows none
    (``head_k_dim``: the gated delta net's key head size)."""
    notes: list[str] = []
    approximate: list[str] = []
    max_num_batched_tokens = logged.max_num_batched_tokens
    if max_num_batched_tokens is not None and max_num_batched_tokens <= 0:
        raise KVSpecError(f"max_num_batched_tokens must be positive, got {max_num_batched_tokens}")
    if max_num_batched_tokens is None:
        max_num_batched_tokens = LARGEST_DEFAULT_MAX_NUM_BATCHED_TOKENS
        if sliding:
            approximate.append(
                f"max_num_batched_tokens not in the logs or given: {max_num_batched_tokens:,}, the largest "
                "vLLM default, assumed for sliding-window groups (a lower bound; the 'Chunked prefill is "
                "enabled with max_num_batched_tokens=N' line or --max-num-batched-tokens makes it exact)"
            )
    async_scheduling = logged.async_scheduling
    if async_scheduling is None:
        async_scheduling = version >= ASYNC_SCHEDULING_DEFAULT_FROM
        if version >= IN_FLIGHT_TOKENS_FROM and sliding:
            notes.append("async scheduling not in the logs: on, vLLM 0.26+ default (2 batches in flight)")
    batches, why = _in_flight_batches(version, bool(async_scheduling), logged.pp)
    if why and sliding:
        approximate.append(why)
    mode, gdn_checkpoint, mamba_notes, mamba_approximate = _mamba_settings(
        version, logged, linear_kind, head_k_dim
    )
    return LaunchSettings(
        max_num_batched_tokens=max_num_batched_tokens,
        in_flight_tokens=batches * max_num_batched_tokens,
        async_scheduling=bool(async_scheduling),
        mamba_cache_mode=mode,
        gdn_checkpoint=gdn_checkpoint,
        notes=(*notes, *mamba_notes),
        approximate=(*approximate, *mamba_approximate),
    )


def _mamba_settings(
    version: Release, logged: SpecOptions, linear_kind: str | None, head_k_dim: int | None
) -> tuple[str, bool, tuple[str, ...], tuple[str, ...]]:
    """The Mamba cache mode, whether a FlashInfer GDN prefill keeps a checkpoint block, notes, approximations."""
    hybrid = linear_kind is not None
    mode = logged.mamba_cache_mode
    notes: tuple[str, ...] = ()
    approximate: tuple[str, ...] = ()
    if mode is None:
        mode = "align" if hybrid and version >= MAMBA_ALIGN_FROM else "none"
        if hybrid and version >= MAMBA_ALIGN_FROM:
            notes = (
                "Mamba cache mode not in the logs: 'align', vLLM 0.26+ default for hybrid models "
                "(prefix caching on): 2 state blocks per request",
            )
    elif mode not in MAMBA_CACHE_MODES:
        raise KVSpecError(f"mamba_cache_mode {mode!r}: expected one of {list(MAMBA_CACHE_MODES)}")
    gdn_checkpoint = False
    if linear_kind == "gated_delta_net" and mode == "align" and version >= GDN_PREFILL_CHECKPOINT_FROM:
        family = gpu_family(logged.gpu_name)
        gdn_checkpoint = family != "other" and (family != "blackwell" or head_k_dim == 128)
        if family is None or (family == "blackwell" and gdn_checkpoint):
            approximate = (
                "FlashInfer gated-delta-net prefill assumed (Hopper; Blackwell with CUDA 13): a 64-aligned "
                "block size and a checkpoint block per request, a lower bound"
                + ("" if family else "; the GPU type (nvidia-smi snapshot) makes it exact"),
            )
    return mode, gdn_checkpoint, notes, approximate


#: Block size the FlashMLA backends force ("Forcing kv cache block size to 64 for FlashMLA backend").
MLA_BLOCK_SIZE = 64
#: Hybrid Mamba models round the attention block size up to a multiple of this (the attention
#: backends' smallest kernel block).
HYBRID_BLOCK_ALIGNMENT = 16
#: FlashInfer's gated-delta-net prefill checkpoints on a 64-token grid (``gdn_attn.py``), 0.33+.
GDN_CHECKPOINT_ALIGNMENT = 64
#: MLA block size the first-choice backend prefers from 0.18 (``platforms/cuda.py`` priorities,
#: ``get_preferred_block_size``): FLASH_ATTN_MLA ``MultipleOf(16)`` on Hopper (no fp8 KV: FLASHMLA 64
#: then), FLASHINFER_MLA ``[32, 64]`` on Blackwell.
MLA_BACKEND_BLOCK_SIZES: dict[tuple[str | None, bool], int] = {
    ("hopper", False): 16,
    ("hopper", True): 64,
    ("blackwell", False): 32,
    ("blackwell", True): 32,
}


@dataclass(frozen=True)
class BlockSizeInputs:
    """What decides the block size: ``--block-size`` (None: not given), the KV dtype and release, one
    token's and one request's linear state bytes, the model, the GPU, the logged "kv cache group sizes"."""

    requested: int | None
    kv_cache_dtype: str
    version: Release
    attention_token_bytes: int
    linear_bytes: int | None = None
    mla: bool = False
    sparse: bool = False
    gpu_name: str | None = None
    logged_sizes: tuple[int, ...] = ()
    gdn_align: bool = False


def logged_block_sizes(text: object) -> tuple[int, ...]:
    """The block sizes of vLLM's ``kv cache group sizes`` line, as logged (``(576, 576)``, ``[16]``)."""
    if text is None:
        return ()
    if isinstance(text, Sequence) and not isinstance(text, str):
        return tuple(int(size) for size in text)
    sizes = tuple(int(size) for size in re.findall(r"\d+", str(text)))
    if not sizes or min(sizes) <= 0:
        raise KVSpecError(
            f"kv_cache_group_block_sizes {text!r}: expected the sizes as logged, e.g. '(576, 576)'"
        )
    return sizes


def _mla_block_size(inputs: BlockSizeInputs) -> tuple[int, str]:
    requested, version = inputs.requested, inputs.version
    if inputs.kv_cache_dtype == "fp8_ds_mla":
        why = "fp8_ds_mla (FlashMLA sparse) pages hold 64 tokens"
    elif version < MLA_BLOCK_FORCED_FROM:
        return (DEFAULT_BLOCK_SIZE if requested is None else requested), ""
    elif version >= MLA_BACKEND_BLOCK_SIZE_FROM:
        if requested is not None:
            return requested, ""  # platforms/interface.py: a user's --block-size is kept
        if inputs.sparse:
            return MLA_BLOCK_SIZE, "the sparse MLA backends (FlashMLA, FlashAttention) use 64-token blocks"
        family = gpu_family(inputs.gpu_name)
        size = MLA_BACKEND_BLOCK_SIZES.get((family, inputs.kv_cache_dtype.startswith("fp8")))
        if size is None:
            raise KVSpecError(
                f"vLLM {'.'.join(map(str, version))} lets the MLA attention backend pick the block size "
                "(16 on Hopper with bf16 KV, 64 with fp8 KV, 32 on Blackwell), and "
                + (
                    f"kvplan does not know the backend of a {inputs.gpu_name}"
                    if inputs.gpu_name
                    else "the GPU type is not known"
                )
                + ": give --block-size, the logs' 'kv cache group sizes' or 'Setting kv cache block size' "
                "line, or an nvidia-smi snapshot (--nvidia-smi) that names the GPU"
            )
        return size, f"MLA block size {size}: the {family} attention backend's choice from vLLM 0.18"
    elif requested is None:
        why = (
            "MLA backends (FlashMLA) use 64-token blocks; CUTLASS MLA on Blackwell uses 128 "
            "(give block_size=128)"
        )
    elif version < MLA_BLOCK_MULTIPLE_KEPT_FROM and requested != MLA_BLOCK_SIZE:
        why = "vLLM 0.8–0.11 forces 64-token blocks for the FlashMLA backend"
    elif requested % MLA_BLOCK_SIZE:
        why = "vLLM 0.12–0.17 forces 64-token blocks for the FlashMLA backend unless a multiple of 64"
    else:
        return requested, ""
    if requested not in (None, MLA_BLOCK_SIZE):
        why = f"block size {requested} overridden: {why}"
    return MLA_BLOCK_SIZE, why


def _hybrid_block_size(inputs: BlockSizeInputs) -> tuple[int, str]:
    """``align × ceil(state / (align × token page))`` (``platforms/interface.py``), ``align`` =
    max(16, the flag's block size), and lcm with 64 for a FlashInfer GDN prefill in 0.33's align mode."""
    assert inputs.linear_bytes is not None
    requested = inputs.requested or DEFAULT_BLOCK_SIZE
    align = max(HYBRID_BLOCK_ALIGNMENT, requested)
    if inputs.gdn_align and inputs.version >= GDN_PREFILL_CHECKPOINT_FROM:
        align = math.lcm(align, GDN_CHECKPOINT_ALIGNMENT)
    needed = align * -(-inputs.linear_bytes // (align * inputs.attention_token_bytes))
    if requested >= needed:
        return requested, ""
    return needed, (
        f"attention block size raised to {needed} tokens so an attention page "
        f"(≥ {inputs.linear_bytes:,} bytes of recurrent state) fits a whole Mamba / linear-attention state"
        + (f", aligned to {align} tokens" if align != HYBRID_BLOCK_ALIGNMENT else "")
    )


def resolve_block_size(inputs: BlockSizeInputs) -> tuple[int, str]:
    """The block size [tokens] vLLM ends up with, and a note when it is not the one asked for."""
    requested = inputs.requested
    if requested is not None and requested <= 0:
        raise KVSpecError(f"block_size must be positive, got {requested}")
    if inputs.logged_sizes:
        size = max(inputs.logged_sizes)
        if requested in (None, size):
            return size, ""
        return size, f"block size {size} as vLLM logged it ('kv cache group sizes'), not {requested}"
    if inputs.mla:
        return _mla_block_size(inputs)
    if inputs.linear_bytes is not None:
        return _hybrid_block_size(inputs)
    return (DEFAULT_BLOCK_SIZE if requested is None else requested), ""


#: Why a capacity with a logged host pool is approximate (:func:`host_pool_bound`).
HOST_POOL_NOTE = (
    "HiSparse keeps KV cache in a host pool too ('GPU + host KV cache size', vLLM 0.32+): vLLM's concurrency "
    "is the lower of the GPU and host pools' and the host pool is not modelled; capacity is capped at the lower "
    "bound the logged figure gives (logged tokens ÷ length, scaled down to a smaller budget or a longer length)"
)


class LoggedHostPool(NamedTuple):
    """A "GPU + host KV cache size" line: tokens, its ``max_model_len``, the available bytes per rank."""

    tokens: int
    max_model_len: int
    available_bytes: int


def host_pool_bound(capacity: Capacity, logged: LoggedHostPool) -> Capacity:
    """``capacity`` capped at the lower bound of a logged HiSparse "GPU + host" figure: ``tokens / L``,
    scaled down for a smaller budget (less one block) and a longer length, approximate."""
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
