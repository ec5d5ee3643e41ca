"""``kvplan fleet plan`` and ``kvplan fleet gate``: budgets per host class, bundles, waves, canary verdicts
(exit codes as ``kvplan gate``)."""

from __future__ import annotations

import argparse
import sys

from kvplan.cli.common import (
    add_admission_arguments,
    admission_from_args,
    at_least_one,
    describe,
    format_table,
    fraction,
    labels,
    print_json,
    print_warnings,
    size,
)
from kvplan.cli.prometheus import add_gpu_arguments, prometheus_fleet_hosts
from kvplan.escape import terminal_text
from kvplan.units import format_size


def _add_engine_arguments(parser: argparse.ArgumentParser, default: str | None) -> None:
    scheduler = (
        f"local, synchronous or tcp://HOST:8786 (default: DASK_SCHEDULER_ADDRESS, else {default or 'local'})"
    )
    parser.add_argument("--scheduler", metavar="ADDR", default=default, help=scheduler)
    storage = "fsspec storage option for s3:// fleets (key, secret, endpoint_url, anon, ...); repeat"
    parser.add_argument("--storage-option", action="append", default=[], metavar="K=V", help=storage)


#: After the waves of a plan without --out (no class bundle gave the companion utilization).
NO_COMPANION = (
    "note     each class bundle's launch_flags add --gpu-memory-utilization: plan with --out to see it"
)

FLEET_HELP = """\
Fleets: hosts grouped by compatibility key and labels into classes, each with its uniform budget, bundle and
rollout waves.

For example:
  kvplan fleet plan data/fleet/small --reserve 1GiB --model llama-3.1-70b
"""
FLEET_PLAN_HELP = """\
Read every host's startup logs (on Dask), group hosts into classes, and give each class its uniform budget,
outliers with their likely cause, and the rollout waves (canaries first). See docs/cli.md.

For example:
  kvplan fleet plan data/fleet/small --reserve 1GiB --model llama-3.1-70b --out evidence/
"""
FLEET_GATE_HELP = """\
Each host is gated (as kvplan gate) against the bundle whose class lists it. Exit 0 all pass (go on), 1 any
failed (stop), 2 a host cannot be judged or bad input.

For example:
  kvplan fleet gate --approved evidence/2026-12-01-0123456789ab canary-fleet/ --hosts gpu-00019,gpu-00020
"""


def add_fleet(parser: argparse.ArgumentParser) -> None:
    describe(parser, FLEET_HELP)
    commands = parser.add_subparsers(dest="fleet_command", required=True, metavar="COMMAND")
    plan = commands.add_parser("plan", help="per-class budgets, outliers, split advice, bundles and waves")
    describe(plan, FLEET_PLAN_HELP)
    plan.add_argument(
        "fleet", metavar="FLEET", help="folder of host folders, or a manifest CSV host,path,labels"
    )
    plan.add_argument("--reserve", type=size, required=True, help="operating reserve per rank")
    class_by = "labels that split classes further, comma-separated (manifest columns or key fields)"
    plan.add_argument("--class-by", type=labels, default=(), metavar="LABELS", help=class_by)
    model = "model config(s): each class uses the one that serves its model; repeat"
    plan.add_argument("--model", action="append", default=[], metavar="CONFIG", help=model)
    plan.add_argument("--out", metavar="DIR", help="write one evidence bundle per approved class here")
    plan.add_argument(
        "--approver", default="kvplan fleet plan", metavar="NAME", help="who approves the bundles"
    )
    split = "advise a split when min/median of host budgets < R (default 0.95)"
    plan.add_argument("--split-below", type=fraction, metavar="R", help=split)
    min_hosts = "a class needs N clean hosts to be approved (default 3)"
    plan.add_argument("--min-hosts", type=at_least_one, metavar="N", help=min_hosts)
    plan.add_argument("--canaries", type=at_least_one, metavar="N", help="canary hosts per class (default 2)")
    add_admission_arguments(plan, at_least_one, "admission plan (with --seq-len)")
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    _add_engine_arguments(plan, None)
    add_gpu_arguments(plan, host=False)
    plan.set_defaults(run=_run_plan)
    gate = commands.add_parser(
        "gate", help="canary hosts against their class's bundle: per-host verdict and the stop decision"
    )
    describe(gate, FLEET_GATE_HELP)
    targets = "a fleet folder or manifest of canary hosts, or the log files of one host"
    gate.add_argument("targets", nargs="*", metavar="LOGS_OR_FLEET", help=targets)
    gate.add_argument("--approved", nargs="+", required=True, metavar="BUNDLE", help="the classes' bundles")
    gate.add_argument("--hosts", type=labels, default=(), metavar="H1,H2", help="gate only these hosts")
    gate.add_argument("--json", action="store_true", help='print {"passed", "decision", "hosts": [...]}')
    _add_engine_arguments(gate, "synchronous")
    gate.set_defaults(run=_run_gate)


