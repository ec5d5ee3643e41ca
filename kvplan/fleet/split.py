"""Split advice: which hosts hold a class down, why (from the ledger), and what splitting them off buys.

A class whose weakest host's budget is below ``split_below`` × the median host's (policy, default
0.95) gets advice. Its **outliers** are the hosts whose own budget is below that bound. Each one's likely
cause compares its weakest rank's ledger with the class's medians over every rank: less memory free at
startup (other processes on the GPU, as nvidia-smi shows them when a snapshot was given), or more
non-torch, CUDA-graph, weights or activation memory. The **gain** is the tokens the class holds more if
the outliers were split into their own class (the rest at its own minimum, the outliers at theirs) or
fixed (every host at the rest's minimum).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kvplan.budget import median_bytes
from kvplan.fleet.classes import hosts_budget
from kvplan.fleet.read import HostReading
from kvplan.units import format_size

#: The default bound on min/median of per-host budgets below which a class gets split advice.
SPLIT_BELOW = 0.95
#: Ledger parts that can make a rank's room small: (column, larger is worse, what it means).
CAUSES = (
    ("init_free_bytes", False, "less memory free at startup"),
    ("non_torch_bytes", True, "more non-torch memory (NCCL and communication buffers, CUDA context)"),
    ("cuda_graph_bytes", True, "a larger CUDA-graph footprint"),
    ("weights_bytes", True, "larger weights"),
    ("activation_peak_bytes", True, "a larger activation peak"),
)


@dataclass(frozen=True)
class Outlier:
    """A host that holds its class down: its own budget [bytes] and the likely cause."""

    host: str
    budget_bytes: int
    likely_cause: str

    def to_dict(self) -> dict:
        return {"host": self.host, "budget_bytes": self.budget_bytes, "likely_cause": self.likely_cause}


def outlier_hosts(host_budgets: Mapping[str, int], split_below: float = SPLIT_BELOW) -> list[str]:
    """Hosts whose budget is below ``split_below`` × the median host budget, weakest first.

    >>> outlier_hosts({"a": 100, "b": 100, "c": 90, "d": 99}, 0.95)
    ['c']
    """
    middle = median_bytes(list(host_budgets.values()))
    weak = [host for host, budget in host_budgets.items() if budget < split_below * middle]
    return sorted(weak, key=lambda host: (host_budgets[host], host))


def likely_cause(reading: HostReading, medians: Mapping[str, int]) -> str:
    """The ledger part of the host's weakest rank furthest from the class median, in words and bytes."""
    weakest = min(reading.rooms or (), key=lambda record: (int(record["room_bytes"]), int(record["rank"])))
    worst, gap = None, 0
    for column, larger_is_worse, _ in CAUSES:
        value, middle = weakest.get(column), medians.get(column)
        if value is None or middle is None:
            continue
        difference = (value - middle) if larger_is_worse else (middle - value)
        if difference > gap:
            worst, gap = column, difference
    rank = int(weakest["rank"])
    if worst is None:
        return f"rank {rank}: no ledger part differs from the class median (the room itself is lower)"
    text = next(words for column, _, words in CAUSES if column == worst)
    cause = f"rank {rank}: {text}, {format_size(gap)} against the class median"
    other = weakest.get("other_process_bytes")
    if worst == "init_free_bytes" and other:
        cause += f"; other processes on the GPU use {format_size(int(other))} (nvidia-smi)"
    elif worst == "init_free_bytes":
        cause += " (other processes on the GPU?)"
    return cause


def part_medians(hosts: Sequence[HostReading]) -> dict[str, int]:
    """The median over every rank of the class of each ledger part in :data:`CAUSES` [bytes]."""
    medians = {}
    for column, _, _ in CAUSES:
        values = [int(r[column]) for h in hosts for r in h.rooms or () if r.get(column) is not None]
        if values:
            medians[column] = median_bytes(values)
    return medians


def split_advice(
    hosts: Sequence[HostReading],
    host_budgets: Mapping[str, int],
    reserve_bytes: int,
    block_bytes: int | None,
    tokens: Callable[[int], int] | None,
    replicas_per_host: int,
    split_below: float = SPLIT_BELOW,
) -> dict:
    """Outliers and the gain of splitting them off or fixing them (bytes, and tokens with a model).

    ``tokens(bytes)`` is the KV tokens one replica holds at a per-GPU budget (None without a model).
    """
    names = outlier_hosts(host_budgets, split_below)
    medians = part_medians(hosts)
    by_name = {reading.host: reading for reading in hosts}
    outliers = [Outlier(name, host_budgets[name], likely_cause(by_name[name], medians)) for name in names]
    advice: dict = {
        "split_below": split_below,
        "outliers": [o.to_dict() for o in outliers],
        "rest_budget_bytes": None,
        "outlier_budget_bytes": None,
        "gain_split_tokens": None,
        "gain_fixed_tokens": None,
        "gain_split_bytes": None,
    }
    rest = [reading for reading in hosts if reading.host not in set(names)]
    if not outliers or not rest:
        return advice
    old = _budget(hosts, reserve_bytes, block_bytes)
    rest_budget = _budget(rest, reserve_bytes, block_bytes)
    outlier_budget = _budget([by_name[name] for name in names], reserve_bytes, block_bytes)
    rest_ranks = sum(len(reading.rooms or ()) for reading in rest)
    advice.update(
        rest_budget_bytes=rest_budget,
        outlier_budget_bytes=outlier_budget,
        gain_split_bytes=(rest_budget - old) * rest_ranks,
    )
    if tokens is not None:
        base = tokens(old)
        advice["gain_split_tokens"] = replicas_per_host * (
            len(rest) * (tokens(rest_budget) - base) + len(names) * (tokens(outlier_budget) - base)
        )
        advice["gain_fixed_tokens"] = replicas_per_host * len(hosts) * (tokens(rest_budget) - base)
    return advice


def _budget(hosts: Sequence[HostReading], reserve_bytes: int, block_bytes: int | None) -> int:
    """The uniform budget over every rank of ``hosts`` [bytes] (no per-host budgets: not needed here)."""
    return hosts_budget(hosts, reserve_bytes, block_bytes)[0].uniform_budget_bytes
