"""The records of a vLLM server log as a stream, ``LEVEL MM-DD HH:MM:SS [file.py:N] message`` each; tolerated:
ANSI colours, process prefixes, docker ``--timestamps`` and ``[YYYY-MM-DD HH:MM:SS]`` stamps (they give the year),
``VLLM_LOGGING_CONFIG_PATH``'s ``YYYY-MM-DD HH:MM:SS - logger - LEVEL - message``, several records on a line,
a record hard-wrapped at column 159, messages whose header was lost (no time)."""

from __future__ import annotations

import functools
import itertools
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from kvplan.io.load.frame import EPOCH, MICROSECOND, LoadFormatError

WRAP_WIDTH = 159  # column at which some log collectors hard-wrap a record
READ_BLOCK = 4096  # lines that RecordReader.read matches at a time
PLACEHOLDER_YEAR = 2000  # a leap year, so 02-29 parses; used only when no year is known (year_known=False)
OFFSET_STEP_MINUTES = 15  # UTC offsets in use are whole quarter hours
MAX_UTC_OFFSET_HOURS = 14  # UTC−12 … UTC+14 are the offsets in use

_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LEVELS = "|".join(_LEVEL_WORDS)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_HEADER = re.compile(
    rf"(?P<level>{_LEVELS}) (?P<month>\d\d)-(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"\[?(?P<file>[\w./-]+?):(?P<lineno>\d+)\] "
)
_CUSTOM_HEADER = re.compile(
    rf"(?P<stamp>\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[,.]\d+)? - (?P<logger>[\w.]+) - (?P<level>{_LEVELS}) - "
)
_OUTER_STAMP = re.compile(
    r"^(?:(?P<docker_stamp>(?P<docker>\d{4}-\d\d)-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?Z "
    r"|\[(?P<bracket>\d{4}-\d\d)-\d\d [\d:]+\] )"
)
_TRAILING_PREFIX = re.compile(r"\s*\([^()]*(?:\([^()]*\)[^()]*)*pid=\d+[^()]*\)\s*$")
_LAST_MICROS = (datetime.max - EPOCH) // MICROSECOND
_ENGINE_PREFIX = re.compile(r"EngineCore_(?:DP)?(\d+)\b")
_DAY_GROUP, _CLOCK_GROUP = operator.itemgetter(1), operator.itemgetter(2)  # of a whole line's match
_NONES = itertools.repeat(None)


class StatsRecord(NamedTuple):
    """One log record: where it starts, its level and time (``None`` when the header was lost)."""

    line: int
    level: str | None
    time: datetime | None
    year_known: bool
    file: str | None
    lineno: int | None
    engine_prefix: int | None
    message: str
    utc_offset_minutes: int | None = None  # from a docker --timestamps UTC stamp in front


def _first_header(line: str) -> re.Match | None:
    """``_HEADER.search(line)``, tried first where a header usually stands (after a process prefix)."""
    start = line.find(") ") + 2 if line.startswith("(") else 0
    if start == 1 or any(level in line[:start] for level in _LEVEL_WORDS):
        return _HEADER.search(line)
    return _HEADER.match(line, start) or _HEADER.search(line)


def _find_headers(line: str) -> list[re.Match]:
    first = _first_header(line)
    # a second vLLM header needs another "] "; the custom format's header needs " - "
    headers = (
        [first, *_HEADER.finditer(line, first.end())]
        if first and "] " in line[first.end() :]
        else ([first] if first else [])
    )
    if " - " in line:
        headers = sorted([*headers, *_CUSTOM_HEADER.finditer(line)], key=lambda m: m.start())
    return headers


def _split(start: int, line: str) -> Iterator[tuple[int, str, re.Match | None, str]]:
    """(line number, physical prefix text, header match, message) of each record on one logical line."""
    headers = _find_headers(line)
    if not headers:
        if line.strip():
            yield start, "", None, line.strip()
        return
    for position, header in enumerate(headers):
        end = headers[position + 1].start() if position + 1 < len(headers) else len(line)
        before = line[headers[position - 1].end() if position else 0 : header.start()]
        message = line[header.end() : end]
        if "pid=" in message:
            message = _TRAILING_PREFIX.sub("", message)
        yield start, before, header, message.strip()