def _run_plan(args: argparse.Namespace) -> int:
    from kvplan.fleet import FleetPolicy, list_fleet, plan_readings, read_fleet
    from kvplan.fleet.inputs import parse_storage_options
    from kvplan.fleet.planner import class_rows
    from kvplan.fleet.read import default_scheduler, stderr_progress

    tuning = {"split_below": args.split_below, "min_hosts": args.min_hosts, "canaries": args.canaries}
    policy = FleetPolicy(
        args.reserve,
        tuple(args.class_by),
        approver=args.approver,
        admission=admission_from_args(args),
        **{name: value for name, value in tuning.items() if value is not None},
    )
    storage = parse_storage_options(args.storage_option)
    hosts = list_fleet(args.fleet, storage)
    if args.prometheus or args.at:  # each host's GPUs from DCGM's series in Prometheus
        hosts = prometheus_fleet_hosts(args, hosts)
    readings = read_fleet(
        hosts,
        storage,
        default_scheduler(args.scheduler),
        stderr_progress(),
        lambda text: print(text, file=sys.stderr),
    )
    result = plan_readings(args.fleet, readings, policy, args.model, args.out, storage)
    data = result.to_dict()
    if args.json:
        return print_json(data)
    rows = [{name: terminal_text(value) for name, value in row.items()} for row in class_rows(data)]
    print(format_table(rows, ["class", "hosts", "budget", "limiting", "min/median", "stranded", "approved"]))
    for line in _plan_lines(data):
        print(terminal_text(line))
    print_warnings([terminal_text(warning) for warning in data["warnings"]])
    return 0


def _plan_lines(data: dict) -> list[str]:
    """The plan's records after its table, one line each (escaped by the caller)."""
    lines = []
    for c in data["classes"]:
        for outlier in c["outliers"]:
            lines.append(
                f"outlier  {c['class']}: {outlier['host']} {format_size(outlier['budget_bytes'])}: "
                f"{outlier['likely_cause']}"
            )
        gain = c["split"].get("gain_split_tokens")
        if gain:
            lines.append(
                f"split    {c['class']}: splitting the outliers off gains {gain:,} tokens over the class"
            )
    lines += [f"excluded {item['host']}: {item['reason']}" for item in data["excluded"]]
    for wave in data["waves"]:
        lines.append(
            f"wave {wave['wave']}  {wave['kind']:6}  {wave['class']}: {len(wave['hosts'])} host(s)  "
            f"{' '.join(wave['launch_flags'])}"
        )
        lines.append(f"         then: {wave['gate']}")
    if any(len(wave["launch_flags"]) < 2 for wave in data["waves"]):
        lines.append(NO_COMPANION)
    return lines


def _run_gate(args: argparse.Namespace) -> int:
    from kvplan.checks import verdict_word
    from kvplan.fleet.bundles import gate_fleet, stop_decision
    from kvplan.fleet.inputs import parse_storage_options
    from kvplan.fleet.read import default_scheduler

    if not args.targets and len(args.approved) > 1:  # --approved B1 B2 FLEET: the last one is the fleet
        args.targets = [args.approved.pop()]
    if not args.targets:
        raise ValueError(
            "kvplan fleet gate: give LOGS_OR_FLEET after the bundles (--approved BUNDLE... FLEET)"
        )
    storage = parse_storage_options(args.storage_option)
    verdicts = gate_fleet(args.approved, args.targets, args.hosts, default_scheduler(args.scheduler), storage)
    status, decision = stop_decision(verdicts)
    if args.json:
        print_json({"passed": status == 0, "decision": decision, "hosts": [v.to_dict() for v in verdicts]})
        return status
    for verdict in verdicts:
        state = verdict_word(verdict.passed)
        print(terminal_text(f"{verdict.host}: {state}" + (f" ({verdict.reason})" if verdict.reason else "")))
        for check in verdict.checks:
            if check["passed"] is False:
                print(terminal_text(f"  FAIL {check['name']}: {check['detail']}"))
    print(terminal_text(decision))
    return status
