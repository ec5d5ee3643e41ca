"""The one decision pipeline: :func:`decide` turns evidence and policy into one frozen :class:`Decision`; the
steps that read logs (and pandas) are imported on first use.

>>> from kvplan.plan import Policy, decide, given_rooms
>>> rooms = [int(gib * 2**30) for gib in (18.8, 17.6, 12.9, 16.4)]
>>> decide(given_rooms(rooms), Policy(int(0.9 * 2**30))).budget.limiting_rank
2
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan import lazy_names
from kvplan.drift import boot_free_bytes, reference_free_bytes
from kvplan.plan.inputs import GIVEN, AdmissionPlan, Decision, LoadPolicy, ModelLayout, Policy, decide_rooms

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from kvplan.plan.decision import decide, launch_layout_spec, layout_spec, model_check
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

#: The module of :mod:`kvplan.plan` each name is imported from on first use.
_LAZY = {
    **dict.fromkeys(["decide", "launch_layout_spec", "layout_spec", "model_check"], "decision"),
    **dict.fromkeys(["gate_load", "load_section", "profiled_tokens", "read_named_load"], "load_evidence"),
    **dict.fromkeys(
        ["STARTUP_LINES", "Evidence", "InputFileError", "given_rooms", "read_evidence"], "reading"
    ),
    **dict.fromkeys(["renamed", "require_boot", "require_files"], "reading"),
}
__getattr__ = lazy_names(__name__, _LAZY)

__all__ = ["GIVEN", "AdmissionPlan", "Decision", "LoadPolicy", "ModelLayout", "Policy", "decide_rooms"]
__all__ += ["boot_free_bytes", "reference_free_bytes"]
__all__ += ["decide", "launch_layout_spec", "layout_spec", "model_check"]
__all__ += ["gate_load", "load_section", "profiled_tokens", "read_named_load"]
__all__ += ["STARTUP_LINES", "Evidence", "InputFileError", "given_rooms", "read_evidence"]
__all__ += ["renamed", "require_boot", "require_files"]
