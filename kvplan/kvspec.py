"""KV-cache bytes per token per rank from a Hugging Face model config and the parallel layout.

vLLM sizes the KV cache per rank, for the layers and KV heads that rank really holds, and reports
"GPU KV cache size" and "Maximum concurrency" with release-specific arithmetic. This module repeats
that arithmetic so a budget in bytes becomes the tokens and sequences vLLM will print.

Notes
-----
Per token and layer, on one rank (``vllm/v1/kv_cache_interface.py``):

- standard / grouped-query / multi-query attention: ``2 × kv_heads_per_rank × head_dim × dtype_bytes``
  with ``kv_heads_per_rank = max(1, kv_heads // tp)`` (replicated when ``tp > kv_heads``);
- MLA (DeepSeek-V2/V3, Kimi): one latent of ``kv_lora_rank + qk_rope_head_dim`` values, no factor 2,
  the same on every TP rank; ``fp8_ds_mla`` stores 656 bytes per token per layer.

A block holds ``block_size`` tokens of every KV layer the rank owns; ``blocks = kv_bytes // block_bytes``
and every rank then uses the minimum over ranks. Pipeline stages own ``L // pp`` layers, the remainder
going to the stages before the last (``vllm/distributed/utils.py`` ``get_pp_indices``). Decode context
parallel (DCP) shards the tokens of a sequence over ``dcp`` ranks.

Sliding-window and hybrid models follow vLLM's hybrid KV cache manager
(``v1/core/kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size``): layers of each kind are
split into groups of equal size, every group shares one pool of blocks, and a request needs
``ceil(L / block_size)`` blocks per full-attention group, ``ceil(min(window − 1 + batched, L) /
block_size) + 1`` per sliding-window group and one block per Mamba / linear-attention group. Where
the result depends on something the config cannot give (the batched-token budget, the recurrent state
layout of a release), the spec says so in ``approximate_reason``; it never treats such a model as
full attention silently.

References
----------
vLLM ``v1/kv_cache_interface.py``, ``v1/core/kv_cache_utils.py``, ``distributed/utils.py``,
``model_executor/models/config.py`` (hybrid attention block size), and
``vllm-log-formats.md`` §8 for the release differences.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import pandas as pd

from kvplan.capacity import DEFAULT_BLOCK_SIZE
from kvplan.ledger import is_known
from kvplan.releases import version_tuple
from kvplan.units import GiB

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
MLA_ATTENTION = "mla_attention"
LINEAR_ATTENTION = "linear_attention"

#: Bytes per stored value for each ``--kv-cache-dtype``; ``auto`` follows the model dtype.
KV_CACHE_DTYPE_BYTES: dict[str, int | None] = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,
}
# vLLM serves float32 checkpoints in a 16-bit dtype by default (``dtype=auto``).
_MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2}
#: Bytes per value of the dtype vLLM really served (``dtype=torch.bfloat16`` in its config line).
_SERVED_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
#: ``fp8_ds_mla`` page: 512 fp8 latent values + 4 float32 scales + 64 bf16 rope values per token.
FP8_DS_MLA_BYTES_PER_TOKEN = 656
#: Block size the FlashMLA backends force ("Forcing kv cache block size to 64 for FlashMLA backend").
MLA_BLOCK_SIZE = 64
#: Hybrid Mamba models round the attention block size up to a multiple of this.
HYBRID_BLOCK_ALIGNMENT = 16
#: Release assumed when none is given: the newest in ``vllm-log-formats.md``.
DEFAULT_VLLM_VERSION = "0.33.0"
#: The oldest release whose KV arithmetic kvplan repeats.
OLDEST_VLLM_VERSION = (0, 5, 0)
#: The first release that serves MLA models with MLA (a latent per token); before, K and V per head.
MLA_FROM = (0, 7, 1)
#: The first release whose MLA backends force 64-token blocks ("Forcing kv cache block size to 64").
MLA_BLOCK_FORCED_FROM = (0, 8, 0)
#: The first release with ``fp8_ds_mla`` pages (``MLAAttentionSpec``; the flag's choices list it from 0.14).
FP8_DS_MLA_FROM = (0, 11, 0)
#: ``--max-num-batched-tokens`` assumed for sliding-window accounting when none is given.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: Hybrid groups take the largest kind's layer count when it is under this × the smallest's:
#: 1.25 up to 0.17, 1.5 from 0.18.0 (vLLM PR #36684, merged 2026-03-10; 0.18.0 was released 2026-03-20).
GROUP_SIZE_RATIO = {(0, 0, 0): 1.25, (0, 18, 0): 1.5}
#: Half of the 0.01 GiB step of a 2-decimal GiB figure: how far such a figure can be from the truth.
GIB_2DP_HALF_STEP_BYTES = GiB // 200

_NESTED_CONFIG_KEYS = ("text_config", "llm_config", "language_config")


class KVSpecError(ValueError):
    """A model config or layout kvplan cannot size; the message names the field or vLLM's rule."""


# --- versions ---------------------------------------------------------------------------------


def parse_vllm_version(version: str | None) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of a vLLM release string; ``None`` means the newest known release.

    >>> parse_vllm_version("0.6.6.post1"), parse_vllm_version("v0.11.0"), parse_vllm_version("0.19")
    ((0, 6, 6), (0, 11, 0), (0, 19, 0))
    """
    text = DEFAULT_VLLM_VERSION if version is None else str(version).strip()
    parsed = version_tuple(text)
    if parsed is None:
        raise KVSpecError(f"vllm_version: expected a release like '0.11.0', got {text!r}")
    return parsed


# --- the model config -------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelArch:
    """The KV-relevant architecture of one model, read from its config (no layout yet).

    ``layer_types`` has one entry per decoder layer: ``full_attention``, ``sliding_attention``,
    ``mla_attention`` or ``linear_attention`` (Mamba / gated-delta-net state instead of a KV cache).
    ``dtype_bytes`` is None when the config names no ``torch_dtype``/``dtype``; ``model_id`` is the
    Hugging Face name the config states (``_source.model`` or ``_name_or_path``), None when it names none;
    ``max_position_embeddings`` the longest context the config states, None when it states none.
    """

    name: str
    model_type: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int | None
    layer_types: tuple[str, ...]
    sliding_window: int | None = None
    mla_latent_dim: int | None = None
    linear_kind: str | None = None
    linear_dims: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    model_id: str | None = None
    sparse_indexer: bool = False
    max_position_embeddings: int | None = None


def _language_config(config: Mapping) -> Mapping:
    """The language model's config: nested ``text_config`` / ``llm_config`` merged over the outer."""
    for key in _NESTED_CONFIG_KEYS:
        inner = config.get(key)
        if isinstance(inner, Mapping):
            outer = {k: v for k, v in config.items() if k not in _NESTED_CONFIG_KEYS}
            return {**outer, **inner, "_nested_in": key}
    return config


