"""The bundle's commands: ``kvplan approve`` (write one), ``kvplan verify`` (re-check one) and
``kvplan export`` (its launch as a deployment reads it)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from kvplan.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    MODEL_ONLY_OPTIONS,
    CliError,
    add_admission_arguments,
    add_load_arguments,
    add_model_arguments,
    add_nvidia_smi_argument,
    admission_from_args,
    describe,
    layout_options,
    load_policy,
    positive_int,
    print_json,
    print_warnings,
    reader_warnings_into,
    refuse_layout_without_model,
    size,
)
from kvplan.cli.prometheus import (
    add_gpu_arguments,
    add_prometheus_arguments,
    prometheus_gpu_files,
    prometheus_load_files,
)
from kvplan.escape import terminal_text
from kvplan.units import format_budget

APPROVE_HELP = """\
Write the uniform budget of a profiled boot's logs, with its evidence, to a new folder OUT/<date>-<hash>.
Every check must pass (exit 1 if one fails); one that cannot be judged refuses the approval (exit 2) unless
--allow-unjudged names it. See docs/cli.md.

For example:
  kvplan approve data/boots/four-rank/boot.log --reserve 0.9GiB --model llama-3.1-70b --tp 4 --target-concurrency 4 --seq-len 32768 --approver 'Ana Planner' --out evidence/
"""


def add_approve(parser: argparse.ArgumentParser) -> None:
    describe(parser, APPROVE_HELP)
    parser.add_argument("logs", nargs="+", metavar="LOG", help="vLLM logs of the profiled boot(s)")
    add_nvidia_smi_argument(
        parser, "of the profiled boot: joins GPU type, driver and other processes' memory"
    )
    parser.add_argument("--reserve", type=size, required=True, help="operating reserve per rank")
    parser.add_argument("--guard", type=size, default=0, help="guard a canary gate subtracts (default 0)")
    parser.add_argument("--assume-uniform", action="store_true", help="rank 0's room for ranks not shown")
    add_admission_arguments(parser, positive_int, "admission plan: C full sequences at once (with --model)")
    parser.add_argument("--approver", required=True, metavar="NAME", help="who approves")
    parser.add_argument("--note", default="", metavar="TEXT", help="e.g. the change ticket")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder the bundle folder is created in")
    unjudged = "accept the check NAME although it cannot be judged (repeatable; recorded)"
    parser.add_argument("--allow-unjudged", action="append", default=[], metavar="NAME", help=unjudged)
    add_load_arguments(parser, "server logs and /metrics snapshots of a load test at the approved value")
    add_prometheus_arguments(parser, "a load test's (at the approved value)")
    add_gpu_arguments(parser, url=False)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_arguments(parser)
    parser.set_defaults(run=run_approve)


def run_approve(args: argparse.Namespace) -> int:
    """Write the bundle of the logs' decision; print the approved value and where the bundle is."""
    from kvplan import evidence

    try:
        bundle, written = evidence.approve_bundle(_request(args))
    except evidence.CheckFailedError as failed:  # issue 24: a failed check is a verdict (exit 1)
        from kvplan.checks import format_check

        checks: tuple = failed.checks  # each a kvplan.checks.Check
        for check in checks:
            print(format_check(check))
        print(f"error: {terminal_text(failed)}", file=sys.stderr)
        return EXIT_FAIL
    # the record as budget.json reads back, without its ledger rows (not shown here: most of its bytes)
    record = json.loads(json.dumps({key: value for key, value in written.items() if key != "ledger"}))
    own_gate = _own_gate(written)
    del written
    warnings = _approve_warnings(args, record) + own_gate
    if args.json:
        return print_json(
            {
                "bundle": str(bundle),
                "decision": record["decision"],
                "load": record.get("load"),
                "checks": record["checks"],
                "warnings": warnings,
            }
        )
    decision = record["decision"]
    print(
        f"approved     {format_budget(decision['kv_cache_memory_bytes'])} per GPU (limiting rank {decision['limiting_rank']})"
    )
    print(f"flag         {decision['flag']}")
    print(f"launch       {' '.join(decision['launch_flags'])}")
    if "load" in record:
        load = record["load"]
        peak = load["peak_kv_cache_usage_pct"]
        print(
            f"under load   peak KV cache usage {'unknown' if peak is None else f'{peak:.1f}%'}, "
            f"{'unknown' if load['preemptions'] is None else load['preemptions']} preemption(s), "
            f"{load['oom_events']} OOM"
        )
    print(f"bundle       {terminal_text(bundle)}")
    print(f"digest       sha256:{evidence.sha256_file(bundle / evidence.BUDGET_JSON)}")
    print(f"verify with  kvplan verify {terminal_text(bundle)}")
    print_warnings(warnings)
    return EXIT_OK


