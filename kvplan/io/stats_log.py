"""One pass over a vLLM server log under load: what it gathered (:class:`StatsLog`), and the whole-line path.

Most lines of a load-test log are V1 stats lines in vLLM's default form (0.8.3 on). Such a line, when it is
one record alone, is matched whole by :data:`V1_STATS_LINE` and taken straight into the packed rows
(:meth:`StatsLog.take_whole`, the lines handed over by :meth:`~kvplan.io.stats_records.RecordReader.read`), with exactly what the general reader (:mod:`kvplan.io.vllm_stats`) would do for
it; any other line, or one the whole-line path cannot take, goes through the general reader.
"""

from __future__ import annotations

import operator
import re
import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from kvplan.io.stats_records import Record, file_name
from kvplan.load_table import UNKNOWN_NUMBER, LoadRows

V1_PREEMPTIONS_FIELD_FROM_LINENO = (
    236  # loggers.py line of the stats call in 0.11.1, the first with "Preemptions"
)
_NUMBER = r"(-?\d+(?:\.\d+|))"
#: A whole line that is one V1 stats record as vLLM prints it from 0.8.3 on (counts of up to 18 digits, so
#: that each fits its 64-bit column; a longer one is left to the general reader, which refuses it). Optional
#: parts are written ``(?:…|)``, which matches what ``(?:…)?`` matches at less cost to sre.
V1_STATS_LINE = re.compile(
    r"(?:\([A-Za-z]+ pid=\d+\) |)INFO (\d\d-\d\d) (\d\d:\d\d:\d\d) \[([\w./-]+):(\d+)\] Engine (\d{1,18}): "
    rf"Avg prompt throughput: {_NUMBER} tokens/s, Avg generation throughput: {_NUMBER} tokens/s, "
    r"Running: (\d{1,18}) reqs, Waiting: (\d{1,18}) reqs, (?:Preemptions: (\d{1,18}), |)[A-Z]+ KV cache usage: "
    rf"{_NUMBER}%, Prefix cache hit rate: {_NUMBER}%$"
)
_FIRST = datetime(1, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


class StatsLog:
    """What one pass over a log's records gathered: the rows (the last one still open), counters, facts."""

    def __init__(self, source: str, shift: timedelta) -> None:
        self.source, self.shift = source, shift
        self.shift_micros = shift // _MICROSECOND
        self.rows = LoadRows()
        self.code = self.rows.source_code(source)
        self.last: dict | None = None  # the newest row, still open for its companion lines
        self.last_form: str | None = None
        self.restarts = self.rows_at_start = 0
        self.late_v1 = False
        self.pending_v1: array = array("q")  # V1 rows without "Preemptions" while late_v1 was unknown
        self.forms: set[str] = set()
        self.kv_tokens: set[int] = set()
        self.manual_bytes: set[int] = set()
        self.stamped: set[int] = set()  # UTC offsets [min] from docker stamps
        self.yearless = False
        self.untimed = 0
        self.first_untimed: int | None = None
        self.last_preemption: tuple[int, int | None] | None = None
        self.series: dict[int | None, tuple[array, array]] = {}  # engine → (µs since the first, line)
        self.warnings: list[str] = []

    def count(self) -> int:
        return len(self.rows) + (self.last is not None)

    def take_whole(self, found: list[re.Match], line: int, micros: list[int], year_known: bool) -> int:
        """Take a run of consecutive lines, each one V1 stats record in vLLM's default form (``found``:
        their :data:`V1_STATS_LINE` matches), the first at line ``line``, stamped ``micros`` [µs since
        year 1, UTC when the shift is known], with what the general reader
        (:func:`kvplan.io.vllm_stats.parse_stats_lines`) would do for each; returns how many were taken:
        all, or those before the first that the general reader must judge (a usage outside 0–100 %: it
        warns), which is left with the rest.
        """
        usage_pct = _numbers(_group(found, "usage"), float)
        count = len(usage_pct)
        if min(usage_pct) < 0 or max(usage_pct) > 100:
            count = next(n for n, value in enumerate(usage_pct) if not 0 <= value <= 100)
            if not count:
                return 0
            del usage_pct[count:], micros[count:]
            found = found[:count]
        preemptions = _group(found, "preemptions")
        unknown = 0  # the leading lines without "Preemptions" while late_v1 is unknown
        if not self.late_v1:
            files, linenos = _group(found, "file"), _group(found, "lineno")
            for unknown in range(count + 1):
                if (
                    unknown == count
                    or preemptions[unknown] is not None
                    or (
                        file_name(files[unknown]) == "loggers.py"
                        and int(linenos[unknown]) >= V1_PREEMPTIONS_FIELD_FROM_LINENO
                    )
                ):
                    break
            self.late_v1 = unknown < count
        self.close()  # the open row ends here, as a new row's would
        first = len(self.rows)
        self.pending_v1.extend(range(first, first + unknown))
        counts = (
            _numbers(preemptions, int)
            if None not in preemptions
            else [UNKNOWN_NUMBER] * unknown + _numbers(preemptions[unknown:], _count_or_zero)
        )
        engine_indices = _numbers(_group(found, "engine"), int)
        times, lines = _packed(micros), _packed(range(line, line + count))
        self.rows.extend_columns(
            count,
            source=self.code,
            line=lines,
            time=times,
            engine=engine_indices,
            kv_cache_usage_pct=usage_pct,
            running=_numbers(_group(found, "running"), int),
            waiting=_numbers(_group(found, "waiting"), int),
            swapped=UNKNOWN_NUMBER,
            prompt_tokens_per_s=_numbers(_group(found, "prompt"), float),
            generation_tokens_per_s=_numbers(_group(found, "generation"), float),
            prefix_cache_hit_pct=_numbers(_group(found, "hits"), float),
            preemptions=counts,
            preemptions_total=UNKNOWN_NUMBER,
            kind=0,  # "log"
            year_known=year_known,
            restarts=self.restarts,
            event=0,  # none
        )
        if not year_known:
            self.yearless = True
        self.last_form = "v1"
        self.forms.add("v1")
        if engine_indices.count(engine_indices[0]) == count:  # one engine: its series grows by the run
            self._series(engine_indices[0], times, lines)
        else:
            for number, (engine, when) in enumerate(zip(engine_indices, micros), line):
                self._series(engine, (when,), (number,))
        return count

    def _series(self, engine: int | None, micros: Iterable[int], lines: Iterable[int]) -> None:
        """Add stats rows' times [µs since year 1] and lines to ``engine``'s series (for the gap warnings)."""
        series = self.series.get(engine)
        if series is None:
            series = self.series[engine] = (array("q"), array("q"))
        series[0].extend(micros)
        series[1].extend(lines)

    def add(self, record: Record, form: str | None = None, **values) -> dict:
        """Open a new row from ``record`` (its time shifted to UTC when the offset is known)."""
        self.close()
        time = record.time + self.shift if record.time is not None and self.shift else record.time
        row = {
            "engine": record.engine_prefix,
            "restarts": self.restarts,
            "year_known": record.year_known,
            **values,
            "line": record.line,
            "time": time,
        }
        if values.get("event") is not None:
            row["raw"] = record.message
        if time is None:
            self.untimed += 1
            self.first_untimed = record.line if self.first_untimed is None else self.first_untimed
        elif form is not None:
            self._series(row["engine"], ((time - _FIRST) // _MICROSECOND,), (record.line,))
        self.last, self.last_form = row, form
        return row

    def close(self) -> None:
        """Pack the open row."""
        if self.last is not None:
            row = self.last
            self.rows.add(
                self.source,
                row.pop("line"),
                row.pop("time"),
                row,
                event=row.get("event"),
                raw=row.get("raw", ""),
            )
            self.last = None


#: :data:`V1_STATS_LINE`'s groups by name, each the getter of that group from a match
_GROUPS = {
    name: operator.itemgetter(number)
    for number, name in enumerate(
        (
            "day",
            "clock",
            "file",
            "lineno",
            "engine",
            "prompt",
            "generation",
            "running",
            "waiting",
            "preemptions",
            "usage",
            "hits",
        ),
        1,
    )
}


def _group(found: list[re.Match], name: str) -> list:
    """The text of group ``name`` (see :data:`_GROUPS`) of each match (``None`` where it did not take part).

    >>> _group([V1_STATS_LINE.match("INFO 11-29 10:00:10 [loggers.py:310] Engine 000: Avg prompt throughput: "
    ...     "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, "
    ...     "GPU KV cache usage: 5.2%, Prefix cache hit rate: 0.0%")], "running")
    ['3']
    """
    return list(map(_GROUPS[name], found))


def _packed(values: Iterable[int]) -> array:
    """``array("q", values)``, packed by :mod:`struct` (a fraction of what ``array`` costs item by item).

    >>> _packed(range(3))
    array('q', [0, 1, 2])
    """
    values = values if isinstance(values, list) else list(values)
    packed = array("q")
    packed.frombytes(struct.pack(f"{len(values)}q", *values))
    return packed


def _count_or_zero(text: str | None) -> int:
    """A count's text as a number; a field the line leaves out (``None``) is 0.

    >>> _count_or_zero("3"), _count_or_zero(None)
    (3, 0)
    """
    return 0 if text is None else int(text)


def _numbers(texts: Sequence[str], kind: Callable[[str], int | float]) -> list:
    """``list(map(kind, texts))``, each distinct text converted once when texts repeat (counts, percentages).

    >>> _numbers(("3", "3", "3", "3", "3", "12"), int), _numbers(("0.0", "-0.0"), float)
    ([3, 3, 3, 3, 3, 12], [0.0, -0.0])
    """
    distinct = set(texts)
    if 2 * len(distinct) > len(texts):
        return list(map(kind, texts))
    numbers = dict(zip(distinct, map(kind, distinct)))
    return list(map(numbers.__getitem__, texts))
