"""``kvplan gate``: a canary boot against an approved budget (exit 0 pass, 1 fail, 2 cannot judge)."""

from __future__ import annotations

import argparse

from kvplan.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAIL,
    EXIT_OK,
    add_load_arguments,
    add_nvidia_smi_argument,
    describe,
    load_policy,
    print_json,
    print_warnings,
    reader_warnings_into,
    size,
)
from kvplan.cli.prometheus import (
    add_gate_prometheus_arguments,
    add_gpu_arguments,
    gate_prometheus_checks,
    prometheus_gpu_files,
)

GATE_HELP = """\
Check a canary boot against a verified approved bundle: same compatibility key, every rank present, no OOM or
error, safe_ref − max(0, F_ref − F_boot) − guard ≥ the approved value on every rank, and the other checks of
docs/cli.md, one line per rank per check. Exit 0 pass, 1 fail, 2 cannot judge (bad or incomplete input, or a
changed bundle).

For example:
  kvplan gate --approved evidence/2026-11-29-0123456789ab canary.log --guard 0.5GiB
"""


def add_gate(parser: argparse.ArgumentParser) -> None:
    describe(parser, GATE_HELP)
    parser.add_argument("logs", nargs="+", metavar="BOOT_LOG", help="vLLM logs of the canary boot")
    parser.add_argument("--approved", required=True, metavar="BUNDLE", help="the approved evidence bundle")
    digest = "the bundle's digest as approved (at least 12 hex digits): another bundle is not judged"
    parser.add_argument("--approved-digest", metavar="SHA256", help=digest)
    add_nvidia_smi_argument(parser, "taken after warm-up")
    plan = "the startup plan files the canary ran (default: the approved plan without drift)"
    parser.add_argument("--startup-plan", metavar="DIR", help=plan)
    parser.add_argument("--guard", type=size, help="guard per rank (default: the approval's, normally 0)")
    add_load_arguments(parser, "load-test server logs and /metrics snapshots of the canary")
    add_gate_prometheus_arguments(parser)
    add_gpu_arguments(parser, url=False, at=False)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run_gate)


def _with_startup_plan(args: argparse.Namespace, verified, approved, ledger, checks: list) -> list:
    """Issue 24: ``checks`` and, for a canary that ran vLLM's startup plan, whether it applied the approved
    one (``--startup-plan``'s files, else the approved plan without drift) on every rank; a plan runs
    B − G − D by design, so the manual-value check does not apply then."""
    import json
    from pathlib import Path

    from kvplan.checks import Check
    from kvplan.checks.canary import EVIDENCE_CHECKS, PLAN_CHECK, VALUE_CHECK, check_startup_plan
    from kvplan.io.vllm.manual import read_startup_plan_lines

    lines = {
        source: read_startup_plan_lines(source) for source in dict.fromkeys(ledger["source"].astype(str))
    }
    if not any(lines.values()):
        return checks  # the canary ran no startup plan: no such check
    ran_a_plan = Check.not_applicable(VALUE_CHECK, f"the canary ran vLLM's startup plan ({PLAN_CHECK})")
    kept = [ran_a_plan if check.name == VALUE_CHECK else check for check in checks]
    if any(c.name in EVIDENCE_CHECKS and c.passed is not True for c in checks):
        return [
            *kept,
            Check(PLAN_CHECK, None, "not judged: the canary is no evidence of the approved launch"),
        ]
    if args.startup_plan is not None:
        files = sorted(Path(args.startup_plan).glob("startup_plan_*.json"))
        plans = [json.loads(path.read_text()) for path in files]
        values: dict[str, int] = {
            str(p["fingerprint"]): p["kv_cache_memory_bytes"]
            for p in plans
            if isinstance(p, dict) and isinstance(p.get("kv_cache_memory_bytes"), int)
        }
    else:
        from kvplan.export import plans_of

        values = {plan.fingerprint: plan.kv_cache_memory_bytes for plan in plans_of(verified, approved)}
    return [*kept, check_startup_plan(approved, ledger, lines, values)]


def run_gate(args: argparse.Namespace) -> int:
    from kvplan import evidence, plan
    from kvplan.checks import format_checks, gate_verdict, key
    from kvplan.checks.gate import gate_checks
    from kvplan.io.nvidia_smi import join_snapshots
    from kvplan.ledger import compatibility_key
    from kvplan.room import read_vllm_logs_rooms

    policy = load_policy(args)
    for files, flag in [(args.logs, "BOOT_LOG"), (args.nvidia_smi, "--nvidia-smi"), (args.load, "--load")]:
        plan.require_files(files, flag)
    plan.require_files(args.metrics, "--metrics")
    verified, approved = evidence.verified_approval(args.approved, args.approved_digest)
    ledger, metadata = read_vllm_logs_rooms(args.logs)
    plan.require_boot(ledger, args.logs)
    gpus, gpu_warnings = prometheus_gpu_files(args, required=False)  # --prometheus --at: DCGM's, if any
    warnings: list[str] = [*metadata.warnings, *gpu_warnings]
    if not verified.sealed and args.approved_digest is None:  # issue 11 item 11: say what is not pinned
        warnings.append(
            f"the approved bundle has no seal (kvplan 0.1.0 or before): {verified.created_line()}; its "
            "charts are checked by hash only; give --approved-digest to judge against the approval as made"
        )
    free_after_warmup = None
    if args.nvidia_smi or gpus:
        with reader_warnings_into(warnings):
            ledger, free_after_warmup, _ = join_snapshots(ledger, [*args.nvidia_smi, *gpus])
    boot_key, defaults = compatibility_key(ledger, metadata.lines), key.read_defaulted_key_fields(metadata)
    checks = gate_checks(approved, ledger, boot_key, args.guard, free_after_warmup, boot_defaults=defaults)
    checks = _with_startup_plan(args, verified, approved, ledger, checks)
    if args.load:
        section, load_checks = plan.gate_load(approved, args.load, policy)
        checks += load_checks
        warnings += section["notes"] + section["warnings"]
    served_checks, served_warnings = gate_prometheus_checks(args, approved, policy)
    checks += served_checks
    warnings += served_warnings
    verdict = gate_verdict(checks)
    if args.json:
        print_json(
            {
                "passed": verdict is True,
                "checks": [check.to_dict() for check in checks],
                "warnings": warnings,
                "approved_digest": verified.digest,
            }
        )
    else:
        print(f"approved bundle {args.approved} (digest sha256:{verified.digest})")
        print(format_checks(checks))
    print_warnings(warnings)
    return {True: EXIT_OK, False: EXIT_FAIL, None: EXIT_BAD_INPUT}[verdict]
