"""What the uniform budget buys at the planned lengths, and whether the admission plan fits.

The capacity table is :func:`kvplan.capacity.capacity_rows` at the :func:`planned_lengths`; the plan is
``C`` full sequences of ``L`` tokens in blocks, logged-size tokens and (with a model) bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvplan.budget import Budget
from kvplan.capacity import blocks_per_sequence
from kvplan.kvspec import KVSpec
from kvplan.ledger import is_known
from kvplan.plan.inputs import Plan
from kvplan.units import format_size


def planned_lengths(max_model_len: int | None, plan: Plan | None) -> list[int]:
    """Sequence lengths of the capacity table: the plan's length and ``max_model_len``, ascending.

    >>> planned_lengths(32768, Plan(6, 8192))
    [8192, 32768]
    """
    lengths = {plan.seq_len} if plan else set()
    if max_model_len is not None:
        lengths.add(max_model_len)
    return sorted(lengths)


def admission_plan(plan: Plan, key: Mapping[str, object], spec: KVSpec | None, budget: Budget) -> dict:
    """The plan in blocks, logged-size tokens and (with a model) bytes against the uniform budget.

    ``blocks_required = C × blocks per request of L`` (``ceil(L / block_size)`` for full attention);
    ``tokens_required`` is the "GPU KV cache size" a boot with exactly those blocks logs (the gate
    compares a canary's logged size with it); ``fits`` is None without a model.
    """
    logged_len: Any = key.get("max_model_len")
    max_model_len = int(logged_len) if is_known(logged_len) and logged_len else plan.seq_len
    if spec is not None:
        blocks = plan.target_concurrency * spec.blocks_per_request(plan.seq_len)
        tokens, block_size = spec.kv_cache_tokens(blocks, max_model_len), spec.block_size
    else:
        logged_block: Any = key.get("block_size")
        if not is_known(logged_block):
            raise ValueError("the admission plan needs the block size: the logs do not show it; give --model")
        block_size = int(logged_block)
        blocks = plan.target_concurrency * blocks_per_sequence(plan.seq_len, block_size)
        tokens = blocks * block_size
    record = {
        "target_concurrency": plan.target_concurrency,
        "seq_len": plan.seq_len,
        "block_size": block_size,
        "blocks_required": blocks,
        "tokens_required": tokens,
        "bytes_required": None,
        "fits": None,
        "detail": f"{plan.target_concurrency} × {plan.seq_len:,} tokens needs {blocks:,} blocks "
        f"({tokens:,} tokens); bytes unknown without --model",
    }
    if spec is not None:
        needed = blocks * spec.block_bytes
        fits = budget.uniform_budget_bytes >= needed
        record.update(
            bytes_required=needed,
            fits=fits,
            detail=f"{plan.target_concurrency} × {plan.seq_len:,} tokens needs {blocks:,} blocks "
            f"({tokens:,} tokens) = {format_size(needed)} per GPU {'≤' if fits else '>'} "
            f"approved {format_size(budget.uniform_budget_bytes)}",
        )
    return record
