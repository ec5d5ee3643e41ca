"""The launch settings that change vLLM's KV arithmetic, as the logs show them or as vLLM defaults them:
tokens in flight for sliding-window groups, Mamba blocks per request, the GPU family (which picks
attention backends), and a note saying which value was assumed.

>>> settings = launch_settings((0, 33, 0), max_num_batched_tokens=8192, pp=1, sliding=True)
>>> settings.in_flight_tokens, settings.notes
(16384, ('async scheduling not in the logs: on, vLLM 0.26+ default (2 batches in flight)',))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvplan.kvspec.base import KVSpecError
from kvplan.releases import (
    ASYNC_SCHEDULING_DEFAULT_FROM,
    GDN_PREFILL_CHECKPOINT_FROM,
    IN_FLIGHT_TOKENS_FROM,
    MAMBA_ALIGN_FROM,
    Release,
)

#: The largest ``max_num_batched_tokens`` vLLM picks by default (``engine/arg_utils.py``: 16,384 for
#: the LLM class on ≥ 70 GiB GPUs other than A100 and for every context on ≥ 160 GiB; ``vllm serve``
#: takes 8,192 on H100/H200 and 2,048 on A100 and smaller). Assumed when the logs do not say: more
#: tokens in flight keep more sliding-window blocks per request, so the prediction is a lower bound.
LARGEST_DEFAULT_MAX_NUM_BATCHED_TOKENS = 16384
#: Mamba cache modes (``--mamba-cache-mode``): "align" keeps 2 state blocks per request (+1 checkpoint).
MAMBA_CACHE_MODES = ("none", "align", "all")

_HOPPER = re.compile(r"\b(H100|H200|H800|H20|GH200)\b", re.IGNORECASE)
_BLACKWELL = re.compile(r"\b(B100|B200|B300|GB200|GB300)\b", re.IGNORECASE)


def gpu_family(gpu_name: str | None) -> str | None:
    """``hopper`` (SM90), ``blackwell`` (SM100) or ``other`` for an nvidia-smi GPU name; None when unknown.

    >>> gpu_family("NVIDIA H100 80GB HBM3"), gpu_family("NVIDIA B200"), gpu_family("NVIDIA A100-SXM4-80GB")
    ('hopper', 'blackwell', 'other')
    """
    if not gpu_name:
        return None
    if _HOPPER.search(gpu_name):
        return "hopper"
    if _BLACKWELL.search(gpu_name):
        return "blackwell"
    return "other"


@dataclass(frozen=True)
class LaunchSettings:
    """What a launch contributes to the arithmetic: ``max_num_batched_tokens`` (as used),
    ``in_flight_tokens`` (what a sliding-window group keeps beyond its window), the Mamba cache mode,
    Mamba state blocks per request, whether the GDN prefill keeps a checkpoint block and aligns the
    block size to 64, and ``notes`` (assumed values) and ``approximate`` (why a figure is a lower bound).
    """

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


def launch_settings(
    version: Release,
    *,
    pp: int,
    max_num_batched_tokens: int | None = None,
    async_scheduling: bool | None = None,
    mamba_cache_mode: str | None = None,
    gpu_name: str | None = None,
    sliding: bool = False,
    linear_kind: str | None = None,
    head_k_dim: int | None = None,
) -> LaunchSettings:
    """The settings of a launch in release ``version``, with vLLM's defaults where a value is None.

    ``sliding``: the model has sliding-window groups (then ``max_num_batched_tokens`` matters);
    ``linear_kind``: its Mamba / linear-attention layers' kind, None without (then prefix caching, hence
    "align" mode, is vLLM's default from 0.26); ``head_k_dim``: the gated delta net's key head size
    (FlashInfer's GDN prefill on Blackwell needs 128).
    """
    hybrid = linear_kind is not None
    notes: list[str] = []
    approximate: list[str] = []
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
    if async_scheduling is None:
        async_scheduling = version >= ASYNC_SCHEDULING_DEFAULT_FROM
        if version >= IN_FLIGHT_TOKENS_FROM and sliding:
            notes.append("async scheduling not in the logs: on, vLLM 0.26+ default (2 batches in flight)")
    batches, why = _in_flight_batches(version, bool(async_scheduling), pp)
    if why and sliding:
        approximate.append(why)
    if mamba_cache_mode is None:
        mamba_cache_mode = "align" if hybrid and version >= MAMBA_ALIGN_FROM else "none"
        if hybrid and version >= MAMBA_ALIGN_FROM:
            notes.append(
                "Mamba cache mode not in the logs: 'align', vLLM 0.26+ default for hybrid models "
                "(prefix caching on): 2 state blocks per request"
            )
    elif mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise KVSpecError(f"mamba_cache_mode {mamba_cache_mode!r}: expected one of {list(MAMBA_CACHE_MODES)}")
    gdn_checkpoint = False
    gdn = linear_kind == "gated_delta_net"
    if gdn and mamba_cache_mode == "align" and version >= GDN_PREFILL_CHECKPOINT_FROM:
        family = gpu_family(gpu_name)
        gdn_checkpoint = family != "other" and (family != "blackwell" or head_k_dim == 128)
        if family is None or (family == "blackwell" and gdn_checkpoint):
            approximate.append(
                "FlashInfer gated-delta-net prefill assumed (Hopper; Blackwell with CUDA 13): a 64-aligned "
                "block size and a checkpoint block per request, a lower bound"
                + ("" if family else "; the GPU type (nvidia-smi snapshot) makes it exact")
            )
    return LaunchSettings(
        max_num_batched_tokens=max_num_batched_tokens,
        in_flight_tokens=batches * max_num_batched_tokens,
        async_scheduling=bool(async_scheduling),
        mamba_cache_mode=mamba_cache_mode,
        gdn_checkpoint=gdn_checkpoint,
        notes=tuple(notes),
        approximate=tuple(approximate),
    )
