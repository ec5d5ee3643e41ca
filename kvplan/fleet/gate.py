"""The fleet gate: each canary host against its class's approved bundle, and the stop decision.

A host is judged against the bundle whose class lists it (:func:`kvplan.fleet.bundles.bundle_hosts`), with
:func:`kvplan.checks.gate_checks` on its own ledger and snapshots, as ``kvplan gate`` judges one launch. A host
in no bundle's list, or whose logs cannot be read as one launch, cannot be judged. The rollout **stops**
when any host fails (a rank's adjusted budget below the approved value, i.e. below the free-memory
floor, or tokens below the admission plan); it cannot go on while a host cannot be judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvplan.checks import Approved, gate_checks
from kvplan.evidence import verified_approval
from kvplan.fleet.bundles import bundle_hosts
from kvplan.fleet.engine import Progress, map_hosts
from kvplan.fleet.inputs import FleetInputError, HostFiles, is_snapshot, list_fleet
from kvplan.fleet.read import join_host_snapshots, read_logs
from kvplan.ledger import compatibility_key
from kvplan.notes import Note
from kvplan.verdict import gate_verdict

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_JUDGE = 0, 1, 2


@dataclass(frozen=True)
class HostVerdict:
    """One host's gate result: ``passed`` True/False, None when it cannot be judged (``reason`` says why)."""

    host: str
    bundle: str | None
    passed: bool | None
    checks: tuple[dict, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict:
        return {
            "host": self.host,
            "bundle": self.bundle,
            "passed": self.passed,
            "checks": list(self.checks),
            "reason": self.reason,
        }


def approvals(bundles: Sequence[str]) -> dict[str, tuple[Approved, list[str]]]:
    """Each bundle (verified first, as ``kvplan gate`` does) with the hosts its class lists."""
    found = {}
    for bundle in bundles:
        _, approved = verified_approval(bundle)
        found[str(bundle)] = (approved, bundle_hosts(bundle) or [])
    return found


def gate_host(
    files: HostFiles,
    bundles: Mapping[str, tuple[Approved, list[str]]],
    storage_options: Mapping[str, object] | None = None,
) -> HostVerdict:
    """Judge one host against the bundle that lists it (runs inside a Dask task)."""
    listed = [name for name, (_, hosts) in bundles.items() if files.host in hosts]
    if len(listed) != 1:
        why = "no approved bundle lists it" if not listed else f"{len(listed)} bundles list it"
        return HostVerdict(files.host, None, None, reason=f"{why}: gate it against its class's bundle")
    bundle = listed[0]
    approved = bundles[bundle][0]
    if files.missing or not files.logs:
        return HostVerdict(files.host, bundle, None, reason="no log files of the canary boot")
    notes: list[Note] = []
    try:
        ledger, lines = read_logs(files.logs, storage_options, notes)
        if ledger.empty:
            return HostVerdict(
                files.host, bundle, None, reason=f"no vLLM boot found in {', '.join(files.logs)}"
            )
        free = None
        if files.snapshots:
            ledger, free = join_host_snapshots(ledger, files.snapshots, storage_options, notes)
        checks = gate_checks(approved, ledger, compatibility_key(ledger, lines), None, free)
    except (ValueError, OSError) as exc:
        return HostVerdict(files.host, bundle, None, reason=str(exc))
    return HostVerdict(files.host, bundle, gate_verdict(checks), tuple(check.to_dict() for check in checks))


def stop_decision(verdicts: Sequence[HostVerdict]) -> tuple[int, str]:
    """The exit status and the decision: stop on any failed host, cannot go on while any is unjudged.

    >>> stop_decision([HostVerdict("a", "b", True), HostVerdict("c", "b", False)])
    (1, 'STOP: 1 of 2 host(s) failed: c')
    """
    failed = [v.host for v in verdicts if v.passed is False]
    unjudged = [v.host for v in verdicts if v.passed is None]
    if failed:
        return EXIT_FAIL, f"STOP: {len(failed)} of {len(verdicts)} host(s) failed: {', '.join(failed)}"
    if unjudged or not verdicts:
        return EXIT_CANNOT_JUDGE, (
            f"HOLD: {len(unjudged)} host(s) cannot be judged: {', '.join(unjudged)}"
            if verdicts
            else "HOLD: no host to judge"
        )
    return EXIT_PASS, f"GO: all {len(verdicts)} host(s) pass"


def gate_fleet(
    bundles: Sequence[str],
    targets: Sequence[str],
    only: Sequence[str] = (),
    scheduler: str = "synchronous",
    storage_options: Mapping[str, object] | None = None,
    progress: Progress | None = None,
) -> list[HostVerdict]:
    """Every host of ``targets`` (one fleet folder or manifest, or log files of one host, whose folder
    names it) judged against ``bundles``; ``only`` keeps the named hosts (a wave's)."""
    approved = approvals(bundles)
    hosts = _targets(targets, storage_options)
    if only:
        unknown = sorted(set(only) - {files.host for files in hosts})
        if unknown:
            raise FleetInputError(f"{targets[0]}: no host {', '.join(unknown)} in it (--hosts)")
        hosts = [files for files in hosts if files.host in set(only)]
    return map_hosts(gate_host, hosts, (approved, storage_options), scheduler, progress)


def _targets(targets: Sequence[str], storage_options: Mapping[str, object] | None) -> list[HostFiles]:
    if len(targets) == 1 and (
        Path(targets[0]).is_dir() or targets[0].lower().endswith(".csv") or "://" in targets[0]
    ):
        return list_fleet(targets[0], storage_options)
    missing = [target for target in targets if not Path(target).is_file()]
    if missing:
        raise FleetInputError(f"{missing[0]}: no such file (LOGS_OR_FLEET)")
    host = Path(targets[0]).resolve().parent.name
    logs = tuple(t for t in targets if not is_snapshot(t))
    return [HostFiles(host, logs, tuple(t for t in targets if is_snapshot(t)))]
