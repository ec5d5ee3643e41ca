"""The evidence bundle: an approved budget with everything needed to re-check it, written once.

One folder per approval (``YYYY-MM-DD-<hash>``) holding ``budget.json`` (schema in ``docs/budget-json.md``),
``ledger.csv``, ``SUMMARY.md``, ``evidence.log``, ``charts/*.png`` and a copy of every input under ``inputs/``:
:mod:`~kvplan.evidence.record` (the record, its digests and seal, the gate's view),
:mod:`~kvplan.evidence.render` (its text and charts), :mod:`~kvplan.evidence.write` (approve),
:mod:`~kvplan.evidence.reading` (a bundle's files, read safely once) and :mod:`~kvplan.evidence.verify`.

>>> from kvplan.evidence import bundle_name
>>> from datetime import datetime, timezone
>>> bundle_name(datetime(2026, 11, 29, tzinfo=timezone.utc), "0123456789abcdef")
'2026-11-29-0123456789ab'
"""

from kvplan.evidence.evidence_log import evidence_lines
from kvplan.evidence.reading import UnsafeFileError, added_paths, read_bundle
from kvplan.evidence.record import (
    BUDGET_JSON,
    SCHEMA,
    SCHEMA_VERSION,
    SEAL_KEY,
    ApprovalError,
    BundleChangedError,
    BundleError,
    BundleExistsError,
    approved_from_record,
    build_record,
    bundle_digest,
    bundle_name,
    input_names,
    inputs_digest,
    seal,
    sha256_file,
)
from kvplan.evidence.render import (
    artifact_texts,
    chart_names,
    launch_lines,
    summary_markdown,
    under_load_lines,
)
from kvplan.evidence.verify import (
    Verified,
    name_notes,
    user_paths,
    verified_approval,
    verify,
    verify_bundle,
    verify_bundle_with_notes,
)
from kvplan.evidence.write import CheckFailedError, approve, approve_bundle, clean_stale, enclosing_bundle
from kvplan.plan import AdmissionPlan, InputFileError, LoadPolicy, ModelLayout, Policy

__all__ = [
    "BUDGET_JSON",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SEAL_KEY",
    "AdmissionPlan",
    "ApprovalError",
    "BundleChangedError",
    "BundleError",
    "BundleExistsError",
    "CheckFailedError",
    "InputFileError",
    "LoadPolicy",
    "ModelLayout",
    "Policy",
    "UnsafeFileError",
    "Verified",
    "added_paths",
    "approve",
    "approve_bundle",
    "approved_from_record",
    "artifact_texts",
    "build_record",
    "bundle_digest",
    "bundle_name",
    "chart_names",
    "clean_stale",
    "enclosing_bundle",
    "evidence_lines",
    "input_names",
    "inputs_digest",
    "launch_lines",
    "name_notes",
    "read_bundle",
    "seal",
    "sha256_file",
    "summary_markdown",
    "under_load_lines",
    "user_paths",
    "verified_approval",
    "verify",
    "verify_bundle",
    "verify_bundle_with_notes",
]
