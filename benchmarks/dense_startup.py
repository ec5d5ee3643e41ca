"""kvplan on a dense startup log (nearly every line a memory, config or rank line) beside grep.

Writes, in /tmp (never in the repository), a log of the project's own sample boots one after the
other as restarts (every release's format in ``data/boots`` and ``tests/data/logs``: several TP
sizes, DEBUG and INFO lines, Ray, V0, OOM and error boots), each with new pids, to the size given.
Then measures side by side, median of 3, each command's output to a file (not ``/dev/null``, where
GNU grep stops at the first match): ``kvplan ledger --csv``, ``grep -c -F`` on the reader's anchor
phrases, ``wc -l``, and a bare Python line loop; with the peak resident memory of each and the
number of warning lines kvplan printed. Wall and CPU seconds are both shown: on a loaded machine the
CPU ratio is the fairer one.

Goals (issue 15): within 20× grep's time, under 300 MB peak, at most a few dozen warning lines.

    .venv/bin/python benchmarks/dense_startup.py --mb 300
"""

from __future__ import annotations

import argparse
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
from measure import LAST_CPU, LAST_STDERR, python_line_loop, run_median  # the benchmarks' own helpers

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
            shift = copies * 1000
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
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (median)")
    parser.add_argument("--keep", action="store_true", help="keep the log in /tmp")
    args = parser.parse_args()
    handle, name = tempfile.mkstemp(prefix="kvplan-dense-", suffix=".log", dir="/tmp")
    os.close(handle)
    path = Path(name)
    patterns = path.with_suffix(".patterns")
    try:
        started = time.perf_counter()
        copies = build_log(path, args.mb * 10**6)
        size = path.stat().st_size
        print(
            f"built {path} ({size / 1e6:.0f} MB, {copies} sample boots from {len(SAMPLES)} files) "
            f"in {time.perf_counter() - started:.1f} s"
        )
        patterns.write_bytes(b"\n".join(ANCHORS) + b"\n")
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        commands = {
            "kvplan ledger --csv": [sys.executable, "-m", "kvplan", "ledger", str(path), "--csv"],
            "grep -c -F": ["grep", "-c", "-F", "-f", str(patterns), str(path)],
            "wc -l": ["wc", "-l", str(path)],
            "python line loop": python_line_loop(str(path)),
        }
        results, cpu = {}, {}
        for label, command in commands.items():
            results[label] = run_median(command, args.repeat)
            cpu[label] = LAST_CPU[0]
            if label.startswith("kvplan"):
                warning_lines = LAST_STDERR[0].count(b"\n")
        print(f"{'':22}{'seconds':>9}{'MB/s':>9}{'peak MB':>9}{'× grep':>9}{'CPU s':>9}{'× grep':>9}")
        grep_seconds, grep_cpu = results["grep -c -F"][0], cpu["grep -c -F"]
        for label, (seconds, rss, _code, _out) in results.items():
            print(
                f"{label:22}{seconds:9.2f}{size / 1e6 / seconds:9.0f}{rss / 1e6:9.0f}"
                f"{seconds / grep_seconds:9.1f}{cpu[label]:9.2f}{cpu[label] / max(grep_cpu, 1e-3):9.1f}"
            )
        kv_seconds, kv_rss, kv_code, kv_out = results["kvplan ledger --csv"]
        rows = kv_out.count(b"\n") - 1
        print(
            f"kvplan: exit {kv_code}, {rows} ledger rows, {warning_lines} warning lines; "
            f"grep matched {results['grep -c -F'][3].decode().strip()} lines. Goals: ≤ 20× grep "
            f"(now {kv_seconds / grep_seconds:.1f}× wall, {cpu['kvplan ledger --csv'] / max(grep_cpu, 1e-3):.1f}× CPU), "
            f"< 300 MB (now {kv_rss / 1e6:.0f} MB)"
        )
    finally:
        patterns.unlink(missing_ok=True)
        if not args.keep:
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
