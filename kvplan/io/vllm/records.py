"""One physical vLLM log line into records (process prefix, pid, level, message), as real files hold them."""

from __future__ import annotations

import re
from functools import lru_cache
from operator import itemgetter

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
#: A colour code whose ESC byte was lost in copy-paste (``[1;36m``), and the tokens of a record's head.
_BARE_CODE_RE = re.compile(r"\[[0-9;]*m")
_HEAD_TOKEN_RE = re.compile(
    r"(?P<code>\[[0-9;]*m)|(?P<space>[ \t]+)"
    r"|(?P<prefix>\((?:[A-Za-z_][\w.\-= ]*? )?pid=\d+(?:, ip=[^)\s]+)?\))"
    r"|(?P<level>(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?![\w:]))"
    r"|(?P<time>" + _TIME + r")|(?P<file>\[?[\w./<>-]+:\d+\])"
)
#: A line's shape: its UTF-8 bytes with every ASCII digit read as 0 (the patterns above read digits only as a
#: class, so lines of one shape split at the same places).
_SHAPE = bytes.maketrans(b"123456789", b"000000000")


def split_records(line: str) -> list[tuple[str, str, int | None, str | None, str | None, int]]:
    """The records of one line (``\\n`` removed) as ``(message, process, pid, ip, level, repeated)``: ``process``
    the innermost prefix name ('' when none), ``pid``/``ip``/``level`` None when absent, ``repeated`` Ray's
    collapsed-line count. ``\\r``, a prefix or a header mid-line starts a record; colour codes go.

    >>> split_records("(Worker_TP1 pid=12) INFO 08-14 14:07:22 [gpu_worker.py:1] Hi")
    [('Hi', 'Worker_TP1', 12, None, 'INFO', 0)]
    >>> [r[0] for r in split_records("50%|##  \\rINFO 08-14 14:07:22 [a.py:1] done")]
    ['50%|##', 'done']
    >>> split_records("[1;36m(W pid=902)[0;0m INFO ... x [1m")
    [('x [1m', 'W', 902, None, 'INFO', 0)]
    """
    kept, layouts = _layouts(line.encode("utf-8", "surrogatepass").translate(_SHAPE))
    text = "".join(kept(line)) if kept is not None else line
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


@lru_cache(maxsize=4096)
def _layouts(shape: bytes) -> tuple[itemgetter | None, tuple[tuple, ...]]:
    """How every line of ``shape`` splits: the pieces left once the colour codes go (real, then those without ESC;
    None: no code) and per record ``(message, process, pid, ip, level, repeated)`` as slices of the text left."""
    real: list[tuple[int, int]] = []
    bare: list[tuple[int, int]] = []
    layouts = []
    starts = (0, 0, 0)  # where a segment starts in the line, without the real codes, without both
    whole = shape.decode("utf-8", "surrogatepass")
    for segment in whole.split("\r"):  # a colour code holds no \r
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
    if not real and not bare:
        return None, tuple(layouts)
    unreal = [at for at in range(len(whole)) if not any(begin <= at < end for begin, end in real)]
    left = [at for index, at in enumerate(unreal) if not any(begin <= index < end for begin, end in bare)]
    firsts = [at for index, at in enumerate(left) if index == 0 or left[index - 1] != at - 1]
    lasts = [at + 1 for index, at in enumerate(left) if index == len(left) - 1 or left[index + 1] != at + 1]
    return itemgetter(slice(0, 0), *map(slice, firsts, lasts)), tuple(layouts)


def _cut(text: str, cuts: list[tuple[int, int]] | tuple) -> str:
    """``text`` without the spans ``cuts`` (sorted, disjoint)."""
    edges = [0, *(edge for cut in cuts for edge in cut), len(text)]
    return "".join(text[edges[index] : edges[index + 1]] for index in range(0, len(edges), 2))


def _bare_codes(segment: str) -> list[tuple[int, int]]:
    """The spans of the colour codes without their ESC byte (``[1;36m``) in a record's head, not in a message."""
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
    """Where the head tokens from ``position`` end, their colour codes, and whether they hold a prefix or level."""
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
    """The records of one clean segment as ``([message, process, pid, ip, repeated], level)``, spans of ``text``
    (None: absent): a record starts at a run of prefixes and at most one header; text before the first is
    a record unless a wrapper's stamp (docker, compose, ``ts``)."""
    starts = list(_START_RE.finditer(text))
    if not starts:
        span = _stripped(text, 0, len(text))
        return [([span, (0, 0), None, None, None], None)] if span[0] < span[1] else []
    records: list[tuple[list, str | None]] = []
    head = _stripped(text, 0, starts[0].start())
    stamp = text[head[0] : head[1]]
    if head[0] < head[1] and not (stamp.endswith("|") or re.fullmatch(r"[\d\-:.,TZ+ ]+", stamp)):
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


@lru_cache(maxsize=1024)
def worker_groups(name: str) -> tuple[tuple[str, int], ...] | None:
    """The group ranks a worker's name states (``Worker[_DP{d}][_PP{p}][_PCP{c}][_TP{t}][_DCP{k}][_EP{e}]``,
    0.10.2+; ``VllmWorker PP1_TP0``, 0.10.1; a group only when it has more than one member); None otherwise."""
    match = _WORKER_RE.fullmatch(name)
    if match is None:
        return None
    return tuple((group, int(index)) for group, index in _WORKER_GROUP_RE.findall(match.group(1)))


@lru_cache(maxsize=1024)
def rank_name(name: str) -> tuple | None:
    """What a process name says of its rank (group ranks, or ``rank=N``); None when it names none."""
    match = re.fullmatch(r"VllmWorker rank=(\d+)", name)
    if match:
        return (("rank", int(match.group(1))),)
    return worker_groups(name) or None
