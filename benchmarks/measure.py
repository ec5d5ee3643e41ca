"""Timing helpers shared by the benchmarks: wall and CPU seconds and peak RSS of a command, median of N runs.

Each command runs in a fresh child process with its standard output written to a file (never
``/dev/null``: GNU grep stops at the first match when its output is ``/dev/null``), and its peak
resident memory is read with ``resource.getrusage(RUSAGE_CHILDREN)`` in a wrapper process.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

#: The standard error of the last :func:`run_once` (one item).
LAST_STDERR: list[bytes] = [b""]
#: CPU seconds (user + system) of the last :func:`run_once` (one item): on a loaded machine a fairer
#: ratio than wall seconds.
LAST_CPU: list[float] = [0.0]

_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "out, err = open(sys.argv[1], 'wb'), open(sys.argv[1] + '.err', 'wb')\n"
    "t = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[2:], stdout=out, stderr=err).returncode\n"
    "dt = time.perf_counter() - t\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(dt, usage.ru_maxrss * 1024, code, usage.ru_utime + usage.ru_stime)\n"
)


def run_once(command: list[str]) -> tuple[float, int, int, bytes]:
    """Wall seconds, peak RSS [bytes], exit code and standard output of one run of ``command``;
    its standard error is kept in :data:`LAST_STDERR`."""
    with tempfile.NamedTemporaryFile(prefix="kvplan-bench-out-", dir="/tmp") as out:
        line = subprocess.run(
            [sys.executable, "-c", _WRAPPER, out.name, *command], capture_output=True, text=True, check=True
        ).stdout
        seconds, rss, code, cpu = line.split()
        LAST_CPU[:] = [float(cpu)]
        err = Path(out.name + ".err")
        LAST_STDERR[:] = [err.read_bytes()]
        err.unlink()
        return float(seconds), int(rss), int(code), Path(out.name).read_bytes()


class Timing(NamedTuple):
    """A command's median wall and CPU seconds over its runs, highest peak RSS [bytes], and its last run's
    exit code, standard output and standard error."""

    seconds: float
    cpu: float
    rss: int
    code: int
    out: bytes
    err: bytes


def run_rounds(commands: dict[str, list[str]], repeat: int = 3) -> dict[str, Timing]:
    """Each command once per round, ``repeat`` rounds, so that the machine's load falls on all alike."""
    runs: dict[str, list[tuple]] = {label: [] for label in commands}
    for _ in range(repeat):
        for label, command in commands.items():
            runs[label].append((*run_once(command), LAST_CPU[0], LAST_STDERR[0]))
    return {
        label: Timing(
            statistics.median(run[0] for run in done),
            statistics.median(run[4] for run in done),
            max(run[1] for run in done),
            done[-1][2],
            done[-1][3],
            done[-1][5],
        )
        for label, done in runs.items()
    }


def in_tree(tree: str | None) -> list[str]:
    """What runs a command from the checkout ``tree``, first on the path (``python -m`` puts the working
    folder first); nothing for None (this checkout)."""
    return [] if tree is None else ["env", "-C", os.path.abspath(tree), f"PYTHONPATH={os.path.abspath(tree)}"]


def python_line_loop(path: str) -> list[str]:
    """A command that reads ``path`` line by line in bare Python and prints the count (the floor)."""
    code = "import sys\nn = 0\nfor _ in open(sys.argv[1], 'rb'):\n    n += 1\nprint(n)\n"
    return [sys.executable, "-c", code, path]
