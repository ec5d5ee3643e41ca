"""Readers, one per evidence source, each name imported on first use (the load readers: :mod:`kvplan.io.load`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan import lazy_names

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from kvplan.io.gpu_snapshot import read_nvidia_smi_csv  # noqa: F401
    from kvplan.io.ledger_csv import LedgerCsvError, read_ledger_csv  # noqa: F401
    from kvplan.io.metadata import ReadMetadata  # noqa: F401
    from kvplan.io.vllm import LogParseError, read_vllm_log, read_vllm_logs  # noqa: F401

_LAZY = {
    "LedgerCsvError": "ledger_csv",
    "read_ledger_csv": "ledger_csv",
    "ReadMetadata": "metadata",
    "read_nvidia_smi_csv": "gpu_snapshot",
    "LogParseError": "vllm",
    "read_vllm_log": "vllm",
    "read_vllm_logs": "vllm",
}
__getattr__ = lazy_names(__name__, _LAZY)
__all__ = sorted(_LAZY)