#: Above this, a layer, head or dimension count is no real model's: refused rather than looped over.
MAX_CONFIG_COUNT = 1_000_000


def _positive_field(config: Mapping, name: str, where: str) -> int:
    value = config.get(name)
    if value is None:
        raise KVSpecError(f"{where}: missing field {name!r} (needed to size the KV cache)")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONFIG_COUNT:
        raise KVSpecError(f"{where}: field {name!r} must be a positive integer up to {MAX_CONFIG_COUNT:,}, "
                          f"got {value!r}")
    return value


def _config_model_id(config: Mapping) -> str | None:
    """The model the config says it describes: ``_source.model``, else ``_name_or_path``."""
    source = config.get("_source")
    if isinstance(source, Mapping) and source.get("model"):
        return str(source["model"])
    return str(config["_name_or_path"]) if config.get("_name_or_path") else None


def _config_name(config: Mapping) -> str:
    return _config_model_id(config) or str(config.get("_path") or config.get("model_type") or "model")


#: Model types whose Hugging Face config class sets a missing ``num_key_value_heads`` to
#: ``num_attention_heads`` (``LlamaConfig``); other classes default it to a fixed number
#: (``Gemma3TextConfig`` 4, ``MistralConfig`` 8, ``Qwen3Config`` 32), so kvplan refuses to guess there.
KV_HEADS_DEFAULT_TO_HEADS = ("llama",)
#: Model types whose config class has its own ``head_dim`` default (not ``hidden_size / heads``):
#: ``Gemma*Config`` 256, ``Qwen3Config`` 128. A config of these types without ``head_dim`` is refused.
HEAD_DIM_CLASS_DEFAULT = ("gemma", "qwen3")
_KV_HEAD_FIELDS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")


def _kv_heads(lm: Mapping, num_heads: int, where: str) -> tuple[int, str | None]:
    """KV heads of the language model, and a note when they were not stated but defaulted."""
    if lm.get("multi_query") is True:
        return 1, None
    for name in _KV_HEAD_FIELDS:
        if lm.get(name) is not None:
            return _positive_field(lm, name, where), None
    model_type = str(lm.get("model_type") or "")
    if model_type in KV_HEADS_DEFAULT_TO_HEADS:
        return num_heads, (
            f"no 'num_key_value_heads': taken as num_attention_heads ({num_heads}), the default of "
            f"{model_type}'s config class; check it against the model's published config"
        )
    raise KVSpecError(
        f"{where}: missing field 'num_key_value_heads' (needed to size the KV cache; Hugging Face config "
        f"classes default it differently per model type, so kvplan does not guess it for "
        f"model_type {model_type or 'unknown'!r}: copy it from the model's published config.json, or "
        "set it to num_attention_heads for plain multi-head attention)"
    )


def _dtype_bytes(lm: Mapping, where: str) -> int | None:
    """Bytes per value of the config's ``torch_dtype`` / ``dtype``; None when it names none."""
    raw = lm.get("torch_dtype") or lm.get("dtype")
    if raw is None:
        return None
    dtype = str(raw).removeprefix("torch.")
    if dtype not in _MODEL_DTYPE_BYTES:
        raise KVSpecError(
            f"{where}: field 'torch_dtype' = {dtype!r} is not one of {sorted(_MODEL_DTYPE_BYTES)}"
        )
    return _MODEL_DTYPE_BYTES[dtype]


def model_arch(config: Mapping) -> ModelArch:
    """Read the KV-relevant architecture from a Hugging Face ``config.json`` dict.

    Vision-language configs that nest the language model (``text_config``, ``llm_config``) are read
    from the nested part. A missing field raises :class:`KVSpecError` naming it, except where the
    rule is the Hugging Face config class's own and unambiguous: ``head_dim`` = ``hidden_size /
    num_attention_heads`` (not for Gemma / Qwen3, whose classes default it to a constant), and for
    ``model_type`` ``llama`` only, ``num_key_value_heads`` = ``num_attention_heads`` (then noted in
    ``notes``, which makes the spec approximate). A missing ``torch_dtype`` leaves ``dtype_bytes``
    None: :func:`kv_spec` then needs a fixed-size ``kv_cache_dtype`` or the served ``dtype``.

    >>> arch = model_arch({"num_hidden_layers": 80, "num_attention_heads": 64,
    ...                    "num_key_value_heads": 8, "hidden_size": 8192, "torch_dtype": "bfloat16"})
    >>> arch.num_layers, arch.num_kv_heads, arch.head_dim, arch.dtype_bytes
    (80, 8, 128, 2)
    """
    if not isinstance(config, Mapping):
        raise KVSpecError(
            f"model config: expected a dict (a parsed config.json), got {type(config).__name__}"
        )
    name = _config_name(config)
    lm = _language_config(config)
    where = f"{name}" + (f" ({lm['_nested_in']})" if "_nested_in" in lm else "")
    num_layers = _positive_field(lm, "num_hidden_layers", where)
    num_heads = _positive_field(lm, "num_attention_heads", where)
    num_kv_heads, kv_heads_note = _kv_heads(lm, num_heads, where)
    dtype_bytes = _dtype_bytes(lm, where)
    model_type = str(lm.get("model_type") or "")
    mla_latent_dim = None
    if lm.get("kv_lora_rank") is not None:
        mla_latent_dim = _positive_field(lm, "kv_lora_rank", where) + _positive_field(
            lm, "qk_rope_head_dim", where
        )
        head_dim = mla_latent_dim
    elif lm.get("head_dim") is not None:
        head_dim = _positive_field(lm, "head_dim", where)
    elif model_type.startswith(HEAD_DIM_CLASS_DEFAULT):
        raise KVSpecError(
            f"{where}: missing field 'head_dim' (model_type {model_type!r}: its config class defaults it "
            "to a constant, not hidden_size / num_attention_heads; copy it from the published config.json)"
        )
    else:
        hidden = _positive_field(lm, "hidden_size", where)
        if hidden % num_heads:
            raise KVSpecError(
                f"{where}: no 'head_dim', and hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {num_heads}"
            )
        head_dim = hidden // num_heads
    layer_types, window, notes = _layer_types(lm, num_layers, where, mla=mla_latent_dim is not None)
    if kv_heads_note:
        notes = (kv_heads_note, *notes)
    linear_kind, linear_dims = (None, ())
    if LINEAR_ATTENTION in layer_types:
        linear_kind, linear_dims = _linear_state_dims(lm, where)
    return ModelArch(
        name=name,
        model_type=model_type,
        num_layers=num_layers,
        num_attention_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes,
        layer_types=layer_types,
        sliding_window=window,
        mla_latent_dim=mla_latent_dim,
        linear_kind=linear_kind,
        linear_dims=linear_dims,
        notes=notes,
        model_id=_config_model_id(config),
        sparse_indexer=mla_latent_dim is not None and lm.get("index_topk") is not None,
        max_position_embeddings=_positive_or_none(lm.get("max_position_embeddings", config.get(
            "max_position_embeddings"))),
    )


