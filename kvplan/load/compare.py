"""Canaries side by side: the capacity a manual-value canary gives up against the profiled one; the table."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from kvplan.budget import kv_cache_flag


def capacity_loss(kv_cache_tokens: int, profiled_kv_cache_tokens: int) -> tuple[int, float]:
    """Tokens and percent of KV capacity a manual-value canary gives up against the profiled canary.

    Negative values are a gain.

    >>> capacity_loss(157_280, 181_504)  # 181,504 − 157,280 = 24,224 tokens = 13.346%
    (24224, 13.346)
    """
    if profiled_kv_cache_tokens <= 0:
        raise ValueError(f"profiled KV capacity must be positive, got {profiled_kv_cache_tokens} tokens")
    loss = profiled_kv_cache_tokens - kv_cache_tokens
    return loss, round(100 * loss / profiled_kv_cache_tokens, 3)


def capacity_change_text(loss_tokens: int, loss_pct: float) -> str:
    """A :func:`capacity_loss` result in words: a loss, or a gain when it is negative.

    >>> capacity_change_text(24_224, 13.346), capacity_change_text(-1_424, -0.914)
    ('loss of 24,224 tokens (13.346%)', 'gain of 1,424 tokens (0.914%)')
    """
    return f"{'loss' if loss_tokens >= 0 else 'gain'} of {abs(loss_tokens):,} tokens ({abs(loss_pct):g}%)"


COMPARISON_ROWS = (
    "kv_cache_tokens",
    "peak_kv_cache_usage_pct",
    "peak_kv_cache_tokens",
    "max_running",
    "max_waiting",
    "mean_generation_tokens_per_s",
    "preemptions",
    "oom_events",
)
"""The :func:`load_summary` keys that :func:`load_comparison_table` shows, in its row order."""


def load_comparison_table(summaries: Mapping[str, Mapping]) -> pd.DataFrame:
    """Runs side by side: one column per named :func:`load_summary`, one row per :data:`COMPARISON_ROWS` key.

    A key a summary lacks is left empty (NaN).

    >>> runs = {"a": {"kv_cache_tokens": 100, "preemptions": 0}, "b": {"kv_cache_tokens": 90}}
    >>> load_comparison_table(runs).loc[["kv_cache_tokens", "preemptions"]]
                       a    b
    kv_cache_tokens  100   90
    preemptions        0  NaN
    """
    columns = {name: pd.Series(dict(summary), dtype=object) for name, summary in summaries.items()}
    return pd.DataFrame(columns).reindex(list(COMPARISON_ROWS))


def canary_capacity_headline(profiled: Mapping, canary: Mapping) -> dict[str, str]:
    """Capacity of the profiled and the manual-value canary and the change between them, for a headline.

    ``profiled`` and ``canary`` are :func:`load_summary` dicts; the canary's line names the
    ``--kv-cache-memory-bytes`` value its log shows, and the change is :func:`capacity_loss` in words.

    >>> canary = {"kv_cache_tokens": 157_280, "kv_cache_memory_bytes": 12_884_377_600}
    >>> headline = canary_capacity_headline({"kv_cache_tokens": 155_856}, canary)
    >>> for label, text in headline.items():
    ...     print(f"{label}: {text}")
    profiled canary: 155,856 tokens
    manual-value canary: 157,280 tokens (--kv-cache-memory-bytes=12884377600)
    capacity change: gain of 1,424 tokens (0.914%)
    """
    for name, summary in (("profiled", profiled), ("manual-value", canary)):
        if summary.get("kv_cache_tokens") is None:
            raise ValueError(f"the {name} canary's files show no KV cache capacity (GPU KV cache size)")
    manual = canary.get("kv_cache_memory_bytes")
    flag = f" ({kv_cache_flag(manual)})" if manual is not None else ""
    return {
        "profiled canary": f"{profiled['kv_cache_tokens']:,} tokens",
        "manual-value canary": f"{canary['kv_cache_tokens']:,} tokens{flag}",
        "capacity change": capacity_change_text(
            *capacity_loss(canary["kv_cache_tokens"], profiled["kv_cache_tokens"])
        ),
    }
