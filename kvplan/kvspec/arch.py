"""A model's KV-relevant architecture from its Hugging Face ``config.json`` (no layout yet): each layer's
kind, the linear-attention / Mamba state, whether the config describes the logged model; the spec's words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvplan.releases import NEWEST_KNOWN, Release, version_tuple

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
MLA_ATTENTION = "mla_attention"
LINEAR_ATTENTION = "linear_attention"
#: Release assumed when none is given: the newest kvplan knows.
DEFAULT_VLLM_VERSION = ".".join(map(str, NEWEST_KNOWN))
#: Above this, a layer, head or dimension count is no real model's: refused rather than looped over.
MAX_CONFIG_COUNT = 1_000_000


class KVSpecError(ValueError):
    """A model config or layout kvplan cannot size; the message names the field or vLLM's rule."""


KVSpecError.__module__ = "kvplan.kvspec"  # its public home, as tracebacks and doctests name it


def parse_vllm_version(version: str | None) -> Release:
    """``(major, minor, patch)`` of a vLLM release string; ``None`` means the newest known release."""
    text = DEFAULT_VLLM_VERSION if version is None else str(version).strip()
    parsed = version_tuple(text)
    if parsed is None:
        raise KVSpecError(f"vllm_version: expected a release like '0.11.0', got {text!r}")
    return parsed  # type: ignore[return-value]


