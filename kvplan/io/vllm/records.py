"""One physical vLLM log line into records: who printed each (process prefix, pid, level), what it says; as
real files hold them (colour, ``\\r`` progress updates, relayed prefixes, interleaved output, lost headers).
"""

from __future__ import annotations

import re
from functools import lru_cache

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


def split_records(line: str) -> list[tuple[str, str, int | None, str | None, str | None, int]]:
    """The records in one physical line (``\\n`` removed) as ``(message, process, pid, ip, level, repeated)``:
    ``process`` the innermost prefix name ('' when none), ``pid``/``ip`` None without a prefix, ``level`` None
    without a header, ``repeated`` Ray's collapsed-line count. ``\\r`` separates progress updates; a prefix or
    header mid-line starts a record; of relayed prefixes the innermost names the printer. Colour codes go
    (also those that lost their ESC byte among a record's head). Where the records lie is learnt once per
    shape of line (:func:`_layouts`).

    >>> split_records("(Worker_TP1 pid=12) INFO 08-14 14:07:22 [gpu_worker.py:1] Hi")
    [('Hi', 'Worker_TP1', 12, None, 'INFO', 0)]
    >>> [r[0] for r in split_records("50%|##  \\rINFO 08-14 14:07:22 [a.py:1] done")]
    ['50%|##', 'done']
    >>> split_records("[1;36m(W pid=902)[0;0m INFO ... x [1m")
    [('x [1m', 'W', 902, None, 'INFO', 0)]
    """
    real, bare, layouts = _layouts(line.encode("utf-8", "surrogatepass").translate(_SHAPE))
    text = _cut(_cut(line, real), bare) if real or bare else line
    return [
        (
            text[message],
            text[process],
            None if pid is None else int(text[pid]),
            None if ip is None else text[ip],
            level,
            0 if repeated is None else int(text[repeated]),
        )
        for message, process, pid, ip, level, repeated in layouts
    ]


@lru_cache(maxsize=SHAPES_KEPT)
def _layouts(shape: bytes) -> tuple[tuple, tuple, tuple[tuple, ...]]:
    """How every line of ``shape`` splits: the colour codes cut from it (the real ones, then, in the text
    left, those that lost their ESC byte) and per record ``(message, process, pid, ip, level, repeated)``,
    slices of the text left (None where there is none) but ``level`` itself.

    >>> _layouts(b"(W pid=00) INFO 00-00 00:00:00 [a.py:0] x")
    ((), (), ((slice(40, 41, None), slice(1, 2, None), slice(7, 9, None), None, 'INFO', None),))
    """
    real: list[tuple[int, int]] = []
    bare: list[tuple[int, int]] = []
    layouts = []
    starts = (0, 0, 0)  # where a segment starts in the line, without the real codes, without both
    for segment in shape.decode("utf-8", "surrogatepass").split("\r"):  # a colour code holds no \r
        codes = [match.span() for match in _ANSI_RE.finditer(segment)]
        plain = _cut(segment, codes)
        heads = _bare_codes(plain)
        clean = _cut(plain, heads)
        real += [(begin + starts[0], end + starts[0]) for begin, end in codes]
        bare += [(begin + starts[1], end + starts[1]) for begin, end in heads]
        for spans, level in _walk(clean):
            at = starts[2]
            message, process, pid, ip, repeated = (
                None if s is None else slice(s[0] + at, s[1] + at) for s in spans
            )
            layouts.append((message, process, pid, ip, level, repeated))
        starts = (starts[0] + len(segment) + 1, starts[1] + len(plain) + 1, starts[2] + len(clean) + 1)
    return tuple(real), tuple(bare), tuple(layouts)


def _cut(text: str, cuts: list[tuple[int, int]] | tuple) -> str:
    """``text`` without the spans ``cuts`` (sorted, disjoint)."""
    if not cuts:
        return text
    parts, last = [], 0
    for begin, end in cuts:
        parts.append(text[last:begin])
        last = end
    parts.append(text[last:])
    return "".join(parts)


def _bare_codes(segment: str) -> list[tuple[int, int]]:
    """The spans of the colour codes that lost their ESC byte (``[1;36m``) in a record's head (prefix, level,
    date, ``[file:line]``); the same text inside a message body stays.

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
    """The records of one clean segment as ``([message, process, pid, ip, repeated], level)``, spans
    of ``text`` (None: no pid, ip or count): a record starts at a run of prefixes and at most one header;
    text before the first is a record unless a wrapper's stamp (:func:`_is_external_stamp`).

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
    """One record's ``[message, process, pid, ip, repeated]`` (see :func:`_walk`); the innermost prefix
    names the process."""
    repeated = None
    if "[repeated " in text[message[0] : message[1]]:
        repeat = _RAY_REPEAT_RE.search(text, message[0], message[1])
        if repeat:
            repeated = repeat.span(1)
            message = (message[0], repeat.start())
    if not prefixes:
        return [message, (0, 0), None, None, repeated]
    inner = prefixes[-1]
    ip = inner.span(3) if inner.group(3) is not None else None
    name = (0, 0) if inner.group(1) is None else _stripped(text, *inner.span(1))
    return [message, name, inner.span(2), ip, repeated]


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
