"""The one decision pipeline: :func:`decide` turns evidence and policy into one frozen :class:`Decision`.

>>> from kvplan.plan import Policy, decide, given_rooms
>>> GiB = 2**30
>>> rooms = [int(gib * GiB) for gib in (18.8, 17.6, 12.9, 16.4)]
>>> decide(given_rooms(rooms), Policy(int(0.9 * GiB))).budget.limiting_rank
2
"""

from kvplan.plan.decision import Decision, decide, layout_spec, model_check
from kvplan.plan.inputs import LoadPolicy, ModelLayout, Plan, Policy
from kvplan.plan.load_evidence import gate_load, load_section, profiled_tokens, read_named_load
from kvplan.plan.reading import (
    STARTUP_LINES,
    Evidence,
    InputFileError,
    given_rooms,
    read_evidence,
    renamed,
    require_boot,
    require_files,
)
from kvplan.plan.reference import boot_free_bytes, reference_free_bytes

__all__ = [
    "STARTUP_LINES",
    "Decision",
    "Evidence",
    "InputFileError",
    "LoadPolicy",
    "ModelLayout",
    "Plan",
    "Policy",
    "boot_free_bytes",
    "decide",
    "gate_load",
    "given_rooms",
    "layout_spec",
    "load_section",
    "model_check",
    "profiled_tokens",
    "read_evidence",
    "read_named_load",
    "reference_free_bytes",
    "renamed",
    "require_boot",
    "require_files",
]
