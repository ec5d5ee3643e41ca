"""A what-if scenario (every input in bytes) and its outcome (the budget, what it buys, the drift)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from kvplan.budget import Budget, kv_cache_flag
from kvplan.drift import Drift
from kvplan.kvspec.capacity import (
    DEFAULT_BLOCK_SIZE,
    Capacity,
)
from kvplan.plan import Decision, Evidence, Policy, decide
from kvplan.units import format_size

if TYPE_CHECKING:
    from kvplan.kvspec import KVSpec
from kvplan.notebook.headlines import boot_budget_bytes, budget_headline, length_warning, limiting_text

#: Block sizes vLLM accepts on CUDA (``CacheConfig.block_size``), offered by the panel.
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Scenario:
    """Inputs of one what-if evaluation; sizes in bytes, per-rank tuples in rank order.

    ``add_back_bytes`` raises a rank's room, e.g. by the memory of a co-tenant that moved away.
    Capacity needs ``max_model_len`` and either a ``kv_spec`` (:func:`kvplan.kvspec.kv_spec`: vLLM's
    own block, token and concurrency arithmetic for the model, layout and release) or a plain
    ``bytes_per_token`` per rank. ``block_size=None`` means the spec's block size (else 16). Drift
    needs ``ref_free_bytes`` and ``boot_free_bytes`` (startup free memory per rank of the profiled
    reference and of the later boot), against which ``guard_bytes`` is kept. ``max_position_embeddings``
    is the longest context the model config states (``None``: the one :func:`launch_spec` read for
    ``kv_spec``, if any); a longer ``max_model_len`` is warned about in the headline.
    """

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
        """A scenario over a decision's worst room per rank, its reserve and its KV spec.

        ``options`` are the other fields (``max_model_len``, ``target_concurrency``, ``guard_bytes``,
        ``boot_free_bytes``, ...); ``ref_free_bytes`` defaults to the decision's ``F_ref``.
        """
        budget = decision.budget
        defaults = {"kv_spec": decision.spec, "ref_free_bytes": decision.ref_free_bytes}
        return cls(budget.room_bytes, budget.reserve_bytes, ranks=budget.ranks, **{**defaults, **options})

    @classmethod
    def from_ledger(
        cls, ledger: pd.DataFrame, reserve_bytes: int, assume_uniform: bool = False, **options
    ) -> Scenario:
        """:meth:`from_decision` of the pipeline's decision over a ledger (no model: ``kv_spec`` option)."""
        decision = decide(Evidence(ledger), Policy(reserve_bytes, assume_uniform=assume_uniform))
        return cls.from_decision(decision, **{"kv_spec": None, "ref_free_bytes": None, **options})

    @property
    def effective_block_size(self) -> int:
        """Block size in tokens: the one given, else the spec's, else vLLM's default 16."""
        if self.block_size is not None:
            return self.block_size
        return self.kv_spec.block_size if self.kv_spec is not None else DEFAULT_BLOCK_SIZE

    @property
    def position_limit(self) -> int | None:
        """The model's longest context in tokens: the one given, else the config's behind ``kv_spec``."""
        if self.max_position_embeddings is not None:
            return self.max_position_embeddings
        return self.kv_spec.arch.max_position_embeddings if self.kv_spec is not None else None

    @property
    def rank_ids(self) -> tuple[int, ...]:
        """Rank ids, 0..n-1 unless given."""
        return tuple(range(len(self.room_bytes))) if self.ranks is None else tuple(self.ranks)


