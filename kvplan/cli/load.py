"""``kvplan load``: KV cache usage, requests, preemptions and OOMs under load, from logs and /metrics."""

from __future__ import annotations

import argparse
import sys

from kvplan.cli.common import EXIT_OK, CliError, describe, format_table, positive_int, print_warnings
from kvplan.cli.prometheus import add_prometheus_arguments, prometheus_load

LOAD_HELP = """\
One row per vLLM stats line, per /metrics scrape and engine, and per event (preemption warning, OOM, error),
in file order; unknown values are null. Give the files of one run: server logs and saved /metrics snapshots
alike, or the run's series in Prometheus (--prometheus URL --start TIME --end TIME): the same rows and
warnings as the same samples in /metrics files.

For example:
  kvplan load data/load/manual-canary-overload/server.log --year 2026 --json
  kvplan load --prometheus http://prometheus:9090 --start 2026-11-27T11:03:00Z --end 2026-11-27T11:17:00Z --match '{job="vllm"}'
"""


def add_load(parser: argparse.ArgumentParser) -> None:
    """Register ``kvplan load``."""
    describe(parser, LOAD_HELP)
    parser.add_argument(
        "files", nargs="*", metavar="FILE", help="server logs and /metrics snapshots of one run"
    )
    parser.add_argument("--year", type=positive_int, help="year of vLLM's yearless MM-DD timestamps")
    parser.add_argument(
        "--log-utc-offset",
        type=float,
        metavar="HOURS",
        dest="log_utc_offset",
        help="the server's offset from UTC in hours (e.g. -7 for PDT): log times (local) become UTC, "
        "like /metrics times; without it, logs and /metrics are compared as if the server ran on UTC",
    )
    add_prometheus_arguments(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help='print {"rows": [...], "warnings": [...]}')
    output.add_argument("--csv", action="store_true", help="print the rows as CSV (warnings on stderr)")
    parser.set_defaults(run=run_load)


def run_load(args: argparse.Namespace) -> int:
    """Print the rows of the load-test files (and the run's summary without ``--json``/``--csv``)."""
    from kvplan.io.load import read_load_evidence

    reading = prometheus_load(args)
    if (reading is None) == (not args.files):
        raise CliError("give the run's FILEs or --prometheus URL (one of them)")
    if reading is None:
        reading = read_load_evidence(args.files, year=args.year, utc_offset=args.log_utc_offset)
    if args.json:  # orjson's text of the rows, a batch of rows at a time
        sys.stdout.flush()
        sys.stdout.buffer.writelines(reading.json_chunks())
        return EXIT_OK
    if args.csv:  # to_csv's text of the rows, a batch of rows at a time
        reading.write_csv(sys.stdout)
    else:
        from kvplan.columns import LOAD_ROW_KEYS
        from kvplan.load import load_summary

        rows = reading.records()
        summary = load_summary(reading)
        shown = [{**row, "where": f"{row['source']}:{row['line']}"} for row in rows]
        hidden = ("swapped", "prompt_tokens_per_s", "prefix_cache_hit_pct")
        columns = ["where", *(key for key in LOAD_ROW_KEYS[2:] if key not in hidden)]  # source:line, the rest
        print(format_table([{k: ("" if v is None else v) for k, v in row.items()} for row in shown], columns))
        print()
        print(
            f"peak KV cache usage  {summary['peak_kv_cache_usage_pct']}% "
            f"(capacity {summary['kv_cache_tokens'] or 'unknown'} tokens)"
        )
        preemptions = summary["preemptions"]
        at_least = "at least " if summary["preemptions_lower_bound"] else ""
        print(f"preemptions          {'unknown' if preemptions is None else f'{at_least}{preemptions}'}")
        print(f"OOM / error events   {summary['oom_events']} / {summary['error_events']}")
    print_warnings(reading.warnings)
    return EXIT_OK
