"""Host classes (hosts grouped by compatibility key, then ``class_by`` labels): each class's uniform budget over
all its hosts' ranks, split advice for the hosts that hold it down, and the rollout waves (canaries first)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from kvplan.budget import Budget, median_bytes, uniform_budget
from kvplan.columns import KEY_COLUMNS
from kvplan.fleet.read import HostReading
from kvplan.plan import AdmissionPlan
from kvplan.units import format_size

#: Defaults: split advice below this min/median of host budgets, clean hosts to approve, canaries per class.
SPLIT_BELOW, MIN_HOSTS, CANARIES = 0.95, 3, 2
#: What the printed gate command names for the canaries' logs: the wave's boots at the class value.
CANARY_FLEET = "CANARY_FLEET"
#: Ledger parts that can make a rank's room small: (column, larger is worse, what it means).
CAUSES = (
    ("init_free_bytes", False, "less memory free at startup"),
    ("non_torch_bytes", True, "more non-torch memory (NCCL and communication buffers, CUDA context)"),
    ("cuda_graph_bytes", True, "a larger CUDA-graph footprint"),
    ("weights_bytes", True, "larger weights"),
    ("activation_peak_bytes", True, "a larger activation peak"),
)


@dataclass(frozen=True)
class FleetPolicy:
    """The planner's policy: reserve per rank [bytes], class labels, split bound, hosts, canaries, plan, approver."""

    reserve_bytes: int
    class_by: tuple[str, ...] = ()
    split_below: float = SPLIT_BELOW
    min_hosts: int = MIN_HOSTS
    canaries: int = CANARIES
    admission: AdmissionPlan | None = None
    approver: str = "kvplan fleet plan"


@dataclass(frozen=True)
class FleetClass:
    """One host class: its budget over every rank of its hosts [bytes], limiting (host, rank), hosts' own budgets."""

    name: str
    key: Mapping[str, object]
    labels: Mapping[str, str]
    hosts: tuple[HostReading, ...]
    budget: Budget
    limiting_host: str
    limiting_rank: int
    host_budgets: Mapping[str, int]
    stranded_by_host: Mapping[str, int]

    def host_budget_summary(self) -> dict:
        """min, median and max of the per-host budgets, and min/median [bytes, ratio] (``--json`` keys)."""
        values = list(self.host_budgets.values())
        low, middle = min(values), median_bytes(values)
        summary = {"host_budget_min_bytes": low, "host_budget_median_bytes": middle}
        return {**summary, "host_budget_max_bytes": max(values), "min_median_ratio": low / middle}


def group_classes(readings: Sequence[HostReading], class_by: Sequence[str] = ()) -> list[tuple[tuple, list]]:
    """Clean hosts grouped by (compatibility key, ``class_by`` labels of its key and manifest), first seen first."""
    groups: dict[tuple, list[HostReading]] = {}
    for reading in readings:
        if reading.excluded is not None:
            continue
        found = [*(reading.key or {}).items(), *reading.labels.items()]  # a manifest label over a key field
        labels = {name: str(value) for name, value in found if value is not None}
        key = tuple((name, (reading.key or {}).get(name)) for name in KEY_COLUMNS)
        chosen = tuple((name, labels.get(name)) for name in class_by)
        groups.setdefault((key, chosen), []).append(reading)
    return list(groups.items())


def class_name(key: Mapping[str, object], labels: Mapping[str, str | None]) -> str:
    """A readable class name: GPU type, driver, vLLM release and the chosen labels' values."""
    parts = [str(key.get("gpu_name") or "unknown GPU"), str(key.get("driver_version") or "unknown driver")]
    parts += [f"vLLM {key.get('vllm_version') or 'unknown'}", *(f"{k}={v}" for k, v in labels.items())]
    return " / ".join(parts)


