"""Reading a fleet: each host read as ``kvplan budget`` reads one launch (a host that fails a check is excluded),
on Dask: ``scheduler`` ``"synchronous"``, ``"local"`` (a ``LocalCluster``, the default) or ``tcp://HOST:8786``."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pandas as pd

from kvplan.fleet.inputs import LOG_SUFFIXES, HostFiles, filesystem
from kvplan.ledger import LedgerWarning, compatibility_key, plain_value, room_per_rank
from kvplan.notes import Note
from kvplan.plan import Evidence, InputFileError, read_evidence
from kvplan.plan.reading import STARTUP_LINES
from kvplan.room import check_dropped_ranks, refuse_failed_boots

#: Ledger columns a host's reading keeps per rank of its worst boot (for the likely cause of a weak host).
PART_COLUMNS = (
    *("init_free_bytes", "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes"),
    *("other_process_bytes", "total_bytes"),
)
#: How many characters of a refusal an excluded host's reason keeps.
REASON_CHARS = 400
#: Tasks per worker thread (evens out the last tasks; the scheduler costs ~10 ms of CPU a task, a host ~15 ms).
TASKS_PER_THREAD = 8
#: Hosts per Dask task, at least (amortises the scheduler) and at most (progress and even work at the end).
MIN_HOSTS_PER_TASK, MAX_HOSTS_PER_TASK = 8, 64

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class HostReading:
    """One host's files: per rank its room and :data:`PART_COLUMNS` [bytes], why excluded, digests, identities."""

    host: str
    files: tuple[str, ...]
    labels: Mapping[str, str]
    key: Mapping[str, object] | None = None
    rooms: tuple[dict, ...] | None = None
    excluded: str | None = None
    warnings: tuple[Note, ...] = ()
    digests: Mapping[str, str] = field(default_factory=dict)
    identities: tuple[str, ...] = ()


def read_host(files: HostFiles, storage_options: Mapping[str, object] | None = None) -> HostReading:
    """Read and check one host (runs inside a Dask task); never raises for the host's own content."""
    names = (*files.logs, *files.snapshots)
    base = {"host": files.host, "files": names, "labels": dict(files.labels)}
    if files.missing or not files.logs:
        return HostReading(
            **base, excluded="; ".join(files.missing) or "no log files (expected <host>/*.log)"
        )
    notes: list[Note] = []
    try:
        with local_files(names, storage_options) as local:
            logs, snapshots = local[: len(files.logs)], local[len(files.logs) :]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", LedgerWarning)
                evidence = read_evidence(logs, snapshots)
                notes += [w if isinstance(w, Note) else Note(w, file=files.host) for w in evidence.warnings]
                require_boot_per_file(evidence, files.logs)
                ledger, lines = evidence.ledger, evidence.lines
                key = compatibility_key(ledger, lines)
                check_dropped_ranks(evidence.warnings)
                refuse_failed_boots(ledger, lines)
                rooms = room_per_rank(ledger, lines=lines, key=key)
            digests, identities = evidence_identities(evidence, logs, snapshots)
        ledger_notes = [w for w in caught if issubclass(w.category, LedgerWarning)]
        notes += [Note(str(w.message), code="ledger", file=files.host) for w in ledger_notes]
    except FileNotFoundError as exc:
        return HostReading(**base, excluded=f"{exc.filename or exc}: no such file")
    except ValueError as exc:  # LedgerError, LogParseError, NvidiaSmiError: the host's evidence is refused
        return HostReading(**base, excluded=_short(str(exc)), warnings=tuple(notes))
    records = _with_parts(rooms, ledger)
    return HostReading(
        **base, key=key, rooms=records, warnings=tuple(notes), digests=digests, identities=identities
    )


@contextmanager
def local_files(
    urls: Sequence[str], storage_options: Mapping[str, object] | None
) -> Iterator[list[tuple[str, str]]]:
    """``(local path, URL)`` of each file, a remote one fetched to a temporary folder removed on exit."""
    with tempfile.TemporaryDirectory(prefix="kvplan-fleet-", ignore_cleanup_errors=True) as folder:
        pairs = []
        for number, url in enumerate(urls):
            local = url
            if "://" in url:
                fs, path = filesystem(url, storage_options)
                suffix = next((s for s in LOG_SUFFIXES if url.lower().endswith(s)), ".log")
                local = os.path.join(folder, f"{number}{suffix}")
                fs.get(path, local)
            pairs.append((local, url))
        yield pairs


