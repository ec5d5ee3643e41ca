"""vLLM startup logs into the ledger (:func:`read_vllm_log`, :func:`read_vllm_logs`, :func:`stream_vllm_logs`).

Bottom up: ``scan`` (anchored lines), ``records`` (a line into records), ``values`` and ``handlers`` (what vLLM
prints, as values), ``families`` (the line table), ``boots`` (restarts), ``ranks`` (who printed a line),
``resolve`` (a boot into rows), ``read`` (files into the ledger).
"""

from kvplan.io.vllm.read import LogParseError, read_vllm_log, read_vllm_logs, stream_vllm_logs

__all__ = ["LogParseError", "read_vllm_log", "read_vllm_logs", "stream_vllm_logs"]
