"""The sealed whole-line engine of the load log reader (:func:`take_stats_lines`): a run of V1 stats lines in
vLLM's default form (0.8.3 on) goes straight into the columns; ``tests/test_load_streaming.py`` compares it."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvplan.io.load.frame import UNKNOWN_NUMBER
from kvplan.io.load.records import file_name

if TYPE_CHECKING:
    from kvplan.io.load.log import StatsLog

#: loggers.py line of the stats call in vLLM 0.11.1, the first with "Preemptions"
V1_PREEMPTIONS_FIELD_FROM_LINENO = 236
_NUMBER = r"-?\d+(?:\.\d+|)"
#: One V1 stats record as a whole line (counts of up to 18 digits fit 64 bits; ``(?:…|)``: ``(?:…)?``, cheaper)
V1_STATS_LINE = re.compile(
    r"(?:\([A-Za-z]+ pid=\d+\) |)INFO (\d\d-\d\d) (\d\d:\d\d:\d\d) \[(?P<file>[\w./-]+):(?P<lineno>\d+)\] "
    rf"Engine (?P<engine>\d{{1,18}}): Avg prompt throughput: (?P<prompt>{_NUMBER}) tokens/s, Avg generation "
    rf"throughput: (?P<generation>{_NUMBER}) tokens/s, Running: (?P<running>\d{{1,18}}) reqs, Waiting: "
    r"(?P<waiting>\d{1,18}) reqs, (?:Preemptions: (?P<preemptions>\d{1,18}), |)[A-Z]+ KV cache usage: "
    rf"(?P<usage>{_NUMBER})%, Prefix cache hit rate: (?P<hits>{_NUMBER})%$"
)


def take_stats_lines(
    log: StatsLog, found: list[re.Match], line: int, micros: list[int], year_known: bool
) -> int:
    """Take matches of :data:`V1_STATS_LINE` from ``line`` on (``micros``: µs since year 1) as the general
    reader would; returns how many: all, or those before a usage outside 0–100 %."""
    usage_pct = _numbers(_group(found, "usage"), float)
    count = len(usage_pct)
    if min(usage_pct) < 0 or max(usage_pct) > 100:
        count = next(n for n, value in enumerate(usage_pct) if not 0 <= value <= 100)
        if not count:
            return 0
        del usage_pct[count:], micros[count:]
        found = found[:count]
    preemptions = _group(found, "preemptions")
    unknown = 0 if log.late_v1 else _unknown_preemptions(found, preemptions)
    log.late_v1 = log.late_v1 or unknown < count
    log.close()  # the open row ends here, as a new row's would
    first = len(log.rows)
    log.pending_v1.extend(range(first, first + unknown))
    counts = (
        _numbers(preemptions, int)
        if None not in preemptions
        else [UNKNOWN_NUMBER] * unknown
        + _numbers(preemptions[unknown:], lambda text: 0 if text is None else int(text))
    )
    log.rows.extend(
        count,
        {
            "source": log.code,
            "time": micros,
            "line": range(line, line + count),
            "engine": _numbers(_group(found, "engine"), int),
            "kv_cache_usage_pct": usage_pct,
            "running": _numbers(_group(found, "running"), int),
            "waiting": _numbers(_group(found, "waiting"), int),
            "swapped": UNKNOWN_NUMBER,
            "prompt_tokens_per_s": _numbers(_group(found, "prompt"), float),
            "generation_tokens_per_s": _numbers(_group(found, "generation"), float),
            "prefix_cache_hit_pct": _numbers(_group(found, "hits"), float),
            "preemptions": counts,
            "preemptions_total": UNKNOWN_NUMBER,
            "restarts": log.restarts,
            "event": 0,  # none
            "kind": 0,  # "log"
            "year_known": int(year_known),
        },
    )
    log.yearless = log.yearless or not year_known
    log.last_form = "v1"
    log.forms.add("v1")
    return count


def _unknown_preemptions(found: list[re.Match], preemptions: list[str | None]) -> int:
    """How many leading lines state no ``Preemptions`` while the V1 form is unknown."""
    files, linenos = _group(found, "file"), _group(found, "lineno")
    for unknown, (count, file, lineno) in enumerate(zip(preemptions, files, linenos)):
        if count is not None or (
            file_name(file) == "loggers.py" and int(lineno) >= V1_PREEMPTIONS_FIELD_FROM_LINENO
        ):
            return unknown
    return len(found)


def _group(found: list[re.Match], name: str) -> list:
    return list(map(operator.itemgetter(V1_STATS_LINE.groupindex[name]), found))  # by number: no look-up


def _numbers(texts: Sequence[str], kind: Callable[[str], int | float]) -> list:
    """``list(map(kind, texts))``, each distinct text converted once."""
    distinct = set(texts)
    if 2 * len(distinct) > len(texts):
        return list(map(kind, texts))
    numbers = dict(zip(distinct, map(kind, distinct)))
    return list(map(numbers.__getitem__, texts))