def _request(args: argparse.Namespace):
    from kvplan import evidence, plan
    from kvplan.io.model_config import resolve_model_config

    admission = admission_from_args(args)
    if args.seq_len is not None and not args.model:
        raise CliError(
            "an admission plan needs --model: without the model config its bytes are unknown, so it cannot "
            "be checked against the approved value and nothing would stop a plan that does not fit"
        )
    layout = None
    if not args.model:
        refuse_layout_without_model(args, (*MODEL_ONLY_OPTIONS, "block_size"))
    else:
        layout = plan.ModelLayout(resolve_model_config(args.model), layout_options(args))
    args.nvidia_smi = [*args.nvidia_smi, *prometheus_gpu_files(args)[0]]  # --prometheus --at: DCGM's
    return evidence.Request(
        args.logs,
        args.out,
        plan.Policy(args.reserve, args.guard, args.assume_uniform),
        args.approver,
        args.note,
        layout,
        admission,
        load_paths=[*args.load, *prometheus_load_files(args)],  # --prometheus: its samples saved
        load_policy=load_policy(args),
        nvidia_smi_paths=args.nvidia_smi,
        allow_unjudged=args.allow_unjudged,
    )


def _approve_warnings(args: argparse.Namespace, record: dict) -> list[str]:
    from kvplan import evidence

    warnings = [evidence.user_paths(record, warning) for warning in record["warnings"]]
    if not args.model:
        warnings.append(
            "no --model: the value is not rounded to whole KV blocks and the bundle has no "
            "capacity table (tokens, concurrency); give --model CONFIG to add both"
        )
    if not args.nvidia_smi:
        warnings.append(
            "no --nvidia-smi: the recorded key has no GPU type or driver, so a gate cannot "
            "compare them; give the profiled boot's --query-gpu (and --query-compute-apps) "
            "snapshots"
        )
    return warnings


def _own_gate(record: dict) -> list[str]:
    """Issue 24: the warning when the approval's ``--guard`` fails the approved boots at the gate."""
    import pandas as pd

    from kvplan.checks.gate import check_own_gate
    from kvplan.evidence import approved_from_record

    refusal = check_own_gate(approved_from_record(record), pd.DataFrame(record["ledger"]))
    return [] if refusal is None else [refusal.detail]


VERIFY_HELP = """\
Re-check an evidence bundle: every file's SHA-256, the inputs digest, and the decision, SUMMARY.md,
ledger.csv and evidence.log recomputed from the input copies. Exit 0 when all agree, 1 with the differences
listed, 2 when the bundle cannot be read. The folder name is a label: a copied or renamed bundle folder
verifies (exit 0) when its contents agree, and a second approver (or a different note) approving the same
inputs on the same day gets a folder of its own.

For example:
  kvplan verify evidence/2026-11-29-0123456789ab
"""