def _positive_or_none(value: object) -> int | None:
    """A positive whole number as int, else None (a config field that may be absent)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


_LAYER_TYPE_NAMES = {
    "full_attention": FULL_ATTENTION,
    "attention": FULL_ATTENTION,
    "sliding_attention": SLIDING_ATTENTION,
    "linear_attention": LINEAR_ATTENTION,
    "mamba": LINEAR_ATTENTION,
}


def _layer_types(
    lm: Mapping, num_layers: int, where: str, mla: bool
) -> tuple[tuple[str, ...], int | None, tuple[str, ...]]:
    """Kind of every layer, the sliding window (tokens) and notes on what is assumed."""
    window = lm.get("sliding_window")
    if lm.get("use_sliding_window") is False:
        window = None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise KVSpecError(
            f"{where}: field 'sliding_window' must be one whole number of tokens, got {window!r}"
        )
    if lm.get("attention_chunk_size"):
        raise KVSpecError(
            f"{where}: field 'attention_chunk_size' (chunked local attention, Llama 4) is not sized "
            "by kvplan; it would be wrong to size these layers as full attention"
        )
    notes: list[str] = []
    if mla and lm.get("index_topk") is not None:
        notes.append(
            "DeepSeek-V3.2 sparse attention also keeps an indexer key cache per layer, not counted here"
        )
    if isinstance(lm.get("layer_types"), Sequence) and not isinstance(lm.get("layer_types"), str):
        raw = list(lm["layer_types"])
        if len(raw) != num_layers:
            raise KVSpecError(
                f"{where}: field 'layer_types' has {len(raw)} entries, num_hidden_layers is {num_layers}"
            )
        unknown = sorted({str(t) for t in raw} - set(_LAYER_TYPE_NAMES))
        if unknown:
            raise KVSpecError(
                f"{where}: field 'layer_types' has {unknown}, which kvplan cannot size "
                f"(known: {sorted(_LAYER_TYPE_NAMES)})"
            )
        kinds = [_LAYER_TYPE_NAMES[str(t)] for t in raw]
    elif lm.get("full_attention_interval") is not None:  # Qwen3-Next style: every n-th layer attends
        interval = _positive_field(lm, "full_attention_interval", where)
        kinds = [FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers)]
    elif lm.get("attn_layer_period") is not None:  # Jamba: attention every period, at an offset
        period = _positive_field(lm, "attn_layer_period", where)
        offset = int(lm.get("attn_layer_offset") or 0)
        kinds = [FULL_ATTENTION if i % period == offset else LINEAR_ATTENTION for i in range(num_layers)]
    elif window:
        kinds = _sliding_pattern(lm, num_layers, where, notes)
    else:
        kinds = [FULL_ATTENTION] * num_layers
    if SLIDING_ATTENTION in kinds:
        if not window:
            raise KVSpecError(f"{where}: sliding-window layers but no positive 'sliding_window' field")
        window = int(window)
    else:
        window = None
    if mla:
        if set(kinds) != {FULL_ATTENTION}:
            raise KVSpecError(f"{where}: MLA with sliding-window or linear layers is not supported by kvplan")
        kinds = [MLA_ATTENTION] * num_layers
    if kinds.count(LINEAR_ATTENTION) == num_layers:
        raise KVSpecError(f"{where}: no attention layer at all (a pure Mamba model has no KV cache to size)")
    return tuple(kinds), window, tuple(notes)


def _sliding_pattern(lm: Mapping, num_layers: int, where: str, notes: list[str]) -> list[str]:
    """Which layers use the config's ``sliding_window`` when it has no ``layer_types`` list."""
    model_type = str(lm.get("model_type") or "")
    pattern = lm.get("sliding_window_pattern") or lm.get("_sliding_window_pattern")
    if pattern is None and model_type.startswith("gemma3"):
        pattern = 6  # Gemma3TextConfig's default: five local layers, then one global
        notes.append("no 'sliding_window_pattern': Gemma3TextConfig's default 6 (five local, one global) "
                     "taken; check it against the model's published config")
    if pattern is not None:
        pattern = int(pattern)
        return [FULL_ATTENTION if (i + 1) % pattern == 0 else SLIDING_ATTENTION for i in range(num_layers)]
    if model_type.startswith("gemma2"):  # Gemma 2: even layers local, odd layers global
        return [SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION for i in range(num_layers)]
    if lm.get("use_sliding_window") and lm.get("max_window_layers") is not None:  # Qwen2 style
        first = int(lm["max_window_layers"])
        return [SLIDING_ATTENTION if i >= first else FULL_ATTENTION for i in range(num_layers)]
    notes.append(
        "the config's sliding_window is taken to apply to every layer (Mistral v0.1 style); releases "
        "that read only per-layer layer_types size these layers as full attention: check the log"
    )
    return [SLIDING_ATTENTION] * num_layers


