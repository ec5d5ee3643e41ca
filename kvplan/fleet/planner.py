"""The fleet planner: group the hosts into classes, budget each, advise splits, bundle and plan the waves
(:func:`plan_readings` plans hosts already read; :meth:`FleetPlan.to_dict` is ``kvplan fleet plan --json``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvplan.budget import BudgetError
from kvplan.evidence import ApprovalError, read_bundle
from kvplan.fleet.bundles import approve_class
from kvplan.fleet.classes import (
    FleetClass,
    FleetPolicy,
    class_budget,
    class_name,
    group_classes,
    host_budget,
    rollout_waves,
    split_advice,
)
from kvplan.fleet.inputs import list_fleet
from kvplan.fleet.read import HostReading, read_fleet
from kvplan.io.model_config import resolve_model_config
from kvplan.kvspec import KVSpec
from kvplan.kvspec.capacity import capacity_rows
from kvplan.notes import Note, aggregate_notes
from kvplan.plan import ModelLayout, layout_spec
from kvplan.plan.inputs import admission_plan, planned_lengths
from kvplan.units import format_budget, format_size


@dataclass(frozen=True)
class ClassDecision:
    """One class's decision: budget and hosts (:class:`FleetClass`), capacity, split advice, bundle."""

    fleet_class: FleetClass
    capacity: tuple[dict, ...] | None
    split: dict
    approved: bool
    reason: str | None = None
    bundle: str | None = None
    #: the class bundle's ``launch_flags`` (the value and its companion utilization); () before one is written
    launch_flags: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """The class's entry of ``kvplan fleet plan --json`` (bytes as int)."""
        c = self.fleet_class
        return {
            "class": c.name,
            "key": dict(c.key),
            "labels": dict(c.labels),
            "hosts": [r.host for r in c.hosts],
            "clean_hosts": len(c.hosts),
            "uniform_budget_bytes": c.budget.uniform_budget_bytes,
            "flag": c.budget.flag if self.approved else None,
            "launch_flags": (list(self.launch_flags) or [c.budget.flag]) if self.approved else None,
            "limiting_host": c.limiting_host,
            "limiting_rank": c.limiting_rank,
            "stranded_total_bytes": c.budget.stranded_total_bytes,
            "stranded_by_host": dict(c.stranded_by_host),
            "host_budgets": dict(c.host_budgets),
            **c.host_budget_summary(),
            "block_bytes": c.budget.block_bytes,
            "capacity": list(self.capacity) if self.capacity else None,
            "outliers": self.split["outliers"],
            "split": self.split,
            "approved": self.approved,
            "not_approved_reason": self.reason,
            "bundle": self.bundle,
        }


@dataclass(frozen=True)
class FleetPlan:
    """Everything ``kvplan fleet plan`` decides for a fleet."""

    fleet: str
    classes: tuple[ClassDecision, ...]
    excluded: tuple[tuple[str, str], ...]
    waves: tuple[dict, ...]
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        """The JSON of ``kvplan fleet plan --json``."""
        notes = aggregate_notes(self.warnings)
        return {
            "fleet": self.fleet,
            "classes": [decision.to_dict() for decision in self.classes],
            "excluded": [{"host": host, "reason": reason} for host, reason in self.excluded],
            "waves": list(self.waves),
            "warnings": [str(note) for note in notes],
            "warning_details": [Note(note).to_dict() for note in notes],
        }


def plan_fleet(
    fleet: str,
    policy: FleetPolicy,
    models: Sequence[str] = (),
    scheduler: str = "local",
    storage_options: Mapping[str, object] | None = None,
    out: str | Path | None = None,
) -> FleetPlan:
    """Read the fleet at ``fleet`` on ``scheduler``, then :func:`plan_readings`."""
    readings = read_fleet(list_fleet(fleet, storage_options), storage_options, scheduler)
    return plan_readings(fleet, readings, policy, models, out, storage_options)


