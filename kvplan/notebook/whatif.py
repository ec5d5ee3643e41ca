"""The pure what-if (no widgets, no drawing): :func:`evaluate` turns a :class:`Scenario` into an :class:`Outcome`."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pandas as pd

from kvplan.budget import Budget, kv_cache_flag, uniform_budget
from kvplan.drift import Drift, drift_budget
from kvplan.kvspec.capacity import (
    DEFAULT_BLOCK_SIZE,
    Capacity,
    FlatSpec,
    capacity,
    capacity_table,
    sequence_lengths,
)
from kvplan.notebook.headlines import budget_headline, length_warning, limiting_text
from kvplan.plan import Decision
from kvplan.units import bytes_to_gib, format_size, parse_size

if TYPE_CHECKING:
    from kvplan.kvspec import KVSpec


#: Block sizes vLLM accepts on CUDA (``CacheConfig.block_size``), offered by the panel.
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Scenario:
    """Inputs of one what-if in bytes, per-rank tuples in rank order: ``add_back_bytes`` raises a rank's room;
    capacity needs ``max_model_len`` and ``kv_spec`` or ``bytes_per_token``; drift needs ``ref_free_bytes`` and
    ``boot_free_bytes`` (startup free memory of the reference and the later boot)."""

    room_bytes: tuple[int, ...]
    reserve_bytes: int
    ranks: tuple[int, ...] | None = None
    add_back_bytes: tuple[int, ...] | None = None
    bytes_per_token: int | None = None
    block_size: int | None = None
    max_model_len: int | None = None
    target_concurrency: float | None = None
    guard_bytes: int = 0
    ref_free_bytes: tuple[int, ...] | None = None
    boot_free_bytes: tuple[int, ...] | None = None
    kv_spec: KVSpec | None = None
    max_position_embeddings: int | None = None

    @classmethod
    def from_decision(cls, decision: Decision, **options) -> Scenario:
        """A scenario over a decision's worst room per rank, reserve, KV spec and ``F_ref``; ``options``: fields."""
        budget = decision.budget
        defaults = {"kv_spec": decision.spec, "ref_free_bytes": decision.ref_free_bytes}
        return cls(budget.room_bytes, budget.reserve_bytes, ranks=budget.ranks, **{**defaults, **options})

    @property
    def effective_block_size(self) -> int:
        """Block size [tokens]: the one given, else the spec's, else vLLM's default 16."""
        if self.block_size is not None:
            return self.block_size
        return self.kv_spec.block_size if self.kv_spec is not None else DEFAULT_BLOCK_SIZE

    @property
    def position_limit(self) -> int | None:
        """The model's longest context [tokens]: the one given, else ``kv_spec``'s."""
        if self.max_position_embeddings is not None:
            return self.max_position_embeddings
        return self.kv_spec.arch.max_position_embeddings if self.kv_spec is not None else None

    @property
    def rank_ids(self) -> tuple[int, ...]:
        """Rank ids, 0..n-1 unless given."""
        return tuple(range(len(self.room_bytes))) if self.ranks is None else tuple(self.ranks)


