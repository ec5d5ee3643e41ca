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
#: A line's shape: its UTF-8 bytes with every ASCII digit read as 0. Every pattern above reads a digit
#: only as one of a class (``\d``, ``[0-9;]``, ``\w``), so lines of one shape split at the same places.
_SHAPE = bytes.maketrans(b"123456789", b"000000000")
#: Shapes of line whose layout :func:`split_records` remembers (the boots of a deployment repeat theirs).
SHAPES_KEPT = 4096

#: Where a piece of a record's text lies in its line: one slice, or several joined (colour codes cut out).
Where = slice | tuple[slice, ...]


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


def split_records(line: str) -> list[Record]:
    """The records in one physical line (``\\n`` already removed).

    ``\\r`` separates progress-bar updates and continuation lines; a process prefix or a log header in
    the middle of a line starts a new record (two processes wrote into one line). Consecutive prefixes
    are relays: the innermost one names the process that printed. Real colour codes go, and those that
    lost their ESC byte (``[1;36m``) among a record's head. Where the records lie is learnt once per
    shape of line (:func:`_layouts`); each record's text is sliced from the line itself.

    >>> r = split_records("(Worker_TP1 pid=12) INFO 08-14 14:07:22 [gpu_worker.py:1] Hi")[0]
    >>> r.process, r.pid, r.level, r.message
    ('Worker_TP1', 12, 'INFO', 'Hi')
    >>> [x.message for x in split_records("50%|##  \\rINFO 08-14 14:07:22 [a.py:1] done")]
    ['50%|##', 'done']
    >>> [(x.pid, x.message) for x in split_records("[1;36m(W pid=902)[0;0m INFO ... x [1m")]
    [(902, 'x [1m')]
    """
    shape = line.encode("utf-8", "surrogatepass").translate(_SHAPE)
    return [_record(line, layout) for layout in _layouts(shape)]


def _record(line: str, layout: tuple) -> Record:
    """The record that ``layout`` (from :func:`_layouts`) places in ``line``."""
    message, process, pid, ip, level, repeated, outer = layout
    return Record(
        line[message] if isinstance(message, slice) else _text(line, message),
        line[process] if isinstance(process, slice) else _text(line, process),
        None if pid is None else int(_text(line, pid)),
        None if ip is None else _text(line, ip),
        level,
        0 if repeated is None else int(_text(line, repeated)),
        tuple([_text(line, name) for name in outer]) if outer else (),
    )


def _text(line: str, where: Where) -> str:
    return line[where] if isinstance(where, slice) else "".join([line[piece] for piece in where])


@lru_cache(maxsize=SHAPES_KEPT)
def _layouts(shape: bytes) -> tuple[tuple, ...]:
    """Where the records of every line of ``shape`` lie: per record ``(message, process, pid, ip, level,
    repeated, outer)``, each text as a :data:`Where` in the line (pid, ip and count None where there are
    none), ``level`` itself.

    >>> _layouts(b"(W pid=00) INFO 00-00 00:00:00 [a.py:0] x")
    ((slice(40, 41, None), slice(1, 2, None), slice(7, 9, None), None, 'INFO', None, ()),)
    """
    text = shape.decode("utf-8", "surrogatepass")
    layouts: list[tuple] = []
    offset = 0
    for segment in text.split("\r"):  # a colour code holds no \r: each segment is cleaned on its own
        real = [match.span() for match in _ANSI_RE.finditer(segment)]
        plain = _cut(segment, real)
        bare = _bare_codes(plain)
        for spans, level in _walk(_cut(plain, bare)):
            wheres = [None if span is None else _where(span, (bare, real), offset) for span in spans]
            message, process, pid, ip, repeated, *outer = wheres
            layouts.append((message, process, pid, ip, level, repeated, tuple(outer)))
        offset += len(segment) + 1
    return tuple(layouts)


def _cut(text: str, cuts: list[tuple[int, int]]) -> str:
    """``text`` without the spans ``cuts`` (sorted, disjoint)."""
    if not cuts:
        return text
    parts, last = [], 0
    for begin, end in cuts:
        parts.append(text[last:begin])
        last = end
    parts.append(text[last:])
    return "".join(parts)


def _where(span: tuple[int, int], levels: tuple[list[tuple[int, int]], ...], offset: int) -> Where:
    """Where ``span`` of a text cleaned by :func:`_cut` of each of ``levels`` in turn (innermost first)
    lies in the line its segment starts at ``offset`` of."""
    pieces = [span]
    for cuts in levels:
        pieces = [piece for begin, end in pieces for piece in _uncut(begin, end, cuts)]
    slices = tuple(slice(begin + offset, end + offset) for begin, end in pieces)
    return slices[0] if len(slices) == 1 else slices


