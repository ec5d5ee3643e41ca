"""Text for notebook readers: headline figures, verdicts, and tables in one number format with word headers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import pandas as pd

from kvplan.budget import Budget
from kvplan.drift import Drift
from kvplan.escape import markdown_text
from kvplan.ledger import compatibility_key
from kvplan.units import format_budget, format_size

if TYPE_CHECKING:
    from kvplan.kvspec import KVSpec


def length_warning(max_model_len: int | None, position_limit: int | None) -> str:
    """A warning when ``max_model_len`` exceeds ``max_position_embeddings``, else ""."""
    if max_model_len is None or position_limit is None or max_model_len <= position_limit:
        return ""
    return (
        f"{max_model_len:,} tokens exceeds the model config's max_position_embeddings "
        f"({position_limit:,}): vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, "
        "and the model was not trained that long"
    )


def limiting_text(ranks: Sequence[int], values: Sequence[int]) -> str:
    """The rank(s) holding the lowest of ``values``: ``"2"``, ``"1 and 3 (tied)"``, or none when all tie."""
    lowest = [rank for rank, value in zip(ranks, values) if value == min(values)]
    if len(lowest) == len(ranks) and len(ranks) > 1:
        return "none: every rank the same"
    if len(lowest) == 1:
        return str(lowest[0])
    return ", ".join(map(str, lowest[:-1])) + f" and {lowest[-1]} (tied)"


def budget_headline(budget: Budget) -> dict[str, str]:
    """A budget's uniform value, flag, limiting rank, stranded total and min/median, as text."""
    return {
        "uniform budget": format_budget(budget.uniform_budget_bytes),
        "flag": budget.flag,
        "limiting rank": limiting_text(budget.ranks, budget.safe_bytes),
        "stranded total": format_size(budget.stranded_total_bytes),
        "min/median": f"{budget.min_median_ratio:.3f}",
    }


def spec_headline(spec: KVSpec) -> dict[str, str]:
    """A model spec per rank: bytes per token and block, block size and why, approximate or not."""
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
    """The drift-adjusted value, its limiting rank, whether to re-profile and this boot's flag."""
    return {
        "adjusted uniform budget": format_budget(drift.adjusted_uniform_bytes),
        "limiting rank": limiting_text(drift.ranks, drift.adjusted_bytes),
        "re-profile to raise": str(drift.reprofile_to_raise),
        "flag for this boot": drift.flag,
    }


def warnings_markdown(warnings: Sequence[str], none: str = "No warnings.") -> str:
    """Warnings as an escaped Markdown list (they quote logs), or ``none``."""
    return "\n".join(f"- {markdown_text(warning)}" for warning in warnings) or none


def format_headline(lines: Mapping[str, str]) -> str:
    """Headline figures as aligned ``name  value`` lines.

    >>> print(format_headline({"uniform budget": "12 GiB", "limiting rank": "2"}))
    uniform budget  12 GiB
    limiting rank   2
    """
    width = max(len(name) for name in lines)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in lines.items())


def weak_rank_verdict(budget: Budget, loss_threshold: float = 0.10) -> str:
    """Fix the weak rank when it removes ``loss_threshold`` (``1 − min/median``) or more, else tune the reserve."""
    loss = budget.weak_rank_loss_fraction
    rank, weakest = budget.limiting_rank, format_budget(budget.min_safe_bytes)
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


def rounding_text(budget: Budget, spec: KVSpec) -> str:
    """How the weakest rank's safe budget becomes whole KV blocks, in numbers of this launch.

    >>> from kvplan.budget import uniform_budget
    >>> from kvplan.kvspec import kv_spec
    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4, vllm_version="0.26.0")
    >>> print(rounding_text(uniform_budget([13 * 2**30, 18 * 2**30], 2**30, spec.block_bytes), spec))
    A KV block on one rank is 16 tokens × 81,920 B = 1,310,720 B (1.25 MiB) at TP 4. The weakest rank's
    safe budget, rank 0's 12 GiB, is 9,830.4 blocks, so the value is 9,830 blocks = 12,884,377,600 B,
    512 KiB below it (stranded on every rank).
    """
    weakest, blocks = budget.min_safe_bytes, budget.min_safe_bytes / spec.block_bytes
    value = budget.uniform_budget_bytes
    return (
        f"A KV block on one rank is {spec.block_size} tokens × {spec.bytes_per_token:,} B = "
        f"{spec.block_bytes:,} B ({format_size(spec.block_bytes)}) at TP {spec.tp}. The weakest rank's\n"
        f"safe budget, rank {budget.limiting_rank}'s {format_budget(weakest)}, is {blocks:,.1f} blocks, "
        f"so the value is {value // spec.block_bytes:,} blocks = {value:,} B,\n"
        f"{format_size(weakest - value)} below it (stranded on every rank)."
    )


