"""One pass over a vLLM server log under load: what it gathered (:class:`StatsLog`), and the whole-line path.

Most lines of a load-test log are V1 stats lines in vLLM's default form (0.8.3 on). Such a line, when it is
one record alone, is matched whole by :data:`V1_STATS_LINE` and taken straight into the packed rows
(:meth:`StatsLog.take_whole`, the lines handed over by :meth:`~kvplan.io.stats_records.RecordReader.read`), with exactly what the general reader (:mod:`kvplan.io.vllm_stats`) would do for
it; any other line, or one the whole-line path cannot take, goes through the general reader.
"""

from __future__ import annotations

import re
from array import array
from datetime import datetime, timedelta

from kvplan.io.stats_records import Record, file_name
from kvplan.load_table import JSON_BATCH, UNKNOWN_NUMBER, LoadRows

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
_UNKNOWN_TEXT = str(UNKNOWN_NUMBER)  # int() of it is the unknown whole number
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
        self._whole: list[tuple] = []  # lines taken whole since the last flush, their fields as read
        self._whole_known, self._whole_restarts = True, 0  # the year_known and restarts they share

    def count(self) -> int:
        return len(self.rows) + len(self._whole) + (self.last is not None)

    def take_whole(self, groups: tuple, line: int, micros: int, year_known: bool) -> bool:
        """Take a line that is one V1 stats record in vLLM's default form (:data:`V1_STATS_LINE`'s
        ``groups``), stamped ``micros`` [µs since year 1, UTC when the shift is known], with what the
        general reader (:func:`kvplan.io.vllm_stats.parse_stats_lines`) would do for it; False, and
        nothing taken, when the general reader must judge it (a usage outside 0–100 %: it warns)."""
        _, _, file, lineno, engine, prompt, generation, running, waiting, preemptions, usage, hits = groups
        usage_pct = float(usage)
        if not 0 <= usage_pct <= 100:
            return False
        late_v1 = self.late_v1
        if not late_v1:
            late_v1 = self.late_v1 = preemptions is not None or (
                file_name(file) == "loggers.py" and int(lineno) >= V1_PREEMPTIONS_FIELD_FROM_LINENO
            )
        if (
            self.last is not None
            or year_known is not self._whole_known
            or self.restarts != self._whole_restarts
        ):
            self.close()  # the open row ends here, as a new row's would
            self._whole_known, self._whole_restarts = year_known, self.restarts
        if preemptions is None:
            if late_v1:
                preemptions = "0"
            else:
                preemptions = _UNKNOWN_TEXT
                self.pending_v1.append(len(self.rows) + len(self._whole))
        engine_index = int(engine)
        self._whole.append(
            (line, micros, engine_index, usage_pct, running, waiting, prompt, generation, hits, preemptions)
        )
        if len(self._whole) >= JSON_BATCH:
            self.flush()
        if not year_known:
            self.yearless = True
        self.last_form = "v1"
        self.forms.add("v1")
        series = self.series.get(engine_index)
        if series is None:
            series = self.series[engine_index] = (array("q"), array("q"))
        series[0].append(micros)
        series[1].append(line)
        return True

    def flush(self) -> None:
        """Pack the lines taken whole (:meth:`take_whole`) into the rows, a column at a time."""
        if self._whole:
            lines, micros, engines, usage, running, waiting, prompt, generation, hits, preemptions = zip(
                *self._whole
            )
            self.rows.extend_columns(
                len(lines),
                source=self.code,
                line=lines,
                time=micros,
                engine=engines,
                kv_cache_usage_pct=usage,
                running=map(int, running),
                waiting=map(int, waiting),
                swapped=UNKNOWN_NUMBER,
                prompt_tokens_per_s=map(float, prompt),
                generation_tokens_per_s=map(float, generation),
                prefix_cache_hit_pct=map(float, hits),
                preemptions=map(int, preemptions),
                preemptions_total=UNKNOWN_NUMBER,
                kind=0,  # "log"
                year_known=self._whole_known,
                restarts=self._whole_restarts,
                event=0,  # none
            )
            self._whole.clear()

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
        """Pack the open row (after the lines taken whole before it)."""
        self.flush()
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