def plan_readings(
    fleet: str,
    readings: Sequence[HostReading],
    policy: FleetPolicy,
    models: Sequence[str] = (),
    out: str | Path | None = None,
    storage_options: Mapping[str, object] | None = None,
) -> FleetPlan:
    """Plan the fleet ``fleet`` from its hosts' ``readings``; with ``out``, each approved class's bundle."""
    warnings: list[str] = [note for reading in readings for note in reading.warnings]
    shared = shared_evidence(readings)
    excluded = [(r.host, r.excluded or shared[r.host]) for r in readings if r.excluded or r.host in shared]
    usable = [r for r in readings if r.excluded is None and r.host not in shared]
    decisions = _class_decisions(usable, policy, models, excluded, warnings)
    decisions.sort(key=lambda d: (-len(d.fleet_class.hosts), d.fleet_class.name))
    if out is not None:
        decisions = [_with_bundle(d, Path(out), policy, storage_options, warnings) for d in decisions]
    waves = rollout_waves([d.to_dict() for d in decisions if d.approved], policy.canaries)
    return FleetPlan(fleet, tuple(decisions), tuple(sorted(excluded)), tuple(waves), tuple(warnings))


def _class_decisions(
    usable: Sequence[HostReading],
    policy: FleetPolicy,
    models: Sequence[str],
    excluded: list[tuple[str, str]],
    warnings: list[str],
) -> list[ClassDecision]:
    decisions = []
    for (key_fields, labels), hosts in group_classes(usable, policy.class_by):
        key = dict(key_fields)
        name = class_name(key, dict(labels))
        spec, model, refusals = None, None, []
        for candidate in models:  # the first config that fits the class's key
            config = resolve_model_config(candidate)
            try:
                spec, model = layout_spec(ModelLayout(config, {}), key), str(config)
                break
            except ValueError as exc:
                refusals.append(f"{candidate}: {exc}")
        if spec is None and len(refusals) > 1:
            warnings.append(Note(f"class {name}: " + "; ".join(refusals), code="fleet-model-refused"))
        if spec is None and models:
            text = f"matches its model {key.get('model')!r}: no block rounding and no capacity"
            warnings.append(Note(f"class {name}: no --model config {text}", code="fleet-no-model"))
        if key.get("gpu_name") is None:
            text = "no nvidia-smi snapshot: its key, and its bundle's, has no GPU type or driver, so a gate cannot"
            text += " compare them; add each host's --query-gpu snapshot"
            warnings.append(Note(f"class {name}: {text}", code="fleet-no-nvidia-smi"))
        block_bytes = spec.block_bytes if spec is not None else None
        kept = []
        for reading in hosts:  # a host without room for one KV block at the reserve is excluded
            try:
                host_budget(reading, policy.reserve_bytes, block_bytes)
                kept.append(reading)
            except BudgetError as exc:
                excluded.append((reading.host, f"{exc} (at the fleet's reserve)"))
        if kept:
            labelled = {k: str(v) for k, v in labels}
            fleet_class = class_budget(name, key, labelled, kept, policy.reserve_bytes, block_bytes)
            decisions.append(_decide(fleet_class, policy, spec, model, warnings))
    return decisions


def shared_evidence(readings: Sequence[HostReading]) -> dict[str, str]:
    """The hosts whose boot or GPU another host also claims, each with the reason naming the others."""
    holders: dict[str, list[str]] = {}
    for reading in readings:
        for identity in reading.identities:
            holders.setdefault(identity, []).append(reading.host)
    reasons: dict[str, str] = {}
    for identity, hosts in holders.items():
        if len(hosts) < 2:
            continue
        kind, value = identity.split(":", 1)
        what = f"the same boot (sha256 {value[:16]})" if kind == "boot" else f"the same GPU ({value})"
        for host in hosts:
            others = ", ".join(h for h in hosts if h != host)
            why = f"{what} is also under host(s) {others}: a {kind} is the evidence of one host"
            reasons.setdefault(host, why)
    return reasons


