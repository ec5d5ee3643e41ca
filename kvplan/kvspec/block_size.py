"""The block size vLLM ends up with for a model, layout and release: the logged one, the flag's, the
MLA attention backend's, or the one a hybrid Mamba model needs so an attention page holds a whole
recurrent state.

>>> resolve_block_size(BlockSizeInputs(None, "auto", (0, 33, 0), 1024))
(16, '')
>>> resolve_block_size(BlockSizeInputs(None, "auto", (0, 33, 0), 1152, mla=True, gpu_name="NVIDIA H100"))[0]
16
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvplan.capacity import DEFAULT_BLOCK_SIZE
from kvplan.kvspec.base import KVSpecError
from kvplan.kvspec.launch import gpu_family
from kvplan.releases import (
    GDN_PREFILL_CHECKPOINT_FROM,
    MLA_BACKEND_BLOCK_SIZE_FROM,
    MLA_BLOCK_FORCED_FROM,
    MLA_BLOCK_MULTIPLE_KEPT_FROM,
    Release,
)

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
    """What decides the block size: ``requested`` (``--block-size``, None: not given), the KV dtype,
    the release, one token of one attention layer [bytes per rank], one request's recurrent state in
    one linear-attention layer (None: no such layers), an MLA / sparse-indexer model, the GPU name
    (nvidia-smi), the logged "kv cache group sizes" and whether the GDN prefill aligns to 64."""

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
    """The block sizes of vLLM's ``kv cache group sizes`` line, as logged (``(576, 576)``, ``[16]``).

    >>> logged_block_sizes("(576, 576)"), logged_block_sizes("[16]"), logged_block_sizes(None)
    ((576, 576), (16,), ())
    """
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
    """The block size [tokens] vLLM ends up with, and a note when it is not the one asked for.

    The logged ``kv cache group sizes`` win (they are what vLLM used); an MLA model from 0.18 without
    them, a block size or a known GPU is refused (:class:`KVSpecError`), never guessed.
    """
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