class RecordReader:
    """The records of a log, a physical line at a time (:meth:`push`) or whole (:meth:`read`); the year (``year``
    or an outer stamp) moves on at New Year; a stamp of no real time is a :class:`LoadFormatError`.

    >>> reader = RecordReader(2026)
    >>> lines = ["INFO 12-31 23:59:50 [a.py:1] x", "INFO 01-01 00:00:00 [a.py:1] y"]
    >>> [r.time.isoformat() for line in lines for r in reader.push(line)]
    ['2026-12-31T23:59:50', '2027-01-01T00:00:00']
    """

    def __init__(self, year: int | None, wrap_width: int = WRAP_WIDTH, source: str = "log") -> None:
        self.year, self.source = year, source
        self.known = year is not None  # whether the year of the records so far is known
        self.year_value = year if year is not None else PLACEHOLDER_YEAR
        self.last_month: int | None = None
        self.wrap_width = wrap_width
        self.number = 0  # physical lines pushed
        self.held: tuple[int, str] | None = None  # a line of wrap_width characters, maybe continued
        self._day: str | None = None  # "MM-DD" of the last line :meth:`read` took whole, while current
        self._midnight = 0  # its midnight [µs since year 1]

    def push(self, physical: str) -> Iterator[StatsRecord]:
        """The records that the physical line completes (a hard-wrapped record joined)."""
        line = physical[:-1] if physical.endswith("\n") else physical  # without newline, CR and ANSI colours
        line = (_ANSI.sub("", line) if "\x1b" in line else line).rstrip("\r")
        self.number += 1
        if self.held is not None:
            (start, held), self.held = self.held, None
            if not _find_headers(line):  # the continuation of a wrapped record
                held += line
                if len(held) == self.wrap_width:  # an empty continuation: still wrapped
                    self.held = (start, held)
                else:
                    yield from self._records(start, held)
                return
            yield from self._records(start, held)
        if len(line) == self.wrap_width:
            self.held = (self.number, line)
        else:
            yield from self._records(self.number, line)

    def finish(self) -> Iterator[StatsRecord]:
        """The records of the line still held at the end of the log."""
        if self.held is not None:
            (start, held), self.held = self.held, None
            yield from self._records(start, held)

    def _records(self, start: int, line: str) -> Iterator[StatsRecord]:
        for number, before, header, message in _split(start, line):
            try:
                record = self._record(number, before, header, message)
            except ValueError as exc:
                raise LoadFormatError(
                    f"{self.source}:{number}: no such time in the record's stamp ({exc})"
                ) from None
            yield record
            if record.time is not None:
                self.known, self.year_value = record.year_known, record.time.year
                self.last_month, self._day = record.time.month, None

    def _record(self, number: int, before: str, header: re.Match | None, message: str) -> StatsRecord:
        if header is None:
            return StatsRecord(number, None, None, False, None, None, None, message)
        if header.re is _CUSTOM_HEADER:
            stamp = datetime.strptime(header.group("stamp"), "%Y-%m-%d %H:%M:%S")
            return StatsRecord(
                number, header.group("level"), stamp, True, header.group("logger"), None, None, message
            )
        level, month_text, day, clock, file, lineno = header.group(
            "level", "month", "day", "clock", "file", "lineno"
        )
        month, known, year_value = int(month_text), self.known, self.year_value
        outer = _OUTER_STAMP.match(before) if before[:1] == "[" or before[:1].isdecimal() else None
        if outer and self.year is None:
            outer_year, outer_month = (
                int(p) for p in (outer.group("docker") or outer.group("bracket")).split("-")
            )
            # the outer stamp may be UTC and vLLM's local time: take the year that puts them closest
            known = True
            year_value = outer_year - (outer_month == 1 and month == 12) + (outer_month == 12 and month == 1)
        elif self.last_month is not None and month < self.last_month:
            year_value += 1  # the log ran over New Year
        when = datetime(year_value, month, int(day), int(clock[:2]), int(clock[3:5]), int(clock[6:8]))
        prefix = _ENGINE_PREFIX.search(before[-120:]) if "EngineCore_" in before else None
        offset = None
        if outer and outer.group("docker_stamp"):  # docker's stamp is UTC, vLLM's the local time
            utc = datetime.strptime(outer.group("docker_stamp"), "%Y-%m-%dT%H:%M:%S")
            offset = OFFSET_STEP_MINUTES * round((when - utc).total_seconds() / 60 / OFFSET_STEP_MINUTES)
        engine = int(prefix.group(1)) if prefix else None
        return StatsRecord(number, level, when, known, file_name(file), int(lineno), engine, message, offset)

    def read(
        self,
        lines: Iterable[str],
        whole: re.Pattern,
        take: Callable[[list[re.Match], int, list[int], bool], int],
        other: Callable[[str], None],
        shift_micros: int = 0,
    ) -> None:
        """Read ``lines``: runs that ``whole`` matches (groups 1–2 ``MM-DD``, ``HH:MM:SS``) go a day at a time
        to ``take(matches, first line, µs since year 1 + shift each, year known)``, which returns how many it
        took; the others go to ``other``."""
        lines = iter(lines)
        for block in iter(lambda: list(itertools.islice(lines, READ_BLOCK)), []):
            found = list(map(whole.match, block))
            misses = list(itertools.compress(range(len(found)), map(operator.is_, found, _NONES)))
            misses.append(len(block))
            position = 0
            for miss in misses:
                while position < miss:
                    if self.held is None:  # else a wrapped record may go on here
                        position += self._take_run(found[position:miss], take, shift_micros)
                        if position == miss:
                            break
                    other(block[position])  # the first line of the run that was not taken
                    position += 1
                if miss < len(block):
                    other(block[miss])
                    position += 1

    def _take_run(
        self,
        found: list[re.Match],
        take: Callable[[list[re.Match], int, list[int], bool], int],
        shift_micros: int,
    ) -> int:
        """Hand ``found`` to ``take`` as far as :meth:`push` would read alike; returns the lines taken."""
        ends = list(map(re.Match.end, found))
        if self.wrap_width in ends:
            found = found[: ends.index(self.wrap_width)]
        if not found:
            return 0
        all_clocks = list(map(_CLOCK_GROUP, found))
        taken = 0
        for day, same in itertools.groupby(map(_DAY_GROUP, found)):
            count = len(list(same))
            clocks = all_clocks[taken : taken + count]
            if day == self._day:
                state = None
            else:
                state = self._stamp(day, clocks[0])
                if state is None:
                    return taken
            seconds = list(map(_clock_micros, clocks))
            if None in seconds:  # no such second: the general reader refuses it
                count = seconds.index(None)
                del seconds[count:]
            midnight = (self._midnight if state is None else state[3]) + shift_micros
            micros = list(map(midnight.__add__, seconds))
            if shift_micros and micros and (min(micros) < 0 or max(micros) > _LAST_MICROS):
                count = next(n for n, value in enumerate(micros) if not 0 <= value <= _LAST_MICROS)
                del micros[count:]
            got = take(found[taken : taken + count], self.number + 1, micros, self.known) if count else 0
            self.number += got
            taken += got
            if got and state is not None:
                self.year_value, self.last_month, self._day, self._midnight = state
            if got < len(clocks):
                return taken
        return taken

    def _stamp(self, month_day: str, clock: str) -> tuple[int, int, str, int] | None:
        """(year, month, ``MM-DD``, midnight [µs since year 1]) of the next stamp; ``None``: no real time."""
        month = int(month_day[:2])
        year = self.year_value + (self.last_month is not None and month < self.last_month)
        try:
            midnight = (datetime(year, month, int(month_day[3:])) - EPOCH) // MICROSECOND
        except ValueError:
            return None
        return None if _clock_micros(clock) is None else (year, month, month_day, midnight)