def _decide(
    fleet_class: FleetClass, policy: FleetPolicy, spec: KVSpec | None, model: str | None, warnings: list[str]
) -> ClassDecision:
    """One class's capacity, split advice and approval (the policy's minimum hosts, the admission plan)."""
    name, key, budget = fleet_class.name, fleet_class.key, fleet_class.budget
    capacity, tokens = None, None
    max_len = int(key["max_model_len"]) if key.get("max_model_len") else None
    if spec is not None:
        lengths = planned_lengths(max_len, policy.admission)
        capacity = capacity_rows(spec, budget.uniform_budget_bytes, lengths)
        if max_len:

            def tokens(num_bytes: int) -> int:
                return spec.capacity(num_bytes, max_len).tokens

    replicas = int(key.get("data_parallel_size") or 1)
    split = split_advice(fleet_class, policy, spec.block_bytes if spec else None, tokens, replicas)
    split["model"] = model
    reason, clean = None, len(fleet_class.hosts)
    if clean < policy.min_hosts:
        reason = f"{clean} clean host(s), fewer than the policy's minimum of {policy.min_hosts}: too few "
        reason += "boots to trust a class value; profile more hosts of this class or join them to another"
        warnings.append(Note(f"class {name}: not approved: {reason}", code="fleet-too-few-hosts"))
    if reason is None and spec is not None and policy.admission is not None:
        planned = admission_plan(policy.admission, dict(key), spec, budget)
        if planned["fits"] is False:  # as the class's bundle would refuse it, in a dry run too
            reason = f"the admission plan does not fit: {planned['detail']}"
            warnings.append(Note(f"class {name}: not approved: {reason}", code="fleet-plan-does-not-fit"))
    if split["outliers"]:
        ratio = fleet_class.host_budget_summary()["min_median_ratio"]
        text = f"{len(split['outliers'])} host(s) hold it down; see the split advice"
        text = f"class {name}: min/median of host budgets {ratio:.3f} < {policy.split_below}: {text}"
        warnings.append(Note(text, code="fleet-split-advice"))
    return ClassDecision(fleet_class, capacity, split, approved=reason is None, reason=reason)


def _with_bundle(
    decision: ClassDecision,
    out: Path,
    policy: FleetPolicy,
    storage_options: Mapping[str, object] | None,
    warnings: list[str],
) -> ClassDecision:
    """The decision with its class's bundle written under ``out``; a refused approval un-approves it."""
    if not decision.approved:
        return decision
    c = decision.fleet_class
    try:
        bundle = approve_class(c, out, policy, decision.split.get("model"), storage_options)
    except (ApprovalError, ValueError) as exc:
        warnings.append(Note(f"class {c.name}: not approved: {exc}", code="fleet-approval-refused"))
        return replace(decision, approved=False, reason=str(exc))
    recorded = read_bundle(bundle)["decision"]
    if c.budget.uniform_budget_bytes != int(recorded["kv_cache_memory_bytes"]):
        value = format_size(c.budget.uniform_budget_bytes)
        why = f"the bundle approves another value than the class's {value}: refusing a plan that disagrees"
        raise ApprovalError(f"{bundle}: {why}")
    return replace(decision, bundle=str(bundle), launch_flags=tuple(recorded["launch_flags"]))


def class_rows(plan: Mapping) -> list[dict]:
    """One readable row per class of a plan's dict: hosts, value, limiting host and rank, min/median."""
    return [
        {
            "class": c["class"],
            "hosts": c["clean_hosts"],
            "budget": format_budget(c["uniform_budget_bytes"]),  # never above the flag (issue 27)
            "limiting": f"{c['limiting_host']} rank {c['limiting_rank']}",
            "min/median": f"{c['min_median_ratio']:.3f}",
            "stranded": format_size(c["stranded_total_bytes"]),
            "approved": "yes" if c["approved"] else "NO",
        }
        for c in plan["classes"]
    ]
