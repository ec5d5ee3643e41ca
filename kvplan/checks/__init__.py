"""Checks: pure functions of evidence that return :class:`kvplan.verdict.Check`.

:mod:`~kvplan.checks.key` (the compatibility key, with vLLM's defaults as not shown),
:mod:`~kvplan.checks.boot` (every rank present, no OOM or error), :mod:`~kvplan.checks.launch` (vLLM's
own start-up refusals of a launch, per release, and the launch flags that pass them) and
:mod:`~kvplan.checks.gate` (a canary against an approval: :class:`Approved`, the budget, reserve and
token checks, :func:`gate_checks`). The
load checks are :mod:`kvplan.load.checks`'s, the model cross-check :func:`kvplan.plan.model_check`.

>>> from kvplan.checks import check_ranks_present
>>> import pandas as pd
>>> check_ranks_present([0, 1], pd.DataFrame({"rank": [0]})).passed
False
"""

from kvplan.checks.boot import OUTCOME_CHECK, RANKS_CHECK, check_outcomes, check_ranks_present
from kvplan.checks.canary import (
    VALUE_CHECK,
    check_canary_utilization,
    check_canary_value,
    judged_on_complete_evidence,
)
from kvplan.checks.gate import (
    BUDGET_CHECK,
    RESERVE_CHECK,
    TOKENS_CHECK,
    Approved,
    check_budget_fits,
    check_reserve_after_warmup,
    check_tokens,
    gate_checks,
)
from kvplan.checks.key import (
    DEFAULT_PROVENANCE,
    KEY_CHECK,
    MANUAL_BOOT_IGNORES,
    NONE_WHEN_CONFIG_SHOWN,
    check_compatibility_key,
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
    largest_utilization,
    launch_flags,
    passes_startup_check,
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
    "check_ranks_present",
    "check_reserve_after_warmup",
    "check_startup_memory",
    "check_tokens",
    "defaulted_key_fields",
    "gate_checks",
    "judged_on_complete_evidence",
    "largest_length",
    "largest_utilization",
    "launch_flags",
    "passes_startup_check",
    "read_defaulted_key_fields",
    "request_bytes",
]