@functools.lru_cache(maxsize=1 << 17)
def _clock_micros(clock: str) -> int | None:
    """µs since midnight of ``HH:MM:SS``; ``None`` when it names no real time."""
    hours, minutes, second = int(clock[:2]), int(clock[3:5]), int(clock[6:])
    if hours > 23 or minutes > 59 or second > 59:
        return None
    return ((hours * 60 + minutes) * 60 + second) * 1_000_000


@functools.lru_cache(maxsize=1024)
def file_name(path: str) -> str:
    """The file name of a record header's path (``vllm/v1/metrics/loggers.py`` → ``loggers.py``)."""
    return Path(path).name


def log_time_shift(utc_offset: float | None) -> timedelta:
    """What to add to a log time (the server's local time) to get UTC, for ``utc_offset`` hours east of UTC."""
    if utc_offset is None:
        return timedelta(0)
    if not -MAX_UTC_OFFSET_HOURS <= utc_offset <= MAX_UTC_OFFSET_HOURS:
        raise ValueError(
            f"UTC offset {utc_offset:g} h is out of range: expected hours east of UTC, "
            f"from -{MAX_UTC_OFFSET_HOURS} to +{MAX_UTC_OFFSET_HOURS}"
        )
    return -timedelta(hours=utc_offset)


def utc_offset_hours(
    source: str, stamped: set[int], given: float | None, warnings: list[str]
) -> float | None:
    """The log's UTC offset [h]: the one given, else its docker stamps' when they agree (said in ``warnings``)."""
    hours = sorted({minutes / 60 for minutes in stamped})
    if given is not None:
        if hours and hours != [given]:
            warnings.append(
                f"{source}: the docker timestamps put the server at UTC{hours[0]:+g} h, not the "
                f"{given:+g} h given; the given offset is used"
            )
        return given
    if len(hours) == 1 and abs(hours[0]) > MAX_UTC_OFFSET_HOURS:
        warnings.append(
            f"{source}: the docker timestamps put the server at UTC{hours[0]:+g} h, outside "
            f"UTC-{MAX_UTC_OFFSET_HOURS} … UTC+{MAX_UTC_OFFSET_HOURS} h; log times left as the server's local time"
        )
        return None
    if len(hours) == 1:
        warnings.append(
            f"{source}: log times turned into UTC with the server's offset UTC{hours[0]:+g} h, "
            "read from the docker --timestamps stamps (UTC) in front of vLLM's (local time)"
        )
        return hours[0]
    if hours:
        warnings.append(
            f"{source}: the docker timestamps give several UTC offsets "
            f"({', '.join(f'{h:+g} h' for h in hours)}); log times left as the server's local time"
        )
    return None
