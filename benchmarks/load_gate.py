"""``kvplan load --json``, ``approve --load`` and ``gate --load`` side by side on one large load log.

Builds the load log of :mod:`load_speed` (a vLLM 0.26 server log of the project's load samples restamped every
10 s, in /tmp) and approves the four-rank sample boot (``data/boots/four-rank/boot.log``, 12 GiB: the
manual canary's ``--kv-cache-memory-bytes=12884377600``) once without load evidence, for the gate. Then it
runs, each in a fresh process and taking turns for ``--repeat`` rounds:

- ``kvplan load LOG --json``: the reader and the JSON of its rows;
- ``kvplan approve BOOT --load LOG``: the reader plus the load summary and checks of the approval;
- ``kvplan gate BUNDLE BOOT --load LOG``: the same analysis against the bundle.

and prints the median wall seconds, MB/s, CPU seconds (user + system) and peak resident memory of each, and
each analysis command's CPU time as a multiple of ``load --json``'s (of the same checkout). Goal (issue 23):
``approve --load`` and ``gate --load`` within 2× of ``load --json``, ``load --json`` ≥ 30 MB/s. The preemptions
of the overload sample repeat in the log, so the policy allows them (``--max-preemptions``). ``--against TREE``
(repeatable) runs the three commands from other checkouts too (e.g. worktrees of earlier commits), in the same
turns and each against its own bundle, for before/after figures from one run.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/load_gate.py --mb 50 --repeat 3 [--against ../base ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_speed import build_log  # the benchmarks' own helpers, beside this script
from measure import LAST_CPU, LAST_STDERR, run_once

from kvplan import DATA_DIR

BOOT = DATA_DIR / "boots" / "four-rank" / "boot.log"
POLICY = ["--year", "2026", "--max-preemptions", "1000000000"]


KVPLAN = [sys.executable, "-m", "kvplan"]
#: 12 GiB in whole blocks (the model gives the block bytes): 12,884,377,600 B, the value the canary ran
APPROVE = [*KVPLAN, "approve", str(BOOT), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--tp", "4"]
APPROVE += ["--approver", "bench"]


def _in_tree(tree: str | None) -> list[str]:
    """What runs a command in the checkout ``tree``, first on the path (``python -m`` puts the working
    folder first); nothing for this one."""
    return [] if tree is None else ["env", "-C", os.path.abspath(tree), f"PYTHONPATH={os.path.abspath(tree)}"]


def commands(log: Path, bundle: Path, out: Path, tree: str | None = None) -> dict[str, list[str]]:
    """The three commands on ``log``: the gate against ``bundle``, approve writing under ``out``; run from
    the checkout ``tree`` when given (named with the tree's folder name)."""
    run, mark = _in_tree(tree), "" if tree is None else f" ({Path(tree).name})"
    gate = ["gate", "--approved", str(bundle), str(BOOT), "--load", str(log), *POLICY]
    return {
        f"kvplan load --json{mark}": [*run, *KVPLAN, "load", str(log), "--year", "2026", "--json"],
        f"kvplan approve --load{mark}": [*run, *APPROVE, "--out", str(out), "--load", str(log), *POLICY],
        f"kvplan gate --load{mark}": [*run, *KVPLAN, *gate],
    }


def approved_bundle(folder: Path, tree: str | None = None) -> Path:
    """The four-rank boot approved without load evidence, under ``folder`` (by the checkout ``tree``)."""
    run_once([*_in_tree(tree), *APPROVE, "--out", str(folder)])
    if not folder.is_dir():
        raise SystemExit(f"approve failed: {LAST_STDERR[0].decode()}")
    return next(folder.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=50, help="size of the load log [MB] (default 50)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the median is shown")
    parser.add_argument("--log", type=Path, help="read this log instead of building one")
    parser.add_argument(
        "--against",
        metavar="TREE",
        action="append",
        default=[],
        help="also run the commands from this checkout",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvplan-load-gate-") as name:
        folder = Path(name)
        log = args.log.resolve() if args.log else folder / "server.log"
        built = "" if args.log else f", {build_log(log, int(args.mb * 1e6)):,} stats lines"
        size = log.stat().st_size
        print(f"{log}: {size / 1e6:.1f} MB{built}")
        trees = [None, *args.against]
        bundles = [approved_bundle(folder / f"bundle-{n}", tree) for n, tree in enumerate(trees)]
        runs: dict[str, list[tuple[float, float, int]]] = {}
        codes: dict[str, int] = {}
        for round_number in range(args.repeat):  # interleaved: the machine's load falls on all alike
            turn: dict[str, list[str]] = {}
            for n, (tree, bundle) in enumerate(zip(trees, bundles)):
                turn |= commands(log, bundle, folder / f"approved-{round_number}-{n}", tree)
            for command_name, command in turn.items():
                seconds, peak, codes[command_name], _ = run_once(command)
                runs.setdefault(command_name, []).append((seconds, LAST_CPU[0], peak))
        print(
            f"{'command':<42} {'exit':>4} {'seconds':>8} {'MB/s':>7} {'CPU s':>7} {'× json':>7} {'peak MB':>8}"
        )
        for command_name, measured in runs.items():
            json_name = "kvplan load --json" + (
                command_name[command_name.index(" (") :] if " (" in command_name else ""
            )
            json_cpu = statistics.median(cpu for _, cpu, _ in runs[json_name])
            seconds = statistics.median(s for s, _, _ in measured)
            cpu = statistics.median(c for _, c, _ in measured)
            peak = max(p for _, _, p in measured)
            print(
                f"{command_name:<42} {codes[command_name]:>4} {seconds:8.2f} {size / 1e6 / seconds:7.1f} "
                f"{cpu:7.2f} {cpu / json_cpu:7.2f} {peak / 1e6:8.0f}"
            )


if __name__ == "__main__":
    main()