def require_boot_per_file(evidence: Evidence, logs: Sequence[str]) -> None:
    """Refuse (:class:`kvplan.plan.InputFileError`) the first log without a vLLM boot (a ledger CSV is one)."""
    shown = {str(boot["source"]) for boot in evidence.metadata.boots} if evidence.metadata else set()
    shown |= {str(source) for source in evidence.ledger["source"].unique()}
    for url in logs:
        if url not in shown:
            raise InputFileError(f"{url}: not a vLLM log (no vLLM boot found): expected {STARTUP_LINES}")


def evidence_identities(
    evidence: Evidence, logs: Sequence[tuple[str, str]], snapshots: Sequence[tuple[str, str]]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Each file's SHA-256 by URL, and the host's identities: ``boot:`` its boots' hashes, ``gpu:`` its GPU UUIDs."""
    pids: dict[tuple[str, int], list[int]] = {}
    for source, boot, pid in zip(*(evidence.ledger[name].tolist() for name in ("source", "boot", "pid"))):
        if not pd.isna(pid):
            pids.setdefault((str(source), int(boot)), []).append(int(pid))
    boots = evidence.metadata.boots if evidence.metadata else ()
    digests, identities = {}, []
    for path, url in logs:
        ranges = [(int(b["boot"]), b["first_line"], b["last_line"]) for b in boots if b["source"] == url]
        digests[url], boot_hashes = _hash_lines(path, ranges)
        for boot, boot_hash in boot_hashes.items():
            boot_hash.update(repr(sorted(pids.get((url, boot), []))).encode())
            identities.append("boot:" + boot_hash.hexdigest())
        if not ranges:  # a ledger CSV: the file is the boot
            identities.append("boot:" + digests[url])
    digests.update((url, _hash_lines(path, [])[0]) for path, url in snapshots)
    gpus = evidence.gpus["gpu_uuid"].tolist() if evidence.gpus is not None else []  # the snapshots' GPUs
    identities += [f"gpu:{uuid}" for uuid in gpus if not pd.isna(uuid)]
    return digests, tuple(sorted(set(identities)))


def _hash_lines(path: str, ranges: Sequence[tuple[int, int | None, int | None]]) -> tuple[str, dict]:
    """The file's SHA-256 and, per ``(boot, first line, last line)`` of ``ranges``, a hash of its lines."""
    whole = hashlib.sha256()
    hashes = {boot: hashlib.sha256() for boot, _, _ in ranges}
    with open(path, "rb") as stream:
        for number, line in enumerate(stream, start=1):
            whole.update(line)
            for boot, first, last in ranges:
                if (first or 1) <= number and (last is None or number <= last):
                    hashes[boot].update(line)
    return whole.hexdigest(), hashes


def _with_parts(rooms: pd.DataFrame, ledger: pd.DataFrame) -> tuple[dict, ...]:
    """One plain record per rank: its room and the ledger parts of its worst boot."""
    first: dict[tuple, int] = {}
    for position, place in enumerate(zip(*(ledger[name].tolist() for name in ("source", "boot", "rank")))):
        first.setdefault(tuple(plain_value(value) for value in place), position)
    parts = {column: ledger[column].tolist() for column in PART_COLUMNS if column in ledger.columns}
    names = rooms.columns.tolist()
    records = []
    for rank, *values in zip(rooms.index.tolist(), *(rooms[name].tolist() for name in names)):
        record = {"rank": int(rank), **{name: plain_value(value) for name, value in zip(names, values)}}
        position = first.get((record["source"], record["boot"], int(rank)))
        for column in PART_COLUMNS:
            found = position is not None and column in parts
            record[column] = plain_value(parts[column][position]) if found else None
        records.append(record)
    return tuple(records)


def _short(text: str) -> str:
    """A refusal cut to its first item and :data:`REASON_CHARS` characters, with the count of the rest."""
    items = text.split("; ")
    first = items[0] if len(items[0]) <= REASON_CHARS else items[0][: REASON_CHARS - 1] + "…"
    return first + (f" (+{len(items) - 1} more)" if len(items) > 1 else "")


def default_scheduler(given: str | None) -> str:
    """The scheduler to use: the one given, else ``DASK_SCHEDULER_ADDRESS``, else ``"local"``."""
    return given or os.environ.get("DASK_SCHEDULER_ADDRESS") or "local"


def run_group(task: Callable, group: Sequence[HostFiles], *args: object) -> list:
    """One Dask task's work: ``task(files, *args)`` for each host of ``group``, in order."""
    return [task(files, *args) for files in group]


def hosts_per_task(hosts: int, threads: int) -> int:
    """Hosts per task: about :data:`TASKS_PER_THREAD` tasks per worker thread, within the bounds."""
    wanted = -(-hosts // max(1, threads * TASKS_PER_THREAD))
    return max(MIN_HOSTS_PER_TASK, min(MAX_HOSTS_PER_TASK, wanted))


@contextmanager
def dask_client(scheduler: str, announce: Callable[[str], None] | None = None) -> Iterator[object | None]:
    """A ``distributed.Client`` for ``scheduler`` (None: synchronous), closed on exit; ``announce`` gets its link."""
    if scheduler == "synchronous":
        yield None
        return
    method = "forkserver" if sys.platform.startswith("linux") else "spawn"
    if scheduler == "local" and method == "forkserver":
        import multiprocessing.forkserver

        # the fork server imports Dask, pandas and the readers once while this process starts the scheduler;
        # each worker forked from it has them (instead of importing the readers itself: ~0.7 CPU s a worker)
        multiprocessing.set_forkserver_preload(["distributed", "kvplan.fleet"])
        multiprocessing.forkserver.ensure_running()
    import dask
    from distributed import Client, LocalCluster

    cluster = None
    if scheduler == "local":
        # no worker profile (~14 % of a worker's CPU), no fork of this threaded process (a fork under one's lock
        # deadlocks), the cluster's own clocks slowed (~8 % of a core at their defaults)
        settings = {
            "distributed.worker.profile.enabled": False,
            "distributed.worker.multiprocessing-method": method,
            "distributed.admin.tick.interval": "1s",
            "distributed.worker.memory.monitor-interval": "1s",
            "distributed.admin.system-monitor.interval": "2s",
        }
        with dask.config.set(settings):
            # silent: a worker heartbeat racing the shutdown is no error of the plan
            kw = {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0", "silence_logs": logging.CRITICAL}
            cluster = LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True, **kw)
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
    """Every host's :func:`read_host`, in host order; ``progress(hosts read, hosts)`` as groups finish."""
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
    hosts, done = list(hosts), 0
    with dask_client(scheduler, announce) as client:
        size = hosts_per_task(len(hosts), 1 if client is None else max(1, sum(client.nthreads().values())))
        groups = [hosts[start : start + size] for start in range(0, len(hosts), size)]
        readings: list[list] = [[] for _ in groups]
        if client is None:
            finished = ((index, run_group(task, group, *args)) for index, group in enumerate(groups))
        else:
            from distributed import as_completed

            futures = {client.submit(run_group, task, g, *args, pure=False): i for i, g in enumerate(groups)}
            # each future dropped (so released) once its result is taken
            finished = ((futures.pop(future), future.result()) for future in as_completed(futures))
        for index, result in finished:
            readings[index] = result
            done += len(result)
            if progress:
                progress(done, len(hosts))
    return [reading for group in readings for reading in group]


def stderr_progress(every: int = 0) -> Progress:
    """A callback printing ``read N/TOTAL hosts`` on stderr every ``every`` hosts (default: 1/20) and at the end."""
    printed = [-1]

    def report(done: int, total: int) -> None:
        step = every or max(1, total // 20)
        if total and (done == total or done // step != printed[0]):
            printed[0] = done // step
            print(f"read {done:,}/{total:,} hosts", file=sys.stderr, flush=True)

    return report
