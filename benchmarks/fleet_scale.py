"""Time and client memory of ``kvplan fleet plan`` on 100 / 1,000 / 10,000 hosts, synchronous vs cluster.

Generates each fleet in a temporary folder (never in the repository) with data/fleet/make_fleet.py: 8 ranks
per host (TP=8), vLLM 0.26.0 startup logs followed by serving stats lines (30–200 KB per host), both
nvidia-smi snapshots, 70 % H100 / 25 % H200 / 5 % H100 on another driver, 6 % co-tenants, 2 % failed
boots. Each run is its own process (``kvplan fleet plan FLEET --reserve 1GiB --model llama-3.1-70b
--json``), so its peak resident memory (the client's; the cluster's workers are separate processes) is
that run's alone.

Goals (issue 13): the local cluster ≥ 1.6× the synchronous time on 2 cores; time linear in hosts; client
memory flat beyond the ledger itself.

    .venv/bin/python benchmarks/fleet_scale.py --hosts 100 1000 10000
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "data" / "fleet" / "make_fleet.py"


def generate(hosts: int, folder: Path) -> tuple[int, float]:
    """Write a fleet of ``hosts`` into ``folder``; returns (bytes of logs, seconds)."""
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(GENERATOR),
            "--hosts",
            str(hosts),
            "--out",
            str(folder),
            "--serving-lines",
            "250",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    size = sum(path.stat().st_size for path in folder.glob("*/*.log"))
    return size, time.perf_counter() - start


def run(folder: Path, scheduler: str) -> tuple[float, int]:
    """One ``kvplan fleet plan`` in its own process: (seconds, peak resident memory of it [bytes])."""
    command = [
        sys.executable,
        "-m",
        "kvplan",
        "fleet",
        "plan",
        str(folder),
        "--reserve",
        "1GiB",
        "--model",
        "llama-3.1-70b",
        "--scheduler",
        scheduler,
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return seconds, usage.ru_maxrss * 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--schedulers", nargs="+", default=["synchronous", "local"])
    args = parser.parse_args()
    print(
        f"{'hosts':>7} {'logs MB':>8} {'KB/host':>8} {'scheduler':>12} {'seconds':>9} {'ms/host':>8} "
        f"{'client MB':>10}"
    )
    rows = []
    for hosts in args.hosts:
        with tempfile.TemporaryDirectory(prefix="kvplan-fleet-bench-") as tmp:
            folder = Path(tmp) / "fleet"
            size, _ = generate(hosts, folder)
            for scheduler in args.schedulers:
                seconds, peak = run(folder, scheduler)
                rows.append((hosts, scheduler, seconds, peak))
                line = f"{hosts:>7,} {size / 1e6:>8.1f} {size / hosts / 1e3:>8.1f} {scheduler:>12} "
                print(
                    f"{line}{seconds:>9.1f} {seconds / hosts * 1e3:>8.1f} {peak / 2**20:>10.0f}", flush=True
                )
    times = {(hosts, scheduler): seconds for hosts, scheduler, seconds, _ in rows}
    for hosts in args.hosts:
        if (hosts, "synchronous") in times and (hosts, "local") in times:
            ratio = times[hosts, "synchronous"] / times[hosts, "local"]
            print(f"{hosts:>7,} hosts: local cluster {ratio:.2f}× the synchronous time")
    print(f"benchmark process peak: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
