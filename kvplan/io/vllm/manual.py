"""The manual KV value a boot ran with, and vLLM 0.33's startup-plan lines (``docs/startup-plan.md``).

A ``--kv-cache-memory-bytes`` boot prints "reserved X GiB memory for KV Cache" rounded to 0.01 GiB: the flag
lies within :data:`PRINTED_HALF_BYTES` of X; ``non-default args`` and the startup-plan line carry the exact
bytes. ``manual_kv_max_bytes`` is the most the flag can be: a gate never passes a canary that may have run more.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from kvplan.io.metadata import place_note
from kvplan.units import format_size

#: Half of vLLM's printed 0.01 GiB, rounded up [bytes]: the flag is at most this far above the figure.
PRINTED_HALF_BYTES = -(-(1 << 30) // 200)


def printed_manual(printed_bytes: int) -> dict:
    """The ledger values of a printed manual figure: the figure and the most the flag can be [bytes]."""
    return {"manual_kv_bytes": printed_bytes, "manual_kv_max_bytes": printed_bytes + PRINTED_HALF_BYTES}


def exact_manual(rows: dict, config: dict, origin: dict, source: str, warnings: list) -> None:
    """Each rank's printed manual figure replaced by the flag's bytes in ``config``; a figure more than
    :data:`PRINTED_HALF_BYTES` off keeps its value, its bound widened to the flag's, with a note."""
    held = config.get("manual_kv_bytes")
    if held is None or not str(held[0]).isdigit():  # held as text, like every other configuration value
        return
    exact, line, raw = int(str(held[0])), held[1], held[2]
    for rank, values in rows.items():
        printed, most = values.get("manual_kv_bytes"), values.get("manual_kv_max_bytes")
        if printed is None or most is None or most == printed:  # no manual line, or bytes already exact
            continue
        if abs(exact - printed) <= PRINTED_HALF_BYTES:
            values["manual_kv_bytes"] = values["manual_kv_max_bytes"] = exact
            origin[(rank, "manual_kv_bytes")] = origin[(rank, "manual_kv_max_bytes")] = (line, raw)
            continue
        values["manual_kv_max_bytes"] = max(most, exact)
        text = (
            f"the arguments give --kv-cache-memory-bytes={exact} but rank {rank} printed {format_size(printed)} "
            "reserved for KV cache: the larger is taken as what it may have run"
        )
        warnings.append(place_note("manual-value-differs", source, line, text))


SAVED, APPLIED, NOT_APPLIED = "saved", "applied", "not applied"
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
    """One startup-plan line: where (line, process, pid), which kind, and its values [bytes]."""

    line: int
    process: str
    pid: int
    kind: str
    fingerprint: str | None = None
    kv_cache_memory_bytes: int | None = None
    free_bytes: int | None = None
    baseline_bytes: int | None = None


def parse_startup_plan_line(text: str, line: int) -> StartupPlanLine | None:
    """The startup-plan line in ``text`` (line number ``line``), None when it is not one.

    >>> parse_startup_plan_line("(Worker_TP2 pid=48604) INFO 11-24 09:16:20 [startup_plan.py:189] Saved startup "
    ...     "plan to /root/.cache/vllm/startup_plan/startup_plan_0123456789abcdef.json", 7).fingerprint
    '0123456789abcdef'
    """
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
    """Every startup-plan line of a vLLM log, in file order."""
    found = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, text in enumerate(handle, start=1):
            parsed = parse_startup_plan_line(text.rstrip("\n"), number)
            if parsed is not None:
                found.append(parsed)
    return found


def _gib(text: str | None) -> int | None:
    return None if text is None else round(float(text) * (1 << 30))
