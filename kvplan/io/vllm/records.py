"""One physical vLLM log line into records: who printed each (process prefix, pid, level), what it says.

:func:`split_records` copes with what real files contain: ANSI colour, ``\\r`` progress updates,
several process prefixes on one line, two processes' output interleaved, lost headers.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX_RE = re.compile(r"\((?:([A-Za-z_][\w.\-= ]*?) )?pid=(\d+)(?:, ip=([^)\s]+))?\)\s?")
_LEVELS = r"DEBUG|INFO|WARNING|ERROR|CRITICAL"
#: A header after its level: the time (``MM-DD HH:MM:SS``; in pasted excerpts often ``...`` or ``…``), then
#: ``[file:line]`` (issue 26).
_TIME = r"(?:\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?|\.\.\.|…)"
_HEADER_TAIL = r" " + _TIME + r" (?:\[?[\w./<>-]+:\d+\] ?)?"
#: Where a record starts: a process prefix (groups 1-3: name, pid, ip) or a log header (group 4: level).
_START_RE = re.compile(_PREFIX_RE.pattern + r"|(" + _LEVELS + r")" + _HEADER_TAIL)
_LEVEL_GROUP = 4
_WORKER_RE = re.compile(r"(?:Worker|VllmWorker)((?:[ _](?:DP|PP|PCP|TP|DCP|EP)\d+)*)")
_WORKER_GROUP_RE = re.compile(r"(DP|PP|PCP|TP|DCP|EP)(\d+)")
_RAY_REPEAT_RE = re.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")
#: A colour code whose ESC byte was lost in copy-paste (``[1;36m``), and the tokens of a record's
#: head (process prefix, level, date, ``[file:line]``) among which such codes are stripped.
_BARE_CODE_RE = re.compile(r"\[[0-9;]*m")
_HEAD_TOKEN_RE = re.compile(
    r"(?P<code>\[[0-9;]*m)|(?P<space>[ \t]+)"
    r"|(?P<prefix>\((?:[A-Za-z_][\w.\-= ]*? )?pid=\d+(?:, ip=[^)\s]+)?\))"
    r"|(?P<level>(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?![\w:]))"
    r"|(?P<time>" + _TIME + r")|(?P<file>\[?[\w./<>-]+:\d+\])"
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
    records = []
    for segment in strip_ansi(line).split("\r"):
        records.extend(_segment_records(strip_bare_colour(segment)))
    return records


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
    """The records of one ``\\r``-free segment: each starts at a run of process prefixes and at most
    one header (:data:`_START_RE`); text before the first start is a record of its own unless a
    wrapper's stamp (:func:`_is_external_stamp`).

    >>> [(r.process, r.pid, r.level, r.message) for r in _segment_records(
    ...     "(A pid=1) INFO 08-14 14:07:22 [a.py:1] x (B pid=2) y")]
    [('A', 1, 'INFO', 'x'), ('B', 2, None, 'y')]
    """
    starts = _starts(segment)
    if not starts:
        text = segment.strip()
        return [Record(text)] if text else []
    records: list[Record] = []
    head = segment[: starts[0].start()].strip()
    if head and not _is_external_stamp(head):
        records.append(Record(head))
    index, count = 0, len(starts)
    while index < count:
        prefixes: list[re.Match] = []
        level, end = None, starts[index].start()
        while index < count and starts[index].start() <= end + 1:
            match = starts[index]
            end = match.end()
            if level is not None:  # a second header, or a prefix after the header: the next record's
                break
            if match.lastindex == _LEVEL_GROUP:
                level = match.group(_LEVEL_GROUP)
            else:
                prefixes.append(match)
            index += 1
        stop = starts[index].start() if index < count else len(segment)
        records.append(_record(segment[end:stop].strip(), prefixes, level))
    return records


def _starts(segment: str) -> list[re.Match]:
    """Every match of :data:`_START_RE` in ``segment``, as ``finditer`` gives them: the next one is
    looked for right after the last (a run of prefixes and a header), and further on only when the
    rest holds a word every start holds (``pid=``, a level and a space).

    >>> [m.group(0) for m in _starts("(A pid=1) INFO 08-14 14:07:22 [a.py:1] x (B pid=2) y")]
    ['(A pid=1) ', 'INFO 08-14 14:07:22 [a.py:1] ', '(B pid=2) ']
    """
    found = []
    match = _START_RE.search(segment)
    while match is not None:
        found.append(match)
        end = match.end()
        match = _START_RE.match(segment, end) or _START_RE.match(segment, end + 1)
        if match is None and _may_start(segment[end:]):
            match = _START_RE.search(segment, end)
    return found


def _may_start(text: str) -> bool:
    """Whether ``text`` holds a word every match of :data:`_START_RE` holds (``pid=``, a level and a
    space): else no record starts in it."""
    return (
        "pid=" in text
        or "INFO " in text
        or "WARNING " in text
        or "DEBUG " in text
        or "ERROR " in text
        or "CRITICAL " in text
    )


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
        return Record(message, "", None, None, level, repeated)
    *outer, inner = prefixes
    name, pid, ip = inner.group(1, 2, 3)
    return Record(
        message,
        (name or "").strip(),
        int(pid),
        ip,
        level,
        repeated,
        tuple((m.group(1) or "").strip() for m in outer),
    )


@lru_cache(maxsize=1024)
def worker_groups(name: str) -> tuple[tuple[str, int], ...] | None:
    """The group ranks a multiproc worker's name states (``Worker[_DP{d}][_PP{p}][_PCP{c}][_TP{t}][_DCP{k}]
    [_EP{e}]``, 0.10.2+; ``VllmWorker PP1_TP0``, 0.10.1), each part present only when its group has more
    than one member (EP whenever expert parallelism is on); None for any other name.

    >>> worker_groups("Worker_DP1_PP0_TP3_EP7"), worker_groups("VllmWorker PP1_TP0"), worker_groups("EngineCore")
    ((('DP', 1), ('PP', 0), ('TP', 3), ('EP', 7)), (('PP', 1), ('TP', 0)), None)
    """
    match = _WORKER_RE.fullmatch(name)
    if match is None:
        return None
    return tuple((group, int(index)) for group, index in _WORKER_GROUP_RE.findall(match.group(1)))


@lru_cache(maxsize=1024)
def rank_name(name: str) -> tuple | None:
    """What a process name says of the rank it printed for (its group ranks, or ``rank=N``); None for a
    name that names no rank (``Worker`` before its groups exist, ``EngineCore``, Ray's actors).

    >>> rank_name("Worker_PP1_TP0"), rank_name("VllmWorker rank=2"), rank_name("Worker"), rank_name("EngineCore")
    ((('PP', 1), ('TP', 0)), (('rank', 2),), None, None)
    """
    match = re.fullmatch(r"VllmWorker rank=(\d+)", name)
    if match:
        return (("rank", int(match.group(1))),)
    return worker_groups(name) or None
