"""The record of one decision (:class:`Decision`, what :func:`kvplan.plan.decide` returns) and the decision of
rooms given by hand (:func:`decide_rooms`, ``kvplan budget --room``).

Neither pandas nor the model code is imported here, so ``kvplan budget --room`` starts fast.

>>> GiB = 2**30
>>> d = decide_rooms([int(g * GiB) for g in (18.8, 17.6, 12.9, 16.4)], Policy(int(0.9 * GiB)))
>>> d.budget.limiting_rank, d.room_sources
(2, ('given', 'given', 'given', 'given'))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvplan.budget import Budget, launch_flags_text, uniform_budget
from kvplan.plan.inputs import Policy
from kvplan.verdict import Check

if TYPE_CHECKING:  # for the annotations only
    import pandas as pd

    from kvplan.io.metadata import ReadMetadata
    from kvplan.kvspec import KVSpec
    from kvplan.kvspec.capacity import Capacity

#: The ``room_source`` of a room typed in by hand.
GIVEN = "given"


@dataclass(frozen=True)
class Decision:
    """Everything a decision computes from its evidence and policy (all sizes in bytes).

    ``rooms`` is :func:`kvplan.ledger.room_per_rank` (None for rooms given by hand); ``ref_free_bytes`` and
    ``room_sources`` follow ``budget.ranks``; ``capacity`` holds the rows at the planned lengths;
    ``warnings`` are the readers', ``notes`` what the decision itself has to say. ``ledger`` and
    ``provenance`` are None when no logs were read.
    """

    ledger: pd.DataFrame | None
    #: makes :attr:`provenance` when it is first asked for (the reader's metadata builds it once)
    provenance_of: Callable[[], pd.DataFrame | None]
    warnings: tuple[str, ...]
    budget: Budget
    compatibility_key: dict
    ref_free_bytes: tuple[int | None, ...]
    room_sources: tuple[str | None, ...]
    spec: KVSpec | None
    capacity: tuple[dict, ...] | None
    plan: dict | None
    checks: tuple[Check, ...]
    load: dict | None = None
    rooms: pd.DataFrame | None = None
    max_model_len: int | None = None
    capacity_at_max_len: Capacity | None = None
    cross_check: pd.DataFrame | None = None
    cross_check_verdict: str | None = None
    notes: tuple[str, ...] = ()
    #: the log reader's metadata (compact provenance rows, where raw lines are read back); None without it
    metadata: ReadMetadata | None = None
    #: the companion ``--gpu-memory-utilization`` vLLM's start-up check passes with (:mod:`kvplan.checks.launch`)
    gpu_memory_utilization: float | None = None
    #: what to measure when that companion rests on incomplete evidence (None: it does not)
    launch_warning: str | None = None

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
        """Key fields the reader filled with vLLM's default (:func:`kvplan.checks.read_defaulted_key_fields`)."""
        from kvplan.checks import defaulted_key_fields, read_defaulted_key_fields

        if self.metadata is not None:
            return read_defaulted_key_fields(self.metadata)
        return defaulted_key_fields(self.provenance) if self.provenance is not None else frozenset()

    @property
    def uniform_budget_bytes(self) -> int:
        """The value every rank gets: ``--kv-cache-memory-bytes`` [bytes]."""
        return self.budget.uniform_budget_bytes


def decide_rooms(room_bytes: Sequence[int], policy: Policy, block_bytes: int | None = None) -> Decision:
    """The decision of rooms given by hand, rank order [bytes]: the uniform budget (whole blocks of
    ``block_bytes`` when given), every source :data:`GIVEN`, no free memory known, no ledger, no checks."""
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
        spec=None,
        capacity=None,
        plan=None,
        checks=(),
    )
