"""Verifying a bundle: every file, key and number recomputed from the hashed copies of its inputs; the gate
judges the record verify parsed (:func:`verified_approval`). The folder name is a label, never a difference."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import kvplan.evidence.reading as reading
import kvplan.evidence.record as rec
from kvplan import __version__
from kvplan.checks.gate import Approved
from kvplan.columns import NEWER_THAN_0_1_0
from kvplan.evidence.render import artifact_pieces, chart_images, chart_names
from kvplan.io.metadata import RawLines
from kvplan.plan import Decision, renamed

#: The keys recomputed and compared, in order: not the approval's identity, inputs, files and seal (checked on
#: their own), nor the model options (inputs of kv_spec).
_COMPARED = ("decision", "policy", "ranks", "summary", "stranded", "kv_spec", "capacity", "admission_plan")
_COMPARED += ("load", "compatibility_key", "checks", "warnings", "ledger")


@dataclass(frozen=True)
class Verified:
    """A bundle as verified: its record, digest, differences (none: it verifies), notes and recomputed decision."""

    folder: Path
    record: dict
    digest: str
    differences: tuple[str, ...]
    notes: tuple[str, ...]
    decision: Decision | None

    @property
    def ok(self) -> bool:
        """True when nothing differs."""
        return not self.differences

    @property
    def sealed(self) -> bool:
        """Whether the record carries a seal (else only the digest pins ``created_utc`` and the charts)."""
        return rec.SEAL_KEY in self.record

    @property
    def verdict(self) -> str:
        """verify's verdict, one word: ``OK`` when nothing differs, else ``CHANGED``."""
        return "OK" if self.ok else "CHANGED"

    def created_line(self) -> str:
        """How far ``created_utc`` is verified: never "sealed" for a bundle that changed."""
        created = self.record.get("created_utc")
        if not self.ok:
            return f"created {created}: not verified (the bundle changed)"
        if self.sealed:
            return f"created {created}: sealed"
        return (
            f"created {created}: not verified (no seal; only the digest, gate --approved-digest "
            f"sha256:{self.digest}, pins it)"
        )


def verify_bundle(bundle: str | os.PathLike) -> list[str]:
    """Differences between a bundle and a fresh recomputation from its inputs (empty = all agree)."""
    return list(verify(bundle).differences)


def verify(bundle: str | os.PathLike) -> Verified:
    """Check a bundle against a fresh recomputation from its own inputs; :class:`BundleError` when unreadable."""
    folder = Path(bundle)
    record, data = reading.load(folder)
    digest = rec.bundle_digest(data)
    differences, notes, decision = _recompute(folder, record)
    unknown = [f"{key}: not a key of a bundle" for key in record if key not in rec.KNOWN_KEYS]
    differences = unknown + differences
    if not differences:  # the catch-alls, when nothing more specific explains the change
        if rec.sha256_of(rec.record_chunks(record)) != digest:
            differences.append(
                "budget.json: its bytes are not what approve writes for its record (padding, other spacing or "
                "key order)"
            )
        if rec.SEAL_KEY in record and record[rec.SEAL_KEY] != (sealed := rec.seal(record)):
            differences.append(
                f"{rec.SEAL_KEY}: recorded {record[rec.SEAL_KEY]!r}, recomputed {sealed}: the record was changed "
                "after approval"
            )
    if rec.SEAL_KEY not in record:
        notes.insert(
            0,
            f"no {rec.SEAL_KEY} (written by kvplan 0.1.0 or before): its created_utc is not sealed; "
            f"pin the bundle with kvplan gate --approved-digest sha256:{digest}",
        )
    return Verified(folder, record, digest, tuple(differences), tuple(notes), decision)


