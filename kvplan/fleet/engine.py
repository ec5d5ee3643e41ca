"""Where the fleet is read: Dask's synchronous scheduler, an embedded local cluster, or a running scheduler.

``scheduler`` is ``"synchronous"`` (one process, no cluster), ``"local"`` (an embedded
``distributed.LocalCluster``: processes, one per core, one thread each; the default), or a scheduler
address ``tcp://HOST:8786`` (``DASK_SCHEDULER_ADDRESS`` when no scheduler is named). Reading is one task
per group of hosts (:data:`HOSTS_PER_TASK`); each returns only its hosts' readings. Results come back in
host order whatever the scheduler, so the answer is identical on all of them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from kvplan.fleet.inputs import HostFiles
from kvplan.fleet.read import HostReading, read_host

#: Hosts per Dask task: enough work per task to amortise the scheduler, small enough to spread.
HOSTS_PER_TASK = 8
SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"

Progress = Callable[[int, int], None]


def default_scheduler(given: str | None) -> str:
    """The scheduler to use: the one given, else ``DASK_SCHEDULER_ADDRESS``, else ``"local"``.

    >>> default_scheduler("synchronous")
    'synchronous'
    """
    return given or os.environ.get(SCHEDULER_ENV) or "local"


def run_group(task: Callable, group: Sequence[HostFiles], *args: object) -> list:
    """One Dask task's work: ``task(files, *args)`` for each host of ``group``, in order."""
    return [task(files, *args) for files in group]


def _groups(hosts: Sequence[HostFiles], size: int) -> list[Sequence[HostFiles]]:
    return [hosts[start : start + size] for start in range(0, len(hosts), size)]


@contextmanager
def dask_client(scheduler: str, announce: Callable[[str], None] | None = None) -> Iterator[object | None]:
    """A ``distributed.Client`` for ``scheduler`` (None for ``"synchronous"``), closed on exit.

    ``announce`` receives the dashboard link of a cluster.
    """
    if scheduler == "synchronous":
        yield None
        return
    import dask
    from distributed import Client, LocalCluster

    cluster = None
    if scheduler == "local":
        cores = os.cpu_count() or 1
        # the workers' statistical profiler samples every task's stack: ~14 % of a worker's CPU here
        with dask.config.set({"distributed.worker.profile.enabled": False}):
            cluster = LocalCluster(
                n_workers=cores,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.CRITICAL,  # a worker heartbeat racing the shutdown is no error of the plan
            )
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise OSError(f"{scheduler}: cannot reach the Dask scheduler ({exc})") from None
    try:
        if announce is not None and client.dashboard_link:
            announce(f"Dask dashboard: {client.dashboard_link}")
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def read_fleet(
    hosts: Sequence[HostFiles],
    storage_options: Mapping[str, object] | None = None,
    scheduler: str = "local",
    progress: Progress | None = None,
    announce: Callable[[str], None] | None = None,
) -> list[HostReading]:
    """Every host's reading (:func:`kvplan.fleet.read.read_host`), in the order of ``hosts``, on the given
    scheduler; ``progress(done, total)`` is called as groups finish (hosts read / hosts)."""
    return map_hosts(read_host, hosts, (storage_options,), scheduler, progress, announce)


def map_hosts(
    task: Callable,
    hosts: Sequence[HostFiles],
    args: Sequence[object] = (),
    scheduler: str = "local",
    progress: Progress | None = None,
    announce: Callable[[str], None] | None = None,
) -> list:
    """``task(files, *args)`` for every host, spread over the scheduler in groups, results in host order."""
    groups = _groups(list(hosts), HOSTS_PER_TASK)
    total = len(hosts)
    done = 0
    readings: list[list | None] = [None] * len(groups)
    with dask_client(scheduler, announce) as client:
        if client is None:
            for index, group in enumerate(groups):
                readings[index] = run_group(task, group, *args)
                done += len(group)
                if progress:
                    progress(done, total)
        else:
            from distributed import as_completed

            futures = {
                client.submit(run_group, task, group, *args, pure=False): index
                for index, group in enumerate(groups)
            }
            for future in as_completed(futures):
                readings[futures[future]] = future.result()
                done += len(groups[futures[future]])
                if progress:
                    progress(done, total)
                future.release()
    return [reading for group in readings for reading in group or ()]


def stderr_progress(every: int = 0) -> Progress:
    """A progress callback printing ``read N/TOTAL hosts`` on stderr (about 20 lines per run).

    >>> stderr_progress()(0, 0) is None
    True
    """

    def report(done: int, total: int) -> None:
        step = every or max(1, total // 20)
        if total and (done == total or done % step < HOSTS_PER_TASK):
            print(f"read {done:,}/{total:,} hosts", file=sys.stderr, flush=True)

    return report
