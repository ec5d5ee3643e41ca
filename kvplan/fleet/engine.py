"""Where the fleet is read: Dask's synchronous scheduler, an embedded local cluster, or a running scheduler.

``scheduler`` is ``"synchronous"`` (one process, no cluster), ``"local"`` (an embedded
``distributed.LocalCluster``: processes, one per core, one thread each; the default), or a scheduler
address ``tcp://HOST:8786`` (``DASK_SCHEDULER_ADDRESS`` when no scheduler is named). Reading is one task
per group of hosts (:func:`hosts_per_task`: about :data:`TASKS_PER_THREAD` tasks per worker thread); each
returns only its hosts' readings. Results come back in host order whatever the scheduler, so the answer
is identical on all of them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from kvplan.fleet.inputs import HostFiles
from kvplan.fleet.read import HostReading, read_host

#: Tasks per worker thread: enough to even out the last tasks, few enough that the scheduler's cost per
#: task (~10 ms of the client's CPU) stays small against a task's hosts (~15 ms of CPU each).
TASKS_PER_THREAD = 8
#: Hosts per Dask task, at least (amortises the scheduler on small fleets) and at most (progress, and
#: even work at the end, on large ones).
MIN_HOSTS_PER_TASK = 8
MAX_HOSTS_PER_TASK = 64
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


def hosts_per_task(hosts: int, threads: int) -> int:
    """Hosts per task for ``hosts`` hosts on ``threads`` worker threads: about :data:`TASKS_PER_THREAD`
    tasks per thread, within :data:`MIN_HOSTS_PER_TASK` and :data:`MAX_HOSTS_PER_TASK`.

    >>> hosts_per_task(100, 2), hosts_per_task(1_000, 2), hosts_per_task(10_000, 2)
    (8, 63, 64)
    """
    wanted = -(-hosts // max(1, threads * TASKS_PER_THREAD))
    return max(MIN_HOSTS_PER_TASK, min(MAX_HOSTS_PER_TASK, wanted))


def _groups(hosts: Sequence[HostFiles], size: int) -> list[Sequence[HostFiles]]:
    return [hosts[start : start + size] for start in range(0, len(hosts), size)]


def _threads(client) -> int:
    """Worker threads of the cluster behind ``client`` (1 on the synchronous scheduler)."""
    return 1 if client is None else max(1, sum(client.nthreads().values()))


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
        settings = {
            # the workers' statistical profiler samples every task's stack: ~14 % of a worker's CPU here
            "distributed.worker.profile.enabled": False,
            # workers start from a fork server (a clean process), never forked from this one: the client
            # already runs threads (Dask's event loop, fsspec's, a Jupyter kernel's), and a fork taken while
            # one of them holds a lock deadlocks the worker (seen once in test_fleet_dask)
            "distributed.worker.multiprocessing-method": _start_method(),
            # the cluster's own clocks (event-loop watchdog every 20 ms, each worker's memory check every
            # 100 ms, the dashboard's system monitor every 0.5 s) cost ~8 % of a core while it reads
            "distributed.admin.tick.interval": "1s",
            "distributed.worker.memory.monitor-interval": "1s",
            "distributed.admin.system-monitor.interval": "2s",
        }
        with dask.config.set(settings):
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


def _start_method() -> str:
    """``"forkserver"`` on Linux, else ``"spawn"`` (macOS's system libraries are not fork-safe; Windows has no fork).

    Never plain ``"fork"``: forking a process that runs threads can copy a held lock into the child.
    """
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


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
    total = len(hosts)
    done = 0
    with dask_client(scheduler, announce) as client:
        groups = _groups(list(hosts), hosts_per_task(total, _threads(client)))
        readings: list[list | None] = [None] * len(groups)
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
    """A progress callback printing ``read N/TOTAL hosts`` on stderr (about 20 lines per run): once each
    time ``done`` enters a new step of ``every`` hosts (default: a twentieth of the total), and at the end.

    >>> stderr_progress()(0, 0) is None
    True
    """
    printed = [-1]

    def report(done: int, total: int) -> None:
        step = every or max(1, total // 20)
        if total and (done == total or done // step != printed[0]):
            printed[0] = done // step
            print(f"read {done:,}/{total:,} hosts", file=sys.stderr, flush=True)

    return report
