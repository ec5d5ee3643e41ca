"""One pass over a vLLM server log under load: what it gathered (:class:`StatsLog`), and the whole-line path.

Most lines of a load-test log are V1 stats lines in vLLM's default form (0.8.3 on). Such a line, when it is
one record alone, is matched whole by :data:`V1_STATS_LINE` and taken straight into the packed rows
(:meth:`StatsLog.take_whole`, the lines handed over by :meth:`~kvplan.io.stats_records.RecordReader.read`), with exactly what the general reader (:mod:`kvplan.io.vllm_stats`) would do for
it; any other line, or one the whole-line path cannot take, goes through the general reader.
"""

from __future__ import annotations

import re
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

    def take_whole(self, groups: list[tuple], line: int, micros: list[int], year_known: bool) -> int:
        """Take a run of consecutive lines, each one V1 stats record in vLLM's default form (``groups``:
        :data:`V1_STATS_LINE`'s groups, one tuple per group with an item per line), the first at line
        ``line``, stamped ``micros`` [µs since year 1, UTC when the shift is known], with what the general
        reader (:func:`kvplan.io.vllm_stats.parse_stats_lines`) would do for each; returns how many were
        taken: all, or those before the first that the general reader must judge (a usage outside
        0–100 %: it warns), which is left with the rest.
        """
        _, _, files, linenos, engines, prompt, generation, running, waiting, preemptions, usage, hits = groups
        usage_pct = _numbers(usage, float)
        count = len(usage_pct)
        if min(usage_pct) < 0 or max(usage_pct) > 100:
            count = next(n for n, value in enumerate(usage_pct) if not 0 <= value <= 100)
            if not count:
                return 0
            del usage_pct[count:], micros[count:]
            files, linenos, engines, prompt, generation, running, waiting, preemptions, hits = (
                column[:count]
                for column in (
                    files,
                    linenos,
                    engines,
                    prompt,
                    generation,
                    running,
                    waiting,
                    preemptions,
                    hits,
                )
            )
        unknown = 0  # the leading lines without "Preemptions" while late_v1 is unknown
        if not self.late_v1:
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
            else [UNKNOWN_NUMBER] * unknown
            + [0 if value is None else int(value) for value in preemptions[unknown:]]
        )
        engine_indices = _numbers(engines, int)
        self.rows.extend_columns(
            count,
            source=self.code,
            line=range(line, line + count),
            time=micros,
            engine=engine_indices,
            kv_cache_usage_pct=usage_pct,
            running=_numbers(running, int),
            waiting=_numbers(waiting, int),
            swapped=UNKNOWN_NUMBER,
            prompt_tokens_per_s=map(float, prompt),
            generation_tokens_per_s=map(float, generation),
            prefix_cache_hit_pct=_numbers(hits, float),
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
            self._series(engine_indices[0], micros, range(line, line + count))
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
