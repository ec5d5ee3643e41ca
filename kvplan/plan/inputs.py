"""What a decision is asked under: the policy, the admission plan (and what it needs: the planned lengths,
its blocks, logged-size tokens and bytes against the uniform budget), the load policy, the model layout.

All sizes are bytes. These are the pipeline's inputs besides the evidence itself
(:func:`kvplan.plan.read_evidence`); :func:`kvplan.plan.decide` turns both into one
:class:`~kvplan.plan.Decision`.

>>> Policy(reserve_bytes=966_367_641).guard_bytes
0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvplan.budget import Budget
from kvplan.kvspec.capacity import blocks_per_sequence
from kvplan.units import format_size

if TYPE_CHECKING:  # the model code (and pandas) only where a spec is given
    from kvplan.kvspec import KVSpec


@dataclass(frozen=True)
class Policy:
    """The approver's policy: reserve kept free per rank, canary guard (bytes), rank-0 assumption."""

    reserve_bytes: int
    guard_bytes: int = 0
    assume_uniform: bool = False


@dataclass(frozen=True)
class AdmissionPlan:
    """The admission plan: ``target_concurrency`` full sequences of ``seq_len`` tokens at once."""

    target_concurrency: int
    seq_len: int


@dataclass(frozen=True)
class LoadPolicy:
    """How load-test evidence is read and judged at approval.

    ``max_preemptions`` is the number of preemptions the run may show (default 0); ``year`` anchors
    vLLM's yearless ``MM-DD HH:MM:SS`` log stamps (None: times stay yearless unless /metrics give one);
    ``max_capacity_loss_pct`` bounds the KV tokens a run at a manual value may give up against the
    profiled boot [%] (None: the loss is reported without a bound).

    >>> LoadPolicy(max_preemptions=-1)
    Traceback (most recent call last):
    ...
    ValueError: max_preemptions must be a count ≥ 0, got -1
    >>> LoadPolicy(max_capacity_loss_pct=-2.0)
    Traceback (most recent call last):
    ...
    ValueError: max_capacity_loss_pct must be a percentage ≥ 0, got -2.0
    """

    max_preemptions: int = 0
    year: int | None = None
    max_capacity_loss_pct: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_preemptions, int) or self.max_preemptions < 0:
            raise ValueError(f"max_preemptions must be a count ≥ 0, got {self.max_preemptions!r}")
        if self.year is not None and (not isinstance(self.year, int) or self.year <= 0):
            raise ValueError(f"year must be a positive whole number, got {self.year!r}")
        bound = self.max_capacity_loss_pct
        if bound is not None and (
            not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound < 0
        ):
            raise ValueError(f"max_capacity_loss_pct must be a percentage ≥ 0, got {bound!r}")


@dataclass(frozen=True)
class ModelLayout:
    """How KV bytes per token were derived: the model config (an input file) and the layout options.

    ``options`` are the keyword arguments of :func:`kvplan.kvspec.kv_spec` other than the config
    (``tp``, ``pp``, ``dcp``, ``kv_cache_dtype``, ``block_size``, ``vllm_version``,
    ``max_num_batched_tokens``), recorded so that :func:`kvplan.evidence.verify_bundle` rebuilds the
    same spec. A ``vllm_version`` or ``block_size`` left None is taken from the logs' compatibility key.
    ``name`` is how the config is quoted where it names no model (a bundle's copy ``inputs/config.json``,
    so approval and verification read the same text wherever the bundle lies); None: its path.
    """

    config: Path | str
    options: Mapping[str, object] = field(default_factory=dict)
    name: str | None = None


def planned_lengths(max_model_len: int | None, plan: AdmissionPlan | None) -> list[int]:
    """Sequence lengths of the capacity table: the plan's length and ``max_model_len``, ascending.

    >>> planned_lengths(32768, AdmissionPlan(6, 8192))
    [8192, 32768]
    """
    lengths = {plan.seq_len} if plan else set()
    if max_model_len is not None:
        lengths.add(max_model_len)
    return sorted(lengths)


def admission_plan(
    plan: AdmissionPlan, key: Mapping[str, object], spec: KVSpec | None, budget: Budget
) -> dict:
    """The plan in blocks, logged-size tokens and (with a model) bytes against the uniform budget.

    ``blocks_required = C × blocks per request of L`` (``ceil(L / block_size)`` for full attention);
    ``tokens_required`` is the "GPU KV cache size" a boot with exactly those blocks logs (the gate
    compares a canary's logged size with it); ``fits`` is None without a model.
    """
    from kvplan.columns import is_known  # here: pandas only once logs were read

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
