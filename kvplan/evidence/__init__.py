"""The evidence bundle: an approved budget with everything needed to re-check it, written once.

One folder per approval (``YYYY-MM-DD-<hash>``) holding ``budget.json`` (schema in ``docs/budget-json.md``),
``ledger.csv``, ``SUMMARY.md``, ``evidence.log``, ``charts/*.png`` and a copy of every input under ``inputs/``:
:mod:`~kvplan.evidence.record` (the record, its digests and seal, the gate's view),
:mod:`~kvplan.evidence.render` (its text and charts), :mod:`~kvplan.evidence.write` (approve),
:mod:`~kvplan.evidence.reading` (a bundle's files, read safely once) and :mod:`~kvplan.evidence.verify`.

>>> from kvplan import DATA_DIR
>>> verify_bundle(DATA_DIR / "no-such-bundle")
Traceback (most recent call last):
...
kvplan.evidence.record.BundleError: ...no-such-bundle/budget.json: no such file: not an evidence bundle
"""

from kvplan.evidence.reading import approved_from_record, read_bundle
from kvplan.evidence.record import (
    BUDGET_JSON,
    SEAL_KEY,
    ApprovalError,
    BundleChangedError,
    BundleError,
    BundleExistsError,
    bundle_digest,
    inputs_digest,
    seal,
    sha256_file,
)
from kvplan.evidence.render import launch_lines, summary_markdown
from kvplan.evidence.verify import (
    Verified,
    user_paths,
    verified_approval,
    verify,
    verify_bundle,
    verify_bundle_with_notes,
)
from kvplan.evidence.write import CheckFailedError, Request, approve, approve_bundle, enclosing_bundle
from kvplan.plan import AdmissionPlan, LoadPolicy, ModelLayout, Policy

__all__ = [
    "BUDGET_JSON",
    "SEAL_KEY",
    "AdmissionPlan",
    "ApprovalError",
    "BundleChangedError",
    "BundleError",
    "BundleExistsError",
    "CheckFailedError",
    "LoadPolicy",
    "ModelLayout",
    "Policy",
    "Request",
    "Verified",
    "approve",
    "approve_bundle",
    "approved_from_record",
    "bundle_digest",
    "enclosing_bundle",
    "inputs_digest",
    "launch_lines",
    "read_bundle",
    "seal",
    "sha256_file",
    "summary_markdown",
    "user_paths",
    "verified_approval",
    "verify",
    "verify_bundle",
    "verify_bundle_with_notes",
]
