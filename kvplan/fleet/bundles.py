"""One evidence bundle per approved class: :func:`kvplan.evidence.approve` over the class's clean hosts' logs.

Every host is a profiled boot of the same compatibility key, so the bundle's budget (each rank's worst
boot over the hosts, then the minimum over ranks) is the class's, and ``kvplan verify`` and ``kvplan
gate`` work on it as on a single launch. The bundle's inputs include the ``--query-gpu`` snapshot of the
class's first host that has one, so its key records the GPU type and driver every host of the class
showed (a class is one key) and a gate compares them. The class's name, labels and host list are
recorded in the bundle's note as JSON (hashed into its digest); :func:`note_hosts` reads the list back
for ``kvplan fleet gate``. Logs in object storage are fetched afresh to ``OUT/inputs/<host>/<file>``
(both names as :func:`kvplan.escape.safe_component` makes them safe, checked by
:func:`kvplan.escape.path_inside`, so every write stays inside ``OUT``); every file, fetched or local,
must still have the SHA-256 it had when the plan read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvplan.escape import path_inside, safe_component
from kvplan.evidence import AdmissionPlan, ModelLayout, Policy, approve, sha256_file
from kvplan.fleet.inputs import filesystem, is_snapshot
from kvplan.fleet.read import HostReading
from kvplan.io.dcgm import read_gpu_snapshot

NOTE_MARK = "fleet class "
FETCHED = "inputs"
#: The folder of a host whose name is no safe path component: ``host-`` and 16 hex digits of its SHA-256.
HOST_PREFIX = "host-"


def class_note(name: str, labels: Mapping[str, str], hosts: Sequence[str]) -> str:
    """The bundle note of a class: name, labels and hosts as one JSON object after :data:`NOTE_MARK`
    (a label or host name can hold any text and still not change the list).

    >>> class_note("H100", {"zone": "a"}, ["h1", "h2"])
    'fleet class {"class": "H100", "labels": {"zone": "a"}, "hosts": ["h1", "h2"]}'
    """
    return NOTE_MARK + json.dumps({"class": name, "labels": dict(labels), "hosts": list(hosts)})


def note_hosts(note: str) -> list[str] | None:
    """The hosts a fleet-class note lists (None: not a fleet bundle).

    >>> note_hosts(class_note("H100", {}, ["h1", "h 2; hosts: h3"])), note_hosts("CHG-1")
    (['h1', 'h 2; hosts: h3'], None)
    """
    if not note.startswith(NOTE_MARK):
        return None
    try:
        hosts = json.loads(note[len(NOTE_MARK) :]).get("hosts")
    except (ValueError, AttributeError):
        return None
    return [str(host) for host in hosts] if isinstance(hosts, list) else None


def class_inputs(
    hosts: Sequence[HostReading], out: Path, storage_options: Mapping[str, object] | None
) -> tuple[list[str], list[str]]:
    """The class's logs and one ``--query-gpu`` snapshot as local paths, remote ones fetched to
    ``out/inputs/<host>/<file>``; a file whose SHA-256 is not the one the plan read is refused."""
    logs: list[str] = []
    snapshot: list[str] = []
    for reading in hosts:
        for url in reading.files:
            if is_snapshot(url) and snapshot:
                continue
            local = _local_copy(reading, url, out, storage_options)
            if not is_snapshot(url):
                logs.append(local)
            elif read_gpu_snapshot(local)[1].kind == "gpus":  # nvidia-smi's CSV or a DCGM scrape
                snapshot.append(local)
    return logs, snapshot


def _local_copy(
    reading: HostReading, url: str, out: Path, storage_options: Mapping[str, object] | None
) -> str:
    """``url`` as a local path (fetched afresh when remote) with the SHA-256 the plan read, else a refusal."""
    local = url
    if "://" in url:
        fs, path = filesystem(url, storage_options)
        name = safe_component(path.rsplit("/", 1)[-1], "file-")
        target = path_inside(out, FETCHED, safe_component(reading.host, HOST_PREFIX), name)
        target.parent.mkdir(parents=True, exist_ok=True)
        local = str(target)
        partial = f"{local}.{os.getpid()}.partial"
        try:
            fs.get(path, partial)
            os.replace(partial, local)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    read = reading.digests.get(url)
    if read is None or sha256_file(local) != read:
        raise ValueError(
            f"{url}: not the file the plan read (SHA-256 {read or 'unknown'}): it changed since; plan again"
        )
    return local


def approve_class(
    name: str,
    labels: Mapping[str, str],
    hosts: Sequence[HostReading],
    out: Path,
    reserve_bytes: int,
    approver: str,
    model: str | None,
    plan: AdmissionPlan | None,
    storage_options: Mapping[str, object] | None,
) -> Path:
    """Write the class's bundle under ``out`` and return its folder (``kvplan.evidence.approve``)."""
    layout = ModelLayout(Path(model), {}) if model else None
    note = class_note(name, labels, [reading.host for reading in hosts])
    logs, snapshot = class_inputs(hosts, out, storage_options)
    return approve(logs, out, Policy(reserve_bytes), approver, note, layout, plan, nvidia_smi_paths=snapshot)
