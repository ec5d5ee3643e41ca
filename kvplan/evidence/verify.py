"""Verifying a bundle: every file, key and number recomputed from the bundle's own copies of its inputs.

:func:`verify` reads ``budget.json`` once (bounded, a regular file inside the bundle), hashes and copies
each input into a private folder (:func:`~kvplan.evidence.reading.copy_hashed`) and recomputes the decision
from those copies with :func:`kvplan.plan.decide`, so what is judged is exactly what was hashed. The
result (:class:`Verified`) carries the record it parsed and the bundle's digest, and the gate judges that
record (:func:`verified_approval`), never a second read. The folder name is a label: a name other than the
approved ``<created_utc date>-<digest>`` is a note, never a difference.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kvplan import __version__
from kvplan.checks import Approved
from kvplan.columns import NEWER_THAN_0_1_0
from kvplan.evidence.reading import added_paths, bundle_paths, load, read_files
from kvplan.evidence.record import (
    ALLOWED_UNJUDGED_KEY,
    BUDGET_JSON,
    CHARTS_DIR,
    INPUT_KEYS,
    KNOWN_KEYS,
    LAUNCH_KEY,
    NVIDIA_SMI_ROLE,
    ROLES,
    SEAL_KEY,
    TEXT_ESCAPING,
    TEXT_ESCAPING_KEY,
    BundleChangedError,
    BundleError,
    approved_from_record,
    build_record,
    bundle_digest,
    bundle_name,
    created_time,
    input_names,
    inputs_digest,
    int_or_none,
    record_chunks,
    same_bytes,
    same_canonical,
    seal,
    settings,
)
from kvplan.evidence.render import artifact_pieces, artifact_texts, chart_images, chart_names
from kvplan.io.metadata import RawLines
from kvplan.plan import AdmissionPlan, Decision, LoadPolicy, ModelLayout, Policy, decide, renamed

#: The keys recomputed from the inputs and compared: every key but the approval's identity, inputs and
#: files (checked on their own: digest, hashes, folder name) and the model options (inputs of kv_spec).
_NOT_RECOMPUTED = frozenset(
    {"schema", "schema_version", "kvplan_version", "created_utc", "approver", "note", "inputs_digest"}
    | {"model_options", "inputs", "files", SEAL_KEY, TEXT_ESCAPING_KEY, ALLOWED_UNJUDGED_KEY}
)
_COMPARED = tuple(key for key in KNOWN_KEYS if key not in _NOT_RECOMPUTED)


@dataclass(frozen=True)
class Verified:
    """A bundle as verified: the record parsed from the bytes that were checked, their SHA-256 (the
    bundle's digest), the differences (empty: it verifies), the notes and the recomputed decision."""

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
        """Whether the record carries a seal (kvplan after 0.1.0): ``created_utc`` and the charts, which no
        recomputation can check, cannot change without it. An unsealed bundle's are pinned by the bundle
        digest only (``gate --approved-digest``)."""
        return SEAL_KEY in self.record

    @property
    def verdict(self) -> str:
        """verify's verdict on the bundle, one word: ``OK`` when nothing differs, else ``CHANGED``."""
        return "OK" if self.ok else "CHANGED"

    def created_line(self) -> str:
        """How far ``created_utc`` is verified, for verify's and gate's output: never "sealed" for a bundle
        that changed (its seal no longer vouches for anything).

        >>> Verified(Path("b"), {"created_utc": "2026-11-29T10:40:00Z"}, "ab", (), (), None).created_line()
        'created 2026-11-29T10:40:00Z: not verified (no seal; only the digest, gate --approved-digest sha256:ab, pins it)'
        >>> Verified(Path("b"), {"created_utc": "2026-11-29T10:40:00Z", SEAL_KEY: "cd"}, "ab", ("x",), (), None).created_line()
        'created 2026-11-29T10:40:00Z: not verified (the bundle changed)'
        """
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


def verify_bundle_with_notes(bundle: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The differences of :func:`verify` and its notes (e.g. a folder renamed: a label only)."""
    verified = verify(bundle)
    return list(verified.differences), list(verified.notes)


def verify(bundle: str | os.PathLike) -> Verified:
    """Check a bundle against a fresh recomputation from its own inputs; :class:`BundleError` when unreadable.

    Checked, in order: every top-level key is known and ``budget.json``'s bytes are what approve
    writes for its record (no padding, no reordering); the seal; every path stays inside the bundle and
    is a regular file; every file's SHA-256 and each input's size, and nothing added; charts are PNG;
    the inputs digest recomputed; ``created_utc``; then the decision, budgets, key, capacity, plan,
    load and ledger recomputed from the input copies with the recorded policy, field by field; and
    ``SUMMARY.md``, ``ledger.csv`` and ``evidence.log`` byte for byte against the text regenerated from
    the record (the charts too, for a bundle written before the seal).
    """
    folder = Path(bundle)
    record, data = load(folder)
    digest = bundle_digest(data)
    differences, notes, decision = _recompute(folder, record)
    differences = [f"{key}: not a key of a bundle" for key in record if key not in KNOWN_KEYS] + differences
    if not differences:  # the catch-alls, when nothing more specific explains the change
        differences = _record_differences(record, data)
    if SEAL_KEY not in record:
        notes.insert(
            0,
            f"no {SEAL_KEY} (written by kvplan 0.1.0 or before): its created_utc is not sealed; "
            f"pin the bundle with kvplan gate --approved-digest sha256:{digest}",
        )
    return Verified(folder, record, digest, tuple(differences), tuple(notes), decision)


def _record_differences(record: Mapping, data: bytes) -> list[str]:
    """``budget.json`` is byte for byte what approve writes for its record, and its seal holds."""
    differences = []
    if not same_bytes(data, record_chunks(record)):
        differences.append(
            "budget.json: its bytes are not what approve writes for its record (padding, "
            "other spacing or key order)"
        )
    if SEAL_KEY in record and record[SEAL_KEY] != seal(record):
        differences.append(
            f"{SEAL_KEY}: recorded {record[SEAL_KEY]!r}, recomputed {seal(record)}: the "
            "record was changed after approval"
        )
    return differences


def _recompute(folder: Path, record: dict) -> tuple[list[str], list[str], Decision | None]:
    """The differences found by recomputing the bundle from its inputs, the notes, and the decision."""
    differences: list[str] = []
    notes: list[str] = []
    sealed = SEAL_KEY in record
    entries, policy, plan, load_policy, options = _settings_of(folder, record)
    differences += _entry_shape(entries)
    paths = bundle_paths(record, differences)
    with tempfile.TemporaryDirectory(prefix="kvplan-verify-") as private:
        copies, artifacts = read_files(folder, Path(private), record, paths, differences)
        differences += [f"{name}: not part of the bundle as approved" for name in added_paths(folder, paths)]
        logs, snapshots, configs, loads = ([e for e in entries if e.get("role") == role] for role in ROLES)
        if logs + snapshots + configs + loads != list(entries):
            differences.append(
                "inputs: roles or order changed (logs, then nvidia-smi snapshots, then the "
                "model config, then load files)"
            )
        ordered = logs + snapshots + configs + loads
        layout = None
        if configs and options is not None:
            name = configs[0]["bundle_path"]
            layout = ModelLayout(copies.get(name, Path(private) / "missing"), options, name=name)
        approval = (str(record["approver"]), str(record["note"]), str(record["kvplan_version"]))
        allowed = _allowed_unjudged(folder, record)
        digest = inputs_digest(
            [e["sha256"] for e in ordered],
            settings(policy, layout, plan, load_policy, ordered, *approval, allowed),
        )
        if digest != record.get("inputs_digest"):
            differences.append(
                f"inputs digest: recorded {record.get('inputs_digest')}, recomputed {digest} "
                "(policy, plan, model options, load policy, input hashes or paths, approver, "
                "note or kvplan version were changed)"
            )
        created = created_time(record.get("created_utc"))
        if created is None:
            differences.append(f"created_utc: {record.get('created_utc')!r} is not an ISO 8601 UTC time")
            return differences, notes, None
        approved_name = bundle_name(created, str(record.get("inputs_digest")))
        notes += name_notes(folder.resolve().name, approved_name)
        if any(e["bundle_path"] not in copies for e in ordered):
            return differences, notes, None
        named = {
            role: [(copies[e["bundle_path"]], e["bundle_path"]) for e in group]
            for role, group in zip(ROLES, (logs, snapshots, configs, loads))
        }
        try:
            decision = decide(
                named["log"], policy, layout, plan, named["load"], load_policy, named[NVIDIA_SMI_ROLE]
            )
        except (ValueError, TypeError, OverflowError) as exc:  # TypeError: options kv_spec does not take
            message = renamed(
                str(exc),
                {str(path): name for path, name in (pair for group in named.values() for pair in group)},
            )
            differences.append(f"recomputation failed: {message}")
            return differences, notes, None
        decision = _as_recorded(decision, record.get("ledger"))
        launch = isinstance(record.get("decision"), dict) and LAUNCH_KEY in record["decision"]
        fresh = _roundtrip(
            build_record(decision, policy, entries, digest, created, *approval[:2], options, launch=launch)
        )
        for key in _COMPARED:
            differences += _compare(key, record.get(key), fresh.get(key))
        regenerated = {**fresh, "kvplan_version": approval[2]}
        if allowed:
            regenerated[ALLOWED_UNJUDGED_KEY] = allowed
        if TEXT_ESCAPING_KEY not in record:  # written before the rule: regenerated as it was written
            del regenerated[TEXT_ESCAPING_KEY]
        elif not same_canonical(record[TEXT_ESCAPING_KEY], TEXT_ESCAPING):
            differences.append(
                f"{TEXT_ESCAPING_KEY}: recorded {_short(record[TEXT_ESCAPING_KEY])}, this kvplan writes "
                f"{TEXT_ESCAPING}"
            )
        for file_name, pieces in artifact_pieces(decision, regenerated, approved_name).items():
            if file_name in artifacts and not same_bytes(  # evidence.log reads raw lines from the copies
                artifacts[file_name], (piece.encode("utf-8") for piece in pieces)
            ):
                text = artifact_texts(decision, regenerated, approved_name)[file_name]
                differences += _text_difference(artifacts[file_name], file_name, text)
        decision = _rehomed(decision, Path(private), folder)
    expected_charts = {f"{CHARTS_DIR}/{chart}.png" for chart in chart_names(decision)}
    recorded_charts = {path for path in record["files"] if str(path).startswith(f"{CHARTS_DIR}/")}
    if recorded_charts != expected_charts:
        differences.append(f"charts: recorded {sorted(recorded_charts)}, expected {sorted(expected_charts)}")
    elif not sealed and not differences:
        # A bundle from before seals (kvplan 0.1.0) has its charts checked by hash only: a redraw with
        # today's chart code need not match the bytes an older release drew (docs/safety.md).
        notes += [
            f"{name}: differs from the chart this kvplan draws for the record; a bundle without a seal "
            "has its charts checked by hash only"
            for name, image in chart_images(decision).items()
            if artifacts.get(name) != image
        ]
    if differences and approval[2] != __version__:
        differences.append(
            f"note: approved with kvplan {approval[2]}, verified with {__version__}; a reader "
            "change can explain a recomputed difference"
        )
    return differences, notes, decision


def verified_approval(bundle: str | os.PathLike, digest: str | None = None) -> tuple[Verified, Approved]:
    """The verified bundle and its gate view; :class:`BundleChangedError` when it does not verify or is
    not the bundle pinned by ``digest`` (its SHA-256, or at least the first 12 hex digits of it).

    The gate judges the record verify parsed (one read of each file), with the key fields the approved
    logs did not show (:func:`kvplan.checks.defaulted_key_fields`).
    """
    verified = verify(bundle)
    if digest is not None:
        wanted = digest.strip().lower().removeprefix("sha256:")
        if len(wanted) < 12 or not verified.digest.startswith(wanted):
            raise BundleChangedError(
                f"cannot judge: {bundle} is not the approved bundle: its digest is "
                f"sha256:{verified.digest}, --approved-digest asks for {digest}"
            )
    if verified.differences:
        differences = verified.differences
        count = f"{len(differences)} difference{'s' if len(differences) > 1 else ''}"
        raise BundleChangedError(
            f"cannot judge: the approved bundle changed: {bundle} fails verification "
            f"({count}; `kvplan verify {bundle}` lists them), first: {differences[0]}"
        )
    misnamed = name_digest_mismatch(verified.folder.resolve().name, str(verified.record["inputs_digest"]))
    if misnamed:
        raise BundleChangedError(f"cannot judge: {bundle}: {misnamed}")
    defaults = verified.decision.defaulted_key_fields if verified.decision is not None else frozenset()
    return verified, approved_from_record(verified.record, defaults)


def name_digest_mismatch(name: str, digest: str) -> str | None:
    """Why folder ``name`` of the approved form ``YYYY-MM-DD-<12 hex>`` is not this bundle's (None when it
    is, or when the name is a label of another form).

    >>> name_digest_mismatch("2026-11-29-0123456789ab", "0123456789abcdef") is None
    True
    """
    if len(name) != 23 or name[10] != "-" or not all(c in "0123456789abcdef" for c in name[11:]):
        return None
    if name[11:] == digest[:12]:
        return None
    return (
        f"the folder name pins inputs digest {name[11:]}, but the bundle's is {digest[:12]}: another "
        "approval was put at the approved path"
    )


def name_notes(name: str, approved_name: str) -> list[str]:
    """The note for a bundle folder whose ``name`` is not the ``approved_name`` (a label, never a difference).

    >>> name_notes("2026-11-29-0123456789ab", "2026-11-29-0123456789ab")
    []
    """
    if name == approved_name:
        return []
    return [
        f"folder name {name!r} is not the approved name {approved_name!r} (created_utc's date and the "
        "inputs digest in budget.json): a label only; the contents are checked against that digest"
    ]


def user_paths(record: Mapping, text: str) -> str:
    """``text`` with the bundle's input copies (``inputs/boot.log``) named as the user gave them.

    >>> user_paths({"inputs": [{"bundle_path": "inputs/oom.log", "path": "data/oom.log"}]},
    ...            "inputs/oom.log:88: no KV cache line")
    'data/oom.log:88: no KV cache line'
    """
    return renamed(text, {entry["bundle_path"]: entry["path"] for entry in record.get("inputs", [])})


def _settings_of(
    folder: Path, record: Mapping
) -> tuple[list, Policy, AdmissionPlan | None, LoadPolicy | None, object]:
    """The inputs, policy, plan, load policy and model options a record states; :class:`BundleError`."""
    try:
        entries = list(record["inputs"])
        raw = record["policy"]
        policy = Policy(_int(raw["reserve_bytes"]), _int(raw["guard_bytes"]), _bool(raw["assume_uniform"]))
        plan_record = record.get("admission_plan")
        plan = (
            AdmissionPlan(_int(plan_record["target_concurrency"]), _int(plan_record["seq_len"]))
            if plan_record
            else None
        )
        load_record, load_policy = record.get("load"), None
        if any(isinstance(e, dict) and e.get("role") == "load" for e in entries):
            load_policy = (
                LoadPolicy()
                if load_record is None
                else LoadPolicy(
                    _int(load_record["max_preemptions"]),
                    int_or_none(load_record["year"]),
                    load_record.get("max_capacity_loss_pct"),
                )
            )
        options = record.get("model_options")
        if options is not None and not isinstance(options, dict):
            raise TypeError("model_options is not an object")
        return entries, policy, plan, load_policy, options
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BundleError(
            f"{folder / BUDGET_JSON}: malformed policy, plan, load, approval or inputs: {exc!r}"
        ) from None


def _allowed_unjudged(folder: Path, record: Mapping) -> list[str]:
    """The checks the approver accepted without a verdict (none when the key is absent); :class:`BundleError`
    when the key is not a non-empty list of names."""
    if ALLOWED_UNJUDGED_KEY not in record:
        return []
    allowed = record[ALLOWED_UNJUDGED_KEY]
    if not isinstance(allowed, list) or not allowed or not all(isinstance(name, str) for name in allowed):
        raise BundleError(f"{folder / BUDGET_JSON}: {ALLOWED_UNJUDGED_KEY} is not a list of check names")
    return allowed


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def _entry_shape(entries: Sequence[object]) -> list[str]:
    """Each ``inputs[]`` entry holds exactly :data:`INPUT_KEYS` of the right types, named as approve would."""
    for i, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or sorted(entry) != sorted(INPUT_KEYS)
            or not all(isinstance(entry[k], str) for k in ("path", "bundle_path", "sha256", "role"))
            or entry["role"] not in ROLES
        ):
            raise BundleError(
                f"budget.json: inputs[{i}] is not an input entry ({', '.join(INPUT_KEYS)}; role "
                f"one of {', '.join(ROLES)})"
            )
    out = []
    for entry, name in zip(entries, input_names([entry["path"] for entry in entries])):
        if entry["bundle_path"] != name:
            out.append(f"inputs: {entry['path']} is copied as {name}, recorded {entry['bundle_path']}")
    return out


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
    """Field-by-field differences between a recorded and a recomputed JSON value."""
    if same_canonical(recorded, fresh):  # 1, 1.0 and true are not the same record
        return []
    if isinstance(recorded, dict) and isinstance(fresh, dict):
        out = []
        for name in sorted(set(recorded) | set(fresh), key=str):
            out += _compare(f"{key}.{name}", recorded.get(name), fresh.get(name))
        return out or [f"{key}: recorded {_short(recorded)}, recomputed {_short(fresh)}"]
    if isinstance(recorded, list) and isinstance(fresh, list) and len(recorded) == len(fresh):
        out = []
        for i, (a, b) in enumerate(zip(recorded, fresh)):
            out += _compare(f"{key}[{i}]", a, b)
        return out
    return [f"{key}: recorded {_short(recorded)}, recomputed {_short(fresh)}"]


def _short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _roundtrip(record: dict) -> dict:
    """``record`` as JSON reads it back (lists for tuples, string keys); the ledger rows are taken as they
    are: :func:`~kvplan.evidence.record.build_record` makes them plain JSON values with string keys already,
    and they are most of a record (a second copy of 20,000 rows would double verify's memory)."""
    read = json.loads(json.dumps({key: value for key, value in record.items() if key != "ledger"}))
    return {key: record[key] if key == "ledger" else read[key] for key in record}


def _as_recorded(decision: Decision, recorded_ledger: object) -> Decision:
    """``decision`` without the ledger columns (and their provenance) that a bundle of kvplan 0.1.0 did not
    record (:data:`~kvplan.columns.NEWER_THAN_0_1_0`, absent from every recorded row): the reader has
    learned more lines since, and what it learned is no part of what was approved. Any other column is
    compared as before.
    """
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
    """``decision`` with its raw lines read back from the bundle's own inputs in ``folder`` rather than from
    the ``private`` copies verify removes (the same bytes: each copy was hashed against the record)."""
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