def add_verify(parser: argparse.ArgumentParser) -> None:
    describe(parser, VERIFY_HELP)
    parser.add_argument("bundle", metavar="BUNDLE", help="an evidence bundle folder")
    parser.add_argument("more_bundles", nargs="*", help=argparse.SUPPRESS)  # refused by run_verify
    parser.add_argument("--json", action="store_true", help='print {"bundle", "ok", "differences", "notes"}')
    parser.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    from kvplan import evidence

    if args.more_bundles:  # `kvplan verify evidence/*/` (issue 25): not "unrecognized arguments"
        given = [args.bundle, *args.more_bundles]
        raise CliError(
            f"verify takes one bundle, {len(given)} were given ({', '.join(map(terminal_text, given))}): "
            "run kvplan verify once per bundle"
        )
    recomputed_warnings: list[str] = []  # the bundle records them; verify compares, never reprints them
    with reader_warnings_into(recomputed_warnings):
        verified = evidence.verify(args.bundle)
    differences, notes = list(verified.differences), list(verified.notes)
    if args.json:
        print_json(
            {
                "bundle": args.bundle,
                "ok": not differences,
                "differences": differences,
                "notes": notes,
                "digest": verified.digest,
                "created_utc": verified.record.get("created_utc"),
                "created_utc_verified": verified.sealed and not differences,
            }
        )
        return EXIT_FAIL if differences else EXIT_OK
    shown = terminal_text(args.bundle)
    if differences:
        print(
            f"{shown}: {verified.verdict}, {len(differences)} difference{'s' if len(differences) > 1 else ''}:"
        )
        for difference in differences:
            print(f"  - {terminal_text(difference)}")
    else:
        print(f"{shown}: {verified.verdict}, every hash and the recomputed decision agree")
    for note in notes:
        print(f"  note: {terminal_text(note)}")
    print(f"  {verified.created_line()}")
    print(
        f"  digest: sha256:{verified.digest} (SHA-256 of budget.json; pin it with kvplan gate "
        "--approved-digest)"
    )
    return EXIT_FAIL if differences else EXIT_OK


STARTUP_PLAN = "startup-plan"

EXPORT_HELP = """\
The approved launch in a deployment's format, each output naming the bundle's digest. The bundle is verified
first (a changed bundle: exit 2). Without --out the text goes to stdout. See docs/cli.md for each format.

For example:
  kvplan export vllm-config evidence/2026-11-29-0123456789ab --out serve.yaml
  kvplan export startup-plan evidence/2026-11-29-0123456789ab --out plans/ --tolerate-drift 1GiB
"""


def add_export(parser: argparse.ArgumentParser) -> None:
    from kvplan.export import EXPORTERS

    describe(parser, EXPORT_HELP)
    formats = [*EXPORTERS, STARTUP_PLAN]
    parser.add_argument("format", choices=formats, metavar="FORMAT", help=", ".join(formats))
    parser.add_argument("bundle", metavar="BUNDLE", help="an evidence bundle folder (verified first)")
    parser.add_argument(
        "--out", metavar="PATH", help="file to write (startup-plan: the folder; default stdout)"
    )
    parser.add_argument("--approved-digest", metavar="SHA256", help="the bundle's digest as approved")
    drift = "startup-plan: free memory a rank may lose before vLLM profiles again (default 0)"
    parser.add_argument("--tolerate-drift", type=size, default=0, metavar="SIZE", help=drift)
    parser.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    from kvplan.export import EXPORTERS, startup_plans, verified_launch

    if args.format == STARTUP_PLAN:
        if args.out is None:
            raise CliError("startup-plan needs --out DIR (one file per rank)")
        if args.tolerate_drift < 0:
            raise CliError("--tolerate-drift must not be negative")
        plans = startup_plans(args.bundle, args.tolerate_drift, args.approved_digest)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for plan in plans:
            write_atomic(out / plan.file_name, plan.text)
            print(
                f"rank {plan.rank}: {out / plan.file_name}: kv_cache_memory_bytes={plan.kv_cache_memory_bytes}, "
                f"free_memory_baseline={plan.free_memory_baseline}"
            )
        return EXIT_OK
    if args.tolerate_drift:
        raise CliError("--tolerate-drift applies to startup-plan only")
    _, launch = verified_launch(args.bundle, args.approved_digest)
    text = EXPORTERS[args.format](launch)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_atomic(Path(args.out), text)
        print(f"{args.out}: {args.format} of bundle sha256:{launch.digest}", file=sys.stderr)
    return EXIT_OK


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename; errors name ``path``."""
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise CliError(
            f"{path}: cannot write ({error.strerror}): expected a file name in an existing, writable folder"
        ) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise CliError(f"{path}: cannot write ({error.strerror}): expected a file name") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
