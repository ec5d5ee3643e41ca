"""vLLM startup logs into the ledger: scanning, records, line families, boots, ranks.

:func:`read_vllm_log` and :func:`read_vllm_logs` are the entry points (:func:`stream_vllm_logs`: the rows only, in batches); the modules, bottom up:
:mod:`~kvplan.io.vllm.scan` (the block scan and its anchors), :mod:`~kvplan.io.vllm.records` (a line
into records), :mod:`~kvplan.io.vllm.values` and :mod:`~kvplan.io.vllm.handlers` (what vLLM prints,
as values), :mod:`~kvplan.io.vllm.families` (the line families, each message read once by
:func:`~kvplan.io.vllm.families.read_message`), :mod:`~kvplan.io.vllm.boots` (restarts), :mod:`~kvplan.io.vllm.ranks` (who printed a line), :mod:`~kvplan.io.vllm.resolve` (a boot
into rows).
"""

from kvplan.io.vllm.read import LogParseError, read_vllm_log, read_vllm_logs, stream_vllm_logs

__all__ = ["LogParseError", "read_vllm_log", "read_vllm_logs", "stream_vllm_logs"]
