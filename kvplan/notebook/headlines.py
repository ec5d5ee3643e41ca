"""Headline text for notebooks: the figures a reviewer asks for first, one line each, and the verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kvplan.budget import Budget, kv_cache_flag, round_down_to_blocks
from kvplan.drift import Drift
from kvplan.escape import markdown_text
from kvplan.units import format_size

if TYPE_CHECKING:
    from kvplan.kvspec import KVSpec


def boot_budget_bytes(drift: Drift, block_bytes: int | None = None) -> int:
    """The drift-adjusted uniform value for a later boot, rounded down to whole blocks when known.

    >>> from kvplan.drift import drift_budget
    >>> GiB = 2**30
    >>> drift = drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 42 * GiB])  # 29 GiB
    >>> boot_budget_bytes(drift), boot_budget_bytes(drift, 3 * GiB) // GiB  # 9 blocks of 3 GiB
    (31138512896, 27)
    """
    value = drift.adjusted_uniform_bytes
    return value if not block_bytes else round_down_to_blocks(value, block_bytes)


def length_warning(max_model_len: int | None, position_limit: int | None) -> str:
    """A warning when ``max_model_len`` exceeds the model's ``max_position_embeddings``; else "".

    >>> length_warning(10_000_000, 131_072).startswith("10,000,000 tokens exceeds")
    True
    >>> length_warning(32_768, 131_072), length_warning(10_000_000, None)
    ('', '')
    """
    if max_model_len is None or position_limit is None or max_model_len <= position_limit:
        return ""
    return (
        f"{max_model_len:,} tokens exceeds the model config's max_position_embeddings "
        f"({position_limit:,}): vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, "
        "and the model was not trained that long"
    )


def limiting_text(ranks: Sequence[int], values: Sequence[int]) -> str:
    """The rank(s) holding the lowest of ``values``: ``"2"``, ``"1 and 3 (tied)"``, or none when all tie.

    A tie names no arbitrary rank: when every rank holds the same value none limits alone.

    >>> limiting_text([0, 1, 2], [5, 4, 3]), limiting_text([0, 1, 2], [3, 5, 3]), limiting_text([0, 1], [3, 3])
    ('2', '0 and 2 (tied)', 'none: every rank the same')
    """
    lowest = [rank for rank, value in zip(ranks, values) if value == min(values)]
    if len(lowest) == len(ranks) and len(ranks) > 1:
        return "none: every rank the same"
    if len(lowest) == 1:
        return str(lowest[0])
    return ", ".join(map(str, lowest[:-1])) + f" and {lowest[-1]} (tied)"


def budget_headline(budget: Budget) -> dict[str, str]:
    """Uniform budget, flag, limiting rank, stranded total and min/median of a budget, as text.

    >>> from kvplan.budget import uniform_budget
    >>> budget_headline(uniform_budget([13 * 2**30, 18 * 2**30], 2**30))["stranded total"]
    '5 GiB'
    >>> budget_headline(uniform_budget([31 * 2**30] * 4, 2**30))["limiting rank"]  # a tie names no rank
    'none: every rank the same'
    """
    return {
        "uniform budget": format_size(budget.uniform_budget_bytes),
        "flag": budget.flag,
        "limiting rank": limiting_text(budget.ranks, budget.safe_bytes),
        "stranded total": format_size(budget.stranded_total_bytes),
        "min/median": f"{budget.min_median_ratio:.3f}",
    }


def spec_headline(spec: KVSpec) -> dict[str, str]:
    """What a model spec says per rank: bytes per token and per block, block size and why, approximate or not.

    >>> from kvplan.kvspec import kv_spec
    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4, vllm_version="0.26.0")
    >>> spec_headline(spec)["bytes per block"]
    '1,310,720 (1.25 MiB)'
    """
    note = f" ({spec.block_size_note})" if spec.block_size_note else ""
    return {
        "model": spec.arch.name,
        "bytes per token per layer": f"{spec.bytes_per_token_per_layer:,}",
        "bytes per token per rank": f"{spec.bytes_per_token:,}",
        "block size": f"{spec.block_size} tokens{note}",
        "bytes per block": f"{spec.block_bytes:,} ({format_size(spec.block_bytes)})",
        "approximate": spec.approximate_reason or "no: exact for this model and release",
    }


def drift_headline(drift: Drift) -> dict[str, str]:
    """The drift-adjusted value, its limiting rank, whether to re-profile, and the flag for this boot.

    >>> from kvplan.drift import drift_budget
    >>> GiB = 2**30
    >>> drift_headline(drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 42 * GiB]))["adjusted uniform budget"]
    '29 GiB'
    """
    return {
        "adjusted uniform budget": format_size(drift.adjusted_uniform_bytes),
        "limiting rank": limiting_text(drift.ranks, drift.adjusted_bytes),
        "re-profile to raise": str(drift.reprofile_to_raise),
        "flag for this boot": kv_cache_flag(boot_budget_bytes(drift)),
    }


def warnings_markdown(warnings: Sequence[str], none: str = "No warnings.") -> str:
    """The reader's warnings as a Markdown bullet list (each escaped: it names files and quotes logs),
    or ``none`` when there are none.

    >>> print(warnings_markdown(["a.log:3: rank 1 shows no room", "b.log: no model name"]))
    - a.log:3: rank 1 shows no room
    - b.log: no model name
    """
    return "\n".join(f"- {markdown_text(warning)}" for warning in warnings) or none


def format_headline(lines: Mapping[str, str]) -> str:
    """Headline figures as aligned ``name  value`` lines, stable enough to pin in a notebook test.

    >>> print(format_headline({"uniform budget": "12 GiB", "limiting rank": "2"}))
    uniform budget  12 GiB
    limiting rank   2
    """
    width = max(len(name) for name in lines)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in lines.items())


def weak_rank_verdict(budget: Budget, loss_threshold: float = 0.10) -> str:
    """Fix the weak rank or tune the value? Decided by ``1 − min/median`` against a threshold.

    When the weakest rank removes at least ``loss_threshold`` of the median rank's safe budget,
    the weak rank (its co-tenant, its extra memory) is the lever; otherwise the ranks agree and the
    reserve is the lever. The 10 % default is a policy choice, not a vLLM figure.

    >>> from kvplan.budget import uniform_budget
    >>> GiB = 2**30
    >>> weak_rank_verdict(uniform_budget([13 * GiB, 19 * GiB, 19 * GiB], GiB))[:36]
    'Fix the weak rank: rank 0 (12 GiB) r'
    """
    loss = budget.weak_rank_loss_fraction
    rank, weakest = budget.limiting_rank, format_size(budget.min_safe_bytes)
    median = format_size(budget.median_safe_bytes)
    if loss >= loss_threshold:
        return (
            f"Fix the weak rank: rank {rank} ({weakest}) removes {loss:.1%} of the median rank's "
            f"safe budget ({median}); find what else holds memory on its GPU before tuning the value."
        )
    return (
        f"Tune the value: the weakest rank ({rank}, {weakest}) is within {loss:.1%} of the median "
        f"({median}); the reserve is the lever."
    )
