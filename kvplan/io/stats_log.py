"""One pass over a vLLM server log under load: what it gathered (:class:`StatsLog`), and the whole-line path.

Most lines of a load-test log are V1 stats lines in vLLM's default form (0.8.3 on). Such a line, when it is
one record alone, is matched whole by :data:`V1_STATS_LINE` and taken straight into the packed rows
(:func:`read_lines`), with exactly what the general reader (:mod:`kvplan.io.vllm_stats`) would do for
it; any other line, or one the whole-line path cannot take, goes through the general reader.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from kvplan.io.stats_records import Record, RecordReader, file_name
from kvplan.load_reading import UNKNOWN_NUMBER, LoadRows

V1_PREEMPTIONS_FIELD_FROM_LINENO = (
    236  # loggers.py line of the stats call in 0.11.1, the first with "Preemptions"
)
_NUMBER = r"(-?\d+(?:\.\d+)?)"
#: A whole line that is one V1 stats record as vLLM prints it from 0.8.3 on (counts of up to 18 digits, so
#: that each fits its 64-bit column; a longer one is left to the general reader, which refuses it).
V1_STATS_LINE = re.compile(
    r"(?:\([A-Za-z]+ pid=\d+\) )?INFO (\d\d-\d\d) (\d\d:\d\d:\d\d) \[([\w./-]+?):(\d+)\] Engine (\d{1,18}): "
    rf"Avg prompt throughput: {_NUMBER} tokens/s, Avg generation throughput: {_NUMBER} tokens/s, "
    r"Running: (\d{1,18}) reqs, Waiting: (\d{1,18}) reqs, (?:Preemptions: (\d{1,18}), )?[A-Z]+ KV cache usage: "
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
            micros, lines = self.series.setdefault(row["engine"], (array("q"), array("q")))
            micros.append((time - _FIRST) // _MICROSECOND)
            lines.append(record.line)
        self.last, self.last_form = row, form
        return row

    def close(self) -> None:
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


def read_lines(
    log: StatsLog, reader: RecordReader, lines: Iterable[str], wrap_width: int, general: Callable[[str], None]
) -> None:
    """Read ``lines`` into ``log``: a line that is one V1 stats record in vLLM's default form
    (:data:`V1_STATS_LINE`) straight into the packed rows, with what the general reader would do for it;
    any other line through ``general`` (the general reader: :func:`kvplan.io.vllm_stats.parse_stats_lines`),
    as is a stats line that it must judge: a time that does not exist, a usage outside 0–100 %."""
    fast, joiner, take_stamp = V1_STATS_LINE.match, reader.lines, reader.take_stamp
    add, pending_v1, series = log.rows.add_packed, log.pending_v1, log.series
    code, shift = log.code, log.shift_micros
    for text in lines:
        match = None if joiner.held is not None else fast(text)
        if match is None or match.end() == wrap_width:
            general(text)
            continue
        (
            month_day,
            clock,
            file,
            lineno,
            engine,
            prompt,
            generation,
            running,
            waiting,
            preemptions,
            usage,
            hits,
        ) = match.groups()
        usage_pct = float(usage)
        taken = take_stamp(month_day, clock, shift) if 0 <= usage_pct <= 100 else None
        if taken is None:  # the general reader warns about the usage, or refuses the stamp
            general(text)
            continue
        line, micros = taken
        late_v1 = log.late_v1
        if not late_v1:
            late_v1 = log.late_v1 = preemptions is not None or (
                file_name(file) == "loggers.py" and int(lineno) >= V1_PREEMPTIONS_FIELD_FROM_LINENO
            )
        if log.last is not None:
            log.close()  # the open row ends here, as a new row's would
        if preemptions is not None:
            preempted = int(preemptions)
        elif late_v1:
            preempted = 0
        else:
            preempted = UNKNOWN_NUMBER
            pending_v1.append(len(log.rows))
        known, engine_index = reader.known, int(engine)
        add(
            code,
            line,
            micros,
            engine_index,
            usage_pct,
            int(running),
            int(waiting),
            UNKNOWN_NUMBER,
            float(prompt),
            float(generation),
            float(hits),
            preempted,
            UNKNOWN_NUMBER,
            0,  # kind "log"
            known,
            log.restarts,
            0,  # no event
        )
        if not known:
            log.yearless = True
        log.last_form = "v1"
        log.forms.add("v1")
        engine_series = series.get(engine_index)
        if engine_series is None:
            engine_series = series[engine_index] = (array("q"), array("q"))
        engine_series[0].append(micros)
        engine_series[1].append(line)
