"""Throughput and peak memory of ``kvplan load --csv`` and ``--json`` on a large stats log, beside one regex.

Builds a vLLM 0.26 server log in /tmp (never in the repository) from the project's own load samples
(``data/load/*/server.log``, written by ``data/load/make_load_samples.py``): one server start, then the
samples' stats lines (``Engine 000: … Running: N reqs, Waiting: N reqs, [Preemptions: N,] GPU KV cache
usage: …``) over and over, restamped every 10 s so the run is one continuous load test. Then it runs, side by
side and each in a fresh process, ``kvplan load --csv``, ``kvplan load --json`` and a one-regex Python
reader that writes the same rows' numbers as CSV (the floor for a Python line loop), each with its output
to a file; it prints the median of ``--repeat`` runs of wall time, MB/s, CPU time (user + system, and MB
per CPU second: what a run costs when the machine is shared) and peak resident memory (``/usr/bin/time``'s
maximum RSS). The commands take turns, ``--repeat`` rounds.

Goal (issue 15): ≥ 30 MB/s with ``--json`` on the 200 MB log, peak under 500 MB. ``--against TREE`` (repeatable)
also runs ``kvplan load`` from other checkouts (e.g. worktrees of earlier commits) in the same turns, for
side-by-side ratios; ``--keep`` keeps the log (its path is printed) and ``--log PATH`` reads a kept one.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/load_speed.py --mb 200 --repeat 3 [--against ../base ...]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from kvplan import DATA_DIR

SAMPLES = sorted((DATA_DIR / "load").glob("*/server.log"))
STAMP = re.compile(r" (\d\d-\d\d \d\d:\d\d:\d\d) \[")
START = datetime(2026, 11, 27, 11, 0, 0)
INTERVAL = timedelta(seconds=10)  # vLLM V1's API server logs stats every 10 s
ONE_REGEX = r"""
import re, sys
pattern = re.compile(rb"Engine (\d+): .*?Running: (\d+) reqs, Waiting: (\d+) reqs.*?KV cache usage: ([\d.]+)")
with open(sys.argv[1], "rb") as log, open(sys.argv[2], "wb") as out:
    for number, line in enumerate(log, 1):
        match = pattern.search(line)
        if match:
            out.write(b"%d,%s\n" % (number, b",".join(match.groups())))
"""


def build_log(path: Path, target_bytes: int) -> int:
    """Write one server start and the samples' stats lines until ``target_bytes``; returns the stats lines."""
    first = SAMPLES[0].read_text().splitlines()
    stats = [line for sample in SAMPLES for line in sample.read_text().splitlines() if "Running: " in line]
    header = [line for line in first if "Running: " not in line and "] " in line][:6]
    written = lines = 0
    when = START
    with open(path, "w") as out:
        out.write("\n".join(header) + "\n")
        while written < target_bytes:
            chunk = []
            for line in stats:
                when += INTERVAL
                chunk.append(STAMP.sub(when.strftime(" %m-%d %H:%M:%S ["), line, count=1))
            text = "\n".join(chunk) + "\n"
            out.write(text)
            written += len(text)
            lines += len(chunk)
    return lines


def measure(command: list[str], out: Path, tree: str | None = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS [bytes] of ``command`` with its stdout to
    ``out`` (CPU time says what the command costs when the machine is shared), run in ``tree`` with
    ``PYTHONPATH=tree`` when given (``python -m`` puts the working folder first on the path)."""
    env = None if tree is None else {**os.environ, "PYTHONPATH": tree}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report, open(out, "w") as stdout:
        subprocess.run(
            ["/usr/bin/time", "-f", "%e %U %S %M", "-o", report.name, *command],
            stdout=stdout,
            stderr=subprocess.DEVNULL,
            check=True,
            env=env,
            cwd=tree,
        )
        seconds, user, system, kib = report.read().split()[-4:]
    return float(seconds), float(user) + float(system), int(kib) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=200, help="size of the stats log [MB] (default 200)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the median is shown")
    parser.add_argument(
        "--against",
        metavar="TREE",
        action="append",
        default=[],
        help="also run kvplan load from this checkout",
    )
    parser.add_argument("--keep", action="store_true", help="keep the log (its path is printed)")
    parser.add_argument(
        "--log", type=Path, help="read this log (e.g. one kept before) instead of building one"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvplan-load-speed-") as folder:
        log = (args.log and args.log.resolve()) or Path(
            tempfile.mkdtemp(prefix="kvplan-load-log-") if args.keep else folder
        ) / "server.log"
        built = "" if args.log else f", {build_log(log, int(args.mb * 1e6)):,} stats lines"
        size = log.stat().st_size
        print(f"{log}: {size / 1e6:.1f} MB{built}")
        kvplan = [sys.executable, "-m", "kvplan", "load", str(log), "--year", "2026"]
        commands: dict[str, tuple[list[str], str | None]] = {
            "kvplan load --csv": ([*kvplan, "--csv"], None),
            "kvplan load --json": ([*kvplan, "--json"], None),
            "one regex (Python)": ([sys.executable, "-c", ONE_REGEX, str(log), "/dev/stdout"], None),
        }
        for tree in args.against:
            for form in ("csv", "json"):
                commands[f"  --{form} ({Path(tree).name})"] = ([*kvplan, f"--{form}"], tree)
        print(f"{'command':<30} {'seconds':>8} {'MB/s':>7} {'CPU s':>7} {'MB/CPU s':>9} {'peak MB':>8}")
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
        for _ in range(args.repeat):  # interleaved, so that the machine's load falls on all alike
            for name, (command, tree) in commands.items():
                runs[name].append(measure(command, Path(folder) / "out", tree))
        for name, measured in runs.items():
            seconds = statistics.median(s for s, _, _ in measured)
            cpu = statistics.median(c for _, c, _ in measured)
            peak = statistics.median(r for _, _, r in measured)
            print(
                f"{name:<30} {seconds:8.2f} {size / 1e6 / seconds:7.1f} {cpu:7.2f} {size / 1e6 / cpu:9.1f} "
                f"{peak / 1e6:8.0f}"
            )
        for tree in args.against:
            for form in ("csv", "json"):
                ours = statistics.median(c for _, c, _ in runs[f"kvplan load --{form}"])
                theirs = statistics.median(c for _, c, _ in runs[f"  --{form} ({Path(tree).name})"])
                print(
                    f"--{form}: ours takes {ours / theirs:.2f}× the CPU time of {tree} ({ours / theirs - 1:+.0%})"
                )


if __name__ == "__main__":
    main()