def positive_field(config: Mapping, name: str, where: str) -> int:
    """The config's field ``name`` as an int in 1..:data:`MAX_CONFIG_COUNT`, else a :class:`KVSpecError`."""
    value = config.get(name)
    if value is None:
        raise KVSpecError(f"{where}: missing field {name!r} (needed to size the KV cache)")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONFIG_COUNT:
        raise KVSpecError(
            f"{where}: field {name!r} must be a positive integer up to {MAX_CONFIG_COUNT:,}, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class ModelArch:
    """One model's KV-relevant architecture: a kind per decoder layer, its name, its sparse indexer."""

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
    index_head_dim: int | None = None


_NESTED_CONFIG_KEYS = ("text_config", "llm_config", "language_config")
#: Bytes per value of a dtype; vLLM serves a float32 checkpoint in 16 bits unless ``--dtype`` says otherwise.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
#: Model types whose config class sets a missing ``num_key_value_heads`` to the heads (``LlamaConfig``); others
#: default it to a number (``Gemma3TextConfig`` 4, ``MistralConfig`` 8, ``Qwen3Config`` 32): not guessed.
KV_HEADS_DEFAULT_TO_HEADS = ("llama",)
#: DeepSeek-V3.2's indexer key size when the config does not give ``index_head_dim``.
DEFAULT_INDEX_HEAD_DIM = 128
#: Model types whose config class has its own ``head_dim`` default (``Gemma*Config`` 256, ``Qwen3Config``
#: 128), not ``hidden_size / heads``: refused without ``head_dim``.
HEAD_DIM_CLASS_DEFAULT = ("gemma", "qwen3")
_KV_HEAD_FIELDS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")


def _language_config(config: Mapping) -> Mapping:
    """The language model's config: nested ``text_config`` / ``llm_config`` merged over the outer."""
    for key in _NESTED_CONFIG_KEYS:
        inner = config.get(key)
        if inner is not None and not isinstance(inner, Mapping):
            raise KVSpecError(
                f"model config: field {key!r} must be the nested model's config (a dict), got {type(inner).__name__}"
            )
        if isinstance(inner, Mapping):
            outer = {k: v for k, v in config.items() if k not in _NESTED_CONFIG_KEYS}
            return {**outer, **inner, "_nested_in": key}
    return config


def _config_model_id(config: Mapping) -> str | None:
    """The model the config says it describes: ``_source.model``, else ``_name_or_path``."""
    source = config.get("_source")
    if isinstance(source, Mapping) and source.get("model"):
        return str(source["model"])
    return str(config["_name_or_path"]) if config.get("_name_or_path") else None


def _kv_heads(lm: Mapping, num_heads: int, where: str) -> tuple[int, str | None]:
    """KV heads of the language model, and a note when they were not stated but defaulted."""
    if lm.get("multi_query") is True:
        return 1, None
    for name in _KV_HEAD_FIELDS:
        if lm.get(name) is not None:
            kv_heads = positive_field(lm, name, where)
            if kv_heads > num_heads:  # vLLM refuses it: each KV head serves whole query heads
                raise KVSpecError(
                    f"{where}: field {name!r} = {kv_heads} is above num_attention_heads {num_heads}"
                )
            return kv_heads, None
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
    if dtype not in DTYPE_BYTES:
        raise KVSpecError(f"{where}: field 'torch_dtype' = {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return min(2, DTYPE_BYTES[dtype])


def _head_dim(lm: Mapping, num_heads: int, where: str) -> tuple[int | None, int]:
    """``(MLA latent or None, head_dim)``: ``kv_lora_rank + qk_rope_head_dim`` for MLA, else ``head_dim``,
    else ``hidden_size / num_attention_heads`` (refused where the config class has its own default)."""
    if lm.get("kv_lora_rank") is not None:
        latent = positive_field(lm, "kv_lora_rank", where) + positive_field(lm, "qk_rope_head_dim", where)
        return latent, latent
    if lm.get("head_dim") is not None:
        return None, positive_field(lm, "head_dim", where)
    model_type = str(lm.get("model_type") or "")
    if model_type.startswith(HEAD_DIM_CLASS_DEFAULT):
        raise KVSpecError(
            f"{where}: missing field 'head_dim' (model_type {model_type!r}: its config class defaults it "
            "to a constant, not hidden_size / num_attention_heads; copy it from the published config.json)"
        )
    hidden = positive_field(lm, "hidden_size", where)
    if hidden % num_heads:
        raise KVSpecError(
            f"{where}: no 'head_dim', and hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {num_heads}"
        )
    return None, hidden // num_heads


def model_arch(config: Mapping) -> ModelArch:
    """The KV-relevant architecture of a ``config.json`` dict (a nested language model's); a missing field
    is a :class:`KVSpecError` naming it, except the defaults vLLM's config classes share (noted).

    >>> arch = model_arch({"num_hidden_layers": 80, "num_attention_heads": 64,
    ...                    "num_key_value_heads": 8, "hidden_size": 8192, "torch_dtype": "bfloat16"})
    >>> arch.num_layers, arch.num_kv_heads, arch.head_dim, arch.dtype_bytes
    (80, 8, 128, 2)
    """
    if not isinstance(config, Mapping):
        raise KVSpecError(
            f"model config: expected a dict (a parsed config.json), got {type(config).__name__}"
        )
    name = _config_model_id(config) or str(config.get("_path") or config.get("model_type") or "model")
    lm = _language_config(config)
    where = f"{name}" + (f" ({lm['_nested_in']})" if "_nested_in" in lm else "")
    num_layers = positive_field(lm, "num_hidden_layers", where)
    num_heads = positive_field(lm, "num_attention_heads", where)
    num_kv_heads, kv_heads_note = _kv_heads(lm, num_heads, where)
    dtype_bytes = _dtype_bytes(lm, where)
    mla_latent_dim, head_dim = _head_dim(lm, num_heads, where)
    layer_types, window, notes = layer_kinds(lm, num_layers, where, mla=mla_latent_dim is not None)
    linear_kind, linear_dims = linear_state_dims(lm, where) if LINEAR_ATTENTION in layer_types else (None, ())
    sparse = mla_latent_dim is not None and lm.get("index_topk") is not None
    max_position = lm.get("max_position_embeddings", config.get("max_position_embeddings"))
    return ModelArch(
        name=name,
        model_type=str(lm.get("model_type") or ""),
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
        model_id=_config_model_id(config),
        notes=(kv_heads_note, *notes) if kv_heads_note else notes,
        sparse_indexer=sparse,
        index_head_dim=int(lm.get("index_head_dim") or DEFAULT_INDEX_HEAD_DIM) if sparse else None,
        max_position_embeddings=(
            max_position
            if isinstance(max_position, int) and not isinstance(max_position, bool) and max_position > 0
            else None
        ),
    )


_LAYER_TYPE_NAMES = {kind: kind for kind in (FULL_ATTENTION, SLIDING_ATTENTION, LINEAR_ATTENTION)}
_LAYER_TYPE_NAMES.update(attention=FULL_ATTENTION, mamba=LINEAR_ATTENTION)


def layer_kinds(
    lm: Mapping, num_layers: int, where: str, mla: bool
) -> tuple[tuple[str, ...], int | None, tuple[str, ...]]:
    """Kind of every layer, the sliding window [tokens] and notes on what is assumed."""
    window = _sliding_window(lm, where)
    if lm.get("attention_chunk_size"):
        raise KVSpecError(
            f"{where}: field 'attention_chunk_size' (chunked local attention, Llama 4) is not sized "
            "by kvplan; it would be wrong to size these layers as full attention"
        )
    notes: list[str] = []
    listed = lm.get("layer_types")
    if listed is not None:
        kinds = _listed_kinds(listed, num_layers, where)
    elif lm.get("full_attention_interval") is not None:  # Qwen3-Next style: every n-th layer attends
        interval = positive_field(lm, "full_attention_interval", where)
        kinds = [FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers)]
    elif lm.get("attn_layer_period") is not None:  # Jamba: attention every period, at an offset
        period = positive_field(lm, "attn_layer_period", where)
        offset = int(lm.get("attn_layer_offset") or 0)
        kinds = [FULL_ATTENTION if i % period == offset else LINEAR_ATTENTION for i in range(num_layers)]
    elif window:
        kinds = _sliding_pattern(lm, num_layers, notes)
    else:
        kinds = [FULL_ATTENTION] * num_layers
    if SLIDING_ATTENTION in kinds and not window:
        raise KVSpecError(f"{where}: sliding-window layers but no positive 'sliding_window' field")
    window = window if SLIDING_ATTENTION in kinds else None
    if mla:
        if set(kinds) != {FULL_ATTENTION}:
            raise KVSpecError(f"{where}: MLA with sliding-window or linear layers is not supported by kvplan")
        kinds = [MLA_ATTENTION] * num_layers
    if kinds.count(LINEAR_ATTENTION) == num_layers:
        raise KVSpecError(f"{where}: no attention layer at all (a pure Mamba model has no KV cache to size)")
    return tuple(kinds), window, tuple(notes)


def _listed_kinds(raw: object, num_layers: int, where: str) -> list[str]:
    """The kinds of a config's ``layer_types`` list, checked."""
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise KVSpecError(
            f"{where}: field 'layer_types' must be a list of one kind per layer, got {type(raw).__name__}"
        )
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
    return [_LAYER_TYPE_NAMES[str(t)] for t in raw]


def _sliding_window(lm: Mapping, where: str) -> int | None:
    """The config's ``sliding_window`` [tokens], None when it has none or turns it off."""
    window = lm.get("sliding_window")
    if lm.get("use_sliding_window") is False:
        window = None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        # a negative window would shrink the sliding layers' blocks per request: capacity over-predicted
        raise KVSpecError(
            f"{where}: field 'sliding_window' must be one whole number of tokens, 0 or more, got {window!r}"
        )
    return window


def _sliding_pattern(lm: Mapping, num_layers: int, notes: list[str]) -> list[str]:
    """Which layers use the config's ``sliding_window`` when it has no ``layer_types`` list."""
    model_type = str(lm.get("model_type") or "")
    pattern = lm.get("sliding_window_pattern") or lm.get("_sliding_window_pattern")
    if pattern is None and model_type.startswith("gemma3"):
        pattern = 6  # Gemma3TextConfig's default: five local layers, then one global
        notes.append(
            "no 'sliding_window_pattern': Gemma3TextConfig's default 6 (five local, one global) "
            "taken; check it against the model's published config"
        )
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


def linear_state_dims(lm: Mapping, where: str) -> tuple[str, tuple[int, ...]]:
    """What sizes the recurrent state of the linear-attention / Mamba layers: ``(kind, dims)``."""
    if lm.get("linear_num_value_heads") is not None:  # gated delta net (Qwen3-Next)
        names = ("num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim", "conv_kernel_dim")
        return "gated_delta_net", tuple(positive_field(lm, f"linear_{name}", where) for name in names)
    if lm.get("mamba_d_state") is not None:  # Mamba-1 (Jamba)
        hidden = positive_field(lm, "hidden_size", where)
        expand = positive_field(lm, "mamba_expand", where)
        return "mamba", (
            expand * hidden,
            positive_field(lm, "mamba_d_conv", where),
            positive_field(lm, "mamba_d_state", where),
        )
    raise KVSpecError(
        f"{where}: linear-attention layers without a known state description "
        "(expected linear_num_value_heads… for gated delta net or mamba_d_state… for Mamba)"
    )


_HF_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
#: A name part that marks a release variant of one architecture (tuning, quantisation, a date stamp).
MODEL_VARIANT_PART = re.compile(
    r"instruct|thinking|chat|base|it|hf|fp8|fp4|nvfp4|awq|gptq|int4|int8|w4a16|w8a8|w8a16|bnb|4bit|8bit"
    r"|dynamic|quantized|\d{4}"
)


def model_base_name(repo_id: str) -> str:
    """The architecture part of a Hugging Face model name, without variant parts and date stamps."""
    parts = re.split(r"[-_]", repo_id.rsplit("/", 1)[-1].lower())
    return "-".join(part for part in parts if not MODEL_VARIANT_PART.fullmatch(part))


def check_model_name(arch: ModelArch, logged_model: str | None) -> None:
    """Refuse a config of another model (:func:`model_base_name`) than the logs served (both repo ids)."""
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
