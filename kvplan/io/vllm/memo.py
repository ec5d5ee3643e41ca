"""Bounded memo tables: what the reader learnt once per shape of line or message, kept within a limit.

A table that reaches :data:`MAX_ENTRIES` starts over, so memory stays bounded on logs of any size.
"""

from __future__ import annotations

from typing import TypeVar

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
