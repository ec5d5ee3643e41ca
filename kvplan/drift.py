"""Reusing an approved budget on a later boot: ``B_adj = B_ref − max(0, F_ref − F_boot) − G``, never raised.
Where evidence leaves a choice the side that lowers ``B_adj`` wins: ``F_ref`` is the free memory of the boot that
set the rank's room (the highest its own boots show for a room assumed from another rank), ``F_boot`` the lowest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvplan.budget import (
    BudgetError,
    kv_cache_flag,
    largest_utilization,
    launch_flags_text,
    round_down_to_blocks,
)
from kvplan.units import format_size

if TYPE_CHECKING:  # pandas only for the frames' annotations
    import pandas as pd


def adjusted_budget_bytes(
    ref_budget_bytes: int, ref_free_bytes: int, boot_free_bytes: int, guard_bytes: int = 0
) -> int:
    """A rank's budget on a later boot: ``B_ref − max(0, F_ref − F_boot) − G`` [bytes].

    >>> GiB = 2**30
    >>> adjusted_budget_bytes(30 * GiB, 42 * GiB, 40 * GiB + 3 * GiB // 4, GiB // 2) / GiB
    28.25
    """
    return ref_budget_bytes - max(0, ref_free_bytes - boot_free_bytes) - guard_bytes


def per_rank(ledger: pd.DataFrame, column: str, pick: str) -> dict[int, int]:
    """The ``pick`` (``"min"`` or ``"max"``) shown value of ``column`` per rank, over every row [bytes]."""
    if column not in ledger.columns:
        return {}
    values = ledger[["rank", column]].dropna()
    return {int(rank): int(value) for rank, value in values.groupby("rank")[column].agg(pick).items()}


def lowest_free_bytes(ledger: pd.DataFrame) -> dict[int, int]:
    """``F_boot`` per rank: the lowest startup free memory each rank shows [bytes] (none: left out)."""
    return per_rank(ledger, "init_free_bytes", "min")


def reference_free_bytes(ledger: pd.DataFrame, rooms: pd.DataFrame) -> tuple[int | None, ...]:
    """``F_ref`` per rank of ``rooms`` (:func:`kvplan.ledger.room_per_rank`) [bytes]; None where none is shown."""
    from kvplan.columns import is_known  # pandas: only once logs were read

    free: list[int | None] = []
    for rank, record in rooms.iterrows():
        if record["room_source"] == "assumed_uniform":
            own = ledger.loc[ledger["rank"] == rank, "init_free_bytes"].dropna()
            free.append(int(own.max()) if not own.empty else None)
        else:
            value = record["init_free_bytes"]
            free.append(int(value) if is_known(value) else None)
    return tuple(free)


def boot_free_bytes(ledger: pd.DataFrame, ranks: Sequence[int]) -> tuple[int, ...]:
    """``F_boot`` per rank of ``ranks`` [bytes] (:func:`lowest_free_bytes`); a rank showing none is refused."""
    lowest = lowest_free_bytes(ledger)
    for rank in ranks:
        if rank not in lowest:
            sources = ledger["source"].dropna() if "source" in ledger.columns else []
            files = ", ".join(dict.fromkeys(str(source) for source in sources))
            raise ValueError(
                f"{files or 'the ledger'}: rank {rank} shows no free memory at startup "
                "(no startup memory line in its log): is the log complete?"
            )
    return tuple(lowest[rank] for rank in ranks)


@dataclass(frozen=True)
class Drift:
    """Per-rank drift against a reference boot and the uniform adjusted budget (bytes)."""

    ranks: tuple[int, ...]
    ref_budget_bytes: tuple[int, ...]
    ref_free_bytes: tuple[int, ...]
    boot_free_bytes: tuple[int, ...]
    guard_bytes: int
    drift_bytes: tuple[int, ...]
    adjusted_bytes: tuple[int, ...]
    #: one KV block's bytes (the flag is whole blocks) and each rank's total memory (for the companion U)
    block_bytes: int | None = None
    total_bytes: tuple[int, ...] | None = None

    @property
    def adjusted_uniform_bytes(self) -> int:
        """The minimum adjusted budget [bytes] (``uniform_budget_bytes`` in ``kvplan drift --json``)."""
        return min(self.adjusted_bytes)

    @property
    def limiting_rank(self) -> int:
        """The rank whose adjusted budget bounds the launch."""
        return self.ranks[self.adjusted_bytes.index(self.adjusted_uniform_bytes)]

    @property
    def launch_bytes(self) -> int:
        """The value to launch with [bytes]: the adjusted uniform value, in whole blocks when known."""
        value = self.adjusted_uniform_bytes
        return round_down_to_blocks(value, self.block_bytes) if self.block_bytes else value

    @property
    def flag(self) -> str:
        """The vLLM flag of :attr:`launch_bytes`."""
        return kv_cache_flag(self.launch_bytes)

    @property
    def gpu_memory_utilization(self) -> float | None:
        """The companion U vLLM's start-up check passes on every rank's boot free memory less the guard."""
        if self.total_bytes is None:
            return None
        return largest_utilization(self.total_bytes, self.boot_free_bytes, self.guard_bytes)

    @property
    def launch_flags(self) -> tuple[str, ...]:
        """The byte flag and, when known, its companion ``--gpu-memory-utilization``."""
        return launch_flags_text(self.launch_bytes, self.gpu_memory_utilization)

    @property
    def reprofile_to_raise(self) -> bool:
        """Whether some rank has more free memory than at the reference (re-profile to raise)."""
        return any(drift < 0 for drift in self.drift_bytes)

    def to_frame(self) -> pd.DataFrame:
        """One row per rank: reference and boot free memory, drift, adjusted budget."""
        import pandas as pd  # here, not at import: the CLI's light commands start without pandas

        return pd.DataFrame(
            {
                "rank": list(self.ranks),
                "ref_free_bytes": list(self.ref_free_bytes),
                "boot_free_bytes": list(self.boot_free_bytes),
                "drift_bytes": list(self.drift_bytes),
                "ref_budget_bytes": list(self.ref_budget_bytes),
                "adjusted_bytes": list(self.adjusted_bytes),
            }
        ).set_index("rank")

    def to_dict(self) -> dict:
        """JSON-ready dict with ``uniform_budget_bytes``, ``reprofile_to_raise`` and ``ranks``."""
        return {
            "uniform_budget_bytes": self.adjusted_uniform_bytes,
            "limiting_rank": self.limiting_rank,
            "reprofile_to_raise": self.reprofile_to_raise,
            "guard_bytes": self.guard_bytes,
            "flag": self.flag,
            "launch_flags": list(self.launch_flags),
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "ranks": [
                {"rank": rank, "drift_bytes": drift, "adjusted_bytes": adjusted}
                for rank, drift, adjusted in zip(self.ranks, self.drift_bytes, self.adjusted_bytes)
            ],
        }


def drift_budget(
    ref_budget_bytes: int | Sequence[int],
    ref_free_bytes: int | Sequence[int],
    boot_free_bytes: int | Sequence[int],
    guard_bytes: int = 0,
    ranks: Sequence[int] | None = None,
) -> Drift:
    """Adjusted budget per rank for a later boot (scalars apply to every rank); :class:`BudgetError` where a
    budget is not positive or above its reference free memory."""
    if guard_bytes < 0:
        raise ValueError(f"guard must not be negative, got {guard_bytes} bytes")
    columns = [_as_list(v) for v in (ref_budget_bytes, ref_free_bytes, boot_free_bytes)]
    lengths = {len(column) for column in columns if len(column) != 1}
    if len(lengths) > 1:
        raise ValueError(f"per-rank lists differ in length: {sorted(lengths)}")
    n = lengths.pop() if lengths else 1
    ref_budget, ref_free, boot_free = (c * n if len(c) == 1 else c for c in columns)
    rank_ids = tuple(range(n)) if ranks is None else tuple(int(r) for r in ranks)
    if len(rank_ids) != n:
        raise ValueError(f"{len(rank_ids)} rank ids for {n} ranks")
    adjusted = [
        adjusted_budget_bytes(b, f_ref, f_boot, guard_bytes)
        for b, f_ref, f_boot in zip(ref_budget, ref_free, boot_free)
    ]
    for rank, budget, free, value in zip(rank_ids, ref_budget, ref_free, adjusted):
        if budget <= 0:
            raise BudgetError(f"rank {rank}: reference budget {format_size(budget)} is not positive")
        if budget > free:
            raise BudgetError(
                f"rank {rank}: reference budget {format_size(budget)} is above the reference free memory "
                f"{format_size(free)} it was measured under: no boot allocates more KV cache than it had "
                "free; check --ref-budget and --ref-free (they belong to one profiled boot)"
            )
        if value <= 0:
            raise BudgetError(
                f"rank {rank}: the lost startup free memory and the guard leave no KV budget "
                f"(adjusted {format_size(value)} from {format_size(budget)}); re-profile this boot"
            )
    return Drift(
        ranks=rank_ids,
        ref_budget_bytes=tuple(ref_budget),
        ref_free_bytes=tuple(ref_free),
        boot_free_bytes=tuple(boot_free),
        guard_bytes=guard_bytes,
        drift_bytes=tuple(ref - boot for ref, boot in zip(ref_free, boot_free)),
        adjusted_bytes=tuple(adjusted),
    )


def _as_list(value: int | Sequence[int]) -> list[int]:
    values = [int(value)] if isinstance(value, int) else [int(v) for v in value]
    if not values:
        raise ValueError("empty per-rank list")
    return values