def _recompute(folder: Path, record: dict) -> tuple[list[str], list[str], Decision | None]:
    """The differences found by recomputing the bundle from its inputs, the notes, and the decision."""
    entries, approval = reading.stated_settings(folder, record)
    differences = reading.entry_differences(entries)
    paths = reading.bundle_paths(record, differences)
    with tempfile.TemporaryDirectory(prefix="kvplan-verify-") as temporary:
        private = Path(temporary)
        copies, artifacts = reading.read_files(folder, private, record, paths, differences)
        differences += [
            f"{name}: not part of the bundle as approved" for name in reading.added_paths(folder, paths)
        ]
        groups = [[e for e in entries if e.get("role") == role] for role in rec.ROLES]
        ordered = [entry for group in groups for entry in group]
        if ordered != list(entries):
            differences.append(
                "inputs: roles or order changed (logs, then nvidia-smi snapshots, then the "
                "model config, then load files)"
            )
        digest = rec.stated_digest(approval, ordered)
        if digest != record.get("inputs_digest"):
            differences.append(
                f"inputs digest: recorded {record.get('inputs_digest')}, recomputed {digest} "
                "(policy, plan, model options, load policy, input hashes or paths, approver, "
                "note or kvplan version were changed)"
            )
        created = rec.created_time(record.get("created_utc"))
        if created is None:
            differences.append(f"created_utc: {record.get('created_utc')!r} is not an ISO 8601 UTC time")
            return differences, [], None
        approved_name = rec.bundle_name(created, str(record.get("inputs_digest")))
        name, notes = folder.resolve().name, []
        if name != approved_name:  # a label only, never a difference
            notes.append(
                f"folder name {name!r} is not the approved name {approved_name!r} (created_utc's date and the "
                "inputs digest in budget.json): a label only; the contents are checked against that digest"
            )
        if any(e["bundle_path"] not in copies for e in ordered):
            return differences, notes, None
        named = {
            role: [(copies[e["bundle_path"]], e["bundle_path"]) for e in group]
            for role, group in zip(rec.ROLES, groups)
        }
        try:
            decision = rec.decide_copies(named, approval)
        except (ValueError, TypeError, OverflowError) as exc:  # TypeError: options kv_spec does not take
            pairs = (pair for group in named.values() for pair in group)
            differences.append(f"recomputation failed: {renamed(str(exc), {str(p): n for p, n in pairs})}")
            return differences, notes, None
        decision = _as_recorded(decision, record.get("ledger"))
        fresh = _roundtrip(rec.build_record(decision, approval, created, entries, digest))
        differences += _recomputed_differences(decision, record, fresh, artifacts, approved_name)
        differences, notes = _chart_differences(decision, record, artifacts, differences, notes)
        return differences, notes, _rehomed(decision, private, folder)


def _recomputed_differences(
    decision: Decision, record: Mapping, fresh: dict, artifacts: Mapping[str, tuple[Path, str]], name: str
) -> list[str]:
    """The ``fresh`` record's keys against the recorded ones, then the text files regenerated from it."""
    differences = [
        difference for key in _COMPARED for difference in _compare(key, record.get(key), fresh.get(key))
    ]
    recorded = record.get(
        rec.TEXT_ESCAPING_KEY, rec.TEXT_ESCAPING
    )  # absent: written before the rule, regenerated so
    if rec.canonical_json(recorded) != rec.canonical_json(rec.TEXT_ESCAPING):
        differences.append(
            f"{rec.TEXT_ESCAPING_KEY}: recorded {_short(recorded)}, this kvplan writes {rec.TEXT_ESCAPING}"
        )
    for file_name, pieces in artifact_pieces(decision, fresh, name).items():
        copy, actual = artifacts.get(file_name, (None, None))
        if copy is not None and rec.sha256_of(piece.encode("utf-8") for piece in pieces) != actual:
            text = "".join(artifact_pieces(decision, fresh, name)[file_name])
            differences += _text_difference(copy.read_bytes(), file_name, text)
    return differences


def _chart_differences(
    decision: Decision,
    record: Mapping,
    artifacts: Mapping[str, tuple[Path, str]],
    differences: list[str],
    notes: list[str],
) -> tuple[list[str], list[str]]:
    """``differences`` and ``notes`` with the charts' (without a seal: a redraw that differs is a note)."""
    expected = {f"{rec.CHARTS_DIR}/{chart}.png" for chart in chart_names(decision)}
    recorded = {path for path in record["files"] if str(path).startswith(f"{rec.CHARTS_DIR}/")}
    if recorded != expected:
        differences = [*differences, f"charts: recorded {sorted(recorded)}, expected {sorted(expected)}"]
    elif rec.SEAL_KEY not in record and not differences:
        notes = notes + [
            f"{name}: differs from the chart this kvplan draws for the record; a bundle without a seal "
            "has its charts checked by hash only"
            for name, image in chart_images(decision).items()
            if name not in artifacts or artifacts[name][0].read_bytes() != image
        ]
    approved_with = str(record["kvplan_version"])
    if differences and approved_with != __version__:
        differences = [
            *differences,
            f"note: approved with kvplan {approved_with}, verified with {__version__}; a reader "
            "change can explain a recomputed difference",
        ]
    return differences, notes