def launch_headline(ledger: pd.DataFrame) -> dict[str, str]:
    """The launch the logs show: model, layout, vLLM release, boots and files, as text."""
    key = compatibility_key(ledger)
    files, boots = ledger["source"].nunique(), ledger.groupby(["source", "boot"]).ngroups
    tp, pp = key.get("tensor_parallel_size"), key.get("pipeline_parallel_size")
    return {
        "model": str(key.get("model") or "not in the logs"),
        "layout": f"TP {tp or '?'} × PP {pp or 1} ({ledger['rank'].nunique()} ranks)",
        "vLLM": str(key.get("vllm_version") or "not in the logs"),
        "boots": f"{boots} in {files} file{'s' if files > 1 else ''}",
    }


def moved_hosts_text(move: Mapping[str, object], hosts: Sequence[str]) -> str:
    """What notebook 07's ``MOVE`` does: the hosts it moves, and those it names the fleet lacks."""
    known = [host for host in move if host in hosts]
    unknown = [host for host in move if host not in hosts]
    if not known:
        listed = ", ".join(list(hosts)[:5]) + (", …" if len(hosts) > 5 else "")
        return (
            f"MOVE names no host of this fleet ({', '.join(unknown) or 'none'}): the plan below is unchanged; "
            f"its hosts are {listed}"
        )
    text = f"MOVE moves {', '.join(known)}"
    return text + (f"; names no host of this fleet: {', '.join(unknown)}" if unknown else "")


def run_headline(summary: Mapping) -> str:
    """A load-test run's :func:`kvplan.load.load_summary` in a sentence.

    >>> print(run_headline({"peak_kv_cache_usage_pct": 70.1, "kv_cache_tokens": 157_280,
    ...     "peak_kv_cache_tokens": 110_253, "peak_at": {"source": "/runs/a/server.log", "line": 40},
    ...     "max_running": 32, "max_waiting": 3, "preemptions": 0, "oom_events": 0}))
    peak KV cache usage 70.1% of 157,280 tokens (110,253 tokens, server.log:40); up to 32 requests running and 3 waiting; 0 preemptions, 0 OOM
    """
    peak, tokens = summary.get("peak_kv_cache_usage_pct"), summary.get("kv_cache_tokens")
    if peak is None:
        usage = "no KV cache usage in the files"
    else:
        where = summary.get("peak_at") or {}
        place = f", {PurePath(where['source']).name}:{where['line']}" if where.get("source") else ""
        of = f" of {tokens:,} tokens ({summary['peak_kv_cache_tokens']:,} tokens{place})" if tokens else place
        usage = f"peak KV cache usage {peak:.1f}%{of}"
    preemptions = summary.get("preemptions")
    plural = "s" * (preemptions != 1)
    counted = "unknown preemptions" if preemptions is None else f"{preemptions:,} preemption{plural}"
    return (
        f"{usage}; up to {summary.get('max_running')} requests running and {summary.get('max_waiting')} waiting; "
        f"{counted}, {summary.get('oom_events', 0)} OOM"
    )


_WORDS = {"kv": "KV", "oom": "OOM", "tp": "TP", "pp": "PP", "gpu": "GPU", "seq": "sequence", "len": "length"}


def readable_name(key: object) -> str:
    """A glossary key in words."""
    unit = " [%]" if str(key).endswith("_pct") else ""
    words = str(key).removesuffix("_pct").removesuffix("_bytes").split("_")
    return " ".join(_WORDS.get(word, word) for word in words) + unit


def readable_value(key: object, value: Any) -> str:
    """``value`` of the column (or row) ``key`` in the one number format."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (hasattr(value, "dtype") and pd.api.types.is_integer(value)):
        return format_size(int(value)) if str(key).endswith("_bytes") else f"{int(value):,}"
    if isinstance(value, float) or pd.api.types.is_float(value):
        return format_size(int(value)) if str(key).endswith("_bytes") else f"{float(value):,.2f}"
    return str(value)


def readable_table(
    frame: pd.DataFrame, keys: str = "columns", names: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """``frame`` for readers: values by :func:`readable_value`, names in words (or ``names``); ``keys``:
    whether each ``"columns"`` or ``"index"`` entry is one quantity.

    >>> run = pd.Series({"kv_cache_tokens": 155856, "peak_kv_cache_usage_pct": 70.749487}, dtype=object)
    >>> table = pd.DataFrame({"a": run})
    >>> print(readable_table(table, keys="index").to_string())
                                   a
    KV cache tokens          155,856
    peak KV cache usage [%]    70.75
    """
    names = dict(names or {})
    if keys == "index":
        rows = {key: [readable_value(key, value) for value in frame.loc[key]] for key in frame.index}
        shown = pd.DataFrame.from_dict(rows, orient="index", columns=list(frame.columns))
        return shown.rename(index={key: names.get(str(key), readable_name(key)) for key in frame.index})
    cells = {column: [readable_value(column, value) for value in frame[column]] for column in frame.columns}
    words = {column: names.get(str(column), readable_name(column)) for column in frame.columns}
    return pd.DataFrame(cells, index=frame.index).rename(columns=words)
