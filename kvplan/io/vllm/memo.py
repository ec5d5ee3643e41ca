"""Bounded memo tables: what the reader learnt once per shape of line or message, kept within a limit.

A table that reaches :data:`MAX_ENTRIES` starts over, so memory stays bounded on logs of any size.
"""

from __future__ import annotations

from typing import TypeVar

#: A line's or a message's shape: its text (or UTF-8 bytes) with every ASCII digit read as 0. The numbers
#: vary from line to line (memory figures, pids, timestamps), the shapes recur; a reading learnt once per
#: shape treats all digits alike.
SHAPE_BYTES = bytes.maketrans(b"123456789", b"000000000")
SHAPE_TEXT = str.maketrans("123456789", "000000000")
#: Entries a memo table keeps at most (then it is cleared and starts over).
MAX_ENTRIES = 4096

Value = TypeVar("Value")


def remember(table: dict, key: object, value: Value) -> Value:
    """Store ``value`` under ``key`` in ``table`` (cleared first when full) and return it.

    >>> table = {}
    >>> remember(table, "Free memory 0 GiB", (3,)), table
    ((3,), {'Free memory 0 GiB': (3,)})
    """
    if len(table) >= MAX_ENTRIES:
        table.clear()
    table[key] = value
    return value
