"""The text of load rows' values as the JSON and CSV writers write them, a batch at a time.

Times [µs since year 1] are written a day at a time (each day's text and each time of day's once),
numbers that repeat once per distinct number, unknowns as the form's ``null`` or empty field; the
:data:`FORMS` hold the text between values of a JSON object and of a CSV row. What
:meth:`kvplan.load_table.LoadRows.texts` joins into rows.
"""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import json
import math
import struct
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from kvplan.load_rows import ROW_KEYS

UNKNOWN_NUMBER = -(2**63)  # an unknown whole number, as a packed column holds it
EPOCH = datetime(1, 1, 1)  # times are kept in µs since then
MICROSECOND = timedelta(microseconds=1)
DAY_MICROS = 86_400_000_000  # µs
TEXTS_KEPT = 100_000  # texts of times of day, and of numbers, that the text writers keep
NEGATIVE_ZERO = struct.pack("d", -0.0)


def time_text(micros: int, year_known: int, days: dict, clocks: dict[int, str]) -> str:
    """:attr:`LoadRow.time_text` of a time given in µs since year 1 (``days`` and ``clocks`` cache each
    day's and each second of the day's text).

    >>> time_text((datetime(2026, 11, 29, 10, 0, 10, 5) - EPOCH) // MICROSECOND, True, {}, {})
    '2026-11-29T10:00:10.000005'
    """
    day, rest = divmod(micros, DAY_MICROS)
    prefix = days.get((day, year_known))
    if prefix is None:
        date = EPOCH + timedelta(days=day)
        prefix = days[day, year_known] = (
            f"{date.year:04d}-{date.month:02d}-{date.day:02d}T"
            if year_known
            else f"{date.month:02d}-{date.day:02d} "
        )
    seconds, fraction = divmod(rest, 1_000_000)
    clock = clocks.get(seconds)
    if clock is None:
        minutes, second = divmod(seconds, 60)
        clock = clocks[seconds] = f"{minutes // 60:02d}:{minutes % 60:02d}:{second:02d}"
    return f"{prefix}{clock}.{fraction:06d}" if fraction and year_known else prefix + clock


def time_texts(
    micros: list[int], known: list[int], unknown: str | None, mark: str, caches: tuple[dict, dict, dict]
) -> list:
    """:func:`time_text` of each time [µs since year 1] (``known``: each one's ``year_known``) between
    ``mark`` s (``'"'`` for JSON), ``unknown`` for an unknown time. Times in order with one ``year_known``
    are written a day at a time, as the day's text and each time of day's (``caches``: :func:`time_text`'s
    ``days`` and ``clocks``, and the texts of times of day for each ``year_known``, kept across calls).

    >>> caches = ({}, {}, {})
    >>> day = (datetime(2026, 11, 29) - EPOCH) // MICROSECOND
    >>> time_texts([day + 5, day + DAY_MICROS - 1, day + DAY_MICROS], [True] * 3, None, "", caches)
    ['2026-11-29T00:00:00.000005', '2026-11-29T23:59:59.999999', '2026-11-30T00:00:00']
    >>> time_texts([UNKNOWN_NUMBER, day], [True, False], "null", '"', caches)
    ['null', '"11-29 00:00:00"']
    """
    days, clocks, _ = caches
    if micros and min(micros) != UNKNOWN_NUMBER and known.count(known[0]) == len(known):
        texts: list[str] = []
        start = 0
        while start < len(micros):
            midnight = micros[start] - micros[start] % DAY_MICROS
            stop = bisect.bisect_left(micros, midnight + DAY_MICROS, start)
            day = micros[start:stop]
            if not day or min(day) < midnight or max(day) >= midnight + DAY_MICROS:
                break  # not in order
            texts += day_texts(day, midnight, known[0], mark, caches)
            start = stop
        else:
            return texts
    return [
        unknown if time == UNKNOWN_NUMBER else f"{mark}{time_text(time, year_known, days, clocks)}{mark}"
        for time, year_known in zip(micros, known)
    ]


def day_texts(micros: list[int], midnight: int, year_known: int, mark: str, caches: tuple) -> list[str]:
    """:func:`time_texts` of times on the day that starts at ``midnight`` [µs since year 1]."""
    days, clocks, of_day = caches
    texts = of_day.get((year_known, mark))
    if texts is None:
        texts = of_day[year_known, mark] = TimesOfDay(year_known, mark)
    prefix = mark + time_text(midnight, year_known, days, clocks)[:-8]  # the day's text, no "00:00:00"
    return [prefix + texts[time - midnight] for time in micros]


