"""Checks: pure functions of evidence that return :class:`kvplan.verdict.Check`.

:mod:`~kvplan.checks.key` (whether a boot is the approved launch: key, ranks, outcome),
:mod:`~kvplan.checks.launch` (vLLM's own start-up refusals, per release, and the flags that pass them),
:mod:`~kvplan.checks.gate` (a canary against an approval: :class:`Approved`, :func:`gate_checks`) and
:mod:`~kvplan.checks.canary` (a canary as evidence, its own launch and running value).

>>> import pandas as pd
>>> check_ranks_present([0, 1], pd.DataFrame({"rank": [0]})).passed
False
"""

from kvplan.budget import largest_utilization, passes_startup_check
from kvplan.checks.canary import (
    VALUE_CHECK,
    check_canary_utilization,
    check_canary_value,
    judged_on_complete_evidence,
)
from kvplan.checks.gate import (
    BUDGET_CHECK,
    OWN_GATE_CHECK,
    RESERVE_CHECK,
    TOKENS_CHECK,
    Approved,
    check_budget_fits,
    check_own_gate,
    check_reserve_after_warmup,
    check_tokens,
    gate_checks,
    largest_guard,
)
from kvplan.checks.key import (
    DEFAULT_PROVENANCE,
    KEY_CHECK,
    MANUAL_BOOT_IGNORES,
    NONE_WHEN_CONFIG_SHOWN,
    OUTCOME_CHECK,
    RANKS_CHECK,
    check_compatibility_key,
    check_outcomes,
    check_ranks_present,
    defaulted_key_fields,
    read_defaulted_key_fields,
)
from kvplan.checks.launch import (
    FOOTPRINT_CHECK,
    LAUNCH_CHECKS,
    REQUEST_CHECK,
    UTILIZATION_CHECK,
    LaunchFlags,
    check_footprint,
    check_full_request,
    check_startup_memory,
    largest_length,
    launch_flags,
    launch_section,
    request_bytes,
)

__all__ = [
    "BUDGET_CHECK",
    "DEFAULT_PROVENANCE",
    "FOOTPRINT_CHECK",
    "KEY_CHECK",
    "LAUNCH_CHECKS",
    "MANUAL_BOOT_IGNORES",
    "NONE_WHEN_CONFIG_SHOWN",
    "OUTCOME_CHECK",
    "OWN_GATE_CHECK",
    "RANKS_CHECK",
    "REQUEST_CHECK",
    "RESERVE_CHECK",
    "TOKENS_CHECK",
    "UTILIZATION_CHECK",
    "VALUE_CHECK",
    "Approved",
    "LaunchFlags",
    "check_budget_fits",
    "check_canary_utilization",
    "check_canary_value",
    "check_compatibility_key",
    "check_footprint",
    "check_full_request",
    "check_outcomes",
    "check_own_gate",
    "check_ranks_present",
    "check_reserve_after_warmup",
    "check_startup_memory",
    "check_tokens",
    "defaulted_key_fields",
    "gate_checks",
    "judged_on_complete_evidence",
    "largest_guard",
    "largest_length",
    "largest_utilization",
    "launch_flags",
    "launch_section",
    "passes_startup_check",
    "read_defaulted_key_fields",
    "request_bytes",
]
