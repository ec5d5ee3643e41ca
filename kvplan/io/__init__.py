"""Readers, one per evidence source: vLLM logs, ledger CSVs, nvidia-smi snapshots, model configs, load data."""

from kvplan.io.ledger_csv import LedgerCsvError, read_ledger_csv
from kvplan.io.metadata import ReadMetadata
from kvplan.io.nvidia_smi import read_nvidia_smi_csv
from kvplan.io.vllm import LogParseError, read_vllm_log, read_vllm_logs

__all__ = [
    "LedgerCsvError",
    "LogParseError",
    "ReadMetadata",
    "read_ledger_csv",
    "read_nvidia_smi_csv",
    "read_vllm_log",
    "read_vllm_logs",
]