class TimesOfDay(dict):
    """The text of each time of day [µs since midnight] after its day's, as :func:`time_text` writes it
    (and a closing ``mark``), filled on first use and kept up to :data:`TEXTS_KEPT`.

    >>> TimesOfDay(True, '"')[10_000_005], TimesOfDay(False, "")[10_000_005]
    ('00:00:10.000005"', '00:00:10')
    """

    def __init__(self, year_known: int, mark: str) -> None:
        super().__init__()
        self.year_known, self.mark = year_known, mark
        self.day_length = len(time_text(0, year_known, {}, {})) - 8  # a day's text's

    def __missing__(self, offset: int) -> str:
        if len(self) >= TEXTS_KEPT:
            self.clear()
        text = self[offset] = time_text(offset, self.year_known, {}, {})[self.day_length :] + self.mark
        return text


class NumberTexts(dict):
    """The ``str`` of the numbers of one column (what ``%s`` writes), each distinct number's written once
    while numbers repeat (kept up to :data:`TEXTS_KEPT`); a column whose numbers mostly differ, or that
    may hold ``-0.0`` (a key equal to ``0.0``), is written a number at a time.

    >>> texts = NumberTexts(floats=True)
    >>> texts.of([1.5, 1.5, 1.5, 1.5, 2.0, 0.0]), texts.of([0.0, -0.0, 0.0]), texts.of(["null", 0.0])
    (['1.5', '1.5', '1.5', '1.5', '2.0', '0.0'], ['0.0', '-0.0', '0.0'], ['null', '0.0'])
    """

    def __init__(self, floats: bool, repeating: bool = True) -> None:
        super().__init__()
        self.floats = floats  # whether the column holds floats (a float column may hold -0.0)
        self.varied = not repeating  # whether the last column's numbers mostly differed

    def of(self, column: list) -> list[str]:
        """The text of each number of ``column``."""
        if self.varied or (self.floats and may_hold_negative_zero(column)):
            return list(map(str, column))
        known = len(self)
        texts = list(map(self.__getitem__, column))
        self.varied = len(self) - known > len(column) // 2
        return texts

    def __missing__(self, value) -> str:
        if len(self) >= TEXTS_KEPT:
            self.clear()
        text = self[value] = str(value)
        return text


def may_hold_negative_zero(column: list) -> bool:
    """Whether ``column`` may hold ``-0.0``: it does, or a value is no float (an unknown's text).

    >>> may_hold_negative_zero([0.0, 1.5]), may_hold_negative_zero([0.0, -0.0]), may_hold_negative_zero([""])
    (False, True, True)
    """
    try:
        return NEGATIVE_ZERO in struct.pack(f"{len(column)}d", *column)
    except struct.error:
        return True


def known_numbers(column: list, unknown: str | None = None) -> list:
    """A column of packed numbers with the unknown ones (the sentinel, a float ``NaN`` or ``±Inf``) as
    ``unknown``; the column itself when all are known.

    >>> known_numbers([1, UNKNOWN_NUMBER]), known_numbers([1.5, math.nan], "null"), known_numbers([2, 3])
    ([1, None], [1.5, 'null'], [2, 3])
    """
    if column and isinstance(column[0], float):  # a float column never holds the sentinel
        if math.isfinite(sum(column)):  # NaN and ±Inf survive a sum (or overflow it: then look closer)
            return column
    else:
        missing = column.count(UNKNOWN_NUMBER)
        if not missing:
            return column
        if missing == len(column):  # every one unknown (a field the log never shows)
            return [unknown] * len(column)
    return [unknown if value == UNKNOWN_NUMBER or value - value != 0 else value for value in column]


def csv_field(text: str | None) -> str:
    """``text`` as :mod:`csv` writes it among other fields (quoted when it holds a comma, a quote or a
    line break).

    >>> csv_field("a.log"), csv_field('my "b", c.log'), csv_field("")
    ('a.log', '"my ""b"", c.log"', '')
    """
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([text, None])
    return buffer.getvalue()[:-2]  # without ",\n"


def shared_value(column: list):
    """The value every item of ``column`` has and writes alike (``0.0`` and ``-0.0`` differ), or ``None``.

    >>> shared_value([3, 3]), shared_value([0.0, -0.0]), shared_value(["null", "null"]), shared_value([1, 2])
    (3, None, 'null', None)
    """
    first, last = column[0], column[-1]
    if (last is not first and last != first) or column.count(first) != len(column):
        return None
    if first == 0 and isinstance(first, float):  # equal, but written "0.0" and "-0.0"
        signs = sum(map(math.copysign, itertools.repeat(1.0, len(column)), column))
        return first if signs == math.copysign(len(column), first) else None
    return first


class TextForm(NamedTuple):
    """A text form of the rows: json.dumps's and csv.writer's text for the rows' dicts and values."""

    pieces: tuple[str, ...]  # one row's text before each value and after the last
    between: str  # the text between rows
    quote: Callable[[str | None], str]  # a string's text (None: unknown)
    unknown: str  # an unknown value's text


FORMS = {
    "json": TextForm(
        (*(f"{', ' if i else '{'}{json.dumps(key)}: " for i, key in enumerate(ROW_KEYS)), "}"),
        ", ",
        json.dumps,
        "null",
    ),
    "csv": TextForm(("", *("," for _ in ROW_KEYS[1:]), "\n"), "", csv_field, ""),
}
