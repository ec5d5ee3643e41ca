"""``kvplan export FORMAT BUNDLE``: an approved launch in the form a deployment reads, from a verified bundle.

The formats are :data:`kvplan.export.formats.EXPORTERS`' (one entry each) and ``startup-plan`` (vLLM's own
per-rank startup plan files, :mod:`kvplan.export.bundle`); this module parses, calls them and writes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from kvplan.cli.common import EXIT_OK, CliError, add_command, size
from kvplan.export.formats import EXPORTERS

STARTUP_PLAN = "startup-plan"

EXPORT_HELP = """\
write an approved launch as a deployment reads it, from a verified bundle

The bundle is verified first (as kvplan verify); a changed bundle is refused (exit 2). Formats: vllm-config
(YAML for vllm serve --config), args (one flag a line), helm-production-stack (values fragment), kserve
(InferenceService args patch), ray-serve (engine_kwargs JSON), prometheus-rules (alert rules for
promtool check rules / a Prometheus rule_files entry), startup-plan (vLLM 0.33's per-rank
startup_plan_<fingerprint>.json files, --out DIR). Every output names the bundle's digest
(kvplan.io/bundle-digest). Without --out the text goes to stdout.

For example:
  kvplan export vllm-config evidence/2026-11-29-0123456789ab --out serve.yaml
  kvplan export startup-plan evidence/2026-11-29-0123456789ab --out plans/ --tolerate-drift 1GiB
"""


def add_export(sub: argparse._SubParsersAction) -> None:
    """Register ``kvplan export``."""
    parser = add_command(sub, "export", EXPORT_HELP)
    parser.add_argument(
        "format",
        choices=[*EXPORTERS, STARTUP_PLAN],
        metavar="FORMAT",
        help=", ".join([*EXPORTERS, STARTUP_PLAN]),
    )
    parser.add_argument("bundle", metavar="BUNDLE", help="an evidence bundle folder (verified first)")
    parser.add_argument(
        "--out", metavar="PATH", help="file to write (startup-plan: the folder; default stdout)"
    )
    parser.add_argument(
        "--approved-digest",
        metavar="SHA256",
        help="the bundle's digest as approved (as kvplan gate takes it)",
    )
    parser.add_argument(
        "--tolerate-drift",
        type=size,
        default=0,
        metavar="SIZE",
        help="startup-plan: free memory a rank may lose before vLLM profiles again (default 0)",
    )
    parser.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Verify the bundle, then write the format's text (or the startup plan's files)."""
    if args.format == STARTUP_PLAN:
        return _startup_plan(args)
    if args.tolerate_drift:
        raise CliError("--tolerate-drift applies to startup-plan only")
    from kvplan.export.bundle import verified_launch

    _, launch = verified_launch(args.bundle, args.approved_digest)
    text = EXPORTERS[args.format].render(launch)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_atomic(Path(args.out), text)
        print(f"{args.out}: {args.format} of bundle sha256:{launch.digest}", file=sys.stderr)
    return EXIT_OK


def _startup_plan(args: argparse.Namespace) -> int:
    from kvplan.export.bundle import startup_plans

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


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    handle, temporary = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
