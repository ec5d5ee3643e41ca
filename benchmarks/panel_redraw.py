"""How long a what-if panel takes to redraw after one step of its reserve slider (issue 27: ≤ 300 ms).

Builds the panels of notebooks 02, 03 and 04 on the sample data as the notebooks build them, then moves
each one's reserve slider one step at a time (what an arrow key does) and times each redraw in the kernel's
process: evaluate, draw the charts whose inputs changed, encode their PNGs and set the widgets. Prints the
median wall and CPU milliseconds per step for each panel (CPU time is the fairer number on a shared
machine). The browser test (``make browser-test``) measures the same from the key press to the last image
drawn in Chromium.

    PYTHONPATH=. python benchmarks/panel_redraw.py [STEPS]
"""

from __future__ import annotations

import statistics
import sys
import time

from kvplan import DATA_DIR
from kvplan.notebook import Scenario, WhatIfPanel, co_tenant_bytes, launch_max_model_len, read_launch
from kvplan.plan import Evidence, ModelLayout, Policy, boot_free_bytes, decide
from kvplan.units import parse_size

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
    return walls, cpus


def main(steps: int = 10) -> None:
    for name, panel in panels().items():
        walls, cpus = step_times(panel, steps)
        print(
            f"{name}: {statistics.median(walls) * 1000:.0f} ms wall, {statistics.median(cpus) * 1000:.0f} ms CPU "
            f"per reserve step (median of {steps}; first {walls[0] * 1000:.0f} ms)"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