@dataclass(frozen=True, eq=False)
class Outcome:
    """What one scenario gives: the budget and, where inputs allow, capacity, drift and ``target_length`` (the
    longest length ≤ ``max_model_len`` holding the target, 0 if none). Compared by identity."""

    scenario: Scenario
    budget: Budget
    capacity: Capacity | None
    curve: pd.DataFrame | None
    target_bytes: int | None
    drift: Drift | None
    target_length: int | None = None
    spec: KVSpec | None = None

    @property
    def boot_budget_bytes(self) -> int | None:
        """Under drift, this boot's value in whole blocks; else None."""
        return None if self.drift is None else self.drift.launch_bytes

    @property
    def target_sequences(self) -> int | None:
        """The target concurrency rounded up to whole sequences; None without one."""
        target = self.scenario.target_concurrency
        return math.ceil(target) if target else None

    @property
    def fits(self) -> bool | None:
        """Whether the target fits at ``max_model_len``; None without one."""
        if self.target_length is None:
            return None
        return self.target_length >= (self.scenario.max_model_len or 0)

    def verdict(self) -> str:
        """One plain line: FITS / DOES NOT FIT, the flag to deploy and the limiting rank.

        >>> GiB = 2**30
        >>> evaluate(Scenario((13 * GiB, 18 * GiB), GiB)).verdict()
        'FITS on every rank: --kv-cache-memory-bytes=12884901888 · rank 0 limits'
        >>> evaluate(Scenario((13 * GiB, 13 * GiB), GiB)).verdict()
        'FITS on every rank: --kv-cache-memory-bytes=12884901888 · every rank the same (none limits alone)'
        """
        judged = self.budget if self.drift is None else self.drift  # drift: this boot's value in whole blocks
        values = self.budget.safe_bytes if self.drift is None else self.drift.adjusted_bytes
        tied = len(set(values)) == 1
        limits = "every rank the same (none limits alone)" if tied else f"rank {judged.limiting_rank} limits"
        if self.fits is None:
            return f"FITS on {'every rank' if self.drift is None else 'this boot'}: {judged.flag} · {limits}"
        word = "FITS" if self.fits else "DOES NOT FIT"
        target = f"{self.target_sequences:,} sequences of {self.scenario.max_model_len:,} tokens"
        return f"{word}: {target} · {judged.flag} · {limits}"

    def table(self) -> pd.DataFrame:
        """Per-rank table in bytes; under drift the uniform value and limiting rank are this boot's (the
        reference's as ``ref_…`` columns)."""
        frame = self.budget.to_frame()
        frame.insert(1, "add_back_bytes", list(self.scenario.add_back_bytes or [0] * len(frame)))
        if self.drift is not None:
            references = ("uniform_budget_bytes", "stranded_bytes", "limiting")
            frame = frame.rename(columns={column: f"ref_{column}" for column in references})
            frame["adjusted_bytes"] = list(self.drift.adjusted_bytes)
            frame["uniform_budget_bytes"] = self.boot_budget_bytes
            frame["limiting"] = [rank == self.drift.limiting_rank for rank in self.drift.ranks]
        return frame

    def headline(self) -> dict[str, str]:
        """The figures a reviewer asks for first, as text."""
        lines = budget_headline(self.budget)
        if self.drift is not None:
            boot_value = self.boot_budget_bytes
            limiting = limiting_text(self.drift.ranks, self.drift.adjusted_bytes)
            limits = f"ranks {limiting} limit" if " and " in limiting else f"rank {limiting} limits"
            if limiting.startswith("none"):
                limits = "every rank the same"
            raise_note = "; re-profile to raise" if self.drift.reprofile_to_raise else ""
            lines = {
                "after drift": f"{format_size(boot_value)} ({limits}{raise_note})",
                "flag for this boot": kv_cache_flag(boot_value),
                "limiting rank": limiting,
                **{"reference " + name.removeprefix("uniform "): text for name, text in lines.items()},
            }
        if self.capacity is not None:
            cap = self.capacity
            note = getattr(cap, "block_size_note", "")
            lines["block size"] = f"{cap.block_size} tokens" + (f" ({note})" if note else "")
            lines["tokens"] = f"{cap.tokens:,}"
            lines["max concurrency"] = f"{cap.max_concurrency:.2f}× at {cap.max_model_len:,}"
            if getattr(cap, "approximate_reason", ""):
                lines["approximate"] = cap.approximate_reason
        elif self.spec is not None:
            note = self.spec.block_size_note
            lines["block size"] = f"{self.spec.block_size} tokens" + (f" ({note})" if note else "")
        elif self.budget.block_bytes is not None:
            lines["block size"] = f"{self.scenario.effective_block_size} tokens"
        scenario, sequences = self.scenario, self.target_sequences
        length, target = scenario.max_model_len, scenario.target_concurrency
        if self.target_bytes is not None:
            rounded = f" ({target:g} rounded up to {sequences})" if sequences != target else ""
            needed = format_size(self.target_bytes)
            lines["target needs"] = f"{needed} per rank for {sequences:,} sequences of {length:,}{rounded}"
        if self.fits:
            lines["target fits"] = f"yes: {sequences:,} sequences of {length:,} tokens at once"
        elif self.target_length:
            lines["target fits"] = (
                f"no: {sequences:,} sequences of {length:,} do not fit; "
                f"{sequences:,} fit up to {self.target_length:,} tokens each"
            )
        elif self.target_length is not None:
            lines["target fits"] = (
                f"no: {sequences:,} sequences do not fit at any length (not even 1 token each)"
            )
        warning = length_warning(length, self.scenario.position_limit)
        if warning:
            lines["max model length"] = warning
        return lines


def weak_rank_at_median(outcome: Outcome) -> Scenario:
    """The scenario with the limiting rank's safe budget raised to the median's ("fix the weak rank?")."""
    scenario, budget = outcome.scenario, outcome.budget
    add_back = list(scenario.add_back_bytes or (0,) * len(scenario.room_bytes))
    position = budget.ranks.index(budget.limiting_rank)
    add_back[position] += budget.median_safe_bytes - budget.min_safe_bytes
    return replace(scenario, add_back_bytes=tuple(add_back))


