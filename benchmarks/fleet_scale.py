"""Time and client memory of ``kvplan fleet plan`` on 100 / 1,000 / 10,000 hosts, synchronous vs cluster.

Generates each fleet in a temporary folder (never in the repository) with data/fleet/make_fleet.py: 8 ranks
per host (TP=8), vLLM 0.26.0 startup logs followed by serving stats lines (30–200 KB per host), both
nvidia-smi snapshots, 70 % H100 / 25 % H200 / 5 % H100 on another driver, 6 % co-tenants, 2 % failed
boots. Each run is its own process (``kvplan fleet plan FLEET --reserve 1GiB --model llama-3.1-70b
--json``), which reports its own peak resident memory (the client's; the cluster's workers are separate
processes) and the CPU seconds of itself, its workers and their fork server (on a shared machine, wall time
also counts the other processes' load: the CPU seconds show the work itself).

Goals (issue 13): the local cluster ≥ 1.6× the synchronous time on 2 cores; time linear in hosts; client
memory flat beyond the ledger itself. Printed per run: wall seconds, ms per host, CPU seconds of the client
and its workers, of the client alone, and the client's peak memory; then the ratio per fleet size and the
growth of wall time per tenfold hosts (linear: 10×).

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


def run(folder: Path, scheduler: str) -> tuple[float, float, float, int]:
    """One ``kvplan fleet plan`` in its own process: (wall seconds, CPU seconds of it and of its workers,
    CPU seconds of the client alone, the client's own peak resident memory [bytes]: the process running
    the plan, not the cluster's workers)."""
    command = [sys.executable, __file__, "--client", str(folder), scheduler]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {result.stderr[-2000:]}")
    cpu, own, peak = (float(value) for value in result.stdout.split())
    return seconds, cpu, own, int(peak)


def client(folder: str, scheduler: str) -> None:
    """Run the plan here (``kvplan fleet plan FLEET --reserve 1GiB --model llama-3.1-70b --scheduler S --json``,
    its JSON discarded) and print this process's and its reaped children's CPU seconds, its own CPU seconds
    and its own peak RSS."""
    import contextlib
    import io

    from kvplan.cli import main as kvplan_main

    argv = [
        "fleet",
        "plan",
        folder,
        "--reserve",
        "1GiB",
        "--model",
        "llama-3.1-70b",
        "--scheduler",
        scheduler,
    ]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = kvplan_main([*argv, "--json"])
    if status != 0:
        raise SystemExit(f"kvplan {' '.join(argv)} exited {status}")
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_cpu = own.ru_utime + own.ru_stime
    total = own_cpu + workers.ru_utime + workers.ru_stime + living_children_cpu()
    print(total, own_cpu, own.ru_maxrss * 1024)  # Linux: KiB


def living_children_cpu() -> float:
    """CPU seconds of this process's children still running and of the children they reaped: the fork server
    and the cluster's workers forked from it (reaped by the fork server, so not in ``RUSAGE_CHILDREN``)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name: state, ppid, ...
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == os.getpid():
            total += sum(int(ticks) for ticks in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--schedulers", nargs="+", default=["synchronous", "local"])
    parser.add_argument("--client", nargs=2, metavar=("FLEET", "SCHEDULER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client(*args.client)
        return
    print(
        f"{'hosts':>7} {'logs MB':>8} {'KB/host':>8} {'scheduler':>12} {'seconds':>9} {'ms/host':>8} "
        f"{'CPU s':>8} {'client CPU s':>12} {'client MB':>10}",
        flush=True,
    )
    rows = []
    for hosts in args.hosts:
        with tempfile.TemporaryDirectory(prefix="kvplan-fleet-bench-") as tmp:
            folder = Path(tmp) / "fleet"
            size, _ = generate(hosts, folder)
            for scheduler in args.schedulers:
                seconds, cpu, own, peak = run(folder, scheduler)
                rows.append((hosts, scheduler, seconds, peak))
                line = f"{hosts:>7,} {size / 1e6:>8.1f} {size / hosts / 1e3:>8.1f} {scheduler:>12} "
                print(
                    f"{line}{seconds:>9.1f} {seconds / hosts * 1e3:>8.1f} {cpu:>8.1f} {own:>12.1f} "
                    f"{peak / 2**20:>10.0f}",
                    flush=True,
                )
    times = {(hosts, scheduler): seconds for hosts, scheduler, seconds, _ in rows}
    for hosts in args.hosts:
        if (hosts, "synchronous") in times and (hosts, "local") in times:
            ratio = times[hosts, "synchronous"] / times[hosts, "local"]
            print(f"{hosts:>7,} hosts: local cluster {ratio:.2f}× the synchronous time")
    for scheduler in args.schedulers:
        for small, large in zip(args.hosts, args.hosts[1:]):
            if (small, scheduler) in times and (large, scheduler) in times:
                growth = times[large, scheduler] / times[small, scheduler]
                print(
                    f"{scheduler}: {small:,} → {large:,} hosts ({large / small:.0f}× hosts): {growth:.1f}× time"
                )
    print(f"load average at the end: {' '.join(f'{load:.1f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
