"""What kvplan can size in a release, and what it sizes as a lower bound: refusals name vLLM's rule,
approximations say why the prediction is low rather than exact.

>>> unmodelled_kv_dtype("nvfp4")
('fp8', "kv_cache_dtype 'nvfp4' is not modelled: sized as fp8 (1 byte per value; nvfp4 pages take 0.5625 \
bytes per value plus scales), so blocks and tokens are a lower bound")
"""

from __future__ import annotations

from kvplan.kvspec.arch import ModelArch
from kvplan.kvspec.base import SLIDING_ATTENTION, KVSpecError
from kvplan.releases import DCP_FROM, FP8_DS_MLA_FROM, MLA_FROM, OLDEST_KV_ARITHMETIC, Release

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
    """Why a prefill-context-parallel launch is approximate (empty for ``pcp`` 1).

    >>> pcp_note(1), pcp_note(2)[:40]
    ('', 'prefill context parallel (PCP 2) is not ')
    """
    if pcp < 1:
        raise KVSpecError(f"pcp must be positive, got {pcp}")
    if pcp == 1:
        return ""
    return (
        f"prefill context parallel (PCP {pcp}) is not modelled: sized without it (whole requests "
        "per rank), a lower bound"
    )