def _linear_state_dims(lm: Mapping, where: str) -> tuple[str, tuple[int, ...]]:
    """What sizes the recurrent state of the linear-attention / Mamba layers."""
    if lm.get("linear_num_value_heads") is not None:  # gated delta net (Qwen3-Next)
        names = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                 "linear_value_head_dim", "linear_conv_kernel_dim")
        return "gated_delta_net", tuple(_positive_field(lm, n, where) for n in names)
    if lm.get("mamba_d_state") is not None:  # Mamba-1 (Jamba)
        hidden = _positive_field(lm, "hidden_size", where)
        expand = _positive_field(lm, "mamba_expand", where)
        return "mamba", (expand * hidden, _positive_field(lm, "mamba_d_conv", where),
                         _positive_field(lm, "mamba_d_state", where))
    raise KVSpecError(
        f"{where}: linear-attention layers without a known state description "
        "(expected linear_num_value_heads… for gated delta net or mamba_d_state… for Mamba)"
    )


# --- layout -----------------------------------------------------------------------------------


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


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int | None, model: str = "model") -> int:
    """Bytes per stored KV value for a ``--kv-cache-dtype``; ``auto`` = the model dtype.

    ``model_dtype_bytes`` None (a config without ``torch_dtype``) is refused for ``auto``: vLLM
    would serve such a config in 16 bits, but a ``--dtype float32`` launch stores 4 bytes, so
    kvplan asks rather than assumes.

    >>> kv_dtype_bytes("auto", 2), kv_dtype_bytes("fp8", 2), kv_dtype_bytes("float16", None)
    (2, 1, 2)
    """
    if kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise KVSpecError(f"kv_cache_dtype {kv_cache_dtype!r}: expected one of {list(KV_CACHE_DTYPE_BYTES)}")
    size = KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    if size is None and model_dtype_bytes is None:
        raise KVSpecError(
            f"{model}: missing field 'torch_dtype' (the model dtype sizes a kv_cache_dtype 'auto' cache): "
            "add it to the config, or give --kv-cache-dtype (e.g. bfloat16 or fp8) or the logs' dtype"
        )
    return model_dtype_bytes if size is None else size


def attention_bytes_per_token_per_layer(arch: ModelArch, tp: int, kv_cache_dtype: str = "auto") -> int:
    """KV bytes one token takes in one attention layer of one TP rank.

    >>> attention_bytes_per_token_per_layer(model_arch({"num_hidden_layers": 80,
    ...     "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    ...     "torch_dtype": "bfloat16"}), tp=4)
    1024
    """
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype, arch.dtype_bytes, arch.name)
    kv_heads_per_rank(arch.num_kv_heads, arch.num_attention_heads, tp)  # validates the TP layout
    if arch.mla_latent_dim is not None:
        if kv_cache_dtype == "fp8_ds_mla":
            if not arch.sparse_indexer:
                raise KVSpecError(
                    f"kv_cache_dtype 'fp8_ds_mla' is the FlashMLA-sparse format of DeepSeek-V3.2-style "
                    f"models (config field 'index_topk'); {arch.name} has none, and vLLM has no attention "
                    "backend that serves it with fp8_ds_mla (use fp8 or auto)"
                )
            return FP8_DS_MLA_BYTES_PER_TOKEN
        return arch.mla_latent_dim * dtype_bytes
    if kv_cache_dtype == "fp8_ds_mla":
        raise KVSpecError(
            f"kv_cache_dtype 'fp8_ds_mla' is for MLA models only; {arch.name} has no kv_lora_rank"
        )
    heads = kv_heads_per_rank(arch.num_kv_heads, arch.num_attention_heads, tp)
    return 2 * heads * arch.head_dim * dtype_bytes


def linear_state_bytes(arch: ModelArch, tp: int) -> int:
    """Bytes of one request's recurrent state in one linear-attention / Mamba layer of a TP rank.

    Gated delta net: conv ``(2·k_heads·k_dim + v_heads·v_dim) / tp × (kernel − 1)`` plus temporal
    ``v_heads / tp × k_dim × v_dim``; Mamba-1: ``d_inner / tp × (d_conv − 1 + d_state)``; both in
    the model dtype (refused when the config names none).

    >>> arch = model_arch({"num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
    ...     "head_dim": 256, "full_attention_interval": 4, "linear_num_key_heads": 16,
    ...     "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    ...     "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16"})
    >>> linear_state_bytes(arch, tp=1)
    1097728
    """
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


# --- vLLM's KV cache groups -------------------------------------------------------------------


