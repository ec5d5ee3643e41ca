"""The block size vLLM ends up with for a model, layout and release: the flag's, the MLA backend's,
or the one a hybrid Mamba model needs so an attention page holds a whole recurrent state.

>>> resolve_block_size(None, "auto", (0, 33, 0), 1024, None, mla=False)
(16, '')
"""

from __future__ import annotations

from kvplan.capacity import DEFAULT_BLOCK_SIZE
from kvplan.kvspec.base import KVSpecError
from kvplan.releases import MLA_BLOCK_FORCED_FROM, Release

#: Block size the FlashMLA backends force ("Forcing kv cache block size to 64 for FlashMLA backend").
MLA_BLOCK_SIZE = 64
#: Hybrid Mamba models round the attention block size up to a multiple of this.
HYBRID_BLOCK_ALIGNMENT = 16
#: The first release that keeps a requested MLA block size that is not a multiple of 64.
_MLA_REQUESTED_KEPT_FROM = (0, 20, 0)


def resolve_block_size(
    requested: int | None, kv_cache_dtype: str, version: Release,
    attention_token_bytes: int, linear_bytes: int | None, *, mla: bool,
) -> tuple[int, str]:
    """The block size [tokens] vLLM ends up with, and a note when it is not the one asked for.

    ``attention_token_bytes`` is one token of one attention layer, ``linear_bytes`` one request's
    recurrent state in one linear-attention layer (None: no such layers), both per rank.
    """
    if requested is not None and requested <= 0:
        raise KVSpecError(f"block_size must be positive, got {requested}")
    if mla:
        if kv_cache_dtype == "fp8_ds_mla":
            why = "fp8_ds_mla (FlashMLA sparse) pages hold 64 tokens"
        elif version < MLA_BLOCK_FORCED_FROM:
            return (DEFAULT_BLOCK_SIZE if requested is None else requested), ""
        elif requested is None:
            why = ("MLA backends (FlashMLA) use 64-token blocks; CUTLASS MLA on Blackwell uses 128 "
                   "(give block_size=128)")
        elif version < _MLA_REQUESTED_KEPT_FROM and requested % MLA_BLOCK_SIZE:
            why = "vLLM 0.8–0.19 forces 64-token blocks for the FlashMLA backend unless a multiple of 64"
        else:
            return requested, ""
        if requested not in (None, MLA_BLOCK_SIZE):
            why = f"block size {requested} overridden: {why}"
        return MLA_BLOCK_SIZE, why
    if linear_bytes is not None:
        step_bytes = HYBRID_BLOCK_ALIGNMENT * attention_token_bytes
        needed = HYBRID_BLOCK_ALIGNMENT * -(-linear_bytes // step_bytes)
        if requested is None or requested < needed:
            return needed, (
                f"attention block size raised to {needed} tokens so an attention page "
                f"(≥ {linear_bytes:,} bytes of recurrent state) fits a whole Mamba / linear-attention state"
            )
        return requested, ""
    return (DEFAULT_BLOCK_SIZE if requested is None else requested), ""
