"""The KV spec: the per-rank KV-cache geometry of one model on one ``tp × pp`` layout (with DCP), for
one vLLM release, and what a budget in bytes buys on it (:meth:`KVSpec.capacity`).

A block holds ``block_size`` tokens of every KV layer the rank owns; ``blocks = kv_bytes // block_bytes``
and every rank then uses the minimum over ranks. Pipeline stages own ``L // pp`` layers, the remainder
going to the stages before the last (``vllm/distributed/utils.py`` ``get_pp_indices``). Decode context
parallel (DCP) shards the tokens of a sequence over ``dcp`` ranks. Sliding-window and hybrid models
follow vLLM's hybrid KV cache manager (:mod:`kvplan.kvspec.groups`, :mod:`kvplan.kvspec.figures`);
where the result depends on something the config cannot give, the spec says so in
``approximate_reason``; it never treats such a model as full attention silently.

>>> kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
...          "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4).capacity(12 * 2**30, 32768).tokens
157280
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from kvplan.capacity import Capacity
from kvplan.kvspec import figures
from kvplan.kvspec.arch import ModelArch, model_arch
from kvplan.kvspec.base import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    parse_vllm_version,
)
from kvplan.kvspec.block_size import resolve_block_size
from kvplan.kvspec.groups import kv_cache_groups
from kvplan.kvspec.layout import pp_partition
from kvplan.kvspec.model_name import check_model_name
from kvplan.kvspec.page import SERVED_DTYPE_BYTES, attention_bytes_per_token_per_layer, linear_state_bytes
from kvplan.releases import (
    DCP_FROM,
    FP8_DS_MLA_FROM,
    HYBRID_KV_MANAGER_FROM,
    HYBRID_MAMBA_FROM,
    MLA_FROM,
    OLDEST_KV_ARITHMETIC,
)

#: ``--max-num-batched-tokens`` assumed for sliding-window accounting when none is given.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


@dataclass(frozen=True)
class StageSpec:
    """What one pipeline stage's ranks hold (sizes in bytes, per rank).

    ``block_bytes`` is one block across the stage's KV layers, as vLLM divides available memory by:
    ``page_bytes × layers_per_group`` (for a uniform model, the stage's attention layers).
    ``bytes_per_token = block_bytes / block_size``: what one token slot of the pool costs.
    """

    pp_rank: int
    first_layer: int
    end_layer: int
    attention_layers: int
    linear_layers: int
    layers_per_group: int
    page_bytes: int
    block_bytes: int
    bytes_per_token: int



@dataclass(frozen=True)
class KVSpec:
    """KV-cache geometry of one model on one parallel layout, for one vLLM release.

    Build it with :func:`kv_spec`. Sizes are bytes per rank.
    """

    arch: ModelArch
    tp: int
    pp: int
    dcp: int
    kv_cache_dtype: str
    vllm_version: str
    block_size: int
    block_size_note: str
    bytes_per_token_per_layer: int
    groups: tuple[tuple[str, tuple[int, ...]], ...]
    stages: tuple[StageSpec, ...]
    max_num_batched_tokens: int
    approximate_reason: str
    requested_block_size: int | None = None
    pp_layers: tuple[int, ...] = field(default=())
    dtype: str | None = None

    @property
    def approximate(self) -> bool:
        """True when vLLM's figures cannot be reproduced exactly; see ``approximate_reason``."""
        return bool(self.approximate_reason)

    @property
    def limiting_stage(self) -> StageSpec:
        """The stage with the largest block: it gets the fewest blocks from the same budget."""
        return max(self.stages, key=lambda stage: (stage.block_bytes, -stage.pp_rank))

    @property
    def bytes_per_token(self) -> int:
        """Bytes per token slot on the limiting stage (per rank)."""
        return self.limiting_stage.bytes_per_token

    @property
    def block_bytes(self) -> int:
        """Bytes of one block on the limiting stage (per rank)."""
        return self.limiting_stage.block_bytes

    def stage(self, pp_rank: int) -> StageSpec:
        """The stage of pipeline rank ``pp_rank``."""
        if not 0 <= pp_rank < len(self.stages):
            raise KVSpecError(f"pp_rank {pp_rank} is outside 0..{len(self.stages) - 1}")
        return self.stages[pp_rank]

    def with_settings(self, block_size: int | None = None, vllm_version: str | None = None) -> KVSpec:
        """The same model and layout with another block size or release (``None`` keeps the current)."""
        return kv_spec(
            self.arch,
            tp=self.tp,
            pp=self.pp,
            dcp=self.dcp,
            kv_cache_dtype=self.kv_cache_dtype,
            block_size=self.requested_block_size if block_size is None else block_size,
            vllm_version=self.vllm_version if vllm_version is None else vllm_version,
            max_num_batched_tokens=self.max_num_batched_tokens,
            pp_layers=self.pp_layers,
            dtype=self.dtype,
        )

    def num_blocks(self, kv_bytes: int) -> int:
        """Blocks every rank gets from ``kv_bytes`` per rank: the minimum over stages.

        >>> kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        ...          "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4).num_blocks(12 * 2**30)
        9830
        """
        return min(max(0, kv_bytes // stage.block_bytes) for stage in self.stages)

    def blocks_per_request(self, max_model_len: int) -> int:
        """Blocks one request of ``max_model_len`` tokens needs, summed over vLLM's KV cache groups.

        >>> kv_spec({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
        ...          "head_dim": 64, "torch_dtype": "bfloat16"}, tp=1).blocks_per_request(8193)
        513
        """
        return figures.blocks_per_request(self, max_model_len)

    def max_concurrency(self, num_blocks: int, max_model_len: int) -> float:
        """vLLM's "Maximum concurrency" for ``num_blocks`` blocks, in this release's arithmetic.

        Before 0.9.1 ``tokens / L`` with this release's "GPU KV cache size" tokens (0.9.0 hybrid:
        the blocks split across the KV cache groups); from 0.9.1 ``blocks / blocks per request``.

        >>> spec = kv_spec({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
        ...                "head_dim": 64, "torch_dtype": "bfloat16"}, tp=1)
        >>> old = spec.with_settings(vllm_version="0.8.5")
        >>> spec.max_concurrency(3072, 8193), old.max_concurrency(3072, 8193)
        (5.988304093567251, 5.999267667521054)
        """
        return figures.max_concurrency(self, num_blocks, max_model_len)

    def kv_cache_tokens(self, num_blocks: int, max_model_len: int) -> int:
        """vLLM's "GPU KV cache size" in tokens for ``num_blocks`` blocks, in this release's arithmetic.

        Up to 0.20: ``blocks // groups × block_size`` (× dcp from 0.11); from 0.21:
        ``int(max_concurrency × max_model_len)``.

        >>> spec = kv_spec({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
        ...                "head_dim": 64, "torch_dtype": "bfloat16"}, tp=1)
        >>> old = spec.with_settings(vllm_version="0.20.0")
        >>> spec.kv_cache_tokens(3072, 8193), old.kv_cache_tokens(3072, 8193)
        (49062, 49152)
        """
        return figures.kv_cache_tokens(self, num_blocks, max_model_len)

    def capacity(self, kv_bytes: int, max_model_len: int) -> Capacity:
        """Blocks, tokens and concurrency of ``kv_bytes`` per rank, as this release would log them.

        >>> c = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        ...              "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4,
        ...             vllm_version="0.26.0").capacity(12 * 2**30, 32768)
        >>> c.bytes_per_token, c.blocks, c.tokens, round(c.max_concurrency, 2)
        (81920, 9830, 157280, 4.8)
        """
        blocks = self.num_blocks(kv_bytes)
        limiting = self.limiting_stage
        return Capacity(
            model=self.arch.name,
            vllm_version=self.vllm_version,
            tp=self.tp,
            pp=self.pp,
            dcp=self.dcp,
            kv_cache_dtype=self.kv_cache_dtype,
            kv_bytes=kv_bytes,
            bytes_per_token=limiting.bytes_per_token,
            block_size=self.block_size,
            block_bytes=limiting.block_bytes,
            blocks=blocks,
            tokens=self.kv_cache_tokens(blocks, max_model_len),
            max_model_len=max_model_len,
            max_concurrency=self.max_concurrency(blocks, max_model_len),
            approximate=self.approximate,
            approximate_reason=self.approximate_reason,
            limiting_stage=limiting.pp_rank,
            stages=tuple(
                {**asdict(stage), "blocks": max(0, kv_bytes // stage.block_bytes)} for stage in self.stages
            ),
            block_size_note=self.block_size_note,
        )

    def to_dict(self) -> dict:
        """JSON-ready summary: layout, block size, per-stage geometry, approximate flag."""
        return {
            "model": self.arch.name,
            "vllm_version": self.vllm_version,
            "tp": self.tp,
            "pp": self.pp,
            "dcp": self.dcp,
            "kv_cache_dtype": self.kv_cache_dtype,
            "block_size": self.block_size,
            "block_size_note": self.block_size_note,
            "bytes_per_token_per_layer": self.bytes_per_token_per_layer,
            "bytes_per_token": self.bytes_per_token,
            "block_bytes": self.block_bytes,
            "kv_cache_groups": [{"kind": kind, "layers": len(layers)} for kind, layers in self.groups],
            "approximate": self.approximate,
            "approximate_reason": self.approximate_reason,
            "stages": [asdict(stage) for stage in self.stages],
        }


def kv_spec(
    config: Mapping | ModelArch,
    *,
    tp: int = 1,
    pp: int = 1,
    dcp: int = 1,
    kv_cache_dtype: str = "auto",
    block_size: int | None = None,
    vllm_version: str | None = None,
    max_num_batched_tokens: int | None = None,
    pp_layers: Sequence[int] = (),
    dtype: str | None = None,
    logged_model: str | None = None,
) -> KVSpec:
    """The per-rank KV geometry of a model config on a ``tp × pp`` layout with ``dcp``.

    ``block_size=None`` takes vLLM's default for the model (16; 64 for MLA; raised for hybrid Mamba
    models). ``pp_layers`` is ``VLLM_PP_LAYER_PARTITION`` when set. ``max_num_batched_tokens`` only
    matters for sliding-window layers; without it the spec assumes 8,192 and says it is approximate.
    ``dtype`` is the dtype vLLM served (``--dtype`` as its log shows it, e.g. ``torch.bfloat16``;
    None or ``auto`` = the config's ``torch_dtype``). ``logged_model`` is the model name the logs
    show; a config naming another model is refused (:func:`check_model_name`).

    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
    >>> spec.bytes_per_token_per_layer, spec.bytes_per_token, spec.block_bytes
    (1024, 81920, 1310720)
    """
    arch = config if isinstance(config, ModelArch) else model_arch(config)
    check_model_name(arch, logged_model)
    if dtype is not None and str(dtype) != "auto":
        served = str(dtype).removeprefix("torch.")
        if served not in SERVED_DTYPE_BYTES:
            raise KVSpecError(f"dtype {dtype!r}: expected one of {sorted(SERVED_DTYPE_BYTES)} (or auto)")
        arch = replace(arch, dtype_bytes=SERVED_DTYPE_BYTES[served])
    version = parse_vllm_version(vllm_version)
    if version < OLDEST_KV_ARITHMETIC:
        raise KVSpecError(f"vllm_version {vllm_version}: kvplan repeats vLLM's arithmetic from 0.5.0 on")
    if arch.mla_latent_dim is not None and version < MLA_FROM:
        raise KVSpecError(f"vLLM {vllm_version} serves {arch.name} without MLA (K and V per head, head "
                          "size padded): kvplan sizes MLA models from 0.7.1 on, where one latent per token "
                          "is cached")
    if kv_cache_dtype == "fp8_ds_mla" and version < FP8_DS_MLA_FROM:
        raise KVSpecError(f"kv_cache_dtype 'fp8_ds_mla' does not exist in vLLM {vllm_version}: its 656-byte "
                          "pages came with DeepSeek-V3.2 support in 0.11.0")
    if dcp <= 0:
        raise KVSpecError(f"dcp must be positive, got {dcp}")
    if dcp > 1:
        if tp % dcp:
            raise KVSpecError(f"dcp {dcp} does not divide tp {tp}: vLLM needs tp divisible by the DCP size")
        if version < DCP_FROM:
            raise KVSpecError(f"decode context parallel needs vLLM 0.11 or later, not {vllm_version}")
        if SLIDING_ATTENTION in arch.layer_types:
            raise KVSpecError(f"{arch.name}: vLLM does not support DCP with sliding-window layers")
    token_bytes = attention_bytes_per_token_per_layer(arch, tp, kv_cache_dtype)
    reasons = list(arch.notes)
    linear_bytes = None
    layer_types = arch.layer_types
    if LINEAR_ATTENTION in layer_types:
        if version < HYBRID_MAMBA_FROM:
            raise KVSpecError(
                f"{arch.name}: hybrid Mamba / linear-attention models are sized here from vLLM 0.10"
            )
        linear_bytes = linear_state_bytes(arch, tp)
        reasons.append(
            "linear-attention / Mamba state: its size (state dtypes, prefix-caching mode) and the page "
            "padding vary by release; blocks and concurrency are estimates"
        )
    if SLIDING_ATTENTION in layer_types:
        if version < HYBRID_KV_MANAGER_FROM:
            layer_types = tuple(FULL_ATTENTION for _ in layer_types)
            reasons.append(
                "vLLM before 0.9 keeps sliding-window layers as full attention (no hybrid KV cache "
                "manager); sized that way"
            )
        elif max_num_batched_tokens is None:
            reasons.append(
                f"sliding-window layers hold min(window − 1 + max_num_batched_tokens, L) tokens; "
                f"max_num_batched_tokens not given, {DEFAULT_MAX_NUM_BATCHED_TOKENS} assumed"
            )
    size, note = resolve_block_size(block_size, kv_cache_dtype, version, token_bytes, linear_bytes,
                                    mla=arch.mla_latent_dim is not None)
    page_bytes = size * token_bytes
    groups = tuple(kv_cache_groups(layer_types, ".".join(map(str, version))))
    sizes = pp_partition(arch.num_layers, pp, list(pp_layers) or None)
    stages = []
    start = 0
    for rank, count in enumerate(sizes):
        end = start + count
        layers_per_group = max(sum(start <= i < end for i in layers) for _kind, layers in groups)
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
    return KVSpec(
        arch=arch,
        tp=tp,
        pp=pp,
        dcp=dcp,
        kv_cache_dtype=kv_cache_dtype,
        vllm_version=".".join(str(part) for part in version) if vllm_version is None else str(vllm_version),
        block_size=size,
        block_size_note=note,
        bytes_per_token_per_layer=token_bytes,
        groups=groups,
        stages=tuple(stages),
        max_num_batched_tokens=max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        approximate_reason="; ".join(reasons),
        requested_block_size=block_size,
        pp_layers=tuple(pp_layers),
        dtype=None if dtype is None else str(dtype),
    )
