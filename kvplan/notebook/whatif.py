"""The pure what-if: :func:`evaluate` turns a :class:`~kvplan.notebook.scenario.Scenario` into an Outcome.

It only calls :mod:`kvplan.budget`, :mod:`kvplan.kvspec.capacity` (or the scenario's KV spec) and
:mod:`kvplan.drift`, so it is tested without a browser; the helpers turn control values into scenario bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from kvplan.budget import uniform_budget
from kvplan.drift import drift_budget
from kvplan.kvspec.capacity import (
    block_bytes_from_token_bytes,
    bytes_for_sequences,
    capacity,
    capacity_table,
    concurrency_curve,
    sequence_lengths,
)
from kvplan.units import bytes_to_gib, parse_size

if TYPE_CHECKING:
    from kvplan.kvspec import KVSpec
from kvplan.notebook.scenario import Outcome, Scenario


def weak_rank_at_median(outcome: Outcome) -> Scenario:
    """The same scenario with the limiting rank's safe budget raised to the median rank's.

    "What would the launch buy if its weak rank were a typical one?": the answer to "fix the weak
    rank or tune the value?" in tokens. The uniform value then follows the next weakest rank.

    >>> GiB = 2**30
    >>> outcome = evaluate(Scenario((13 * GiB, 17 * GiB, 19 * GiB), GiB))  # safe 12, 16, 18 GiB
    >>> evaluate(weak_rank_at_median(outcome)).budget.uniform_budget_bytes // GiB
    16
    """
    scenario, budget = outcome.scenario, outcome.budget
    add_back = list(scenario.add_back_bytes or (0,) * len(scenario.room_bytes))
    position = budget.ranks.index(budget.limiting_rank)
    add_back[position] += budget.median_safe_bytes - budget.min_safe_bytes
    return replace(scenario, add_back_bytes=tuple(add_back))


def evaluate(scenario: Scenario, seq_lens: Sequence[int] | None = None) -> Outcome:
    """The budget and what it buys for one scenario (pure: no widgets, no drawing).

    Room per rank is ``room_bytes + add_back_bytes``; the budget is rounded to whole blocks when
    ``bytes_per_token`` is known; the drift reference budget per rank is the safe budget
    (room − reserve), as the gate uses it.

    >>> GiB = 2**30
    >>> s = Scenario((13 * GiB, 18 * GiB), GiB, bytes_per_token=256 * 1024, max_model_len=8192)
    >>> o = evaluate(s)
    >>> o.budget.uniform_budget_bytes // GiB, o.capacity.tokens, o.capacity.max_concurrency
    (12, 49152, 6.0)
    >>> evaluate(replace(s, add_back_bytes=(6 * GiB, 0))).budget.limiting_rank  # 19 vs 18 GiB
    1
    """
    ranks = scenario.rank_ids
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    if len(add_back) != len(scenario.room_bytes):
        raise ValueError(f"{len(add_back)} add-back values for {len(scenario.room_bytes)} ranks")
    room = [r + extra for r, extra in zip(scenario.room_bytes, add_back)]
    block_size = scenario.effective_block_size
    spec = scenario.kv_spec
    if spec is not None and spec.block_size != block_size:
        spec = spec.with_settings(block_size=block_size)
    bpt = scenario.bytes_per_token
    if spec is not None:
        block_bytes = spec.block_bytes
    else:
        block_bytes = None if bpt is None else block_bytes_from_token_bytes(bpt, block_size)
    budget = uniform_budget(room, scenario.reserve_bytes, block_bytes=block_bytes, ranks=ranks)
    cap = curve = target = target_length = None
    length = scenario.max_model_len
    if block_bytes is not None and length is not None:
        kv_bytes = budget.uniform_budget_bytes
        lengths = list(seq_lens) if seq_lens is not None else sequence_lengths(length)
        sequences = math.ceil(scenario.target_concurrency) if scenario.target_concurrency else None
        if spec is not None:
            cap = spec.capacity(kv_bytes, length)
            curve = spec_concurrency_curve(spec, kv_bytes, lengths)
            if sequences:
                target = sequences * spec.blocks_per_request(length) * spec.block_bytes

            def concurrency_at(seq_len: int) -> float:
                return spec.capacity(kv_bytes, seq_len).max_concurrency
        else:
            cap = capacity(kv_bytes, bpt, length, block_size)
            curve = concurrency_curve(kv_bytes, bpt, lengths, block_size)
            if sequences:
                target = bytes_for_sequences(sequences, length, bpt, block_size)

            def concurrency_at(seq_len: int) -> float:
                return capacity(kv_bytes, bpt, seq_len, block_size).max_concurrency

        if sequences:
            target_length = longest_length_at(concurrency_at, sequences, length)
    drift = None
    if scenario.boot_free_bytes is not None:
        if scenario.ref_free_bytes is None:
            raise ValueError("drift needs the reference boot's free memory per rank (ref_free_bytes)")
        drift = drift_budget(
            list(budget.safe_bytes),
            list(scenario.ref_free_bytes),
            list(scenario.boot_free_bytes),
            scenario.guard_bytes,
            ranks,
        )
    return Outcome(scenario, budget, cap, curve, target, drift, target_length, spec)


def longest_length_at(concurrency_at, target: float, max_model_len: int) -> int:
    """The longest length ≤ ``max_model_len`` [tokens] with ``concurrency_at(length) ≥ target``; 0 if none.

    ``concurrency_at`` (full-length requests at once for a request length) must not rise with the
    length, as vLLM's concurrency does not; found by bisection.

    >>> # 3072 blocks of 16 tokens: 8 requests fit while a request needs ≤ 3072 / 8 = 384 blocks = 6144 tokens
    >>> longest_length_at(lambda n: 3072 / -(-n // 16), 8, 32_768)
    6144
    >>> longest_length_at(lambda n: 2.0, 8, 32_768), longest_length_at(lambda n: 9.0, 8, 32_768)
    (0, 32768)
    """
    low, high = 0, max_model_len  # concurrency_at(low) ≥ target, or low = 0
    if concurrency_at(high) >= target:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if concurrency_at(middle) >= target:
            low = middle
        else:
            high = middle
    return low


def spec_concurrency_curve(spec: KVSpec, kv_bytes: int, seq_lens: Sequence[int]) -> pd.DataFrame:
    """:func:`kvplan.kvspec.capacity.capacity_table` of a model spec: tokens and concurrency from
    ``spec.capacity`` at each length, so hybrid and sliding-window models are sized as vLLM sizes them
    (and as approximately as the spec says)."""
    return capacity_table(spec, kv_bytes, seq_lens)


def ledger_after_add_back(ledger: pd.DataFrame, scenario: Scenario) -> pd.DataFrame:
    """A copy of ``ledger`` with ``other_process_bytes`` lowered by the scenario's add-back per rank (≥ 0).

    "What if the co-tenant on rank 2 moved?" as the ledger chart draws it.

    >>> frame = pd.DataFrame({"rank": [0, 1], "other_process_bytes": [None, 5]})
    >>> scenario = Scenario((10, 10), 1, add_back_bytes=(3, 2))
    >>> ledger_after_add_back(frame, scenario)["other_process_bytes"].tolist()
    [0, 3]
    """
    shown = ledger.copy()
    if not scenario.add_back_bytes:
        return shown
    other = pd.to_numeric(shown.get("other_process_bytes", pd.Series(0, index=shown.index)), errors="coerce")
    extra = shown["rank"].map(dict(zip(scenario.rank_ids, scenario.add_back_bytes))).fillna(0)
    shown["other_process_bytes"] = (other.fillna(0) - extra).clip(lower=0).astype("int64")
    return shown


def gib_to_bytes(value_gib: float) -> int:
    """Bytes in a slider's GiB value, to the nearest byte (0.9 → parse_size("0.9GiB")).

    >>> gib_to_bytes(0.9) == parse_size("0.9GiB"), gib_to_bytes(12)
    (True, 12884901888)
    """
    return parse_size(f"{value_gib:.6f}GiB")


def add_back_bytes(value_gib: float, co_tenant: int | None) -> int:
    """An add-back slider's bytes, never more than the co-tenant holds (nothing when that is unknown).

    A slider at its maximum (the co-tenant's bytes in GiB) gives the co-tenant's exact bytes.

    >>> co_tenant = 25_845_153_792  # 24.07 GiB (rounded)
    >>> add_back_bytes(25.0, co_tenant) == add_back_bytes(co_tenant / 2**30, co_tenant) == co_tenant
    True
    >>> add_back_bytes(2.0, co_tenant), add_back_bytes(2.0, None)
    (2147483648, 0)
    """
    if co_tenant is None:
        return 0
    if value_gib >= bytes_to_gib(int(co_tenant)):  # the slider's maximum
        return int(co_tenant)
    return min(gib_to_bytes(value_gib), int(co_tenant))


def add_back_limits(scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None) -> list[int | None]:
    """The most each rank's add-back may be (rank order): its co-tenant's bytes, None where unknown.

    A scenario that already adds back more than that keeps its own value as the limit.

    >>> add_back_limits(Scenario((10, 10), 1, add_back_bytes=(0, 9)), [5, 7])
    [5, 9]
    >>> add_back_limits(Scenario((10,), 1), None)
    [None]
    """
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    co_tenants = list(co_tenant_bytes) if co_tenant_bytes is not None else [None] * len(add_back)
    if len(co_tenants) != len(add_back):
        raise ValueError(f"{len(co_tenants)} co-tenant values for {len(add_back)} ranks")
    return [
        (max(int(co_tenant), extra) if co_tenant is not None and not pd.isna(co_tenant) else (extra or None))
        for co_tenant, extra in zip(co_tenants, add_back)
    ]
