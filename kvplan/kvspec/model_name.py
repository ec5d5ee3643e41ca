"""Does a model config describe the model the logs served? Names compared by architecture, not by
substring.

>>> model_base_name("meta-llama/Llama-3.1-8B-Instruct")
'llama-3.1-8b'
"""

from __future__ import annotations

import re

from kvplan.kvspec.arch import ModelArch
from kvplan.kvspec.base import KVSpecError

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
