"""kvplan on a dense startup log (nearly every line a memory, config or rank line) beside grep.

Writes, in /tmp (never in the repository), a log of the project's own sample boots one after the
other as restarts (every release's format in ``data/boots`` and ``tests/data/logs``: several TP
sizes, DEBUG and INFO lines, Ray, V0, OOM and error boots), each with new pids, to the size given.
Then measures side by side, the commands taking turns for ``--repeat`` rounds (medians), each one's
output to a file (not ``/dev/null``, where GNU grep stops at the first match): ``kvplan ledger --csv``,
``grep -c -F`` on the reader's anchor phrases, ``wc -l``, and a bare Python line loop; with the peak
resident memory of each and the number of warning lines kvplan printed. Wall and CPU seconds are both
shown: on a loaded machine the CPU ratio is the fairer one. ``--against TREE`` also runs ``kvplan
ledger --csv`` from another checkout (e.g. a worktree of the base commit) in the same turns, and says
whether both wrote the same bytes; ``--log PATH`` reads a kept log (``--keep``) instead of building one.

Goals (issue 23): within 15× grep's CPU time, under 300 MB peak, at most a few dozen warning lines.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/dense_startup.py --mb 300 [--against /tmp/base]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvplan import DATA_DIR
from kvplan.io.vllm.scan import ANCHORS

sys.path.insert(0, str(Path(__file__).parent))
from measure import Timing, in_tree, python_line_loop, run_rounds  # the benchmarks' own helpers

SAMPLES = [
    *sorted(DATA_DIR.glob("boots/*/*.log")),
    *sorted((DATA_DIR.parent / "tests" / "data" / "logs").glob("*.log")),
]


def build_log(path: Path, target_bytes: int) -> int:
    """Write the sample boots round-robin (pids shifted per copy) until ``target_bytes``; the copies."""
    texts = [sample.read_text() for sample in SAMPLES]
    copies = written = 0
    with open(path, "w") as out:
        while written < target_bytes:
            text = texts[copies % len(texts)]
            shift = copies % 4096 * 1000  # pids stay below Linux's largest, 2^22 (the samples' reach 61,307)
            text = re.sub(r"pid=(\d+)", lambda m, shift=shift: f"pid={int(m.group(1)) + shift}", text)
            if not text.endswith("\n"):
                text += "\n"
            out.write(text)
            written += len(text.encode())
            copies += 1
    return copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="log size [MB, 10^6 bytes] (default 300)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of runs (median)")
    parser.add_argument("--keep", action="store_true", help="keep the log in /tmp")
    parser.add_argument(
        "--log", type=Path, help="read this log (e.g. one kept before) instead of building one"
    )
    parser.add_argument("--against", metavar="TREE", help="also run kvplan ledger --csv from this checkout")
    args = parser.parse_args()
    handle, name = tempfile.mkstemp(prefix="kvplan-dense-", suffix=".log", dir="/tmp")
    os.close(handle)
    path = args.log.resolve() if args.log else Path(name)
    patterns = Path(name).with_suffix(".patterns")
    try:
        if not args.log:
            started = time.perf_counter()
            copies = build_log(path, args.mb * 10**6)
            seconds = time.perf_counter() - started
            print(f"built {path} ({copies} sample boots from {len(SAMPLES)} files) in {seconds:.1f} s")
        size = path.stat().st_size
        patterns.write_bytes(b"\n".join(ANCHORS) + b"\n")
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        ledger = [sys.executable, "-m", "kvplan", "ledger", str(path), "--csv"]
        commands = {"kvplan ledger --csv": ledger}
        if args.against:
            commands["  (against)"] = [*in_tree(args.against), *ledger]
        commands["grep -c -F"] = ["grep", "-c", "-F", "-f", str(patterns), str(path)]
        commands["wc -l"] = ["wc", "-l", str(path)]
        commands["python line loop"] = python_line_loop(str(path))
        results = run_rounds(commands, args.repeat)
        report(results, size)
        if args.against:
            mine, theirs = results["kvplan ledger --csv"], results["  (against)"]
            same = "the same" if mine.out == theirs.out else "DIFFERENT"
            print(
                f"against {args.against}: ours takes {mine.cpu / theirs.cpu:.2f}× its CPU time "
                f"({(mine.cpu / theirs.cpu - 1) * 100:+.0f}%), {same} ledger bytes "
                f"(sha256 {hashlib.sha256(mine.out).hexdigest()[:12]})"
            )
    finally:
        patterns.unlink(missing_ok=True)
        if args.log or not args.keep:
            Path(name).unlink(missing_ok=True)


def report(results: dict[str, Timing], size: int) -> None:
    """The table of the commands' medians, each beside grep, and kvplan's goals."""
    grep = results["grep -c -F"]
    print(f"{'':22}{'seconds':>9}{'MB/s':>9}{'peak MB':>9}{'× grep':>9}{'CPU s':>9}{'× grep':>9}")
    for label, run in results.items():
        print(
            f"{label:22}{run.seconds:9.2f}{size / 1e6 / run.seconds:9.0f}{run.rss / 1e6:9.0f}"
            f"{run.seconds / grep.seconds:9.1f}{run.cpu:9.2f}{run.cpu / max(grep.cpu, 1e-3):9.1f}"
        )
    kvplan = results["kvplan ledger --csv"]
    rows, warnings = kvplan.out.count(b"\n") - 1, kvplan.err.count(b"\n")
    print(
        f"kvplan: exit {kvplan.code}, {rows} ledger rows, {warnings} warning "
        f"lines; grep matched {grep.out.decode().strip()} lines. Goals: ≤ 15× grep's CPU (now "
        f"{kvplan.cpu / max(grep.cpu, 1e-3):.1f}×; {kvplan.seconds / grep.seconds:.1f}× wall), < 300 MB "
        f"(now {kvplan.rss / 1e6:.0f} MB)"
    )


if __name__ == "__main__":
    main()
