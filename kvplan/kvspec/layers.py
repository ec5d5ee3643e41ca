"""The words of the KV spec (its error, the layer kinds, the release a spec is for) and what kind every
decoder layer is (full, sliding-window or linear attention), with what sizes the recurrent state of
linear-attention / Mamba layers, from a model config's language part.

>>> parse_vllm_version(None), FULL_ATTENTION
((0, 33, 0), 'full_attention')
>>> layer_kinds({"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
...             2, "model", mla=False)
(('sliding_attention', 'full_attention'), 4, ())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvplan.releases import NEWEST_KNOWN, Release, version_tuple

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
MLA_ATTENTION = "mla_attention"
LINEAR_ATTENTION = "linear_attention"

#: Release assumed when none is given: the newest kvplan knows.
DEFAULT_VLLM_VERSION = ".".join(map(str, NEWEST_KNOWN))


class KVSpecError(ValueError):
    """A model config or layout kvplan cannot size; the message names the field or vLLM's rule."""


KVSpecError.__module__ = "kvplan.kvspec"  # its public home, as tracebacks and doctests name it


def parse_vllm_version(version: str | None) -> Release:
    """``(major, minor, patch)`` of a vLLM release string; ``None`` means the newest known release.

    >>> parse_vllm_version("0.6.6.post1"), parse_vllm_version("v0.11.0"), parse_vllm_version("0.19")
    ((0, 6, 6), (0, 11, 0), (0, 19, 0))
    """
    text = DEFAULT_VLLM_VERSION if version is None else str(version).strip()
    parsed = version_tuple(text)
    if parsed is None:
        raise KVSpecError(f"vllm_version: expected a release like '0.11.0', got {text!r}")
    return parsed  # type: ignore[return-value]


#: Above this, a layer, head or dimension count is no real model's: refused rather than looped over.
MAX_CONFIG_COUNT = 1_000_000


def positive_field(config: Mapping, name: str, where: str) -> int:
    """The config's field ``name`` as a positive int up to :data:`MAX_CONFIG_COUNT`, else a
    :class:`KVSpecError` naming it (``where``: the config).

    >>> positive_field({"num_hidden_layers": 80}, "num_hidden_layers", "llama")
    80
    """
    value = config.get(name)
    if value is None:
        raise KVSpecError(f"{where}: missing field {name!r} (needed to size the KV cache)")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONFIG_COUNT:
        raise KVSpecError(
            f"{where}: field {name!r} must be a positive integer up to {MAX_CONFIG_COUNT:,}, got {value!r}"
        )
    return value


_LAYER_TYPE_NAMES = {
    "full_attention": FULL_ATTENTION,
    "attention": FULL_ATTENTION,
    "sliding_attention": SLIDING_ATTENTION,
    "linear_attention": LINEAR_ATTENTION,
    "mamba": LINEAR_ATTENTION,
}


def layer_kinds(
    lm: Mapping, num_layers: int, where: str, mla: bool
) -> tuple[tuple[str, ...], int | None, tuple[str, ...]]:
    """Kind of every layer, the sliding window [tokens] and notes on what is assumed (``lm``: the
    language model's config; ``mla``: the config has an MLA latent)."""
    window = _sliding_window(lm, where)
    if lm.get("attention_chunk_size"):
        raise KVSpecError(
            f"{where}: field 'attention_chunk_size' (chunked local attention, Llama 4) is not sized "
            "by kvplan; it would be wrong to size these layers as full attention"
        )
    notes: list[str] = []
    listed = lm.get("layer_types")
    if listed is not None and (isinstance(listed, str) or not isinstance(listed, Sequence)):
        raise KVSpecError(
            f"{where}: field 'layer_types' must be a list of one kind per layer, got {type(listed).__name__}"
        )
    if listed is not None:
        raw = list(listed)
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
        interval = positive_field(lm, "full_attention_interval", where)
        kinds = [FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers)]
    elif lm.get("attn_layer_period") is not None:  # Jamba: attention every period, at an offset
        period = positive_field(lm, "attn_layer_period", where)
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


def _sliding_pattern(lm: Mapping, num_layers: int, where: str, notes: list[str]) -> list[str]:
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
        names = (
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        )
        return "gated_delta_net", tuple(positive_field(lm, n, where) for n in names)
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
