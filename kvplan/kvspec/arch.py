"""The KV-relevant architecture of a model, read from its Hugging Face ``config.json`` (no layout yet),
whether a config describes the model the logs served (names compared by architecture, not substring), and
what a release can serve of it: refusals name vLLM's rule, approximations say why the prediction is a
lower bound rather than exact.

>>> model_arch({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
...             "head_dim": 64, "torch_dtype": "bfloat16"}).layer_types
('full_attention', 'full_attention')
>>> model_base_name("meta-llama/Llama-3.1-8B-Instruct")
'llama-3.1-8b'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from kvplan.kvspec.layers import (
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    layer_kinds,
    linear_state_dims,
    positive_field,
)
from kvplan.releases import DCP_FROM, FP8_DS_MLA_FROM, MLA_FROM, OLDEST_KV_ARITHMETIC, Release

_NESTED_CONFIG_KEYS = ("text_config", "llm_config", "language_config")
#: Bytes per value of a config's ``torch_dtype``: vLLM serves float32 checkpoints in a 16-bit dtype
#: by default (``dtype=auto``).
_MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2}


@dataclass(frozen=True)
class ModelArch:
    """The KV-relevant architecture of one model, read from its config (no layout yet).

    ``layer_types`` has one entry per decoder layer: ``full_attention``, ``sliding_attention``,
    ``mla_attention`` or ``linear_attention`` (Mamba / gated-delta-net state instead of a KV cache).
    ``dtype_bytes`` is None when the config names no ``torch_dtype``/``dtype``; ``model_id`` is the
    Hugging Face name the config states (``_source.model`` or ``_name_or_path``), None when it names none;
    ``max_position_embeddings`` the longest context the config states, None when it states none.
    ``index_head_dim`` the sparse-attention indexer's key size (DeepSeek-V3.2), None without an indexer.
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
    index_head_dim: int | None = None


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


def _config_name(config: Mapping) -> str:
    return _config_model_id(config) or str(config.get("_path") or config.get("model_type") or "model")


#: Model types whose Hugging Face config class sets a missing ``num_key_value_heads`` to
#: ``num_attention_heads`` (``LlamaConfig``); other classes default it to a fixed number
#: (``Gemma3TextConfig`` 4, ``MistralConfig`` 8, ``Qwen3Config`` 32), so kvplan refuses to guess there.
KV_HEADS_DEFAULT_TO_HEADS = ("llama",)
#: DeepSeek-V3.2's indexer key size when the config does not give ``index_head_dim``.
DEFAULT_INDEX_HEAD_DIM = 128
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
            kv_heads = positive_field(lm, name, where)
            if (
                kv_heads > num_heads
            ):  # vLLM and the config classes refuse it: each KV head serves whole query heads
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
    if dtype not in _MODEL_DTYPE_BYTES:
        raise KVSpecError(
            f"{where}: field 'torch_dtype' = {dtype!r} is not one of {sorted(_MODEL_DTYPE_BYTES)}"
        )
    return _MODEL_DTYPE_BYTES[dtype]


def _head_dim(lm: Mapping, num_heads: int, where: str) -> tuple[int | None, int]:
    """``(MLA latent size or None, head_dim)``: the latent ``kv_lora_rank + qk_rope_head_dim`` for MLA,
    else ``head_dim``, else ``hidden_size / num_attention_heads`` (refused where the class has its own)."""
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
    num_layers = positive_field(lm, "num_hidden_layers", where)
    num_heads = positive_field(lm, "num_attention_heads", where)
    num_kv_heads, kv_heads_note = _kv_heads(lm, num_heads, where)
    dtype_bytes = _dtype_bytes(lm, where)
    model_type = str(lm.get("model_type") or "")
    mla_latent_dim, head_dim = _head_dim(lm, num_heads, where)
    layer_types, window, notes = layer_kinds(lm, num_layers, where, mla=mla_latent_dim is not None)
    if kv_heads_note:
        notes = (kv_heads_note, *notes)
    linear_kind: str | None = None
    linear_dims: tuple[int, ...] = ()
    if LINEAR_ATTENTION in layer_types:
        linear_kind, linear_dims = linear_state_dims(lm, where)
    sparse = mla_latent_dim is not None and lm.get("index_topk") is not None
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
        model_id=_config_model_id(config),
        notes=notes,
        sparse_indexer=sparse,
        index_head_dim=int(lm.get("index_head_dim") or DEFAULT_INDEX_HEAD_DIM) if sparse else None,
        max_position_embeddings=_positive_or_none(
            lm.get("max_position_embeddings", config.get("max_position_embeddings"))
        ),
    )


def _positive_or_none(value: object) -> int | None:
    """A positive whole number as int, else None (a config field that may be absent)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


_HF_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


#: Name parts that mark a release variant of one architecture (tuning, quantisation, a date stamp).
MODEL_VARIANT_PARTS = frozenset(
    {
        "instruct",
        "thinking",
        "chat",
        "base",
        "it",
        "hf",
        "fp8",
        "fp4",
        "nvfp4",
        "awq",
        "gptq",
        "int4",
        "int8",
        "w4a16",
        "w8a8",
        "w8a16",
        "bnb",
        "4bit",
        "8bit",
        "dynamic",
        "quantized",
    }
)


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

    >>> from kvplan.kvspec import model_arch
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


#: Sub-byte KV dtypes sized as fp8: 1 byte per value is more than their packed pages take
#: (nvfp4: ``head_size / 2 + head_size / 16`` bytes per head and token, ``utils/torch_utils.py``).
SUB_BYTE_KV_DTYPES = ("nvfp4", "nvfp4_4over6")


def unmodelled_kv_dtype(kv_cache_dtype: str) -> tuple[str, str]:
    """The KV dtype kvplan sizes in place of ``kv_cache_dtype``, and why (empty when it is modelled).

    >>> unmodelled_kv_dtype("fp8"), unmodelled_kv_dtype("nvfp4")[0]
    (('fp8', ''), 'fp8')
    """
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


#: Bytes per value of the dtype vLLM really served (``dtype=torch.bfloat16`` in its config line).
SERVED_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


def served_arch(arch: ModelArch, dtype: str | None) -> ModelArch:
    """``arch`` in the dtype vLLM served (``--dtype`` as its log shows it, e.g. ``torch.float32``);
    None or ``auto`` keep the config's ``torch_dtype``.

    >>> arch = model_arch({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
    ...                    "head_dim": 64, "torch_dtype": "bfloat16"})
    >>> served_arch(arch, "torch.float32").dtype_bytes, served_arch(arch, None).dtype_bytes
    (4, 2)
    """
    if dtype is None or str(dtype) == "auto":
        return arch
    served = str(dtype).removeprefix("torch.")
    if served not in SERVED_DTYPE_BYTES:
        raise KVSpecError(f"dtype {dtype!r}: expected one of {sorted(SERVED_DTYPE_BYTES)} (or auto)")
    return replace(arch, dtype_bytes=SERVED_DTYPE_BYTES[served])
