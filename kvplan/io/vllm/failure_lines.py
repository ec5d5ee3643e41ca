"""Failed boots: the lines vLLM prints when startup fails, and the traceback frames that say where.

Releases (checked against the released wheels, ``pip download --no-deps vllm==X.Y.Z``):

- ``EngineCore failed to start.`` (``v1/engine/core.py`` ``run_engine_core``, 0.8.5–0.33; ERROR with
  the traceback), ``EngineCore hit an exception: %s`` (0.7.0–0.8.4), ``WorkerProc failed to start.``
  (``v1/executor/multiproc_executor.py``, 0.6.5–0.33).
- ``Exception in worker %s while processing method %s.`` (V0 ``executor/multiproc_worker_utils.py``,
  0.5.0–0.10.2): the method is where the worker failed.
- V0 ``The model's max seq len (%d) is larger than the maximum number of tokens that can be stored in
  KV cache (%d)`` (``worker/worker.py`` ``raise_if_cache_size_invalid``, 0.5.0–0.10.2): the tokens.
- V1 ``… larger than the available KV cache memory (%s GiB)`` (``v1/core/kv_cache_utils.py``,
  ``kv_cache_planning.py`` in 0.33; 0.7.0–0.33): the available memory.
- NIXL (``NIXL_ERR_*``) and UCX (``UCX  ERROR``) transfer errors after KV sizing (0.9+).
- Traceback frames ``File "…", line N, in capture_model``: the vLLM function a failure went through
  (:data:`~kvplan.columns.FAILURE_PHASES`), kept as the ledger's ``failed_in``.
"""

from __future__ import annotations

import re

from kvplan.columns import FAILURE_PHASES
from kvplan.io.vllm.handlers import Family, failure, family

#: Traceback frames of the vLLM functions in :data:`FAILURE_PHASES` (``  File "…", line N, in NAME``).
FRAME_RE = r'^File "[^"]*", line \d+, in (' + "|".join(map(re.escape, FAILURE_PHASES)) + r")\s*$"

# One row a family, as in FAMILIES: family, trigger, scope, values, regex.
# fmt: off
#: Value families of failure lines.
FAILURE_VALUE_FAMILIES: list[Family] = [
    family("worker_method", "Exception in worker", "frame", ("failed_in",), r"Exception in worker \S+ while processing method (\w+)"),
    family("v0_max_tokens", "maximum number of tokens that can be", "engine", ("kv_cache_tokens",), r"stored in KV cache \((\d+)\)"),
    family("available_in_error", "larger than the available KV cache memory", "rank", ("available_kv_bytes",), r"larger than the available KV cache memory \({num} GiB\)"),
    # v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.9–0.32; kv_cache_planning.py 0.33) and V0
    # worker.py raise_if_cache_size_invalid (0.5–0.10): the length vLLM checked the KV cache against
    family("max_len_in_error", "max seq len (", "config", ("max_model_len",), r"max seq len \((\d+)\)(?:, \(| is larger than the maximum number of tokens)"),
    family("nixl_num_blocks", "num_blocks: ", "rank", ("num_gpu_blocks",), r"^num_blocks: (\d+), block_shape: "),
    family("frame", 'File "', "frame", ("failed_in",), FRAME_RE),
]
#: Failure families: the message is the error text. Groups of (outcome, priority, rows); a lower priority
#: names the failure first (:func:`~kvplan.io.vllm.handlers.failure`). Outcome families stop at the first
#: that matches, in this order.
FAILURE_FAMILIES: list[Family] = [
    family(name, trigger, "outcome", failure(outcome, priority), pattern)
    for outcome, priority, rows in [
        ("error", 3, [  # generic: the exception text follows in the traceback
            ("error_engine_start", "failed to start", r"(?:EngineCore|WorkerProc) failed to start"),
            ("error_engine_hit", "hit an exception", r"EngineCore hit an exception"),
            ("error_worker_method", "Exception in worker", r"Exception in worker \S+ while processing method \w+"),
        ]),
        ("error", 1, [
            ("error_v0_max_seq_len", "maximum number of tokens that can be", r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache"),
            ("error_nixl", "NIXL", r"NIXL_ERR_\w+"),
            ("error_ucx", "UCX", r"\bUCX\s+ERROR\b"),
        ]),
        ("oom", 0, [("oom", "emory", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")]),
        ("error", 1, [
            ("error_kv_too_small", "KV cache is needed", r"KV cache is needed, which is larger than the available KV cache memory"),
            ("error_no_blocks", "No available memory for the cache blocks", r"No available memory"),
            ("error_free_below", "less than desired GPU memory", r"is less than desired GPU memory"),
            ("error_fatal", "fatal error", r"EngineCore encountered a fatal error"),
            ("error_profiling", "Error in memory profiling", r"Error in memory profiling"),
        ]),
        ("error", 2, [("error_exception", "Error", r"^(?:[\w.]+\.)?[A-Za-z]*(?:Error|Exception): \S")]),
    ]
    for name, trigger, pattern in rows
]
# fmt: on