def verified_approval(bundle: str | os.PathLike, digest: str | None = None) -> tuple[Verified, Approved]:
    """The verified bundle and its gate view; :class:`BundleChangedError` unless it verifies and is ``digest``'s."""
    verified = verify(bundle)
    if digest is not None:
        wanted = digest.strip().lower().removeprefix("sha256:")
        if len(wanted) < 12 or not verified.digest.startswith(wanted):
            raise rec.BundleChangedError(
                f"cannot judge: {bundle} is not the approved bundle: its digest is "
                f"sha256:{verified.digest}, --approved-digest asks for {digest}"
            )
    if verified.differences:
        differences = verified.differences
        count = f"{len(differences)} difference{'s' if len(differences) > 1 else ''}"
        raise rec.BundleChangedError(
            f"cannot judge: the approved bundle changed: {bundle} fails verification "
            f"({count}; `kvplan verify {bundle}` lists them), first: {differences[0]}"
        )
    name, digest = verified.folder.resolve().name, str(verified.record["inputs_digest"])[:12]
    if re.fullmatch(r"(?s).{10}-[0-9a-f]{12}", name) and name[11:] != digest:  # the approved form of the name
        raise rec.BundleChangedError(
            f"cannot judge: {bundle}: the folder name pins inputs digest {name[11:]}, but the bundle's is "
            f"{digest}: another approval was put at the approved path"
        )
    defaults = verified.decision.defaulted_key_fields if verified.decision is not None else frozenset()
    return verified, reading.approved_from_record(verified.record, defaults)


def user_paths(record: Mapping, text: str) -> str:
    """``text`` with the bundle's input copies (``inputs/boot.log``) named as the user gave them."""
    return renamed(text, {entry["bundle_path"]: entry["path"] for entry in record.get("inputs", [])})


def _text_difference(actual: bytes, name: str, expected: str) -> list[str]:
    """The first line where a bundle text file differs from its regeneration (nothing when equal)."""
    if actual == expected.encode("utf-8"):
        return []
    got = actual.decode("utf-8", errors="replace").splitlines()
    want = expected.splitlines()
    line = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    shown = got[line] if line < len(got) else "(end of file)"
    wanted = want[line] if line < len(want) else "(end of file)"
    return [
        f"{name}: differs from the text regenerated from budget.json at line {line + 1}: "
        f"{_short(shown)} (expected {_short(wanted)})"
    ]


def _compare(key: str, recorded: object, fresh: object) -> list[str]:
    """Field-by-field differences between a recorded and a recomputed JSON value (lists item by item)."""
    if isinstance(recorded, list) and isinstance(fresh, list) and len(recorded) == len(fresh):
        return [d for i, (a, b) in enumerate(zip(recorded, fresh)) for d in _compare(f"{key}[{i}]", a, b)]
    if rec.canonical_json(recorded) == rec.canonical_json(fresh):  # 1, 1.0 and true are not the same record
        return []
    if isinstance(recorded, dict) and isinstance(fresh, dict):
        names = sorted(set(recorded) | set(fresh), key=str)
        out = [d for name in names for d in _compare(f"{key}.{name}", recorded.get(name), fresh.get(name))]
        return out or [f"{key}: recorded {_short(recorded)}, recomputed {_short(fresh)}"]
    return [f"{key}: recorded {_short(recorded)}, recomputed {_short(fresh)}"]


def _short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _roundtrip(record: dict) -> dict:
    """``record`` as JSON reads it back; the ledger rows, plain JSON already, as they are (no second copy)."""
    read = json.loads(json.dumps({key: value for key, value in record.items() if key != "ledger"}))
    return {key: record[key] if key == "ledger" else read[key] for key in record}


def _as_recorded(decision: Decision, recorded_ledger: object) -> Decision:
    """``decision`` without the columns :data:`~kvplan.columns.NEWER_THAN_0_1_0` a 0.1.0 bundle's rows lack."""
    if not isinstance(recorded_ledger, list) or not all(isinstance(row, dict) for row in recorded_ledger):
        return decision
    absent = [c for c in NEWER_THAN_0_1_0 if recorded_ledger and all(c not in row for row in recorded_ledger)]
    if not absent:
        return decision
    provenance = decision.provenance
    if "column" in provenance:
        provenance = provenance[~provenance["column"].isin(absent)].reset_index(drop=True)
    ledger = decision.ledger.drop(columns=absent, errors="ignore")
    return replace(decision, ledger=ledger, provenance_of=lambda: provenance, metadata=None)


def _rehomed(decision: Decision, private: Path, folder: Path) -> Decision:
    """``decision`` reading its raw lines from the bundle's inputs, not the ``private`` copies verify removes."""
    metadata = decision.metadata
    if metadata is None:
        return decision
    files = {
        source: (
            str(folder / Path(where).relative_to(private))
            if isinstance(where, str) and Path(where).is_relative_to(private)
            else where,
            end,
        )
        for source, (where, end) in metadata.raw_lines.files.items()
    }
    moved = replace(metadata, raw_lines=RawLines(files))
    return replace(decision, metadata=moved, provenance_of=lambda: moved.provenance)
