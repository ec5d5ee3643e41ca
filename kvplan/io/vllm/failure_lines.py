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
from kvplan.io.vllm.handlers import NUM, Handler, text
from kvplan.io.vllm.values import gib_bytes

#: Failure families, (family, trigger, regex, outcome, priority): the message is the error text; a
#: lower priority names the failure first (0 OOM, 1 a specific error, 2 any exception, 3 a generic
#: "failed to start" whose exception text follows in the traceback).
FAILURE_FAMILIES = [
    ("error_engine_start", "failed to start", r"(?:EngineCore|WorkerProc) failed to start", "error", 3),
    ("error_engine_hit", "hit an exception", r"EngineCore hit an exception", "error", 3),
    (
        "error_worker_method",
        "Exception in worker",
        r"Exception in worker \S+ while processing method \w+",
        "error",
        3,
    ),
    (
        "error_v0_max_seq_len",
        "maximum number of tokens that can be",
        r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache",
        "error",
        1,
    ),
    ("error_nixl", "NIXL", r"NIXL_ERR_\w+", "error", 1),
    ("error_ucx", "UCX", r"\bUCX\s+ERROR\b", "error", 1),
]
#: Traceback frames of the vLLM functions in :data:`FAILURE_PHASES` (``  File "…", line N, in NAME``).
FRAME_RE = re.compile(r'^File "[^"]*", line \d+, in (' + "|".join(map(re.escape, FAILURE_PHASES)) + r")\s*$")


def _worker_method(m: re.Match) -> dict:
    return {"failed_in": m.group(1)}


def _v0_tokens(m: re.Match) -> dict:
    return {"kv_cache_tokens": int(m.group(1))}


def _available_in_error(m: re.Match) -> dict:
    return {"available_kv_bytes": gib_bytes(m.group(1))}


def _frame(m: re.Match) -> dict:
    return {"failed_in": m.group(1)}


#: Value families of failure lines: (family, trigger, regex, scope, handler), as in ``FAMILIES``.
FAILURE_VALUE_FAMILIES: list[tuple[str, str, re.Pattern, str, Handler]] = [
    (
        "worker_method",
        "Exception in worker",
        re.compile(r"Exception in worker \S+ while processing method (\w+)"),
        "frame",
        _worker_method,
    ),
    (
        "v0_max_tokens",
        "maximum number of tokens that can be",
        re.compile(r"stored in KV cache \((\d+)\)"),
        "engine",
        _v0_tokens,
    ),
    (
        "available_in_error",
        "larger than the available KV cache memory",
        re.compile(r"larger than the available KV cache memory \(" + NUM + r" GiB\)"),
        "rank",
        _available_in_error,
    ),
    (
        "nixl_num_blocks",
        "num_blocks: ",
        re.compile(r"^num_blocks: (\d+), block_shape: "),
        "rank",
        lambda m: {"num_gpu_blocks": int(m.group(1))},
    ),
    ("frame", 'File "', FRAME_RE, "frame", _frame),
]


def failure_handler(outcome: str, priority: int) -> Handler:
    """The handler of a failure family: outcome, the message as the error text, and its priority.

    >>> failure_handler("error", 3)(re.match("x", "x failed"))
    {'outcome': 'error', 'text': 'x failed', 'priority': 3}
    """
    return lambda m: {"outcome": outcome, **text(m), "priority": priority}
