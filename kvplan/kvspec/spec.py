"""The KV spec: the per-rank KV-cache geometry of one model on one ``tp × pp`` layout (with DCP) for one vLLM
release, and what a budget buys on it (:meth:`KVSpec.capacity`): ``blocks = kv_bytes // block_bytes``, the
minimum over pipeline stages; what the config cannot give is named in ``approximate_reason``.

vLLM's figures for a number of blocks (``v1/core/kv_cache_utils.py`` ``get_max_concurrency_for_kv_cache_config``,
``v1/kv_cache_interface.py`` ``max_memory_usage_bytes``): a request of L tokens needs ``ceil(L / DCP /
block_size)`` blocks per full-attention group, ``ceil(min(W − 1 + in-flight tokens, L) / block_size) + 1`` per
sliding-window group, and per Mamba group one state block (2 in "align" mode, +1 for a FlashInfer GDN prefill
checkpoint). "Maximum concurrency" = blocks / blocks per request (0.9.1+); "GPU KV cache size" =
``int(max_concurrency × L)`` (0.21+).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from kvplan.kvspec.arch import (
    FULL_ATTENTION,
    MLA_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    ModelArch,
    check_model_name,
    model_arch,
    parse_vllm_version,
)
from kvplan.kvspec.capacity import SPEC_FIELDS, Capacity
from kvplan.kvspec.launch import (
    HOST_POOL_NOTE,
    BlockSizeInputs,
    LaunchSettings,
    LoggedHostPool,
    SpecOptions,
    host_pool_bound,
    launch_settings,
    logged_block_sizes,
    resolve_block_size,
)
from kvplan.kvspec.page import (
    StageSpec,
    attention_bytes_per_token_per_layer,
    check_release_support,
    kv_cache_groups,
    pcp_note,
    pipeline_stages,
    pp_partition,
    served_arch,
    served_layers,
    unmodelled_kv_dtype,
)
from kvplan.releases import (
    AUTO_FIT_NULL_BLOCK_FROM,
    CONCURRENCY_FROM_BLOCKS_FROM,
    DCP_FROM,
    TOKENS_FROM_CONCURRENCY_FROM,
    TOKENS_PER_GROUP_FROM,
    Release,
)


@dataclass(frozen=True)
class KVSpec:
    """KV-cache geometry of one model, layout and vLLM release (:func:`kv_spec`) [bytes per rank]."""

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
    launch: LaunchSettings
    approximate_reason: str
    num_gpu_blocks_override: int | None = None
    host_pool: LoggedHostPool | None = None
    options: Mapping[str, object] = field(default_factory=dict)

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

    def with_settings(
        self, block_size: int | None = None, vllm_version: str | None = None, **changes: object
    ) -> KVSpec:
        """The same model and layout with another block size, release or :func:`kv_spec` keyword."""
        options = dict(self.options)
        if block_size is not None:
            options["block_size"] = block_size
        if vllm_version is not None:
            options["vllm_version"] = vllm_version
        return kv_spec(self.arch, **{**options, **changes})

    def num_blocks(self, kv_bytes: int) -> int:
        """Blocks every rank gets from ``kv_bytes`` per rank: the minimum over stages."""
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override  # vLLM allocates exactly these (kv_cache_planning.py)
        return min(max(0, kv_bytes // stage.block_bytes) for stage in self.stages)

    def blocks_per_request(self, max_model_len: int) -> int:
        """Blocks one request of ``max_model_len`` tokens needs, summed over vLLM's KV cache groups."""
        if max_model_len <= 0:
            raise KVSpecError(f"max_model_len must be positive, got {max_model_len}")
        full_len = math.ceil(max_model_len / self.dcp)
        window_len = min((self.arch.sliding_window or 0) - 1 + self.launch.in_flight_tokens, max_model_len)
        state_blocks = self.launch.mamba_blocks_per_request(self.arch.linear_kind)
        total = 0
        for kind, _layers in self.groups:
            if kind in (FULL_ATTENTION, MLA_ATTENTION):
                total += math.ceil(full_len / self.block_size)
            elif kind == SLIDING_ATTENTION:
                total += math.ceil(window_len / self.block_size) + 1
            else:
                total += state_blocks
        return total

    def max_concurrency(self, num_blocks: int, max_model_len: int) -> float:
        """vLLM's "Maximum concurrency" of ``num_blocks``: ``tokens / L`` before 0.9.1, then
        ``blocks / blocks per request``."""
        if parse_vllm_version(self.vllm_version) < CONCURRENCY_FROM_BLOCKS_FROM:
            return self.kv_cache_tokens(num_blocks, max_model_len) / max_model_len
        return num_blocks / self.blocks_per_request(max_model_len)

    def kv_cache_tokens(self, num_blocks: int, max_model_len: int) -> int:
        """vLLM's "GPU KV cache size" [tokens] of ``num_blocks``: ``blocks // groups × block_size`` (× dcp
        from 0.11) up to 0.20, then ``int(max_concurrency × max_model_len)``."""
        version = parse_vllm_version(self.vllm_version)
        if version >= TOKENS_FROM_CONCURRENCY_FROM:
            return int(self.max_concurrency(num_blocks, max_model_len) * max_model_len)
        groups = len(self.groups) if version >= TOKENS_PER_GROUP_FROM else 1
        dcp = self.dcp if version >= DCP_FROM else 1
        return num_blocks // groups * self.block_size * dcp

    def auto_fit_max_model_len(self, kv_bytes: int, max_model_len: int) -> int:
        """The ``max_model_len`` vLLM fits with ``--max-model-len -1`` (``_auto_fit_max_model_len``): the
        longest length whose one request fits ``kv_bytes`` less the null block (0.29+); 0 when none fits.

        >>> spec = kv_spec({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        ...                 "head_dim": 128, "torch_dtype": "bfloat16"})  # 2 MiB blocks
        >>> spec.auto_fit_max_model_len(4 * 2**30, 131072)  # 2,047 usable blocks × 16 tokens
        32752
        """
        null_block = parse_vllm_version(self.vllm_version) >= AUTO_FIT_NULL_BLOCK_FROM
        usable = min(kv_bytes - stage.block_bytes * null_block for stage in self.stages)
        limit = min(usable // stage.block_bytes for stage in self.stages)
        if self.blocks_per_request(1) > limit:
            return 0
        low, high = 1, max_model_len  # low fits
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if self.blocks_per_request(middle) <= limit else (low, middle - 1)
        return low

    def capacity(self, kv_bytes: int, max_model_len: int) -> Capacity:
        """Blocks, tokens and concurrency of ``kv_bytes`` per rank, as this release logs them.

        >>> c = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        ...              "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4,
        ...             vllm_version="0.26.0").capacity(12 * 2**30, 32768)
        >>> c.bytes_per_token, c.blocks, c.tokens, round(c.max_concurrency, 2)
        (81920, 9830, 157280, 4.8)
        """
        blocks = self.num_blocks(kv_bytes)
        limiting = self.limiting_stage
        result = Capacity(
            model=self.arch.name,
            **{name: getattr(self, name) for name in SPEC_FIELDS[1:]},
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
                {
                    **asdict(stage),
                    "blocks": self.num_gpu_blocks_override
                    if self.num_gpu_blocks_override is not None
                    else max(0, kv_bytes // stage.block_bytes),
                }
                for stage in self.stages
            ),
            block_size_note=self.block_size_note,
        )
        return result if self.host_pool is None else host_pool_bound(result, self.host_pool)

    def to_dict(self) -> dict:
        """JSON-ready summary: layout, block size, per-stage geometry, approximate flag."""
        shown = (
            "block_size",
            "block_size_note",
            "bytes_per_token_per_layer",
            "bytes_per_token",
            "block_bytes",
        )
        return {
            "model": self.arch.name,
            **{name: getattr(self, name) for name in (*SPEC_FIELDS[1:], *shown)},
            "kv_cache_groups": [{"kind": kind, "layers": len(layers)} for kind, layers in self.groups],
            "approximate": self.approximate,
            "approximate_reason": self.approximate_reason,
            "stages": [asdict(stage) for stage in self.stages],
        }


def kv_spec(config: Mapping | ModelArch, **options: Any) -> KVSpec:
    """The per-rank KV geometry of a model config on a layout (:class:`SpecOptions`' keywords).

    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
    >>> spec.bytes_per_token_per_layer, spec.bytes_per_token, spec.block_bytes
    (1024, 81920, 1310720)
    """
    o = SpecOptions(**options)  # an unknown keyword is a TypeError, as for a signature
    arch = config if isinstance(config, ModelArch) else model_arch(config)
    check_model_name(arch, o.logged_model)
    arch = served_arch(arch, o.dtype)
    version = parse_vllm_version(o.vllm_version)
    check_release_support(arch, version, o.vllm_version, tp=o.tp, dcp=o.dcp, kv_cache_dtype=o.kv_cache_dtype)
    sized_dtype, dtype_note = unmodelled_kv_dtype(o.kv_cache_dtype)
    token_bytes = attention_bytes_per_token_per_layer(arch, o.tp, sized_dtype)
    reasons = [*arch.notes, *filter(None, (dtype_note, pcp_note(o.pcp)))]
    logged_pool = None if o.host_pool is None else LoggedHostPool(*(int(value) for value in o.host_pool))
    if logged_pool is not None:
        reasons.append(HOST_POOL_NOTE)
    layer_types, linear_bytes, served_reasons = served_layers(arch, version, o.tp, o.hybrid_kv_cache_manager)
    reasons += served_reasons
    launch = launch_settings(
        version,
        o,
        sliding=SLIDING_ATTENTION in layer_types,
        linear_kind=arch.linear_kind,
        head_k_dim=arch.linear_dims[2] if arch.linear_kind == "gated_delta_net" else None,
    )
    reasons += launch.approximate
    size, note = _block_size(o, arch, version, token_bytes, linear_bytes, launch.gdn_checkpoint)
    groups = tuple(kv_cache_groups(layer_types, ".".join(map(str, version))))
    layers_per_stage = pp_partition(arch.num_layers, o.pp, list(o.pp_layers) or None)
    return KVSpec(
        arch=arch,
        tp=o.tp,
        pp=o.pp,
        dcp=o.dcp,
        kv_cache_dtype=o.kv_cache_dtype,
        vllm_version=".".join(map(str, version)) if o.vllm_version is None else str(o.vllm_version),
        block_size=size,
        block_size_note=note,
        bytes_per_token_per_layer=token_bytes,
        groups=groups,
        stages=pipeline_stages(layer_types, groups, layers_per_stage, size * token_bytes, token_bytes),
        launch=launch,
        approximate_reason="; ".join(reasons),
        num_gpu_blocks_override=o.num_gpu_blocks_override,
        host_pool=logged_pool,
        options=asdict(o),
    )


def _block_size(
    o: SpecOptions, arch: ModelArch, version: Release, token_bytes: int, linear_bytes: int | None, gdn: bool
) -> tuple[int, str]:
    size, note = resolve_block_size(
        BlockSizeInputs(
            o.block_size,
            unmodelled_kv_dtype(o.kv_cache_dtype)[0],
            version,
            token_bytes,
            linear_bytes,
            mla=arch.mla_latent_dim is not None,
            sparse=arch.sparse_indexer,
            gpu_name=o.gpu_name,
            logged_sizes=logged_block_sizes(o.kv_cache_group_block_sizes),
            gdn_align=gdn,
        )
    )
    if o.num_gpu_blocks_override is not None and o.num_gpu_blocks_override <= 0:
        raise KVSpecError(f"num_gpu_blocks_override must be positive, got {o.num_gpu_blocks_override}")
    return size, note
