"""The gate checks of kvplan 0.1.0's ``kvplan.gate``, now :mod:`kvplan.checks` (imports of it keep working).

>>> from kvplan.gate import gate_checks
>>> gate_checks.__module__
'kvplan.checks.gate'
"""

from kvplan.checks import (  # noqa: F401 (the names kvplan.gate has always exported)
    BUDGET_CHECK,
    DEFAULT_PROVENANCE,
    KEY_CHECK,
    MANUAL_BOOT_IGNORES,
    NONE_WHEN_CONFIG_SHOWN,
    OUTCOME_CHECK,
    RANKS_CHECK,
    RESERVE_CHECK,
    TOKENS_CHECK,
    Approved,
    check_budget_fits,
    check_compatibility_key,
    check_outcomes,
    check_ranks_present,
    check_reserve_after_warmup,
    check_tokens,
    defaulted_key_fields,
    gate_checks,
)