def hosts_budget(
    hosts: Sequence[HostReading], reserve_bytes: int, block_bytes: int | None
) -> tuple[Budget, list[tuple[str, int]]]:
    """``(budget over every rank of every host, slots)``: the ranks' ``(host, rank)`` in the budget's order."""
    slots = [(reading.host, int(record["rank"])) for reading in hosts for record in reading.rooms or ()]
    rooms = [int(record["room_bytes"]) for reading in hosts for record in reading.rooms or ()]
    return uniform_budget(rooms, reserve_bytes, block_bytes=block_bytes), slots


def class_budget(
    name: str,
    key: Mapping[str, object],
    labels: Mapping[str, str],
    hosts: Sequence[HostReading],
    reserve_bytes: int,
    block_bytes: int | None,
) -> FleetClass:
    """The class of ``hosts``: its budget over every host's ranks, each host's own and its stranded bytes."""
    budget, slots = hosts_budget(hosts, reserve_bytes, block_bytes)
    own = {reading.host: host_budget(reading, reserve_bytes, block_bytes) for reading in hosts}
    stranded = dict.fromkeys(own, 0)
    for (host, _), extra in zip(slots, budget.stranded_bytes):
        stranded[host] += extra
    limiting = slots[budget.limiting_rank]
    return FleetClass(name, key, labels, tuple(hosts), budget, *limiting, own, stranded)


def host_budget(reading: HostReading, reserve_bytes: int, block_bytes: int | None) -> int:
    """One host's own uniform budget [bytes] (:func:`kvplan.budget.uniform_budget` over its ranks)."""
    rooms = [int(record["room_bytes"]) for record in reading.rooms or ()]
    ranks = [int(record["rank"]) for record in reading.rooms or ()]
    return uniform_budget(rooms, reserve_bytes, block_bytes=block_bytes, ranks=ranks).uniform_budget_bytes


def move_hosts(readings: Sequence[HostReading], labels: Mapping[str, Mapping[str, str]]) -> list[HostReading]:
    """The readings with extra labels on the named hosts (a what-if: with ``class_by`` the label, a class)."""
    return [replace(r, labels={**r.labels, **labels[r.host]}) if r.host in labels else r for r in readings]


def outlier_hosts(host_budgets: Mapping[str, int], split_below: float = SPLIT_BELOW) -> list[str]:
    """Hosts whose budget is below ``split_below`` × the median host budget, weakest first."""
    middle = median_bytes(list(host_budgets.values()))
    weak = [host for host, budget in host_budgets.items() if budget < split_below * middle]
    return sorted(weak, key=lambda host: (host_budgets[host], host))


def likely_cause(reading: HostReading, medians: Mapping[str, int]) -> str:
    """The ledger part of the host's weakest rank furthest from the class median, in words and bytes."""
    weakest = min(reading.rooms or (), key=lambda record: (int(record["room_bytes"]), int(record["rank"])))
    worst, gap, text = None, 0, ""
    for column, larger_is_worse, words in CAUSES:
        value, middle = weakest.get(column), medians.get(column)
        if value is None or middle is None:
            continue
        difference = (value - middle) if larger_is_worse else (middle - value)
        if difference > gap:
            worst, gap, text = column, difference, words
    rank = int(weakest["rank"])
    if worst is None:
        return f"rank {rank}: no ledger part differs from the class median (the room itself is lower)"
    cause = f"rank {rank}: {text}, {format_size(gap)} against the class median"
    other = weakest.get("other_process_bytes")
    if worst == "init_free_bytes" and other:
        cause += f"; other processes on the GPU use {format_size(int(other))} (nvidia-smi)"
    elif worst == "init_free_bytes":
        cause += " (other processes on the GPU?)"
    return cause


