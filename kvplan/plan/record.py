"""The record of one decision: :class:`Decision`, what :func:`kvplan.plan.decide` returns.

It imports neither pandas nor the model code, so that a decision from rooms given by hand
(:func:`kvplan.plan.decide_rooms`, ``kvplan budget --room``) starts fast.

>>> from kvplan.plan import Policy, decide_rooms
>>> decide_rooms([13 * 2**30, 14 * 2**30], Policy(2**30)).uniform_budget_bytes == 12 * 2**30
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvplan.budget import Budget, launch_flags_text
from kvplan.verdict import Check

if TYPE_CHECKING:  # for the annotations only
    import pandas as pd

    from kvplan.io.metadata import ReadMetadata
    from kvplan.kvspec import KVSpec
    from kvplan.kvspec.capacity import Capacity


@dataclass(frozen=True)
class Decision:
    """Everything a decision computes from its evidence and policy (all sizes in bytes).

    ``rooms`` is :func:`kvplan.ledger.room_per_rank` (per rank: room, its source, the worst boot and
    the spread; None for rooms given by hand); ``ref_free_bytes`` and ``room_sources`` follow
    ``budget.ranks``; ``capacity`` holds the rows at the planned lengths and ``capacity_at_max_len``
    the full :class:`~kvplan.kvspec.capacity.Capacity` at ``max_model_len``; ``cross_check`` the per-boot
    rows of the model check. ``warnings`` are the readers' (a bundle records them); ``notes`` what the
    decision itself has to say (rooms of different evidence, ranks assumed uniform, an old release,
    a model config that disagrees with the logs). ``ledger`` and ``provenance`` are None when no logs
    were read (:func:`kvplan.plan.decide_rooms`).
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
        """One row per value read (source, line, boot, rank, column, value, raw line); None without logs.
        Built when first asked for (the bundle's ``evidence.log``), never by ``kvplan budget``."""
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
