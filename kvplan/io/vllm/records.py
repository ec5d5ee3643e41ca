"""One physical vLLM log line into records: who printed each (process prefix, pid, level), what it says.

:func:`split_records` copes with what real files contain: ANSI colour, ``\\r`` progress updates,
several process prefixes on one line, two processes' output interleaved, lost headers.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from kvplan.io.vllm.memo import SHAPE_BYTES, remember

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX_RE = re.compile(r"\((?:([A-Za-z_][\w.\-= ]*?) )?pid=(\d+)(?:, ip=([^)\s]+))?\)\s?")
_LEVELS = r"DEBUG|INFO|WARNING|ERROR|CRITICAL"
_HEADER_TAIL = r" \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? (?:\[?[\w./<>-]+:\d+\] ?)?"
_HEADER_RE = re.compile(r"(?:" + _LEVELS + r")" + _HEADER_TAIL)
#: The common head of a record at the start of a line: at most one process prefix, then at most one
#: header, spelled exactly as :data:`_PREFIX_RE` and :data:`_HEADER_RE` (one anchored match).
_LEAD_RE = re.compile(
    r"(?:" + _PREFIX_RE.pattern + r")?(?P<header>(?P<level>" + _LEVELS + r")" + _HEADER_TAIL + r")?"
)
_RAY_REPEAT_RE = re.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")
#: A colour code whose ESC byte was lost in copy-paste (``[1;36m``), and the tokens of a record's
#: head (process prefix, level, date, ``[file:line]``) among which such codes are stripped.
_BARE_CODE_RE = re.compile(r"\[[0-9;]*m")
_HEAD_TOKEN_RE = re.compile(
    r"(?P<code>\[[0-9;]*m)|(?P<space>[ \t]+)"
    r"|(?P<prefix>\((?:[A-Za-z_][\w.\-= ]*? )?pid=\d+(?:, ip=[^)\s]+)?\))"
    r"|(?P<level>(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?![\w:]))"
    r"|(?P<time>\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)|(?P<file>\[?[\w./<>-]+:\d+\])"
)


class Record(NamedTuple):
    """One log record: who printed it and what it says.

    ``process`` is the innermost prefix name ('' when none), ``pid``/``ip`` the process identity
    (None when no prefix), ``outer`` the relaying prefixes outside it (Ray through EngineCore),
    ``level`` the log level when the header survived, ``repeated`` Ray's collapsed-line count.
    """

    message: str
    process: str = ""
    pid: int | None = None
    ip: str | None = None
    level: str | None = None
    repeated: int = 0
    outer: tuple[str, ...] = ()


def strip_ansi(text: str) -> str:
    """Text without ANSI colour codes.

    >>> strip_ansi("\\x1b[32mINFO\\x1b[0m 08-14")
    'INFO 08-14'
    """
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


def split_records(line: str) -> list[Record]:
    """The records in one physical line (``\\n`` already removed).

    ``\\r`` separates progress-bar updates and continuation lines; a process prefix or a log
    header in the middle of a line starts a new record (two processes wrote into one line).
    Consecutive prefixes are relays: the innermost one names the process that printed.

    >>> r = split_records("(Worker_TP1 pid=12) INFO 08-14 14:07:22 [gpu_worker.py:1] Hi")[0]
    >>> r.process, r.pid, r.level, r.message
    ('Worker_TP1', 12, 'INFO', 'Hi')
    >>> [x.message for x in split_records("50%|##  \\rINFO 08-14 14:07:22 [a.py:1] done")]
    ['50%|##', 'done']
    """
    if "\r" not in line:
        stripped = _ANSI_RE.sub("", line) if "\x1b" in line else line  # strip_ansi, inlined
        shape = stripped.encode("utf-8", "surrogatepass").translate(SHAPE_BYTES)
        spans = _SHAPES.get(shape)
        if spans is None:
            spans = remember(_SHAPES, shape, simple_spans(stripped))
        if spans is not GENERAL:
            return [simple_record(stripped, spans)] if spans else []
    records = []
    for segment in strip_ansi(line).split("\r"):
        records.extend(_segment_records(strip_bare_colour(segment)))
    return records


#: Shape (:data:`~kvplan.io.vllm.memo.SHAPE_BYTES`) → where the common line's record lies in each line of
#: that shape (:func:`simple_spans`), or :data:`GENERAL`. Every test :func:`simple_spans` makes treats all
#: digits alike, so lines of one shape split at the same places; only the numbers differ. Bounded
#: (:func:`kvplan.io.vllm.memo.remember`).
_SHAPES: dict[bytes, tuple] = {}
#: Spans of a line that holds no record (blank), and of one the general walk reads.
BLANK: tuple = ()
GENERAL: tuple = (None,)


def simple_spans(line: str) -> tuple:
    """Where the record of the common line lies (one process prefix or none at its start, then one
    header or none, nothing of either later, no colour code left: real ones are stripped before), as
    the general walk reads it; :data:`GENERAL` for any other line.

    ``(message, level, process, pid, ip, repeated)``, each part a slice of the line (None when the line
    has no such part) but the level, :data:`BLANK` for a line without a record. One anchored match and
    a few substring tests instead of the general walk's searches.

    >>> simple_spans("(W pid=12) INFO 08-14 14:07:22 [a.py:1] Hi [repeated 3x across cluster]")
    (slice(40, 42, None), 'INFO', slice(1, 2, None), slice(7, 9, None), None, slice(53, 54, None))
    """
    lead = _LEAD_RE.match(line)
    if lead is None:  # not reached: every part of _LEAD_RE is optional
        return GENERAL
    end = lead.end()
    rest = line[end:]
    if "pid=" in rest or _may_hold_header(rest):
        return GENERAL  # a second prefix or header may follow
    if "[" in rest and _BARE_CODE_RE.search(rest) is not None:
        return GENERAL  # a colour code that lost its ESC byte: strip_bare_colour decides
    if end == 0:
        begin, stop = _stripped_span(line, 0, len(line))
        return (slice(begin, stop), None, None, None, None, None) if stop > begin else BLANK
    begin, stop = _stripped_span(line, end, len(line))
    repeated = None
    if "[repeated " in line[begin:stop]:
        repeat = _RAY_REPEAT_RE.search(line, begin, stop)
        if repeat:
            repeated, stop = slice(*repeat.span(1)), repeat.start()
    if lead.group(2) is None:
        return (slice(begin, stop), lead.group("level"), None, None, None, repeated)
    process = slice(*_stripped_span(line, *lead.span(1))) if lead.group(1) is not None else None
    ip = slice(*lead.span(3)) if lead.group(3) is not None else None
    return (slice(begin, stop), lead.group("level"), process, slice(*lead.span(2)), ip, repeated)


def _stripped_span(text: str, begin: int, stop: int) -> tuple[int, int]:
    """The span of ``text[begin:stop].strip()`` in ``text``."""
    part = text[begin:stop]
    return begin + len(part) - len(part.lstrip()), stop - len(part) + len(part.rstrip())


def simple_record(line: str, spans: tuple) -> Record:
    """The record of a common line, from where its parts lie (:func:`simple_spans`, not :data:`BLANK`).

    >>> simple_record("(W pid=12) x", (slice(11, 12), None, slice(1, 2), slice(7, 9), None, None))
    Record(message='x', process='W', pid=12, ip=None, level=None, repeated=0, outer=())
    """
    message, level, process, pid, ip, repeated = spans
    return tuple.__new__(
        Record,
        (
            line[message],
            "" if process is None else line[process],
            None if pid is None else int(line[pid]),
            None if ip is None else line[ip],
            level,
            0 if repeated is None else int(line[repeated]),
            (),
        ),
    )


def _may_hold_header(text: str) -> bool:
    """Whether ``text`` holds a word a log header starts with (``INFO `` …): else it holds no header."""
    return (
        "INFO " in text or "WARNING " in text or "DEBUG " in text or "ERROR " in text or "CRITICAL " in text
    )


def strip_bare_colour(segment: str) -> str:
    """``segment`` without the colour codes that lost their ESC byte (``[1;36m``) in a record's head.

    Only codes among the process prefix, level, date and ``[file:line]`` at the start of a record
    (the segment's start, or a process prefix) go, as :func:`strip_ansi` removes real ones; the same
    text inside a message body stays.

    >>> strip_bare_colour("[1;36m(VllmWorkerProcess pid=902)[0;0m INFO 09-13 10:00:16 [a.py:1] x [1m")
    '(VllmWorkerProcess pid=902) INFO 09-13 10:00:16 [a.py:1] x [1m'
    >>> strip_bare_colour("[32mINFO[0m [90m06-01 10:00:00[0m [90m[a.py:1][0m [1mbold")
    'INFO 06-01 10:00:00 [a.py:1] [1mbold'
    >>> strip_bare_colour("[1;36mno head here")
    '[1;36mno head here'
    """
    if "m" not in segment or _BARE_CODE_RE.search(segment) is None:
        return segment
    starts = [0]
    for match in _PREFIX_RE.finditer(segment):
        before = segment[: match.start()]
        code = re.search(r"(?:\[[0-9;]*m)+$", before)
        starts.append(code.start() if code else match.start())
    cuts: list[tuple[int, int]] = []
    done = 0
    for start in starts:
        if start < done:
            continue
        codes, head, position = [], False, start
        while True:
            token = _HEAD_TOKEN_RE.match(segment, position)
            if token is None or token.end() == position:
                break
            kind = token.lastgroup
            if kind == "code":
                codes.append(token.span())
            elif kind in ("prefix", "level"):
                head = True
            position = token.end()
            if kind == "file":
                # the message follows; only a reset glued to ``[file:line]`` is still the head's
                adjacent = _BARE_CODE_RE.match(segment, position)
                while adjacent:
                    codes.append(adjacent.span())
                    position = adjacent.end()
                    adjacent = _BARE_CODE_RE.match(segment, position)
                break
        done = position
        if head:
            cuts.extend(codes)
    if not cuts:
        return segment
    parts, last = [], 0
    for begin, end in cuts:
        parts.append(segment[last:begin])
        last = end
    parts.append(segment[last:])
    return "".join(parts)


def _segment_records(segment: str) -> list[Record]:
    prefixes = list(_PREFIX_RE.finditer(segment))
    headers = list(_HEADER_RE.finditer(segment))
    single = _single_record(segment, prefixes, headers)
    if single is not None:
        return single
    starts = sorted(
        [(m.start(), m.end(), "prefix", m) for m in prefixes]
        + [(m.start(), m.end(), "header", m) for m in headers]
    )
    records: list[Record] = []
    if not starts:
        text = segment.strip()
        return [Record(text)] if text else []
    head = segment[: starts[0][0]].strip()
    if head and not _is_external_stamp(head):
        records.append(Record(head))
    index = 0
    while index < len(starts):
        prefixes, level, end = [], None, starts[index][0]
        while index < len(starts) and starts[index][0] <= end + 1:
            _start, end, kind, match = starts[index]
            if kind == "prefix" and level is None:
                prefixes.append(match)
            elif kind == "header" and level is None:
                level = match.group(0).split(" ", 1)[0]
            else:
                break
            index += 1
        stop = starts[index][0] if index < len(starts) else len(segment)
        message = segment[end:stop].strip()
        records.append(_record(message, prefixes, level))
    return records


def _single_record(segment: str, prefixes: list[re.Match], headers: list[re.Match]) -> list[Record] | None:
    """The records of the common segment, one record with at most one prefix right before one header
    (or a prefix alone), as the general walk in :func:`_segment_records` reads it; None otherwise."""
    if len(prefixes) > 1 or len(headers) > 1 or not (prefixes or headers):
        return None
    if headers:
        header = headers[0]
        if prefixes and not prefixes[0].start() < header.start() <= prefixes[0].end() + 1:
            return None
        first, end, level = (prefixes or headers)[0].start(), header.end(), header.group(0).split(" ", 1)[0]
    else:
        first, end, level = prefixes[0].start(), prefixes[0].end(), None
    head = segment[:first].strip()
    records = [Record(head)] if head and not _is_external_stamp(head) else []
    records.append(_record(segment[end:].strip(), prefixes, level))
    return records


def _is_external_stamp(text: str) -> bool:
    """True for text that wrappers put before vLLM's own line (docker, compose, ``ts``)."""
    return text.endswith("|") or bool(re.fullmatch(r"[\d\-:.,TZ+ ]+", text))


def _record(message: str, prefixes: list[re.Match], level: str | None) -> Record:
    repeated = 0
    repeat = _RAY_REPEAT_RE.search(message) if "[repeated " in message else None
    if repeat:
        repeated = int(repeat.group(1))
        message = message[: repeat.start()]
    if not prefixes:
        return Record(message, level=level, repeated=repeated)
    inner = prefixes[-1]
    return Record(
        message,
        process=(inner.group(1) or "").strip(),
        pid=int(inner.group(2)),
        ip=inner.group(3),
        level=level,
        repeated=repeated,
        outer=tuple((m.group(1) or "").strip() for m in prefixes[:-1]),
    )
