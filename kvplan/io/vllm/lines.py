"""A candidate line read at the cost of its shape: where its record lies and which families it holds.

Lines of one shape (digits read as 0, :data:`~kvplan.io.vllm.memo.SHAPE_BYTES`) split into the same
record at the same places (:func:`~kvplan.io.vllm.records.simple_spans`) and hold the same families at
the same places (:func:`~kvplan.io.vllm.families.shape_steps`): both are learnt once per shape, from
the shape itself, so that a common line costs one translation, one look-up and the slicing of its own
numbers. A line that holds no family is not even decoded.
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan.io.vllm.families import Step, shape_steps
from kvplan.io.vllm.memo import SHAPE_BYTES, remember
from kvplan.io.vllm.records import GENERAL, simple_spans, strip_ansi


class LinePlan(NamedTuple):
    """How every line of one shape is read: ``steps`` are the families its message holds
    (:func:`~kvplan.io.vllm.families.shape_steps`; none: the line says nothing), ``colour`` whether it
    holds real colour codes (to strip, :func:`~kvplan.io.vllm.records.strip_ansi`), and, once they are
    stripped, its record lies at ``spans`` (:func:`~kvplan.io.vllm.records.simple_spans`), the text that
    names its process (pid to ip, as ``12, ip=10.0.0.4``; None without a prefix) at ``who``."""

    steps: tuple[Step, ...]
    colour: bool
    spans: tuple
    who: slice | None


#: Raw line's shape → its plan, or None for a line the general walk reads (``\r`` in it, several
#: records, a colour code without its ESC byte). Bounded (:func:`kvplan.io.vllm.memo.remember`).
_PLANS: dict[bytes, LinePlan | None] = {}
#: A line longer than :data:`LONG_BYTES` is looked up by the shape of its first :data:`HEAD_BYTES` and
#: the rest's own bytes: long lines (engine config, arguments) recur whole but for their head (pid,
#: time), and hashing the rest costs a fraction of reading it as a shape.
LONG_BYTES = 1024
HEAD_BYTES = 256
#: (head's shape, rest of the line) → the plan of a long line. Bounded.
_LONG_PLANS: dict[tuple[bytes, bytes], LinePlan | None] = {}


def line_plan(raw: bytes) -> LinePlan | None:
    """How ``raw`` (a line's bytes, as the scan found it) is read, learnt once per shape; None when the
    general walk reads it (:func:`~kvplan.io.vllm.records.split_records`).

    >>> plan = line_plan(b"(Worker pid=12) INFO 08-14 14:07:22 [a.py:1] Available KV cache memory: 1.5 GiB")
    >>> plan.spans[:2], [(family, scope) for family, scope, _read in plan.steps], plan.colour, plan.who
    ((slice(45, 79, None), 'INFO'), [('available_kv', 'rank')], False, slice(12, 14, None))
    >>> line_plan(b"INFO 08-14 14:07:22 [a.py:1] Resolved architecture").steps, line_plan(b"a\\rb")
    ((), None)
    >>> line_plan(b"(W pid=1) INFO 08-14 14:07:22 [a.py:1] took " + b"x" * 2000) is line_plan(
    ...     b"(W pid=7) INFO 09-14 14:07:22 [a.py:1] took " + b"x" * 2000)
    True
    """
    if len(raw) > LONG_BYTES:
        return _long_line_plan(raw)
    return _shape_plan(raw.translate(SHAPE_BYTES))


def _shape_plan(shape: bytes) -> LinePlan | None:
    """The plan of the lines of ``shape``, learnt once (:data:`_PLANS`)."""
    try:
        return _PLANS[shape]
    except KeyError:
        return remember(_PLANS, shape, _learn(shape))


def _long_line_plan(raw: bytes) -> LinePlan | None:
    """:func:`line_plan` of a long line, looked up by its head's shape and its rest (:data:`_LONG_PLANS`)."""
    key = (raw[:HEAD_BYTES].translate(SHAPE_BYTES), raw[HEAD_BYTES:])
    try:
        return _LONG_PLANS[key]
    except KeyError:
        pass
    return remember(_LONG_PLANS, key, _shape_plan(key[0] + key[1].translate(SHAPE_BYTES)))


def _learn(shape: bytes) -> LinePlan | None:
    """The plan of the lines of ``shape``, read from the shape (decoded as the line is: digits are ASCII,
    so they keep their places)."""
    text = shape.decode("utf-8", "replace")
    if "\r" in text:
        return None
    line = strip_ansi(text)
    spans = simple_spans(line)
    if spans is GENERAL:
        return None
    if not spans:
        return LinePlan((), False, spans, None)
    _message, _level, _process, pid, ip, _repeated = spans
    who = None if pid is None else slice(pid.start, (pid if ip is None else ip).stop)
    return LinePlan(shape_steps(line[spans[0]]), "\x1b" in text, spans, who)
