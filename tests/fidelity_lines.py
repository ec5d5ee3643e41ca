"""vLLM log lines as each release prints them, for tests that build lines from vLLM's format strings.

``logger.py`` of each release (vllm-log-formats.md §7): up to 0.7.3 the header is
``LEVEL MM-DD HH:MM:SS file.py:N] msg``; from 0.8.0 ``[file.py:N]``; the process prefix is written
by ``_add_prefix`` up to 0.30 (cyan ``\\x1b[1;36m`` to 0.11, ``\\x1b[0;36m`` in 0.12–0.15, plain when
not a TTY in 0.16–0.30) and is part of the record from 0.31 (``(Worker_TP1 pid=448) INFO …``).
"""

from __future__ import annotations

DATE = "11-29 10:00:00"


def release(version: str) -> tuple[int, ...]:
    """``"0.6.4.post1"`` → ``(0, 6, 4)``.

    >>> release("0.6.4.post1"), release("0.33.0")
    ((0, 6, 4), (0, 33, 0))
    """
    return tuple(int(part) for part in version.split(".")[:3])


def vllm_line(
    version: str,
    message: str,
    process: str | None = None,
    pid: int | None = None,
    level: str = "INFO",
    where: str = "x.py:1",
) -> str:
    """One physical line as vLLM ``version`` writes ``message`` from ``process`` (None: no prefix).

    >>> vllm_line("0.33.0", "Hi", "Worker_TP1", 448, where="gpu_worker.py:2")
    '(Worker_TP1 pid=448) INFO 11-29 10:00:00 [gpu_worker.py:2] Hi'
    >>> vllm_line("0.6.6", "Hi", "VllmWorkerProcess", 9)
    '\\x1b[1;36m(VllmWorkerProcess pid=9)\\x1b[0;0m INFO 11-29 10:00:00 x.py:1] Hi'
    """
    v = release(version)
    fileinfo = f"{where}]" if v < (0, 8, 0) else f"[{where}]"
    header = f"{level} {DATE} {fileinfo} "
    if process is None:
        return header + message
    name = f"({process} pid={pid})"
    if v >= (0, 16, 0):
        return f"{name} {header}{message}"
    colour = "\x1b[1;36m" if v < (0, 12, 0) else "\x1b[0;36m"
    return f"{colour}{name}\x1b[0;0m {header}{message}"


def engine_process(version: str, dp: int | None = None) -> str:
    """The EngineCore prefix name of ``version`` (vllm-log-formats.md §7, "V1 EngineCore").

    >>> engine_process("0.9.2"), engine_process("0.14.0"), engine_process("0.33.0")
    ('EngineCore_0', 'EngineCore_DP0', 'EngineCore')
    """
    v = release(version)
    if v < (0, 10, 2):
        return f"EngineCore_{dp or 0}"
    if v < (0, 18, 0):
        return f"EngineCore_DP{dp or 0}"
    return "EngineCore" if dp is None else f"EngineCore_DP{dp}"


def engine_config(
    version: str, model: str = "Qwen/Qwen3-8B", tp: int = 1, max_seq_len: int = 32768, **extra: object
) -> str:
    """The message of the V1 engine-config line (``Initializing a V1 LLM engine (vX) with config: …``).

    >>> engine_config("0.33.0", tp=2)[:48]
    'Initializing a V1 LLM engine (v0.33.0) with conf'
    """
    fields = {
        "model": repr(model),
        "revision": "None",
        "dtype": "torch.bfloat16",
        "max_seq_len": str(max_seq_len),
        "tensor_parallel_size": str(tp),
        "pipeline_parallel_size": "1",
        "data_parallel_size": "1",
        "quantization": "None",
        "enforce_eager": "False",
        "kv_cache_dtype": "auto",
        **{name: str(value) for name, value in extra.items()},
    }
    body = ", ".join(f"{name}={value}" for name, value in fields.items())
    return f"Initializing a V1 LLM engine (v{version}) with config: {body}"


def v0_engine_config(
    version: str, model: str = "meta-llama/Llama-3.1-8B", tp: int = 1, max_seq_len: int = 8192
) -> str:
    """The message of the V0 engine-config line (``Initializing an LLM engine (vX) with config: …``).

    >>> v0_engine_config("0.6.6")[:44]
    'Initializing an LLM engine (v0.6.6) with con'
    """
    return (
        f"Initializing an LLM engine (v{version}) with config: model={model!r}, revision=None, "
        f"dtype=torch.bfloat16, max_seq_len={max_seq_len}, tensor_parallel_size={tp}, "
        "pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto"
    )


def log(*lines: str) -> str:
    """The lines joined into one log text, newline-terminated.

    >>> log("a", "b")
    'a\\nb\\n'
    """
    return "".join(line + "\n" for line in lines)
