"""A class's evidence bundle (:func:`kvplan.evidence.approve` of its clean hosts' logs, its note listing them),
and the canary gate: each host judged as ``kvplan gate`` judges one launch, against the bundle that lists it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from kvplan.checks import gate_verdict
from kvplan.checks.gate import Approved, gate_checks
from kvplan.escape import path_inside, safe_component
from kvplan.evidence import ModelLayout, Policy, approve, sha256_file, verified_approval
from kvplan.fleet.classes import FleetClass, FleetPolicy
from kvplan.fleet.inputs import FleetInputError, HostFiles, filesystem, is_snapshot, list_fleet
from kvplan.fleet.read import HostReading, Progress, local_files, map_hosts
from kvplan.io.gpu_snapshot import read_gpu_snapshot
from kvplan.ledger import compatibility_key
from kvplan.plan import read_evidence

NOTE_MARK = "fleet class "
FETCHED = "inputs"
#: The folder of a host whose name is no safe path component: ``host-`` and 16 hex digits of its SHA-256.
HOST_PREFIX = "host-"
_EXIT_PASS, _EXIT_FAIL, _EXIT_CANNOT_JUDGE = 0, 1, 2  # as kvplan gate


def class_note(name: str, labels: Mapping[str, str], hosts: Sequence[str]) -> str:
    """The bundle note of a class: name, labels and hosts as JSON after :data:`NOTE_MARK`."""
    return NOTE_MARK + json.dumps({"class": name, "labels": dict(labels), "hosts": list(hosts)})


def note_hosts(note: str) -> list[str] | None:
    """The hosts a fleet-class note lists (None: not a fleet bundle)."""
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
    """The class's logs and one ``--query-gpu`` snapshot as local paths (remote ones fetched to
    ``out/inputs/<host>/``), each refused unless it has the SHA-256 the plan read."""
    logs: list[str] = []
    snapshot: list[str] = []  # the first --query-gpu one
    for reading in hosts:
        for url in (url for url in reading.files if not (is_snapshot(url) and snapshot)):
            local = url
            if "://" in url:
                fs, path = filesystem(url, storage_options)
                name = safe_component(path.rsplit("/", 1)[-1], "file-")
                target = path_inside(out, FETCHED, safe_component(reading.host, HOST_PREFIX), name)
                target.parent.mkdir(parents=True, exist_ok=True)
                local, partial = str(target), f"{target}.{os.getpid()}.partial"
                try:
                    fs.get(path, partial)
                    os.replace(partial, local)
                finally:
                    if os.path.exists(partial):
                        os.remove(partial)
            read = reading.digests.get(url)
            if read is None or sha256_file(local) != read:
                why = f"(SHA-256 {read or 'unknown'}): it changed since; plan again"
                raise ValueError(f"{url}: not the file the plan read {why}")
            if not is_snapshot(url):
                logs.append(local)
            elif read_gpu_snapshot(local)[1].kind == "gpus":  # nvidia-smi's CSV or a DCGM scrape
                snapshot.append(local)
    return logs, snapshot


def approve_class(
    fleet_class: FleetClass,
    out: Path,
    policy: FleetPolicy,
    model: str | None,
    storage_options: Mapping[str, object] | None,
) -> Path:
    """Write the class's bundle under ``out`` and return its folder (``kvplan.evidence.approve``)."""
    layout = ModelLayout(Path(model), {}) if model else None
    note = class_note(fleet_class.name, fleet_class.labels, [r.host for r in fleet_class.hosts])
    logs, gpus = class_inputs(fleet_class.hosts, out, storage_options)
    reserve = Policy(policy.reserve_bytes)
    return approve(logs, out, reserve, policy.approver, note, layout, policy.admission, nvidia_smi_paths=gpus)


@dataclass(frozen=True)
class HostVerdict:
    """One host's gate result: ``passed`` True/False, None when it cannot be judged (``reason`` says why)."""

    host: str
    bundle: str | None
    passed: bool | None
    checks: tuple[dict, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "checks": list(self.checks)}


@dataclass(frozen=True)
class ClassApproval:
    """A verified class bundle as the gate uses it: its gate view, the hosts it lists, its inputs by SHA-256."""

    approved: Approved
    hosts: tuple[str, ...]
    inputs: Mapping[str, str]