@dataclass(frozen=True, eq=False)
class Outcome:
    """Everything one scenario gives: the budget, and where inputs allow, capacity and drift.

    ``target_length`` is the longest request length (≤ ``max_model_len``) at which the target
    concurrency (rounded up to whole sequences) still fits, 0 when not even one token does. ``spec``
    is the model spec at the block size in effect (vLLM may raise the one asked for). Compared by
    identity (it holds a DataFrame); compare ``budget`` or ``capacity`` instead.
    """

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
        """Under drift, the value for this boot: :func:`boot_budget_bytes` (whole blocks); else None."""
        return None if self.drift is None else boot_budget_bytes(self.drift, self.budget.block_bytes)

    @property
    def target_sequences(self) -> int | None:
        """The target concurrency in whole sequences (rounded up), None without a target."""
        target = self.scenario.target_concurrency
        return math.ceil(target) if target else None

    @property
    def fits(self) -> bool | None:
        """Whether the target concurrency fits at ``max_model_len``; None without a target."""
        if self.target_length is None:
            return None
        return self.target_length >= (self.scenario.max_model_len or 0)

    def target_fit(self) -> str:
        """Yes or no for the target, in words: ``yes: 4 sequences of 32,768 tokens at once`` or why not."""
        sequences, length = self.target_sequences, self.scenario.max_model_len
        if self.fits:
            return f"yes: {sequences:,} sequences of {length:,} tokens at once"
        if self.target_length:
            return (
                f"no: {sequences:,} sequences of {length:,} do not fit; "
                f"{sequences:,} fit up to {self.target_length:,} tokens each"
            )
        return f"no: {sequences:,} sequences do not fit at any length (not even 1 token each)"

    def verdict(self) -> str:
        """One plain line: FITS / DOES NOT FIT, the flag to deploy and the limiting rank.

        >>> from kvplan.notebook.whatif import evaluate
        >>> GiB = 2**30
        >>> evaluate(Scenario((13 * GiB, 18 * GiB), GiB)).verdict()
        'FITS on every rank: --kv-cache-memory-bytes=12884901888 · rank 0 limits'
        >>> evaluate(Scenario((13 * GiB, 13 * GiB), GiB)).verdict()
        'FITS on every rank: --kv-cache-memory-bytes=12884901888 · every rank the same (none limits alone)'
        """
        if self.drift is not None:
            flag, rank = kv_cache_flag(self.boot_budget_bytes), self.drift.limiting_rank
            tied = len(set(self.drift.adjusted_bytes)) == 1
            where = "this boot"
        else:
            flag, rank = self.budget.flag, self.budget.limiting_rank
            tied = len(set(self.budget.safe_bytes)) == 1
            where = "every rank"
        limits = "every rank the same (none limits alone)" if tied else f"rank {rank} limits"
        if self.fits is None:
            return f"FITS on {where}: {flag} · {limits}"
        word = "FITS" if self.fits else "DOES NOT FIT"
        target = f"{self.target_sequences:,} sequences of {self.scenario.max_model_len:,} tokens"
        return f"{word}: {target} · {flag} · {limits}"

    def table(self) -> pd.DataFrame:
        """Per-rank table in bytes: room (after add-back), safe, uniform, stranded, limiting.

        Under drift, ``uniform_budget_bytes`` and ``limiting`` are this boot's (the adjusted value in
        whole blocks and the drift's limiting rank), after ``adjusted_bytes``; the reference's are kept
        as ``ref_uniform_budget_bytes``, ``ref_stranded_bytes`` and ``ref_limiting``.
        """
        frame = self.budget.to_frame()
        frame.insert(1, "add_back_bytes", list(self.scenario.add_back_bytes or [0] * len(frame)))
        if self.drift is not None:
            frame = frame.rename(
                columns={
                    "uniform_budget_bytes": "ref_uniform_budget_bytes",
                    "stranded_bytes": "ref_stranded_bytes",
                    "limiting": "ref_limiting",
                }
            )
            frame["adjusted_bytes"] = list(self.drift.adjusted_bytes)
            frame["uniform_budget_bytes"] = self.boot_budget_bytes
            frame["limiting"] = [rank == self.drift.limiting_rank for rank in self.drift.ranks]
        return frame

    def headline(self) -> dict[str, str]:
        """The figures a reviewer asks for first, as readable text.

        >>> from kvplan.notebook.whatif import evaluate
        >>> GiB = 2**30
        >>> outcome = evaluate(Scenario((13 * GiB, 18 * GiB), reserve_bytes=GiB))
        >>> outcome.headline()["uniform budget"], outcome.headline()["limiting rank"]
        ('12 GiB', '0')
        """
        lines = budget_headline(self.budget)
        if self.drift is not None:
            boot_value = self.boot_budget_bytes
            limiting = limiting_text(self.drift.ranks, self.drift.adjusted_bytes)
            limits = (
                "every rank the same"
                if limiting.startswith("none")
                else f"ranks {limiting} limit"
                if " and " in limiting
                else f"rank {limiting} limits"
            )
            lines = {
                "after drift": (
                    f"{format_size(boot_value)} ({limits}"
                    + ("; re-profile to raise" if self.drift.reprofile_to_raise else "")
                    + ")"
                ),
                "flag for this boot": kv_cache_flag(boot_value),
                "limiting rank": limiting,
                "reference budget": lines["uniform budget"],
                "reference flag": lines["flag"],
                "reference limiting rank": lines["limiting rank"],
                "reference stranded total": lines["stranded total"],
                "reference min/median": lines["min/median"],
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
        length = self.scenario.max_model_len
        if self.target_bytes is not None:
            target, sequences = self.scenario.target_concurrency, self.target_sequences
            rounded = f" ({target:g} rounded up to {sequences})" if sequences != target else ""
            needed = format_size(self.target_bytes)
            lines["target needs"] = f"{needed} per rank for {sequences:,} sequences of {length:,}{rounded}"
        if self.target_length is not None:
            lines["target fits"] = self.target_fit()
        warning = length_warning(length, self.scenario.position_limit)
        if warning:
            lines["max model length"] = warning
        return lines
