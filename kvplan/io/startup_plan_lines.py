"""vLLM 0.33's startup-plan lines (``VLLM_ENABLE_STARTUP_PLAN=1``; ``v1/worker/startup_plan.py:189, 153, 123``)::

    Saved startup plan to %s                       (the path ends startup_plan_<fingerprint>.json)
    Applying persisted startup plan (fingerprint %s): kv_cache_memory_bytes=%d (%.2f GiB), recorded
        free-memory baseline %.2f GiB, current %.2f GiB. Memory profiling will be skipped.
    Startup plan not applied: current free memory (%.2f GiB) is below the recorded baseline (%.2f GiB); …

:func:`read_startup_plan_lines` returns them with the line and the process prefix that names the rank; the
fingerprint (a SHA-256 over vLLM's config, device and rank) cannot be computed outside vLLM: it is read here.

>>> line = ("(Worker_TP2 pid=48604) INFO 11-24 09:16:20 [startup_plan.py:189] Saved startup plan to "
...         "/root/.cache/vllm/startup_plan/startup_plan_0123456789abcdef.json")
>>> parse_startup_plan_line(line, 7)
StartupPlanLine(line=7, process='Worker_TP2', pid=48604, kind='saved', fingerprint='0123456789abcdef', kv_cache_memory_bytes=None, free_bytes=None, baseline_bytes=None)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

SAVED, APPLIED, NOT_APPLIED = "saved", "applied", "not applied"
_GIB = 1 << 30
_PREFIX = r"^\((?P<process>[A-Za-z0-9_]+) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) .*?"
_PATTERNS = {
    SAVED: re.compile(
        _PREFIX + r"Saved startup plan to \S*startup_plan_(?P<fingerprint>[0-9a-f]{16})\.json\s*$"
    ),
    APPLIED: re.compile(
        _PREFIX + r"Applying persisted startup plan \(fingerprint (?P<fingerprint>[0-9a-f]{16})\): "
        r"kv_cache_memory_bytes=(?P<kv>\d+) \([\d.]+ GiB\), recorded free-memory baseline (?P<baseline>[\d.]+) "
        r"GiB, current (?P<free>[\d.]+) GiB\."
    ),
    NOT_APPLIED: re.compile(
        _PREFIX + r"Startup plan not applied: current free memory \((?P<free>[\d.]+) GiB\) is below the "
        r"recorded baseline \((?P<baseline>[\d.]+) GiB\)"
    ),
}
#: Bytes of a line these patterns read at most: longer lines are not startup-plan lines.
_MAX_LINE = 4096


@dataclass(frozen=True)
class StartupPlanLine:
    """One startup-plan line: where (line number, process, pid), which kind, and its values [bytes]
    (GiB figures printed to 2 decimals become bytes to the nearest byte)."""

    line: int
    process: str
    pid: int
    kind: str
    fingerprint: str | None = None
    kv_cache_memory_bytes: int | None = None
    free_bytes: int | None = None
    baseline_bytes: int | None = None


def parse_startup_plan_line(text: str, line: int) -> StartupPlanLine | None:
    """The startup-plan line in ``text`` (line number ``line``), None when it is not one."""
    if "tartup plan" not in text or len(text) > _MAX_LINE:
        return None
    for kind, pattern in _PATTERNS.items():
        match = pattern.search(text)
        if match is None:
            continue
        values = match.groupdict()
        return StartupPlanLine(
            line,
            values["process"],
            int(values["pid"]),
            kind,
            values.get("fingerprint"),
            int(values["kv"]) if values.get("kv") else None,
            _gib(values.get("free")),
            _gib(values.get("baseline")),
        )
    return None


def read_startup_plan_lines(path: str | os.PathLike) -> list[StartupPlanLine]:
    """Every startup-plan line of a vLLM log, in file order (the file is read once, line by line)."""
    found = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, text in enumerate(handle, start=1):
            parsed = parse_startup_plan_line(text.rstrip("\n"), number)
            if parsed is not None:
                found.append(parsed)
    return found


def _gib(text: str | None) -> int | None:
    return None if text is None else round(float(text) * _GIB)