def evaluate(scenario: Scenario, seq_lens: Sequence[int] | None = None) -> Outcome:
    """The budget of ``room_bytes + add_back_bytes`` (in whole blocks when known) and what it buys; drift's
    reference per rank is the safe budget, as the gate's.

    >>> GiB = 2**30
    >>> s = Scenario((13 * GiB, 18 * GiB), GiB, bytes_per_token=256 * 1024, max_model_len=8192)
    >>> o = evaluate(s)
    >>> o.budget.uniform_budget_bytes // GiB, o.capacity.tokens, o.capacity.max_concurrency
    (12, 49152, 6.0)
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
        block_bytes = None if bpt is None else FlatSpec(bpt, block_size).block_bytes
    budget = uniform_budget(room, scenario.reserve_bytes, block_bytes=block_bytes, ranks=ranks)
    bought: tuple = (None, None, None, None)
    if block_bytes is not None and scenario.max_model_len is not None:
        bought = _bought(scenario, spec, budget.uniform_budget_bytes, seq_lens)
    drift = None
    if scenario.boot_free_bytes is not None:
        if scenario.ref_free_bytes is None:
            raise ValueError("drift needs the reference boot's free memory per rank (ref_free_bytes)")
        free = (list(scenario.ref_free_bytes), list(scenario.boot_free_bytes))
        drift = drift_budget(list(budget.safe_bytes), *free, scenario.guard_bytes, ranks)
        drift = replace(drift, block_bytes=budget.block_bytes)
    cap, curve, target, target_length = bought
    return Outcome(scenario, budget, cap, curve, target, drift, target_length, spec)


def _bought(scenario: Scenario, spec: KVSpec | None, kv_bytes: int, seq_lens: Sequence[int] | None) -> tuple:
    """What ``kv_bytes`` per rank buys: capacity, curve, the target's bytes and longest length (spec or flat)."""
    length, block_size, bpt = scenario.max_model_len, scenario.effective_block_size, scenario.bytes_per_token
    lengths = list(seq_lens) if seq_lens is not None else sequence_lengths(length)
    sequences = math.ceil(scenario.target_concurrency) if scenario.target_concurrency else None
    target = target_length = None
    if spec is not None:
        cap, curve = spec.capacity(kv_bytes, length), capacity_table(spec, kv_bytes, lengths)
        if sequences:
            target = sequences * spec.blocks_per_request(length) * spec.block_bytes

        def concurrency_at(seq_len: int) -> float:
            return spec.capacity(kv_bytes, seq_len).max_concurrency
    else:
        cap = capacity(kv_bytes, bpt, length, block_size)
        curve = capacity_table(FlatSpec(bpt, block_size), kv_bytes, lengths)
        if sequences:
            target = FlatSpec(bpt, block_size).bytes_for_sequences(sequences, length)

        def concurrency_at(seq_len: int) -> float:
            return capacity(kv_bytes, bpt, seq_len, block_size).max_concurrency

    if sequences:
        target_length = longest_length_at(concurrency_at, sequences, length)
    return cap, curve, target, target_length


def longest_length_at(concurrency_at, target: float, max_model_len: int) -> int:
    """The longest length ≤ ``max_model_len`` [tokens] with ``concurrency_at(length) ≥ target`` (0: none), by
    bisection: concurrency never rises with the length.

    >>> # 3072 blocks of 16 tokens: 8 requests fit while a request needs ≤ 3072 / 8 = 384 blocks = 6144 tokens
    >>> longest_length_at(lambda n: 3072 / -(-n // 16), 8, 32_768)
    6144
    >>> longest_length_at(lambda n: 2.0, 8, 32_768), longest_length_at(lambda n: 9.0, 8, 32_768)
    (0, 32768)
    """
    return bisect.bisect_left(range(1, max_model_len + 1), True, key=lambda n: concurrency_at(n) < target)


def gib_to_bytes(value_gib: float) -> int:
    """A slider's GiB value in bytes, as ``parse_size`` reads it."""
    return parse_size(f"{value_gib:.6f}GiB")


def add_back_bytes(value_gib: float, co_tenant: int | None) -> int:
    """An add-back slider's bytes: at most the co-tenant's (all at the slider's top), 0 if unknown."""
    if co_tenant is None:
        return 0
    if value_gib >= bytes_to_gib(int(co_tenant)):  # the slider's maximum
        return int(co_tenant)
    return min(gib_to_bytes(value_gib), int(co_tenant))


def add_back_limits(scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None) -> list[int | None]:
    """The most each rank's add-back may be: its co-tenant's bytes (or the scenario's own), None if unknown."""
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    co_tenants = list(co_tenant_bytes) if co_tenant_bytes is not None else [None] * len(add_back)
    if len(co_tenants) != len(add_back):
        raise ValueError(f"{len(co_tenants)} co-tenant values for {len(add_back)} ranks")
    return [
        (max(int(co_tenant), extra) if co_tenant is not None and not pd.isna(co_tenant) else (extra or None))
        for co_tenant, extra in zip(co_tenants, add_back)
    ]
