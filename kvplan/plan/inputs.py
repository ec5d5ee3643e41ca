"""What a decision is asked under and what it answers (:class:`Decision`), without pandas or the model code."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvplan.budget import Budget, launch_flags_text, uniform_budget
from kvplan.checks import Check
from kvplan.units import format_size

if TYPE_CHECKING:  # the model code (and pandas) only where a spec is given
    import pandas as pd

    from kvplan.io.metadata import ReadMetadata
    from kvplan.kvspec import KVSpec
    from kvplan.kvspec.capacity import Capacity


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
    """How load-test evidence is judged: the preemptions a run may show, the ``year`` of vLLM's yearless log
    stamps, the KV tokens [%] a run at a manual value may give up against the profiled boot (None: unbounded).
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
    """The model config (an input file) on its layout: ``options`` are :func:`kvplan.kvspec.kv_spec`'s keywords
    (recorded, so verify rebuilds the same spec; None: the logs'), ``name`` how the config is quoted (None: its
    path), ``max_model_len`` the length capacity is computed at [tokens] (None: the logs')."""

    config: Path | str
    options: Mapping[str, object] = field(default_factory=dict)
    name: str | None = None
    max_model_len: int | None = None


def planned_lengths(max_model_len: int | None, plan: AdmissionPlan | None) -> list[int]:
    """Sequence lengths of the capacity table: the plan's length and ``max_model_len``, ascending."""
    lengths = {plan.seq_len} if plan else set()
    if max_model_len is not None:
        lengths.add(max_model_len)
    return sorted(lengths)


def admission_plan(
    plan: AdmissionPlan, key: Mapping[str, object], spec: KVSpec | None, budget: Budget
) -> dict:
    """The plan against the uniform budget: ``blocks_required = C × blocks per request of L``, the "GPU KV cache
    size" such a boot logs (``tokens_required``, what the gate compares) and, with a model, bytes and ``fits``."""
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
        from kvplan.kvspec.capacity import blocks_per_sequence  # here: `kvplan ledger` imports no kvspec

        blocks = plan.target_concurrency * blocks_per_sequence(plan.seq_len, block_size)
        tokens = blocks * block_size
    needs = f"{plan.target_concurrency} × {plan.seq_len:,} tokens needs {blocks:,} blocks ({tokens:,} tokens)"
    record = {
        "target_concurrency": plan.target_concurrency,
        "seq_len": plan.seq_len,
        "block_size": block_size,
        "blocks_required": blocks,
        "tokens_required": tokens,
        "bytes_required": None,
        "fits": None,
        "detail": f"{needs}; bytes unknown without --model",
    }
    if spec is not None:
        needed = blocks * spec.block_bytes
        fits = budget.uniform_budget_bytes >= needed
        record.update(
            bytes_required=needed,
            fits=fits,
            detail=f"{needs} = {format_size(needed)} per GPU {'≤' if fits else '>'} "
            f"approved {format_size(budget.uniform_budget_bytes)}",
        )
    return record


#: The ``room_source`` of a room typed in by hand.
GIVEN = "given"


@dataclass(frozen=True)
class Decision:
    """Everything a decision computes from its evidence and policy [bytes]: ``rooms`` (None for rooms given by
    hand), ``ref_free_bytes`` and ``room_sources`` in ``budget.ranks`` order, the capacity rows at the planned
    lengths, the readers' ``warnings`` and the decision's own ``notes``."""

    ledger: pd.DataFrame | None
    provenance_of: Callable[[], pd.DataFrame | None]  # makes :attr:`provenance` when it is first asked for
    warnings: tuple[str, ...]
    budget: Budget
    compatibility_key: dict
    ref_free_bytes: tuple[int | None, ...]
    room_sources: tuple[str | None, ...]
    spec: KVSpec | None = None
    capacity: tuple[dict, ...] | None = None
    plan: dict | None = None
    checks: tuple[Check, ...] = ()
    load: dict | None = None
    rooms: pd.DataFrame | None = None
    max_model_len: int | None = None
    capacity_at_max_len: Capacity | None = None
    cross_check: pd.DataFrame | None = None
    cross_check_verdict: str | None = None
    notes: tuple[str, ...] = ()
    metadata: ReadMetadata | None = None  # the log reader's; None without it
    gpu_memory_utilization: float | None = None  # the companion U of the value
    launch_warning: str | None = None  # what to measure when U rests on incomplete evidence

    @property
    def launch_flags(self) -> tuple[str, ...]:
        """The whole launch: ``--kv-cache-memory-bytes=B`` and ``--gpu-memory-utilization=U`` (when known)."""
        return launch_flags_text(self.uniform_budget_bytes, self.gpu_memory_utilization)

    @property
    def provenance(self) -> pd.DataFrame | None:
        """One row per value read (source, line, boot, rank, column, value, raw line), built when first asked."""
        return self.provenance_of()

    @property
    def defaulted_key_fields(self) -> frozenset[str]:
        """Key fields the reader filled with vLLM's default (:func:`kvplan.checks.key.read_defaulted_key_fields`)."""
        from kvplan.checks.key import defaulted_key_fields, read_defaulted_key_fields

        if self.metadata is not None:
            return read_defaulted_key_fields(self.metadata)
        return defaulted_key_fields(self.provenance) if self.provenance is not None else frozenset()

    @property
    def uniform_budget_bytes(self) -> int:
        """The value every rank gets: ``--kv-cache-memory-bytes`` [bytes]."""
        return self.budget.uniform_budget_bytes


def decide_rooms(room_bytes: Sequence[int], policy: Policy, block_bytes: int | None = None) -> Decision:
    """The decision of rooms given by hand, rank order [bytes]: the uniform budget, every source :data:`GIVEN`."""
    budget = uniform_budget([int(room) for room in room_bytes], policy.reserve_bytes, block_bytes=block_bytes)
    ranks = len(budget.ranks)
    return Decision(
        ledger=None,
        provenance_of=lambda: None,
        warnings=(),
        budget=budget,
        compatibility_key={},
        ref_free_bytes=(None,) * ranks,
        room_sources=(GIVEN,) * ranks,
    )
