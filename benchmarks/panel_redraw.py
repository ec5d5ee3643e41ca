"""How long a what-if panel takes to redraw after one step of its reserve slider (issue 27: ≤ 300 ms).

Builds the panels of notebooks 02, 03 and 04 on the sample data as the notebooks build them, then moves
each one's reserve slider one step at a time (what an arrow key does) and times each redraw in the kernel's
process: evaluate, draw the charts whose inputs changed, encode their PNGs and set the widgets. Prints the
median wall and CPU milliseconds per step for each panel (CPU time is the fairer number on a shared
machine). The browser test (``make browser-test``) measures the same from the key press to the last image
drawn in Chromium.

    PYTHONPATH=. python benchmarks/panel_redraw.py [--steps N] [--rounds R] [--against TREE]

``--against TREE`` times the same panels from another checkout too (e.g. a worktree of the previous commit),
one process per round and checkout, alternating, so both see the same load: before/after figures from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvplan.notebook import Scenario, WhatIfPanel, co_tenant_bytes, launch_max_model_len, read_launch
from kvplan.plan import Evidence, ModelLayout, Policy, boot_free_bytes, decide
from kvplan.units import parse_size

DATA_DIR = Path(__file__).resolve().parent.parent / "data"  # the checkout's own sample
SAMPLE = DATA_DIR / "boots" / "four-rank"


def panels() -> dict[str, WhatIfPanel]:
    """The panels of notebooks 02, 03 and 04 at their parameters."""
    ledger, _ = read_launch(SAMPLE)
    reserve = Policy(parse_size("0.9GiB"))
    headroom = decide(Evidence(ledger), reserve, ModelLayout("llama-3.1-70b", {"tp": 4}))
    concurrency = Scenario.from_decision(
        decide(Evidence(ledger), reserve, ModelLayout("llama-3.1-70b")),
        max_model_len=launch_max_model_len(ledger),
        target_concurrency=4,
    )
    drift = decide(
        DATA_DIR / "boots" / "drift" / "reference.log", Policy(parse_size("1GiB"), parse_size("0.5GiB"))
    )
    canary, _ = read_launch(DATA_DIR / "boots" / "drift" / "canary.log")
    return {
        "02-rank-headroom": WhatIfPanel(
            Scenario.from_decision(headroom), co_tenant_bytes=co_tenant_bytes(ledger), ledger=ledger
        ),
        "03-concurrency": WhatIfPanel(concurrency, co_tenant_bytes=co_tenant_bytes(ledger)),
        "04-drift-and-gate": WhatIfPanel(
            Scenario.from_decision(
                drift,
                guard_bytes=parse_size("0.5GiB"),
                boot_free_bytes=boot_free_bytes(canary, drift.budget.ranks),
            )
        ),
    }


def step_times(panel: WhatIfPanel, steps: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each of ``steps`` one-step moves of the reserve slider (up, then back)."""
    slider = panel.controls["reserve_gib"]
    walls, cpus = [], []
    for index in range(steps):
        direction = 1 if index < steps // 2 else -1
        wall, cpu = time.perf_counter(), time.process_time()
        slider.value = round(slider.value + direction * slider.step, 2)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        assert panel.error is None and not panel.chart_errors, (panel.error, panel.chart_errors)
    return walls, cpus


def measure(steps: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU milliseconds per reserve step of each panel."""
    medians = {}
    for name, panel in panels().items():
        walls, cpus = step_times(panel, steps)
        medians[name] = (statistics.median(walls) * 1000, statistics.median(cpus) * 1000)
    return medians


def _round(tree: str, steps: int) -> dict[str, list[float]]:
    """One round in a fresh process with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": tree}
    command = [sys.executable, __file__, "--steps", str(steps), "--json"]
    return json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="reserve steps per panel and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (processes) per checkout")
    parser.add_argument("--against", metavar="TREE", help="also time the panels from this checkout")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one round, for _round
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps(measure(args.steps)))
        return
    trees = {"this tree": str(Path(__file__).resolve().parent.parent)}
    if args.against:
        trees[args.against] = str(Path(args.against).resolve())
    rounds: dict[str, list[dict]] = {label: [] for label in trees}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            rounds[label].append(_round(tree, args.steps))
    for name in rounds["this tree"][0]:
        for label in trees:
            cpus = sorted(r[name][1] for r in rounds[label])
            wall = statistics.median(r[name][0] for r in rounds[label])
            print(f"{name} ({label}): {statistics.median(cpus):.0f} ms CPU (least {cpus[0]:.0f}), "
                  f"{wall:.0f} ms wall per reserve step (medians of {args.rounds} rounds of {args.steps} steps)")  # fmt: skip


if __name__ == "__main__":
    main()
