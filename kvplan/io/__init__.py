"""Readers, one per evidence source: vLLM logs, ledger CSVs, nvidia-smi snapshots, model configs, load data.

The names below are imported on first use, so that a reader that needs no pandas (``kvplan load``'s
stats and /metrics readers, :mod:`kvplan.io.vllm_stats`) does not import it with this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from kvplan.io.ledger_csv import LedgerCsvError, read_ledger_csv
    from kvplan.io.metadata import ReadMetadata
    from kvplan.io.nvidia_smi import read_nvidia_smi_csv
    from kvplan.io.vllm import LogParseError, read_vllm_log, read_vllm_logs

#: The module of :mod:`kvplan.io` each name is imported from on first use.
_LAZY = {
    "LedgerCsvError": "ledger_csv",
    "read_ledger_csv": "ledger_csv",
    "ReadMetadata": "metadata",
    "read_nvidia_smi_csv": "nvidia_smi",
    "LogParseError": "vllm",
    "read_vllm_log": "vllm",
    "read_vllm_logs": "vllm",
}


def __getattr__(name: str) -> object:
    """The readers' names, imported when first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module 'kvplan.io' has no attribute {name!r}")
    value = getattr(import_module(f"kvplan.io.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "LedgerCsvError",
    "LogParseError",
    "ReadMetadata",
    "read_ledger_csv",
    "read_nvidia_smi_csv",
    "read_vllm_log",
    "read_vllm_logs",
]
