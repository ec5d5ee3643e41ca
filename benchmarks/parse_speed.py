"""Throughput and peak memory of ``kvplan ledger`` on a large log, side by side with ``grep -c -F``.

Builds a log of many boots in /tmp (never in the repository): each boot is the four-rank sample
boot (restarted with new pids), followed by serving traffic (metrics and access lines), as a
long-running server's log looks. Then runs ``kvplan ledger --csv`` and ``grep -c -F`` over the
reader's own anchor phrases on the same file, taking turns for ``--repeat`` rounds (medians), each
one's output to a file (not ``/dev/null``, where GNU grep stops at the first match), and prints MB/s,
CPU seconds and peak resident memory. ``--against TREE`` also runs ``kvplan ledger --csv`` from another
checkout in the same turns, and says whether both wrote the same bytes; ``--log PATH`` reads a kept log
(``--keep``) instead of building one.

Goal (issue 23): at least half of grep's throughput, under 300 MB peak on a 1 GB log.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/parse_speed.py --mb 1024 [--against /tmp/base]
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
from measure import in_tree, run_rounds  # the benchmarks' own helpers, beside this script

BOOT_LOG = DATA_DIR / "boots" / "four-rank" / "boot.log"
SERVING_LINES = (
    "(APIServer pid={pid}) INFO 11-24 10:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
    "{a}.4 tokens/s, Avg generation throughput: {b}.1 tokens/s, Running: 12 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 41.2%, Prefix cache hit rate: 3.1%\n",
    '(APIServer pid={pid}) INFO:     10.0.0.{a}:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
)


def build_log(path: Path, target_bytes: int, serving_bytes_per_boot: int) -> int:
    """Write boots + serving traffic until ``target_bytes``; returns the number of boots."""
    boot = BOOT_LOG.read_text()
    boots = 0
    with open(path, "w") as out:
        written = 0
        while written < target_bytes:
            shift = boots * 1000
            text = re.sub(r"pid=(\d+)", lambda m, shift=shift: f"pid={int(m.group(1)) + shift}", boot)
            out.write(text)
            written += len(text)
            chunk = []
            size = 0
            index = 0
            while size < serving_bytes_per_boot:
                line = SERVING_LINES[index % 2].format(
                    pid=48211 + shift,
                    m=index // 60 % 60,
                    s=index % 60,
                    a=index % 250,
                    b=index % 97,
                    port=40000 + index % 20000,
                )
                chunk.append(line)
                size += len(line)
                index += 1
            out.write("".join(chunk))
            written += size
            boots += 1
    return boots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mb",
        type=int,
        default=1024,
        help="log size to build [MB, 10^6 bytes] (default 1024: the goal's 1 GB)",
    )
    parser.add_argument(
        "--serving-mb-per-boot", type=float, default=2.0, help="serving traffic after each boot"
    )
    parser.add_argument("--repeat", type=int, default=3, help="rounds of runs (median)")
    parser.add_argument("--keep", action="store_true", help="keep the log in /tmp")
    parser.add_argument(
        "--log", type=Path, help="read this log (e.g. one kept before) instead of building one"
    )
    parser.add_argument("--against", metavar="TREE", help="also run kvplan ledger --csv from this checkout")
    args = parser.parse_args()
    handle, name = tempfile.mkstemp(prefix="kvplan-bench-", suffix=".log", dir="/tmp")
    os.close(handle)
    path = args.log.resolve() if args.log else Path(name)
    patterns = Path(name).with_suffix(".patterns")
    try:
        if not args.log:
            started = time.perf_counter()
            boots = build_log(path, args.mb * 10**6, int(args.serving_mb_per_boot * 10**6))
            print(f"built {path} ({boots} boots) in {time.perf_counter() - started:.1f} s")
        size = path.stat().st_size
        patterns.write_bytes(b"\n".join(ANCHORS) + b"\n")
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        ledger = [sys.executable, "-m", "kvplan", "ledger", str(path), "--csv"]
        commands = {"kvplan ledger": ledger}
        if args.against:
            commands["  (against)"] = [*in_tree(args.against), *ledger]
        commands["grep -c -F"] = ["grep", "-c", "-F", "-f", str(patterns), str(path)]
        results = run_rounds(commands, args.repeat)
        print(f"{'':14}{'seconds':>9}{'MB/s':>9}{'CPU s':>9}{'peak MB':>9}")
        for label, run in results.items():
            print(
                f"{label:14}{run.seconds:9.2f}{size / 1e6 / run.seconds:9.0f}{run.cpu:9.2f}{run.rss / 1e6:9.0f}"
            )
        mine, grep = results["kvplan ledger"], results["grep -c -F"]
        print(
            f"grep matched {grep.out.decode().strip()} lines; kvplan reaches {grep.seconds / mine.seconds:.2f} of "
            f"grep's throughput ({grep.cpu / mine.cpu:.2f} in CPU time; goal ≥ 0.5), peak "
            f"{mine.rss / 1e6:.0f} MB (goal < 300 MB on 1 GB)"
        )
        if args.against:
            theirs = results["  (against)"]
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


if __name__ == "__main__":
    main()
