"""Growth of ``kvplan budget``, ``ledger --json``, ``approve`` and ``gate`` with the number of boots.

Builds, in /tmp (never in the repository), N boot files (the four-rank sample boot, each with its
own pids) and one log holding N boots (restarts), for N in 1, 100, 1,000 and 5,000, then times each
command over each input (median of ``--repeat`` runs, output to a file) and prints wall and CPU seconds
(user + system: the fairer figure on a shared machine), peak resident memory and the growth factor per
decade of each (linear in boots: about 10× per decade).

Goal (issue 15): ``kvplan budget`` over 5,000 boot files under 30 s and 300 MB.

    .venv/bin/python benchmarks/scaling.py --boots 1 100 1000 5000
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import shutil
import sys
import tempfile
from pathlib import Path

from kvplan import DATA_DIR

sys.path.insert(0, str(Path(__file__).parent))
import measure  # the benchmarks' own helper, beside this script

BOOT_LOG = DATA_DIR / "boots" / "four-rank" / "boot.log"


def boot_text(index: int) -> str:
    """The sample boot with its pids shifted by ``index`` (another launch of the same key)."""
    return re.sub(r"pid=(\d+)", lambda m: f"pid={int(m.group(1)) + 1000 * index}", BOOT_LOG.read_text())


def build(folder: Path, boots: int) -> tuple[list[str], Path]:
    """``boots`` one-boot files in ``folder/files`` and one log of ``boots`` boots: their paths."""
    files = folder / "files"
    files.mkdir(parents=True)
    paths = []
    with open(folder / "restarts.log", "w") as restarts:
        for index in range(boots):
            text = boot_text(index)
            path = files / f"host{index:05d}.log"
            path.write_text(text)
            paths.append(str(path))
            restarts.write(text)
    return paths, folder / "restarts.log"


def commands(paths: list[str], log: Path, bundle_root: Path) -> dict[str, list[str]]:
    """The commands timed over one size, by label."""
    kvplan = [sys.executable, "-m", "kvplan"]
    approve = [*kvplan, "approve", "--reserve", "1GiB", "--approver", "bench", "--out"]
    return {
        "budget files": [*kvplan, "budget", *paths, "--reserve", "1GiB", "--json"],
        "ledger --json files": [*kvplan, "ledger", *paths, "--json"],
        "approve files": [*approve, str(bundle_root / "files"), *paths],
        "gate files": [*kvplan, "gate", "--approved", "BUNDLE", *paths],
        "budget one log": [*kvplan, "budget", str(log), "--reserve", "1GiB", "--json"],
        "ledger --json one log": [*kvplan, "ledger", str(log), "--json"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boots", type=int, nargs="+", default=[1, 100, 1000, 5000])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--only", nargs="*", help="labels to time (default: all)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kvplan-scaling-", dir="/tmp"))
    results: dict[str, dict[int, tuple[float, int, int]]] = {}
    try:
        for boots in args.boots:
            paths, log = build(root / str(boots), boots)
            bundles = root / str(boots) / "bundles"
            (bundles / "files").mkdir(parents=True)
            for label, command in commands(paths, log, bundles).items():
                if args.only and label not in args.only:
                    continue
                if label == "gate files":
                    found = sorted((bundles / "files").iterdir())
                    if not found:
                        continue
                    command = [str(found[0]) if part == "BUNDLE" else part for part in command]
                repeat = 1 if label.startswith("approve") else args.repeat  # a bundle is never overwritten
                seconds, rss, code, _out = measure.run_median(command, repeat)
                cpu = measure.LAST_CPU[0]
                results.setdefault(label, {})[boots] = (seconds, cpu, rss, code)
                print(
                    f"{label:24}{boots:>6} boots {seconds:9.2f} s {cpu:9.2f} CPU s {rss / 1e6:8.0f} MB  exit {code}",
                    flush=True,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, field in (("wall seconds", 0), ("CPU seconds", 1)):
        print(f"\n{name:24}" + "".join(f"{n:>10}" for n in args.boots) + "   growth per decade")
        for label, by_size in results.items():
            sizes = sorted(by_size)
            cells = "".join(f"{by_size[n][field]:9.2f}s" if n in by_size else f"{'':10}" for n in args.boots)
            growth = []
            for small, large in itertools.pairwise(sizes):
                decades = math.log10(large / small)
                growth.append(f"{(by_size[large][field] / by_size[small][field]) ** (1 / decades):.1f}×")
            print(f"{label:24}{cells}   {' '.join(growth)}")


if __name__ == "__main__":
    main()
