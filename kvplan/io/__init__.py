"""Readers, one per evidence source: vLLM logs, nvidia-smi snapshots, model configs, load data."""
