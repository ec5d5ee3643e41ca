"""Timing helpers shared by the benchmarks: wall seconds and peak RSS of a command, median of N runs.

Each command runs in a fresh child process with its standard output written to a file (never
``/dev/null``: GNU grep stops at the first match when its output is ``/dev/null``), and its peak
resident memory is read with ``resource.getrusage(RUSAGE_CHILDREN)`` in a wrapper process.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: The standard error of the last :func:`run_once` (one item).
LAST_STDERR: list[bytes] = [b""]
#: CPU seconds (user + system) of the last :func:`run_once`, or their median over the last
#: :func:`run_median` (one item): on a loaded machine a fairer ratio than wall seconds.
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


def run_median(command: list[str], repeat: int = 3) -> tuple[float, int, int, bytes]:
    """:func:`run_once` ``repeat`` times: median seconds, highest peak RSS, the last code and output
    (the median CPU seconds in :data:`LAST_CPU`)."""
    runs, cpus = [], []
    for _ in range(repeat):
        runs.append(run_once(command))
        cpus.append(LAST_CPU[0])
    LAST_CPU[:] = [statistics.median(cpus)]
    return (statistics.median(run[0] for run in runs), max(run[1] for run in runs), runs[-1][2], runs[-1][3])


def python_line_loop(path: str) -> list[str]:
    """A command that reads ``path`` line by line in bare Python and prints the count (the floor)."""
    code = "import sys\nn = 0\nfor _ in open(sys.argv[1], 'rb'):\n    n += 1\nprint(n)\n"
    return [sys.executable, "-c", code, path]
