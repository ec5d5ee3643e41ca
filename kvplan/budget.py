"""The uniform per-GPU KV budget: the *minimum* over ranks of room minus reserve (an average hides the rank that
fails), in whole blocks; what stronger ranks cannot use is stranded."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from kvplan.units import GIB_2DP_HALF_STEP_BYTES, format_size

if TYPE_CHECKING:  # pandas only for the frames' annotations
    import pandas as pd


class BudgetError(ValueError):
    """Input from which no safe budget can be computed; the message names the rank."""


def kv_cache_flag(num_bytes: int) -> str:
    """vLLM's flag for a per-GPU KV budget, exactly as a launch command takes it (``--kv-cache-memory-bytes=N``)."""
    return f"--kv-cache-memory-bytes={num_bytes}"


def launch_flags_text(num_bytes: int, gpu_memory_utilization: float | None) -> tuple[str, ...]:
    """The byte flag and its companion ``--gpu-memory-utilization`` (two decimals; left out when unknown)."""
    companion = (
        () if gpu_memory_utilization is None else (f"--gpu-memory-utilization={gpu_memory_utilization:.2f}",)
    )
    return (kv_cache_flag(num_bytes), *companion)


#: How far a GiB figure printed to 2 decimals can be from the bytes it stands for (rounded up).
PRINTED_MARGIN_BYTES = GIB_2DP_HALF_STEP_BYTES + 1


def passes_startup_check(total_bytes: int, free_bytes: int, utilization: float) -> bool:
    """vLLM's ``request_memory`` (0.33 ``v1/worker/utils.py``): ``free ≥ ceil(total × gpu_memory_utilization)``,
    a float product as vLLM computes it."""
    return free_bytes >= math.ceil(total_bytes * utilization)


def largest_utilization(
    total_bytes: Sequence[int], free_bytes: Sequence[int], guard_bytes: int
) -> float | None:
    """The largest two-decimal U with ``ceil(total_r × U) ≤ F_r − G`` on every rank, figures on their safe side
    (± :data:`PRINTED_MARGIN_BYTES`); None when not even 0.01 passes."""
    for hundredths in range(100, 0, -1):
        utilization = hundredths / 100
        if all(
            passes_startup_check(
                total + PRINTED_MARGIN_BYTES, free - PRINTED_MARGIN_BYTES - guard_bytes, utilization
            )
            for total, free in zip(total_bytes, free_bytes)
        ):
            return utilization
    return None


@dataclass(frozen=True)
class Budget:
    """One uniform KV budget and how every rank stands against it [bytes] (stranded includes block rounding)."""

    ranks: tuple[int, ...]
    room_bytes: tuple[int, ...]
    reserve_bytes: int
    safe_bytes: tuple[int, ...]
    min_safe_bytes: int
    median_safe_bytes: int
    max_safe_bytes: int
    block_bytes: int | None
    num_blocks: int | None
    uniform_budget_bytes: int
    rounding_loss_bytes: int
    limiting_rank: int
    stranded_bytes: tuple[int, ...]

    @property
    def stranded_total_bytes(self) -> int:
        """Bytes the stronger ranks could hold but the uniform value leaves unused."""
        return sum(self.stranded_bytes)

    @property
    def allocated_total_bytes(self) -> int:
        """KV bytes allocated over all ranks at the uniform value."""
        return self.uniform_budget_bytes * len(self.ranks)

    @property
    def min_median_ratio(self) -> float:
        """Weakest rank's safe budget over the median rank's (1.0 = no weak rank)."""
        return self.min_safe_bytes / self.median_safe_bytes

    @property
    def weak_rank_loss_fraction(self) -> float:
        """``1 − min/median``: the share of typical capacity the weakest rank removes."""
        return 1.0 - self.min_median_ratio

    @property
    def flag(self) -> str:
        """The exact vLLM flag, e.g. ``--kv-cache-memory-bytes=12884901888``."""
        return kv_cache_flag(self.uniform_budget_bytes)

    def to_frame(self) -> pd.DataFrame:
        """One row per rank: room, safe budget, uniform budget, stranded bytes, limiting flag."""
        import pandas as pd  # here, not at import: the CLI's light commands start without pandas

        limiting = set(limiting_ranks(self))
        return pd.DataFrame(
            {
                "rank": list(self.ranks),
                "room_bytes": list(self.room_bytes),
                "safe_bytes": list(self.safe_bytes),
                "uniform_budget_bytes": [self.uniform_budget_bytes] * len(self.ranks),
                "stranded_bytes": list(self.stranded_bytes),
                "limiting": [rank in limiting for rank in self.ranks],
            }
        ).set_index("rank")

    def to_dict(self) -> dict:
        """Plain JSON-ready dict: the headline keys, the flag and a ``ranks`` list."""
        per_rank = ("ranks", "room_bytes", "safe_bytes", "stranded_bytes")
        data = {name: value for name, value in asdict(self).items() if name not in per_rank}
        data.update(
            allocated_total_bytes=self.allocated_total_bytes,
            stranded_total_bytes=self.stranded_total_bytes,
            min_median_ratio=self.min_median_ratio,
            weak_rank_loss_fraction=self.weak_rank_loss_fraction,
            flag=self.flag,
            ranks=[
                {"rank": r, "room_bytes": room, "safe_bytes": safe, "stranded_bytes": stranded}
                for r, room, safe, stranded in zip(
                    self.ranks, self.room_bytes, self.safe_bytes, self.stranded_bytes
                )
            ],
        )
        return data


