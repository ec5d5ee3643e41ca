"""The evidence bundle: one folder per approval, written once, with everything needed to re-check it
(``docs/budget-json.md``): the record, its texts and charts, approve, safe reading and verify."""

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
)
from kvplan.evidence.write import CheckFailedError, Request, approve, approve_bundle, enclosing_bundle
from kvplan.plan import AdmissionPlan, LoadPolicy, ModelLayout, Policy

__all__ = ["approved_from_record", "launch_lines", "read_bundle", "summary_markdown"]
__all__ += ["BUDGET_JSON", "SEAL_KEY", "ApprovalError", "BundleChangedError", "BundleError"]
__all__ += ["BundleExistsError", "bundle_digest", "inputs_digest", "seal", "sha256_file"]
__all__ += ["Verified", "user_paths", "verified_approval", "verify", "verify_bundle"]
__all__ += ["CheckFailedError", "Request", "approve", "approve_bundle"]
__all__ += ["AdmissionPlan", "LoadPolicy", "ModelLayout", "Policy", "enclosing_bundle"]
