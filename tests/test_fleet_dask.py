"""The same fleet gives the same answer on Dask's synchronous scheduler, a LocalCluster and a separate
`dask scheduler` with two `dask worker` processes, all started here on 127.0.0.1 and stopped by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvplan import DATA_DIR
from kvplan.fleet import FleetPolicy, plan_fleet

FLEET = DATA_DIR / "fleet" / "small"
#: 12 hosts: clean H100 and H200 hosts, the limiting co-tenant, the OOM, cut and no-boot hosts.
HOSTS = [
    "gpu-00000",
    "gpu-00002",
    "gpu-00003",
    "gpu-00004",
    "gpu-00005",
    "gpu-00009",
    "gpu-00017",
    "gpu-00019",
    "gpu-00029",
    "gpu-00034",
    "gpu-00035",
    "gpu-00006",
]
GiB = 2**30


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    rows = ["host,path,zone"]
    for host in HOSTS:
        rows += [f"{host},{file},z" for file in sorted((FLEET / host).iterdir())]
    path = tmp_path_factory.mktemp("fleet") / "manifest.csv"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def answer(manifest: str, scheduler: str) -> dict:
    return plan_fleet(manifest, FleetPolicy(GiB), ["llama-3.1-70b"], scheduler=scheduler).to_dict()


#: How long the scheduler and its workers may take to start on a loaded 2-core machine.
START_SECONDS = 300


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def dask_cluster():
    """`dask scheduler` + two `dask worker` processes on 127.0.0.1; yields the scheduler address."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
        ),
    }
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    worker = [
        sys.executable,
        "-m",
        "distributed.cli.dask_worker",
        address,
        "--nthreads",
        "1",
        "--nworkers",
        "1",
        "--host",
        "127.0.0.1",
        "--no-dashboard",
    ]
    processes = [
        subprocess.Popen(
            [*dask, "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    try:
        deadline = time.monotonic() + START_SECONDS
        while not listening(port):
            if time.monotonic() > deadline or processes[0].poll() is not None:
                pytest.fail(f"the dask scheduler did not start on 127.0.0.1 within {START_SECONDS} s")
            time.sleep(0.2)
        processes += [
            subprocess.Popen(
                worker, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
            for _ in range(2)
        ]
        from distributed import Client

        with Client(address, timeout=f"{START_SECONDS}s") as client:
            while len(client.scheduler_info()["workers"]) < 2:  # each worker imports pandas and dask first
                exited = [p.returncode for p in processes if p.poll() is not None]
                if exited or time.monotonic() > deadline:
                    pytest.fail(f"two dask workers did not join within {START_SECONDS} s (exited: {exited})")
                time.sleep(0.5)
        yield address
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_three_schedulers_same_answer(manifest, dask_cluster):
    synchronous = answer(manifest, "synchronous")
    # the answer itself: gpu-00019 limits its class (room 58,539,581,440 − 1 GiB → 87,685 blocks of 655,360)
    h100 = next(c for c in synchronous["classes"] if c["limiting_host"] == "gpu-00019")
    assert h100["uniform_budget_bytes"] == 87_685 * 655_360
    assert [e["host"] for e in synchronous["excluded"]] == ["gpu-00029", "gpu-00034", "gpu-00035"]
    assert answer(manifest, "local") == synchronous
    assert answer(manifest, dask_cluster) == synchronous


def _parent_pid() -> int:
    """The operating system's parent of this process (multiprocessing's own record names the requester)."""
    return os.getppid()


def test_local_workers_are_not_forked_from_the_client():
    """The embedded cluster's workers start from a fork server, never forked from the client: the client
    already runs threads (Dask's event loop, fsspec's, a Jupyter kernel's) and a fork taken while one of them
    holds a lock deadlocks the worker (a full-suite run once hung here with forked workers)."""
    from kvplan.fleet.read import dask_client

    def readers_imported() -> bool:  # a local function travels by value: asking imports nothing in the worker
        return "kvplan.fleet.read" in sys.modules

    with dask_client("local") as client:
        imported = client.run(readers_imported)  # before any function of this module reaches a worker
        parents = set(client.run(_parent_pid).values())
    assert parents and os.getpid() not in parents
    # issue 23: the fork server imported the readers once, each worker starts with them (~0.7 CPU s each)
    assert imported and all(imported.values())
