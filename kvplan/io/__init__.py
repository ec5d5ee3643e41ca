"""Readers, one per evidence source: vLLM logs, nvidia-smi snapshots, model configs, load data."""

from kvplan.io.nvidia_smi import read_nvidia_smi_csv
from kvplan.io.vllm_log import LogParseError, read_vllm_log, read_vllm_logs

__all__ = ["LogParseError", "read_nvidia_smi_csv", "read_vllm_log", "read_vllm_logs"]
