"""One evidence bundle per approved class: :func:`kvplan.evidence.approve` over the class's clean hosts' logs.

Every host is a profiled boot of the same compatibility key, so the bundle's budget (each rank's worst
boot over the hosts, then the minimum over ranks) is the class's, and ``kvplan verify`` and ``kvplan
gate`` work on it as on a single launch. The class's name, labels and host list are recorded in the
bundle's note (hashed into its digest); :func:`note_hosts` reads the list back for ``kvplan fleet gate``.
Logs in object storage are fetched first to ``OUT/inputs/<host>/`` (the bundle copies them again).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvplan.evidence import AdmissionPlan, ModelLayout, Policy, approve, read_bundle
from kvplan.fleet.inputs import filesystem
from kvplan.fleet.read import HostReading

HOSTS_MARK = "hosts: "
FETCHED = "inputs"


def class_note(name: str, labels: Mapping[str, str], hosts: Sequence[str]) -> str:
    """The bundle note of a class: name, labels and hosts (space-separated, last).

    >>> class_note("H100", {"zone": "a"}, ["h1", "h2"])
    'fleet class H100; labels: zone=a; hosts: h1 h2'
    """
    shown = ", ".join(f"{key}={value}" for key, value in labels.items()) or "none"
    return f"fleet class {name}; labels: {shown}; {HOSTS_MARK}{' '.join(hosts)}"


def note_hosts(note: str) -> list[str] | None:
    """The hosts a fleet-class note lists (None: not a fleet bundle).

    >>> note_hosts(class_note("H100", {}, ["h1", "h2"])), note_hosts("CHG-1")
    (['h1', 'h2'], None)
    """
    if not note.startswith("fleet class ") or HOSTS_MARK not in note:
        return None
    return note.rsplit(HOSTS_MARK, 1)[1].split()


def bundle_hosts(bundle: str | os.PathLike) -> list[str] | None:
    """The hosts an approved bundle was made for (None: not a fleet bundle)."""
    return note_hosts(str(read_bundle(bundle).get("note") or ""))


def local_logs(
    hosts: Sequence[HostReading], out: Path, storage_options: Mapping[str, object] | None
) -> list[str]:
    """The class's log files as local paths, fetching remote ones to ``out/inputs/<host>/<file>``."""
    paths = []
    for reading in hosts:
        for url in reading.files:
            if url.rsplit("/", 1)[-1].lower().startswith("nvidia-smi"):
                continue
            if "://" not in url:
                paths.append(url)
                continue
            fs, path = filesystem(url, storage_options)
            local = out / FETCHED / reading.host / path.rsplit("/", 1)[-1]
            local.parent.mkdir(parents=True, exist_ok=True)
            if not local.exists():
                fs.get(path, str(local))
            paths.append(str(local))
    return paths


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
    return approve(
        local_logs(hosts, out, storage_options), out, Policy(reserve_bytes), approver, note, layout, plan
    )