def _uncut(start: int, stop: int, cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces of the text before :func:`_cut` that hold ``[start, stop)`` of the text after it.

    >>> _uncut(0, 6, [(2, 4)])  # "abXXcdef" without "XX" is "abcdef"
    [(0, 2), (4, 8)]
    """
    pieces, shift = [], 0
    for begin, end in cuts:
        if begin - shift > start:
            if begin - shift >= stop:
                break
            pieces.append((start + shift, begin))
            start = begin - shift
        shift += end - begin
    pieces.append((start + shift, stop + shift))
    return pieces


def _bare_codes(segment: str) -> list[tuple[int, int]]:
    """The spans of the colour codes that lost their ESC byte (``[1;36m``) in a record's head.

    Only codes among the process prefix, level, date and ``[file:line]`` at the start of a record (the
    segment's start, or a process prefix) count; the same text inside a message body stays.

    >>> _bare_codes("[1;36m(VllmWorkerProcess pid=902)[0;0m INFO 09-13 10:00:16 [a.py:1] x [1m")
    [(0, 6), (33, 38)]
    >>> _bare_codes("[1;36mno head here")
    []
    """
    starts = [0]
    for match in _PREFIX_RE.finditer(segment):
        code = re.search(r"(?:\[[0-9;]*m)+$", segment[: match.start()])
        starts.append(code.start() if code else match.start())
    cuts: list[tuple[int, int]] = []
    done = 0
    for start in starts:
        if start >= done:
            done, codes, head = _head_codes(segment, start)
            if head:
                cuts.extend(codes)
    return cuts


def _head_codes(segment: str, position: int) -> tuple[int, list[tuple[int, int]], bool]:
    """Where the head tokens from ``position`` end, the colour codes among them, and whether they hold a
    prefix or a level (a record's head)."""
    codes: list[tuple[int, int]] = []
    head = False
    while True:
        token = _HEAD_TOKEN_RE.match(segment, position)
        if token is None or token.end() == position:
            return position, codes, head
        kind = token.lastgroup
        if kind == "code":
            codes.append(token.span())
        elif kind in ("prefix", "level"):
            head = True
        position = token.end()
        if kind == "file":  # the message follows; only a reset glued to ``[file:line]`` is still the head's
            adjacent = _BARE_CODE_RE.match(segment, position)
            while adjacent:
                codes.append(adjacent.span())
                position = adjacent.end()
                adjacent = _BARE_CODE_RE.match(segment, position)
            return position, codes, head


def _walk(text: str) -> list[tuple[list, str | None]]:
    """The records of one clean segment as ``([message, process, pid, ip, repeated, *outer], level)``, each
    a span of ``text`` (None for no pid, ip or count; an empty span for no name): each record starts at a run of process prefixes and at
    most one header (:data:`_START_RE`); text before the first start is a record of its own unless a
    wrapper's stamp (:func:`_is_external_stamp`).

    >>> [(spans[:3], level) for spans, level in _walk("(A pid=1) INFO 08-14 14:07:22 [a.py:1] x (B pid=2) y")]
    [([(39, 40), (1, 2), (7, 8)], 'INFO'), ([(51, 52), (42, 43), (48, 49)], None)]
    """
    starts = list(_START_RE.finditer(text))
    if not starts:
        span = _stripped(text, 0, len(text))
        return [([span, (0, 0), None, None, None], None)] if span[0] < span[1] else []
    records: list[tuple[list, str | None]] = []
    head = _stripped(text, 0, starts[0].start())
    if head[0] < head[1] and not _is_external_stamp(text[head[0] : head[1]]):
        records.append(([head, (0, 0), None, None, None], None))
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
        stop = starts[index].start() if index < count else len(text)
        records.append((_spans(text, _stripped(text, end, stop), prefixes), level))
    return records


def _spans(text: str, message: tuple[int, int], prefixes: list[re.Match]) -> list:
    """One record's ``[message, process, pid, ip, repeated, *outer]`` (see :func:`_walk`)."""
    repeated = None
    if "[repeated " in text[message[0] : message[1]]:
        repeat = _RAY_REPEAT_RE.search(text, message[0], message[1])
        if repeat:
            repeated = repeat.span(1)
            message = (message[0], repeat.start())
    if not prefixes:
        return [message, (0, 0), None, None, repeated]
    *outer, inner = prefixes
    ip = inner.span(3) if inner.group(3) is not None else None
    return [message, _name(text, inner), inner.span(2), ip, repeated, *(_name(text, m) for m in outer)]


def _name(text: str, prefix: re.Match) -> tuple[int, int]:
    """The span of a prefix's process name without its spaces (empty when it has none)."""
    return (0, 0) if prefix.group(1) is None else _stripped(text, *prefix.span(1))


def _stripped(text: str, start: int, stop: int) -> tuple[int, int]:
    """``[start, stop)`` of ``text`` without the white space at either end."""
    piece = text[start:stop]
    begin = start + len(piece) - len(piece.lstrip())
    return begin, max(begin, stop - len(piece) + len(piece.rstrip()))


def _is_external_stamp(text: str) -> bool:
    """True for text that wrappers put before vLLM's own line (docker, compose, ``ts``)."""
    return text.endswith("|") or bool(re.fullmatch(r"[\d\-:.,TZ+ ]+", text))


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