def safe_budget_bytes(room_bytes: int, reserve_bytes: int) -> int:
    """A rank's safe KV budget: its room minus the reserve [bytes]."""
    return room_bytes - reserve_bytes


def round_down_to_blocks(num_bytes: int, block_bytes: int) -> int:
    """The largest whole number of blocks that fits in ``num_bytes``, in bytes."""
    if block_bytes <= 0:
        raise BudgetError(f"block size must be positive, got {block_bytes} bytes")
    return num_bytes // block_bytes * block_bytes


def median_bytes(values: Sequence[int]) -> int:
    """Median of byte counts as an int (the mean of the middle pair rounded down)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) // 2


def limiting_ranks(budget: Budget) -> list[int]:
    """Every rank whose safe budget is the minimum (``Budget.limiting_rank`` is the first)."""
    return [rank for rank, safe in zip(budget.ranks, budget.safe_bytes) if safe == budget.min_safe_bytes]


def uniform_budget(
    room_bytes: Sequence[int],
    reserve_bytes: int,
    block_bytes: int | None = None,
    ranks: Sequence[int] | None = None,
) -> Budget:
    """The single KV budget every rank can allocate: room [bytes, rank order] less the reserve, in whole blocks
    of ``block_bytes`` when given; ``ranks`` are the ids (default 0..n-1).

    >>> GiB = 2**30
    >>> b = uniform_budget([18 * GiB, 17 * GiB, 13 * GiB, 16 * GiB], reserve_bytes=GiB)
    >>> b.uniform_budget_bytes // GiB, b.limiting_rank, b.stranded_total_bytes // GiB
    (12, 2, 12)
    """
    rooms = [int(room) for room in room_bytes]
    rank_ids = list(range(len(rooms))) if ranks is None else [int(rank) for rank in ranks]
    if not rooms:
        raise BudgetError("no ranks: a budget needs the room of at least one rank")
    if len(rank_ids) != len(rooms):
        raise BudgetError(f"{len(rank_ids)} rank ids for {len(rooms)} room values")
    if len(set(rank_ids)) != len(rank_ids):
        raise BudgetError(f"duplicate rank ids: {rank_ids}")
    if reserve_bytes < 0:
        raise BudgetError(f"reserve must not be negative, got {format_size(reserve_bytes)}")
    safe = [safe_budget_bytes(room, reserve_bytes) for room in rooms]
    for rank, room, budget in zip(rank_ids, rooms, safe):
        if budget <= 0:
            raise BudgetError(
                f"rank {rank}: reserve {format_size(reserve_bytes)} leaves no KV budget "
                f"(room {format_size(room)}, safe budget {format_size(budget)})"
            )
    min_safe = min(safe)
    limiting_rank = rank_ids[safe.index(min_safe)]
    uniform = min_safe
    num_blocks = None
    if block_bytes is not None:
        uniform = round_down_to_blocks(min_safe, block_bytes)
        num_blocks = uniform // block_bytes
        if num_blocks == 0:
            raise BudgetError(
                f"rank {limiting_rank}: safe budget {format_size(min_safe)} is less than one "
                f"block ({format_size(block_bytes)})"
            )
    return Budget(
        ranks=tuple(rank_ids),
        room_bytes=tuple(rooms),
        reserve_bytes=reserve_bytes,
        safe_bytes=tuple(safe),
        min_safe_bytes=min_safe,
        median_safe_bytes=median_bytes(safe),
        max_safe_bytes=max(safe),
        block_bytes=block_bytes,
        num_blocks=num_blocks,
        uniform_budget_bytes=uniform,
        rounding_loss_bytes=min_safe - uniform,
        limiting_rank=limiting_rank,
        stranded_bytes=tuple(budget - uniform for budget in safe),
    )
