"""Host classes and each class's uniform budget: the minimum over every rank of every clean host in it.

Hosts are grouped first by their whole compatibility key (a different vLLM, model, dtype, layout, GPU
type or driver is another class, never mixed), then by the labels the planner names (``class_by``,
e.g. ``("zone",)``; a label is a manifest column or a key field). A class's budget is
:func:`kvplan.budget.uniform_budget` over the rooms of all its hosts' ranks at once, so its limiting
rank names a host (through the one pipeline, :func:`kvplan.plan.decide` on the class's rooms); each host's own
budget is the same rule over that host's ranks alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kvplan.budget import Budget, BudgetError, median_bytes, uniform_budget
from kvplan.columns import KEY_COLUMNS
from kvplan.fleet.read import HostReading
from kvplan.plan import Policy, decide, given_rooms

#: Key fields that make the readable part of a class name, in order.
NAME_FIELDS = ("gpu_name", "driver_version", "vllm_version")


@dataclass(frozen=True)
class FleetClass:
    """One host class and its budget (bytes).

    ``budget`` is over every (host, rank) of the class, its ranks numbered in ``slots`` order;
    ``host_budgets`` each host's own uniform budget; ``stranded_by_host`` the bytes each host's ranks
    could hold beyond the class value.
    """

    name: str
    key: Mapping[str, object]
    labels: Mapping[str, str]
    hosts: tuple[HostReading, ...]
    slots: tuple[tuple[str, int], ...]
    budget: Budget
    host_budgets: Mapping[str, int]
    stranded_by_host: Mapping[str, int]

    @property
    def limiting_host(self) -> str:
        return self.slots[self.budget.limiting_rank][0]

    @property
    def limiting_rank(self) -> int:
        return self.slots[self.budget.limiting_rank][1]

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(reading.host for reading in self.hosts)

    def host_budget_summary(self) -> dict:
        """min, median and max of the per-host budgets, and min/median [bytes, ratio]."""
        values = list(self.host_budgets.values())
        low, middle = min(values), median_bytes(values)
        return {
            "min_bytes": low,
            "median_bytes": middle,
            "max_bytes": max(values),
            "min_median_ratio": low / middle,
        }


def host_labels(reading: HostReading) -> dict[str, str]:
    """A host's labels: its key's fields (GPU name, driver, vLLM, ...) and the manifest's columns.

    >>> reading = HostReading("h1", (), {"zone": "a"}, {"gpu_name": "H100"}, (), None)
    >>> host_labels(reading)["zone"], host_labels(reading)["gpu_name"]
    ('a', 'H100')
    """
    labels = {name: str(value) for name, value in (reading.key or {}).items() if value is not None}
    labels.update({name: str(value) for name, value in reading.labels.items()})
    return labels


def group_classes(readings: Sequence[HostReading], class_by: Sequence[str] = ()) -> list[tuple[tuple, list]]:
    """Clean hosts grouped by (compatibility key, ``class_by`` labels); classes in first-seen order."""
    groups: dict[tuple, list[HostReading]] = {}
    for reading in readings:
        if reading.excluded is not None:
            continue
        labels = host_labels(reading)
        key = tuple((name, (reading.key or {}).get(name)) for name in KEY_COLUMNS)
        chosen = tuple((name, labels.get(name)) for name in class_by)
        groups.setdefault((key, chosen), []).append(reading)
    return list(groups.items())


def class_name(key: Mapping[str, object], labels: Mapping[str, str | None]) -> str:
    """A readable class name: GPU type, driver, vLLM release and the chosen labels' values.

    >>> class_name({"gpu_name": "NVIDIA H100 80GB HBM3", "driver_version": "580.95.05",
    ...             "vllm_version": "0.26.0"}, {"zone": "us-east-1a"})
    'NVIDIA H100 80GB HBM3 / 580.95.05 / vLLM 0.26.0 / zone=us-east-1a'
    """
    parts = [
        str(key.get("gpu_name") or "unknown GPU"),
        str(key.get("driver_version") or "unknown driver"),
        f"vLLM {key.get('vllm_version') or 'unknown'}",
    ]
    parts += [f"{name}={value}" for name, value in labels.items()]
    return " / ".join(parts)


def hosts_budget(
    hosts: Sequence[HostReading], reserve_bytes: int, block_bytes: int | None
) -> tuple[Budget, tuple[tuple[str, int], ...]]:
    """``(budget over every rank of every host, slots)``: the ranks' ``(host, rank)`` in the budget's order."""
    slots, rooms = [], []
    for reading in hosts:
        for record in reading.rooms or ():
            slots.append((reading.host, int(record["rank"])))
            rooms.append(int(record["room_bytes"]))
    budget = decide(given_rooms(rooms), Policy(reserve_bytes), block_bytes=block_bytes).budget
    return budget, tuple(slots)


def class_budget(hosts: Sequence[HostReading], reserve_bytes: int, block_bytes: int | None) -> tuple:
    """``(budget over every host's ranks, slots, per-host budgets, per-host stranded)`` of one class."""
    budget, slots = hosts_budget(hosts, reserve_bytes, block_bytes)
    own, stranded = {}, {}
    for reading in hosts:
        own[reading.host] = host_budget(reading, reserve_bytes, block_bytes)
        stranded[reading.host] = 0
    for (host, _), extra in zip(slots, budget.stranded_bytes):
        stranded[host] += extra
    return budget, slots, own, stranded


def host_budget(reading: HostReading, reserve_bytes: int, block_bytes: int | None) -> int:
    """One host's own uniform budget [bytes] (:func:`kvplan.budget.uniform_budget` over its ranks)."""
    rooms = [int(record["room_bytes"]) for record in reading.rooms or ()]
    ranks = [int(record["rank"]) for record in reading.rooms or ()]
    return uniform_budget(rooms, reserve_bytes, block_bytes=block_bytes, ranks=ranks).uniform_budget_bytes


def budget_refusal(reading: HostReading, reserve_bytes: int, block_bytes: int | None) -> str | None:
    """Why ``reading`` cannot take any budget at this reserve (a rank's room ≤ reserve), else None."""
    try:
        host_budget(reading, reserve_bytes, block_bytes)
    except BudgetError as exc:
        return f"{exc} (at the fleet's reserve)"
    return None


def move_hosts(readings: Sequence[HostReading], labels: Mapping[str, Mapping[str, str]]) -> list[HostReading]:
    """The readings with extra labels on the named hosts (a what-if: move hosts into a class of their own).

    Plan with ``class_by`` naming the label: e.g. ``move_hosts(r, {"gpu-00019": {"pool": "weak"}})`` and
    ``class_by=("pool",)`` puts gpu-00019 in its own class.

    >>> moved = move_hosts([HostReading("h1", (), {}, {}, (), None)], {"h1": {"pool": "weak"}})
    >>> moved[0].labels
    {'pool': 'weak'}
    """
    return [replace(r, labels={**r.labels, **labels[r.host]}) if r.host in labels else r for r in readings]