def kv_cache_groups(
    layer_types: Sequence[str], vllm_version: str | None = None
) -> list[tuple[str, tuple[int, ...]]]:
    """vLLM's KV cache groups: ``(kind, layer indices)``, every group the same size (hybrid manager).

    One kind → one group of all layers. Several kinds → group size = the smallest kind's layer
    count (or the largest, when it is under :data:`GROUP_SIZE_RATIO` × the smallest: 1.25 up to
    0.17, 1.5 from 0.18), each kind split round-robin into ``ceil(count / group size)`` groups
    (``layers[i::n]``, so 52 layers in 6 groups are 9, 9, 9, 9, 8, 8; vLLM sizes memory by the
    largest group). Later releases' smarter group-size search (vLLM PRs #49472, #58175, open when
    this was written) is not modelled.

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
    version = parse_vllm_version(vllm_version)
    ratio = GROUP_SIZE_RATIO[max(start for start in GROUP_SIZE_RATIO if start <= version)]
    group_size = max(counts) if max(counts) < min(counts) * ratio else min(counts)
    groups = []
    for kind, layers in by_kind.items():
        num_groups = math.ceil(len(layers) / group_size)
        groups += [(kind, tuple(layers[i::num_groups])) for i in range(num_groups)]
    return groups


# --- the spec ---------------------------------------------------------------------------------


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
class KVCapacity:
    """Blocks, tokens and full-length concurrency of a per-rank KV budget, as vLLM reports them."""

    model: str
    vllm_version: str
    tp: int
    pp: int
    dcp: int
    kv_cache_dtype: str
    kv_bytes: int
    bytes_per_token: int
    block_size: int
    block_bytes: int
    blocks: int
    tokens: int
    max_model_len: int
    max_concurrency: float
    approximate: bool
    approximate_reason: str
    limiting_stage: int
    stages: tuple[dict, ...]
    block_size_note: str = ""

    def to_dict(self) -> dict:
        """JSON-ready dict; ``stages`` holds one entry per pipeline stage."""
        data = asdict(self)
        data["stages"] = [dict(stage) for stage in self.stages]
        return data


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
        if max_model_len <= 0:
            raise KVSpecError(f"max_model_len must be positive, got {max_model_len}")
        full_len = math.ceil(max_model_len / self.dcp)
        window_len = min((self.arch.sliding_window or 0) - 1 + self.max_num_batched_tokens, max_model_len)
        total = 0
        for kind, _layers in self.groups:
            if kind in (FULL_ATTENTION, MLA_ATTENTION):
                total += math.ceil(full_len / self.block_size)
            elif kind == SLIDING_ATTENTION:
                total += math.ceil(window_len / self.block_size) + 1
            else:
                total += 1
        return total

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
        if parse_vllm_version(self.vllm_version) < (0, 9, 1):
            return self.kv_cache_tokens(num_blocks, max_model_len) / max_model_len
        return num_blocks / self.blocks_per_request(max_model_len)

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
        version = parse_vllm_version(self.vllm_version)
        if version >= (0, 21, 0):
            return int(self.max_concurrency(num_blocks, max_model_len) * max_model_len)
        groups = len(self.groups) if version >= (0, 9, 0) else 1
        dcp = self.dcp if version >= (0, 11, 0) else 1
        return num_blocks // groups * self.block_size * dcp

    def capacity(self, kv_bytes: int, max_model_len: int) -> KVCapacity:
        """Blocks, tokens and concurrency of ``kv_bytes`` per rank, as this release would log them.

        >>> c = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        ...              "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4,
        ...             vllm_version="0.26.0").capacity(12 * 2**30, 32768)
        >>> c.bytes_per_token, c.blocks, c.tokens, round(c.max_concurrency, 2)
        (81920, 9830, 157280, 4.8)
        """
        blocks = self.num_blocks(kv_bytes)
        limiting = self.limiting_stage
        return KVCapacity(
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


def _resolve_block_size(
    arch: ModelArch, requested: int | None, kv_cache_dtype: str, version: tuple[int, int, int],
    attention_token_bytes: int, linear_bytes: int | None,
) -> tuple[int, str]:
    """The block size vLLM ends up with, and a note when it is not the one asked for."""
    if requested is not None and requested <= 0:
        raise KVSpecError(f"block_size must be positive, got {requested}")
    if arch.mla_latent_dim is not None:
        if kv_cache_dtype == "fp8_ds_mla":
            why = "fp8_ds_mla (FlashMLA sparse) pages hold 64 tokens"
        elif version < MLA_BLOCK_FORCED_FROM:
            return (DEFAULT_BLOCK_SIZE if requested is None else requested), ""
        elif requested is None:
            why = ("MLA backends (FlashMLA) use 64-token blocks; CUTLASS MLA on Blackwell uses 128 "
                   "(give block_size=128)")
        elif version < (0, 20, 0) and requested % MLA_BLOCK_SIZE:
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


#: kv_spec option ← compatibility-key field it must agree with (and is taken from when not given).
_LOGGED_OPTIONS = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "dcp": "decode_context_parallel_size",
    "kv_cache_dtype": "kv_cache_dtype",
    "dtype": "dtype",
}
#: Defaults of the layout options when neither the caller nor the logs give them.
_OPTION_DEFAULTS = {"pp": 1, "dcp": 1, "kv_cache_dtype": "auto"}
#: Spellings of one KV cache dtype: vLLM's "fp8" is e4m3 on CUDA.
_KV_DTYPE_ALIASES = {"fp8_e4m3": "fp8"}


def _same_setting(name: str, given: object, logged: object) -> bool:
    if name in ("tp", "pp", "dcp"):
        return int(given) == int(logged)
    if name == "dtype":
        return str(given).removeprefix("torch.") == str(logged).removeprefix("torch.")
    return _KV_DTYPE_ALIASES.get(str(given), str(given)) == _KV_DTYPE_ALIASES.get(str(logged), str(logged))


def options_for_logs(options: Mapping[str, object], key: Mapping[str, object]) -> dict:
    """:func:`kv_spec` options completed from the logs' compatibility key, refusing contradictions.

    ``tp``, ``pp``, ``dcp``, ``kv_cache_dtype`` and ``dtype`` left None are the logs' (else 1, 1,
    ``auto`` and the config's); given ones must equal the logs', else :class:`KVSpecError` names both,
    since their bytes per token would describe another deployment. ``vllm_version`` and
    ``block_size`` left None are the logs'; ``logged_model`` carries the logs' model name so that
    :func:`kv_spec` can refuse a config of another model.

    >>> options_for_logs({"tp": 4, "block_size": None}, {"vllm_version": "0.26.0", "block_size": 16,
    ...     "tensor_parallel_size": 4, "kv_cache_dtype": "fp8", "pipeline_parallel_size": 1})
    {'tp': 4, 'block_size': 16, 'pp': 1, 'dcp': 1, 'kv_cache_dtype': 'fp8', 'vllm_version': '0.26.0'}
    >>> options_for_logs({"kv_cache_dtype": "auto"}, {"kv_cache_dtype": "fp8"})
    Traceback (most recent call last):
    ...
    kvplan.kvspec.KVSpecError: kv_cache_dtype 'auto' given, but the logs show kv_cache_dtype 'fp8'
    """
    completed = dict(options)
    for name, column in _LOGGED_OPTIONS.items():
        given, logged = completed.get(name), key.get(column)
        if not is_known(logged):
            if given is None and name in _OPTION_DEFAULTS:
                completed[name] = _OPTION_DEFAULTS[name]
            continue
        if given is not None and not _same_setting(name, given, logged):
            raise KVSpecError(f"{name} {given!r} given, but the logs show {column} {logged!r}")
        if given is None:
            completed[name] = str(logged) if name in ("kv_cache_dtype", "dtype") else int(logged)
    for name, kind in (("vllm_version", str), ("block_size", int)):
        if completed.get(name) is None and is_known(key.get(name)):
            completed[name] = kind(key[name])
    if is_known(key.get("model")):
        completed["logged_model"] = str(key["model"])
    return completed


_HF_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


#: Name parts that mark a release variant of one architecture (tuning, quantisation, a date stamp).
MODEL_VARIANT_PARTS = frozenset({
    "instruct", "thinking", "chat", "base", "it", "hf", "fp8", "fp4", "nvfp4", "awq", "gptq", "int4", "int8",
    "w4a16", "w8a8", "w8a16", "bnb", "4bit", "8bit", "dynamic", "quantized",
})


def model_base_name(repo_id: str) -> str:
    """The architecture part of a Hugging Face model name: lower case, variant parts and date stamps dropped.

    >>> model_base_name("Qwen/Qwen3-235B-A22B-Instruct-2507")
    'qwen3-235b-a22b'
    >>> model_base_name("RedHatAI/Llama-3.1-70B-Instruct-FP8")
    'llama-3.1-70b'
    """
    parts = re.split(r"[-_]", repo_id.rsplit("/", 1)[-1].lower())
    return "-".join(p for p in parts if p not in MODEL_VARIANT_PARTS and not re.fullmatch(r"\d{4}", p))


def check_model_name(arch: ModelArch, logged_model: str | None) -> None:
    """Refuse a config that names another model than the logs served, where the two can be compared.

    Comparable when both are Hugging Face repo ids (``org/name``; a local path is not); they agree when
    their :func:`model_base_name` is the same (``Llama-3.1-70B`` and ``Llama-3.1-70B-Instruct-FP8``;
    not ``Llama-3.3-70B``, nor ``DeepSeek-V3.2-Exp`` against ``DeepSeek-V3``: give that model's own config).

    >>> arch = model_arch({"_source": {"model": "meta-llama/Llama-3.1-8B-Instruct"}, "model_type": "llama",
    ...     "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128})
    >>> check_model_name(arch, "/models/llama")  # a local path: nothing to compare
    >>> check_model_name(arch, "RedHatAI/Llama-3.1-8B-Instruct-FP8")  # a quantised variant: same architecture
    >>> check_model_name(arch, "meta-llama/Llama-3.1-70B-Instruct")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kvplan.kvspec.KVSpecError: the model config describes meta-llama/Llama-3.1-8B-Instruct, but the logs ...
    """
    if not logged_model or not arch.model_id:
        return
    if not (_HF_REPO_ID.fullmatch(logged_model) and _HF_REPO_ID.fullmatch(arch.model_id)):
        return
    if model_base_name(arch.model_id) == model_base_name(logged_model):
        return
    raise KVSpecError(
        f"the model config describes {arch.model_id}, but the logs served {logged_model}: "
        "give the served model's config.json"
    )


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
        if served not in _SERVED_DTYPE_BYTES:
            raise KVSpecError(f"dtype {dtype!r}: expected one of {sorted(_SERVED_DTYPE_BYTES)} (or auto)")
        arch = replace(arch, dtype_bytes=_SERVED_DTYPE_BYTES[served])
    version = parse_vllm_version(vllm_version)
    if version < OLDEST_VLLM_VERSION:
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
        if version < (0, 11, 0):
            raise KVSpecError(f"decode context parallel needs vLLM 0.11 or later, not {vllm_version}")
        if SLIDING_ATTENTION in arch.layer_types:
            raise KVSpecError(f"{arch.name}: vLLM does not support DCP with sliding-window layers")
    token_bytes = attention_bytes_per_token_per_layer(arch, tp, kv_cache_dtype)
    reasons = list(arch.notes)
    linear_bytes = None
    layer_types = arch.layer_types
    if LINEAR_ATTENTION in layer_types:
        if version < (0, 10, 0):
            raise KVSpecError(
                f"{arch.name}: hybrid Mamba / linear-attention models are sized here from vLLM 0.10"
            )
        linear_bytes = linear_state_bytes(arch, tp)
        reasons.append(
            "linear-attention / Mamba state: its size (state dtypes, prefix-caching mode) and the page "
            "padding vary by release; blocks and concurrency are estimates"
        )
    if SLIDING_ATTENTION in layer_types:
        if version < (0, 9, 0):
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
    size, note = _resolve_block_size(arch, block_size, kv_cache_dtype, version, token_bytes, linear_bytes)
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


# --- cross-check against what a log printed ---------------------------------------------------


def _first(values: pd.Series):
    present = values.dropna()
    return present.iloc[0] if len(present) else None


def _diagnose(
    spec: KVSpec, available_bytes: int, logged_tokens: int | None, predicted_tokens: int
) -> tuple[str, str]:
    """The likely cause of a mismatch (short) and the reason: which setting the gap points to."""
    if not logged_tokens or not predicted_tokens:
        return "block size or max_model_len", (
            "the logged blocks or concurrency differ: check --block-size and max_model_len")
    ratio = logged_tokens / predicted_tokens
    implied = available_bytes / logged_tokens * spec.dcp
    hint = (
        f"the log implies ≈{implied:,.0f} bytes per token per rank, the config and layout give "
        f"{spec.bytes_per_token:,} (logged/predicted tokens = {ratio:.3f})"
    )
    dtype = ("KV dtype", "a factor 2: KV dtype (fp8 = 1 byte, bf16/fp16 = 2 bytes) or the KV-head split "
                         "across TP")
    candidates = [(2.0, *dtype), (0.5, *dtype)]
    if spec.tp > 1:
        tp = ("TP", "a factor TP: check --tp (KV heads per rank)")
        candidates += [(spec.tp, *tp), (1 / spec.tp, *tp)]
    layers = spec.limiting_stage.layers_per_group
    for other in {spec.arch.num_layers, *(s.layers_per_group for s in spec.stages)} - {layers}:
        reason = f"the layer count: {other} KV layers per rank fit, not {layers} (check --pp or the config)"
        candidates.append((layers / other, "layer count", reason))
    if spec.dcp > 1:
        candidates.append((1 / spec.dcp, "DCP", "a factor DCP: check --dcp"))
    for factor, cause, reason in candidates:
        if abs(ratio - factor) <= 0.02 * factor:
            return cause, f"{reason}; {hint}"
    if abs(ratio - 1) <= 0.02:
        return "block size or max_model_len", (
            f"tokens agree but blocks or concurrency do not: check --block-size and max_model_len; {hint}")
    return "model config or layout", f"check the layer count, KV dtype, block size or layout; {hint}"


def cross_check(
    ledger: pd.DataFrame,
    spec: KVSpec,
    *,
    max_model_len: int | None = None,
    available_tolerance_bytes: int | None = None,
) -> pd.DataFrame:
    """Predicted against logged "GPU KV cache size", "Maximum concurrency" and GPU blocks.

    Works on ledger columns (``kvplan.columns``): ``available_kv_bytes`` (else ``kv_in_use_bytes``;
    exact ``manual_kv_bytes`` and 0.10.2's byte-exact ``kv_in_use_bytes`` first), ``num_gpu_blocks``,
    ``kv_cache_tokens``, ``max_concurrency``, ``max_model_len``, ``block_size``, ``vllm_version`` and,
    where present, ``source``, ``boot``, ``dp_rank`` (each DP rank is its own engine) and ``pp_rank``.
    vLLM 0.9.0–0.11.0 log the figures once per worker from that worker's memory, so each row is
    checked; other releases log them once from the minimum over ranks, so each boot is checked
    against the minimum available memory of its rows.

    Available memory read from a 2-decimal GiB figure is only known to ±0.005 GiB; the prediction
    is then a range, and ``agrees`` is False only when a logged figure lies outside it (more than
    block rounding apart). Pass ``available_tolerance_bytes=0`` when the bytes are exact.

    Returns one row per check: ``source``, ``boot``, ``dp_rank``, ``rank``, ``vllm_version``, ``block_size``,
    ``available_kv_bytes``, ``tolerance_bytes``, ``predicted_num_gpu_blocks``,
    ``logged_num_gpu_blocks``, ``predicted_kv_cache_tokens``, ``logged_kv_cache_tokens``,
    ``predicted_max_concurrency``, ``logged_max_concurrency``, ``agrees`` (None when the log has
    nothing to compare), ``likely_cause`` (short, when it disagrees: ``KV dtype``, ``TP``, ``layer
    count``, ``DCP``, ``block size``, ``block size or max_model_len`` or ``model config or layout``) and
    ``reason``.
    :func:`cross_check_verdict` turns the rows into one line.

    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
    >>> ledger = pd.DataFrame({"available_kv_bytes": [12 * 2**30], "kv_cache_tokens": [157280],
    ...     "max_concurrency": [4.8], "max_model_len": [32768], "vllm_version": ["0.26.0"]})
    >>> cross_check(ledger, spec, available_tolerance_bytes=0)[["predicted_kv_cache_tokens", "agrees"]]
       predicted_kv_cache_tokens  agrees
    0                     157280    True
    """
    rows = ledger.reset_index(drop=True).copy()
    for column in ("source", "boot", "dp_rank", "rank", "pp_rank", "vllm_version", "block_size",
                   "max_model_len", "available_kv_bytes", "kv_in_use_bytes", "manual_kv_bytes",
                   "num_gpu_blocks", "kv_cache_tokens", "max_concurrency"):
        if column not in rows:
            rows[column] = None
    # vLLM 0.10.2 prints "Current kv cache memory in use is N bytes": exact, so it goes first there.
    in_use_exact = rows["vllm_version"].map(
        lambda v: v is not None and not pd.isna(v) and parse_vllm_version(str(v)) == (0, 10, 2)
    ) & rows["kv_in_use_bytes"].notna()
    rows["_available"] = (
        rows["manual_kv_bytes"]
        .combine_first(rows["kv_in_use_bytes"].where(in_use_exact))
        .combine_first(rows["available_kv_bytes"])
        .combine_first(rows["kv_in_use_bytes"])
    )
    rows["_exact"] = rows["manual_kv_bytes"].notna() | in_use_exact
    # DP ranks are separate engines: each logs its own figures and none takes a minimum across them
    rows["_key"] = list(zip(*(rows[c].astype(str) for c in ("source", "boot", "dp_rank"))))
    units: list[pd.DataFrame] = []
    for _key, boot in rows.groupby("_key", sort=False):
        version = _first(boot["vllm_version"]) or spec.vllm_version
        per_worker = (0, 9, 0) <= parse_vllm_version(version) <= (0, 11, 0)
        units += [boot.loc[[i]] for i in boot.index] if per_worker else [boot]
    results = [_check_unit(unit, spec, max_model_len, available_tolerance_bytes) for unit in units]
    return pd.DataFrame(results)


def _check_unit(
    unit: pd.DataFrame, spec: KVSpec, max_model_len: int | None, tolerance: int | None
) -> dict:
    version = _first(unit["vllm_version"]) or spec.vllm_version
    block_size = _first(unit["block_size"])
    row_spec = spec.with_settings(
        block_size=None if block_size is None else int(block_size), vllm_version=str(version)
    )
    length = _first(unit["max_model_len"]) or max_model_len
    logged = {name: _first(unit[name]) for name in ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency")}
    result = {
        "source": _first(unit["source"]),
        "boot": _first(unit["boot"]),
        "dp_rank": _first(unit["dp_rank"]),
        "rank": _first(unit["rank"]) if len(unit) == 1 else None,
        "vllm_version": str(version),
        "block_size": row_spec.block_size,
        "available_kv_bytes": None,
        "tolerance_bytes": None,
        "predicted_num_gpu_blocks": None,
        "logged_num_gpu_blocks": logged["num_gpu_blocks"],
        "predicted_kv_cache_tokens": None,
        "logged_kv_cache_tokens": logged["kv_cache_tokens"],
        "predicted_max_concurrency": None,
        "logged_max_concurrency": logged["max_concurrency"],
        "agrees": None,
        "likely_cause": None,
        "reason": "",
    }
    known = unit.dropna(subset=["_available"])
    if known.empty or length is None:
        result["reason"] = "no available KV memory in the log" if known.empty else "max_model_len unknown"
        return result
    length = int(length)

    def blocks_at(offset: int) -> int:
        per_row = []
        for _index, row in known.iterrows():
            stage = row_spec.limiting_stage
            if row["pp_rank"] is not None and not pd.isna(row["pp_rank"]):
                stage = row_spec.stage(int(row["pp_rank"]))
            per_row.append(max(0, (int(row["_available"]) + offset) // stage.block_bytes))
        return min(per_row)

    exact = bool(known["_exact"].all())
    tol = 0 if exact else (GIB_2DP_HALF_STEP_BYTES if tolerance is None else tolerance)
    available = int(known["_available"].min())
    blocks, low, high = blocks_at(0), blocks_at(-tol), blocks_at(tol)
    tokens = row_spec.kv_cache_tokens(blocks, length)
    concurrency = row_spec.max_concurrency(blocks, length)
    result.update(
        available_kv_bytes=available,
        tolerance_bytes=tol,
        predicted_num_gpu_blocks=blocks,
        predicted_kv_cache_tokens=tokens,
        predicted_max_concurrency=concurrency,
    )
    checks: dict[str, bool] = {}
    if logged["num_gpu_blocks"] is not None:
        checks["blocks"] = low <= int(logged["num_gpu_blocks"]) <= high
    if logged["kv_cache_tokens"] is not None:
        lo, hi = row_spec.kv_cache_tokens(low, length), row_spec.kv_cache_tokens(high, length)
        checks["tokens"] = lo <= int(logged["kv_cache_tokens"]) <= hi
    if logged["max_concurrency"] is not None:
        lo = round(row_spec.max_concurrency(low, length), 2)
        hi = round(row_spec.max_concurrency(high, length), 2)
        checks["concurrency"] = lo <= round(float(logged["max_concurrency"]), 2) <= hi
    if not checks:
        result["reason"] = "the log printed no KV cache size, concurrency or block count"
        return result
    result["agrees"] = all(checks.values())
    notes = []
    if len(known) < len(unit):
        notes.append(f"available memory known for {len(known)} of {len(unit)} ranks")
    if row_spec.approximate:
        notes.append(f"approximate: {row_spec.approximate_reason}")
    if not result["agrees"]:
        others = [ok for name, ok in checks.items() if name != "blocks"]
        if not checks.get("blocks", True) and others and all(others):
            result["likely_cause"] = "block size"
            reason = (f"the GPU block count differs ({logged['num_gpu_blocks']} logged, {blocks} predicted) "
                      "while tokens and concurrency agree: check --block-size")
        else:
            logged_tokens = logged["kv_cache_tokens"]
            if logged_tokens is None and logged["num_gpu_blocks"] is not None:
                logged_tokens = int(logged["num_gpu_blocks"]) * row_spec.block_size
            result["likely_cause"], reason = _diagnose(
                row_spec, available, None if logged_tokens is None else int(logged_tokens), tokens)
        notes.insert(0, f"differs by more than block rounding: {reason}")
    result["reason"] = "; ".join(notes)
    return result


def _compared_figure(row: pd.Series) -> str:
    """``predicted X, logged Y`` for the first figure the log printed: tokens, blocks or concurrency."""
    for name, unit in (("kv_cache_tokens", " tokens"), ("num_gpu_blocks", " GPU blocks")):
        if is_known(row[f"logged_{name}"]):
            return f"predicted {int(row[f'predicted_{name}']):,}{unit}, logged {int(row[f'logged_{name}']):,}"
    return (f"predicted {row['predicted_max_concurrency']:.2f}x concurrency, "
            f"logged {float(row['logged_max_concurrency']):.2f}x")


def cross_check_verdict(rows: pd.DataFrame) -> str:
    """One line from :func:`cross_check` rows, for a planner to read and CI to pin.

    Agreement names the rounding it allowed (exact bytes, or a 2-decimal GiB figure's ±0.005 GiB);
    a disagreement starts ``model config DISAGREES`` and names the likely cause; with several rows
    the first disagreeing one is shown and the count of checks is given.

    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4)
    >>> def ledger(tokens):
    ...     return pd.DataFrame({"available_kv_bytes": [12 * 2**30], "kv_cache_tokens": [tokens],
    ...                          "max_model_len": [32768], "vllm_version": ["0.26.0"]})
    >>> print(cross_check_verdict(cross_check(ledger(157280), spec)))
    model config agrees with the log: predicted 157,280 tokens, logged 157,280 (within 2-decimal GiB rounding)
    >>> print(cross_check_verdict(cross_check(ledger(314560), spec, available_tolerance_bytes=0)))
    model config DISAGREES with the log: predicted 157,280 tokens, logged 314,560; likely cause: KV dtype
    >>> print(cross_check_verdict(cross_check(ledger(None), spec)))
    nothing to cross-check: the log printed no KV cache size, concurrency or block count
    """
    judged = rows[rows["agrees"].notna()] if "agrees" in rows else rows.iloc[0:0]
    if judged.empty:
        reason = rows["reason"].iloc[0] if len(rows) and rows["reason"].iloc[0] else "no boot to compare"
        return f"nothing to cross-check: {reason}"
    wrong = judged[~judged["agrees"].astype(bool)]
    count = ""
    if len(judged) > 1:
        count = f" ({len(wrong)} of {len(judged)} checks)" if len(wrong) else f" ({len(judged)} checks)"
    if len(wrong):
        first = wrong.iloc[0]
        return (f"model config DISAGREES with the log: {_compared_figure(first)}; "
                f"likely cause: {first['likely_cause']}{count}")
    tolerances = {int(t) for t in judged["tolerance_bytes"]}
    if tolerances == {0}:
        allowed = "exact bytes"
    elif tolerances <= {0, GIB_2DP_HALF_STEP_BYTES}:
        allowed = "within 2-decimal GiB rounding"
    else:
        allowed = f"within ±{max(tolerances):,} B of available memory"
    approximate = "; the spec is approximate" if judged["reason"].str.contains("approximate:").any() else ""
    figure = _compared_figure(judged.iloc[0])
    return f"model config agrees with the log: {figure} ({allowed}){count}{approximate}"


__all__ = [
    "DEFAULT_VLLM_VERSION",
    "FP8_DS_MLA_BYTES_PER_TOKEN",
    "GIB_2DP_HALF_STEP_BYTES",
    "KV_CACHE_DTYPE_BYTES",
    "MLA_BLOCK_SIZE",
    "KVCapacity",
    "KVSpec",
    "KVSpecError",
    "ModelArch",
    "StageSpec",
    "attention_bytes_per_token_per_layer",
    "check_model_name",
    "cross_check",
    "cross_check_verdict",
    "kv_cache_groups",
    "kv_dtype_bytes",
    "kv_heads_per_rank",
    "kv_spec",
    "linear_state_bytes",
    "model_arch",
    "model_base_name",
    "options_for_logs",
    "parse_vllm_version",
    "pp_partition",
]
