"""Growth of ``kvplan budget``, ``ledger --json``, ``approve`` and ``gate`` with the number of boots.

Builds, in /tmp (never in the repository), N boot files (the four-rank sample boot, each with its
own pids) and one log holding N boots (restarts), for N in 1, 100, 1,000 and 5,000, then times each
command over each input (median of ``--repeat`` runs, output to a file) and prints wall and CPU seconds
(user + system: the fairer figure on a shared machine), peak resident memory and the growth factor per
decade of each (linear in boots: about 10× per decade). ``--against TREE`` also runs each command from
another checkout (e.g. a worktree of the base commit), the two taking turns, each approving into its own
folder and gating against its own bundle, and prints the CPU ratio of each.

Goal (issue 15): ``kvplan budget`` over 5,000 boot files under 30 s and 300 MB.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scaling.py --boots 1 100 1000 5000 [--against /tmp/base]
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


#: Pids of one boot shifted per index: the sample's span (48211-48605) fits in a step, and 5,000 boots stay
#: below Linux's largest pid (2^22, which the reader enforces): 48605 + 800 × 4999 = 4,047,805.
PID_STEP = 800


def boot_text(index: int) -> str:
    """The sample boot with its pids shifted by ``index`` (another launch of the same key)."""
    return re.sub(r"pid=(\d+)", lambda m: f"pid={int(m.group(1)) + PID_STEP * index}", BOOT_LOG.read_text())


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


def commands(paths: list[str], log: Path, bundles: Path, tree: str | None = None) -> dict[str, list[str]]:
    """The commands timed over one size, by label, run from the checkout ``tree`` (None: this one), approving
    into ``bundles`` and gating against the first bundle there."""
    kvplan = [*measure.in_tree(tree), sys.executable, "-m", "kvplan"]
    approve = [*kvplan, "approve", "--reserve", "1GiB", "--approver", "bench", "--out"]
    approved = sorted(bundles.iterdir()) if bundles.is_dir() else []
    return {
        "budget files": [*kvplan, "budget", *paths, "--reserve", "1GiB", "--json"],
        "ledger --json files": [*kvplan, "ledger", *paths, "--json"],
        "approve files": [*approve, str(bundles), *paths],
        **({"gate files": [*kvplan, "gate", "--approved", str(approved[0]), *paths]} if approved else {}),
        "budget one log": [*kvplan, "budget", str(log), "--reserve", "1GiB", "--json"],
        "ledger --json one log": [*kvplan, "ledger", str(log), "--json"],
    }


LABELS = (
    "budget files",
    "ledger --json files",
    "approve files",
    "gate files",
    "budget one log",
    "ledger --json one log",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boots", type=int, nargs="+", default=[1, 100, 1000, 5000])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--only", nargs="*", help="labels to time (default: all)")
    parser.add_argument("--against", metavar="TREE", help="also run each command from this checkout")
    args = parser.parse_args()
    trees = {"": None} if args.against is None else {"": None, " (against)": args.against}
    root = Path(tempfile.mkdtemp(prefix="kvplan-scaling-", dir="/tmp"))
    results: dict[str, dict[int, tuple[float, float]]] = {}
    try:
        for boots in args.boots:
            paths, log = build(root / str(boots), boots)
            for label in LABELS:
                if args.only and label not in args.only:
                    continue
                turns = {}
                for mark, tree in trees.items():
                    bundles = root / str(boots) / f"bundles{mark.strip(' ()')}"
                    command = commands(paths, log, bundles, tree).get(label)
                    if command:
                        turns[label + mark] = command
                repeat = 1 if label.startswith("approve") else args.repeat  # a bundle is never overwritten
                for name, run in measure.run_rounds(turns, repeat).items():
                    results.setdefault(name, {})[boots] = (run.seconds, run.cpu)
                    print(
                        f"{name:34}{boots:>6} boots {run.seconds:9.2f} s {run.cpu:9.2f} CPU s "
                        f"{run.rss / 1e6:8.0f} MB  exit {run.code}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(results, args.boots)


def report(results: dict[str, dict[int, tuple[float, float]]], sizes: list[int]) -> None:
    """Wall and CPU seconds by size with their growth per decade, and each command's CPU against the other
    checkout's."""
    for name, field in (("wall seconds", 0), ("CPU seconds", 1)):
        print(f"\n{name:34}" + "".join(f"{n:>10}" for n in sizes) + "   growth per decade")
        for label, by_size in results.items():
            done = sorted(by_size)
            cells = "".join(f"{by_size[n][field]:9.2f}s" if n in by_size else f"{'':10}" for n in sizes)
            growth = []
            for small, large in itertools.pairwise(done):
                decades = math.log10(large / small)
                growth.append(f"{(by_size[large][field] / by_size[small][field]) ** (1 / decades):.1f}×")
            print(f"{label:34}{cells}   {' '.join(growth)}")
    for label, by_size in results.items():
        theirs = results.get(label + " (against)")
        if theirs:
            ratios = "  ".join(
                f"{n}: {by_size[n][1] / theirs[n][1] - 1:+.0%}" for n in sorted(by_size) if n in theirs
            )
            print(f"{label:34}CPU against the other checkout  {ratios}")


if __name__ == "__main__":
    main()
