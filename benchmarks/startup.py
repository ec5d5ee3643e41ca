"""Start-up of the light commands, side by side with ``python -c pass`` (the floor of any Python CLI).

Runs each command ``-n`` times (default 15), interleaved so that the machine's load falls on all alike,
each in a fresh process with its output written to a file; prints the median wall seconds, the ratio to
the floor and whether the command imported pandas, matplotlib or the evidence machinery (read from
``python -X importtime``). Goal (issue 15): ``kvplan budget --room …`` under 0.15 s wall.

    python benchmarks/startup.py            # from the repository root, with PYTHONPATH=$PWD
    python benchmarks/startup.py -n 31
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from measure import run_once

#: Modules the light commands must not import.
HEAVY = ("pandas", "numpy", "matplotlib", "kvplan.evidence", "kvplan.plan.decision")

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "kvplan --help": ["-m", "kvplan", "--help"],
    "kvplan budget --room": [
        "-m",
        "kvplan",
        "budget",
        "--room",
        "18.8GiB,17.6GiB,12.9GiB,16.4GiB",
        "--reserve",
        "0.9GiB",
    ],
    "kvplan capacity": [
        "-m",
        "kvplan",
        "capacity",
        "--kv-bytes",
        "12GiB",
        "--bytes-per-token",
        "256KiB",
        "--max-model-len",
        "8192",
    ],
    "kvplan drift": [
        "-m",
        "kvplan",
        "drift",
        "--ref-free",
        "42GiB",
        "--ref-budget",
        "30GiB",
        "--boot-free",
        "40.75GiB",
        "--guard",
        "0.5GiB",
    ],
}


def heavy_imports(arguments: list[str]) -> list[str]:
    """The :data:`HEAVY` modules that ``python ARGUMENTS`` imports (from ``-X importtime``)."""
    log = subprocess.run(
        [sys.executable, "-X", "importtime", *arguments], capture_output=True, text=True
    ).stderr
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in log.splitlines() if line.startswith("import time:")
    }
    return [name for name in HEAVY if name in imported]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="runs per command (default 15)")
    n = parser.parse_args().n
    seconds: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(n):
        for name, arguments in COMMANDS.items():
            wall, _, code, _ = run_once([sys.executable, *arguments])
            if code != 0:
                raise SystemExit(f"{name} exited {code}")
            seconds[name].append(wall)
    floor = statistics.median(seconds["python -c pass"])
    print(f"{'command':<24}{'median s':>10}{'x floor':>9}  heavy imports   (n={n}, {sys.executable})")
    for name, arguments in COMMANDS.items():
        median = statistics.median(seconds[name])
        heavy = ", ".join(heavy_imports(arguments)) or "none"
        print(f"{name:<24}{median:>10.3f}{median / floor:>9.1f}  {heavy}")


if __name__ == "__main__":
    main()