def approvals(bundles: Sequence[str]) -> dict[str, ClassApproval]:
    """Each bundle, verified first as ``kvplan gate`` does, with what its *verified* record says."""
    found = {}
    for bundle in bundles:
        verified, approved = verified_approval(bundle)
        record = verified.record
        inputs = {str(e["sha256"]): str(e["path"]) for e in record.get("inputs") or () if e.get("sha256")}
        hosts = tuple(note_hosts(str(record.get("note") or "")) or ())
        found[str(bundle)] = ClassApproval(approved, hosts, inputs)
    return found


def gate_host(
    files: HostFiles,
    bundles: Mapping[str, ClassApproval],
    storage_options: Mapping[str, object] | None = None,
) -> HostVerdict:
    """Judge one host against the bundle that lists it (runs inside a Dask task)."""
    listed = [name for name, approval in bundles.items() if files.host in approval.hosts]
    if len(listed) != 1:
        why = "no approved bundle lists it" if not listed else f"{len(listed)} bundles list it"
        return HostVerdict(files.host, None, None, reason=f"{why}: gate it against its class's bundle")
    bundle, approval = listed[0], bundles[listed[0]]
    if files.missing or not files.logs:
        return HostVerdict(files.host, bundle, None, reason="no log files of the canary boot")
    try:
        with local_files((*files.logs, *files.snapshots), storage_options) as local:
            for path, url in local:  # a canary is a new boot at the approved value, not its evidence
                digest = sha256_file(path)
                if digest in approval.inputs:
                    why = f"{url} is the approval's own input {approval.inputs[digest]} (sha256 {digest[:16]}): a "
                    why += "canary is a new boot at the approved value, not the evidence it was approved from"
                    return HostVerdict(files.host, bundle, None, reason=why)
            evidence = read_evidence(local[: len(files.logs)], local[len(files.logs) :])  # as kvplan gate
            free, defaults = evidence.free_bytes, evidence.defaulted_key_fields
            key = compatibility_key(evidence.ledger, evidence.lines)
            checks = gate_checks(approval.approved, evidence.ledger, key, None, free, boot_defaults=defaults)
    except (ValueError, OSError) as exc:
        return HostVerdict(files.host, bundle, None, reason=str(exc))
    return HostVerdict(files.host, bundle, gate_verdict(checks), tuple(check.to_dict() for check in checks))


def stop_decision(verdicts: Sequence[HostVerdict]) -> tuple[int, str]:
    """The exit status and the decision: stop on any failed host, cannot go on while any is unjudged."""
    failed = [v.host for v in verdicts if v.passed is False]
    unjudged = [v.host for v in verdicts if v.passed is None]
    if failed:
        return _EXIT_FAIL, f"STOP: {len(failed)} of {len(verdicts)} host(s) failed: {', '.join(failed)}"
    if not verdicts:
        return _EXIT_CANNOT_JUDGE, "HOLD: no host to judge"
    if unjudged:
        return _EXIT_CANNOT_JUDGE, f"HOLD: {len(unjudged)} host(s) cannot be judged: {', '.join(unjudged)}"
    return _EXIT_PASS, f"GO: all {len(verdicts)} host(s) pass"


def gate_fleet(
    bundles: Sequence[str],
    targets: Sequence[str],
    only: Sequence[str] = (),
    scheduler: str = "synchronous",
    storage_options: Mapping[str, object] | None = None,
    progress: Progress | None = None,
) -> list[HostVerdict]:
    """Every host of ``targets`` (a fleet, or one host's files) judged against ``bundles``; ``only``: a wave's."""
    approved, first = approvals(bundles), targets[0]
    if len(targets) == 1 and (Path(first).is_dir() or first.lower().endswith(".csv") or "://" in first):
        hosts = list_fleet(first, storage_options)
    else:  # one host's files
        missing = [target for target in targets if not Path(target).is_file()]
        if missing:
            raise FleetInputError(f"{missing[0]}: no such file (LOGS_OR_FLEET)")
        logs, snapshots = [t for t in targets if not is_snapshot(t)], [t for t in targets if is_snapshot(t)]
        hosts = [HostFiles(Path(first).resolve().parent.name, tuple(logs), tuple(snapshots))]
    if only:
        unknown = sorted(set(only) - {files.host for files in hosts})
        if unknown:
            raise FleetInputError(f"{targets[0]}: no host {', '.join(unknown)} in it (--hosts)")
        hosts = [files for files in hosts if files.host in set(only)]
    return map_hosts(gate_host, hosts, (approved, storage_options), scheduler, progress)
