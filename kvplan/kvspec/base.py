"""The words of the KV spec: its error, the layer kinds, and the release a spec is for.

>>> parse_vllm_version(None), FULL_ATTENTION
((0, 33, 0), 'full_attention')
"""

from __future__ import annotations

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