def split_advice(
    fleet_class: FleetClass,
    policy: FleetPolicy,
    block_bytes: int | None,
    tokens: Callable[[int], int] | None,
    replicas_per_host: int,
) -> dict:
    """Outliers and the gain of splitting them off or fixing them, in bytes and, with ``tokens(bytes)``, tokens."""
    hosts, split_below, budgets = fleet_class.hosts, policy.split_below, fleet_class.host_budgets
    names, medians = outlier_hosts(budgets, split_below), {}
    for column, _, _ in CAUSES:  # each ledger part's median over every rank of the class
        values = [int(r[column]) for h in hosts for r in h.rooms or () if r.get(column) is not None]
        if values:
            medians[column] = median_bytes(values)
    by_name = {reading.host: reading for reading in hosts}
    outliers = [
        dict(host=n, budget_bytes=budgets[n], likely_cause=likely_cause(by_name[n], medians)) for n in names
    ]
    advice: dict = {"split_below": split_below, "outliers": outliers, "rest_budget_bytes": None}
    advice.update(outlier_budget_bytes=None, gain_split_tokens=None, gain_fixed_tokens=None)
    advice["gain_split_bytes"] = None
    rest = [reading for reading in hosts if reading.host not in set(names)]
    if not outliers or not rest:
        return advice

    def budget(group: Sequence[HostReading]) -> int:
        return hosts_budget(group, policy.reserve_bytes, block_bytes)[0].uniform_budget_bytes

    old, rest_budget, outlier_budget = budget(hosts), budget(rest), budget([by_name[name] for name in names])
    rest_ranks = sum(len(reading.rooms or ()) for reading in rest)
    advice.update(rest_budget_bytes=rest_budget, outlier_budget_bytes=outlier_budget)
    advice["gain_split_bytes"] = (rest_budget - old) * rest_ranks
    if tokens is not None:
        base = tokens(old)
        split = len(rest) * (tokens(rest_budget) - base) + len(names) * (tokens(outlier_budget) - base)
        advice["gain_split_tokens"] = replicas_per_host * split
        advice["gain_fixed_tokens"] = replicas_per_host * len(hosts) * (tokens(rest_budget) - base)
    return advice


def canary_hosts(host_budgets: Mapping[str, int], limiting_host: str, canaries: int = CANARIES) -> list[str]:
    """The limiting host, then the hosts nearest the median budget, ``canaries`` in all."""
    ordered = sorted(host_budgets, key=lambda host: (host_budgets[host], host))
    middle = host_budgets[ordered[len(ordered) // 2]]
    rest = sorted(set(ordered) - {limiting_host}, key=lambda h: (abs(host_budgets[h] - middle), h))
    return [limiting_host, *rest][: max(1, canaries)]


def gate_command(bundle: str | None, hosts: Sequence[str]) -> str:
    """The ``kvplan fleet gate`` command for ``hosts`` against ``bundle`` on :data:`CANARY_FLEET`, shell-quoted."""
    approved, listed = shlex.quote(bundle or "BUNDLE"), shlex.quote(",".join(hosts))
    return f"kvplan fleet gate --approved {approved} {CANARY_FLEET} --hosts {listed}"


def rollout_waves(classes: Sequence[Mapping], canaries: int = CANARIES) -> list[dict]:
    """Waves for approved ``classes`` (``--json`` dicts): all canaries first, then the rest, smallest class first."""
    ordered = sorted(classes, key=lambda item: (len(item["host_budgets"]), item["class"]))
    chosen = [canary_hosts(item["host_budgets"], item["limiting_host"], canaries) for item in ordered]
    rests = [[h for h in item["host_budgets"] if h not in canary] for item, canary in zip(ordered, chosen)]
    waves = [(item, "canary", hosts) for item, hosts in zip(ordered, chosen)]
    waves += [(item, "class", rest) for item, rest in zip(ordered, rests) if rest]
    return [
        {
            "wave": number,
            "kind": kind,
            "class": item["class"],
            "hosts": hosts,
            "flag": item["flag"],
            "launch_flags": item["launch_flags"],
            "gate": gate_command(item["bundle"], hosts),
            "stop_when": "any rank's adjusted budget is below the class value (free-memory floor) or the "
            "tokens fall below the admission plan: the gate exits 1",
        }
        for number, (item, kind, hosts) in enumerate(waves, start=1)
    ]
