"""Rooms given by hand (``kvplan budget --room``): the step of the pipeline that needs no ledger.

:func:`decide_rooms` is :func:`kvplan.plan.decide`'s rule for rooms typed in rank order (decide calls
it for :func:`~kvplan.plan.given_rooms` evidence); it imports neither pandas nor the log readers, so
``kvplan budget --room`` starts in a fraction of the time.

>>> GiB = 2**30
>>> d = decide_rooms([int(g * GiB) for g in (18.8, 17.6, 12.9, 16.4)], Policy(int(0.9 * GiB)))
>>> d.budget.limiting_rank, d.room_sources
(2, ('given', 'given', 'given', 'given'))
"""

from __future__ import annotations

from collections.abc import Sequence

from kvplan.budget import uniform_budget
from kvplan.plan.inputs import Policy
from kvplan.plan.record import Decision

#: The ``room_source`` of a room typed in by hand.
GIVEN = "given"


def decide_rooms(room_bytes: Sequence[int], policy: Policy, block_bytes: int | None = None) -> Decision:
    """The decision of rooms given by hand, rank order [bytes], under ``policy``: the uniform budget
    (rounded down to whole blocks of ``block_bytes`` when given), every rank's source :data:`GIVEN`,
    no startup free memory known, no ledger (``ledger`` and ``provenance`` are None) and no checks."""
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
