"""vLLM startup logs into the ledger. Bottom up: ``scan`` (anchored lines), ``records`` (a line's records),
``values`` and ``handlers`` (what vLLM prints), ``families`` (the line table), ``boots`` (restarts), ``ranks``
(who printed a line), ``resolve`` (a boot into rows), ``read`` (files into the ledger)."""

from kvplan.io.vllm.read import LogParseError, read_vllm_log, read_vllm_logs, stream_vllm_logs

__all__ = ["LogParseError", "read_vllm_log", "read_vllm_logs", "stream_vllm_logs"]
