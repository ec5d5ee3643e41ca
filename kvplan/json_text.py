"""JSON text in pieces, byte for byte what :func:`json.dumps` writes, at C speed (bundle records, ``--json``).

``json.dumps(value, indent=2)`` runs the pure-Python encoder (the C one has no indent) and joins millions
of small strings: 2 s and 150 MB for the ledger of 1,000 boots. Here every container whose values are all
scalars (a ledger row, a list of numbers) is encoded by the C encoder in one call, with the separators the
indented form has between its items; only the containers above them are walked in Python. The pieces are
yielded, never joined, so a caller can hash, write or compare them without holding the whole text.

>>> "".join(indented_chunks({"a": [1, 2.5], "b": {}, "c": [{"x": None, "y": "é"}]})) == json.dumps(
...     {"a": [1, 2.5], "b": {}, "c": [{"x": None, "y": "é"}]}, indent=2)
True
>>> "".join(canonical_chunks({"b": [1, {"d": 2, "c": True}], "a": "x"}))
'{"a":"x","b":[1,{"c":true,"d":2}]}'
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache

INDENT = 2
_CONTAINERS = (dict, list, tuple)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_KEYS = json.JSONEncoder(separators=(",", ":"))


def indented_chunks(value: object, level: int = 0) -> Iterator[str]:
    """Pieces of ``json.dumps(value, indent=2)`` for ``value`` nested ``level`` deep.

    >>> list(indented_chunks([{"a": 1, "b": 2}]))
    ['[', '\\n  ', '{\\n    "a": 1,\\n    "b": 2\\n  }', '\\n]']
    """
    if not isinstance(value, _CONTAINERS) or not value:
        yield _flat_encoder(level).encode(value)
        return
    inner, closing = "\n" + " " * (INDENT * (level + 1)), "\n" + " " * (INDENT * level)
    items = value.values() if isinstance(value, dict) else value
    if not any(isinstance(item, _CONTAINERS) for item in items):
        text = _flat_encoder(level + 1).encode(value)  # '{"k": v,\n   "k2": v2}': add the line breaks
        yield f"{text[0]}{inner}{text[1:-1]}{closing}{text[-1]}"
        return
    if isinstance(value, dict):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield f"{',' if index else ''}{inner}{_key_text(key)}: "
            yield from indented_chunks(item, level + 1)
        yield f"{closing}}}"
        return
    yield "["
    for index, item in enumerate(value):
        yield f",{inner}" if index else inner
        yield from indented_chunks(item, level + 1)
    yield f"{closing}]"


def canonical_chunks(value: object) -> Iterator[str]:
    """Pieces of ``json.dumps(value, sort_keys=True, separators=(",", ":"))``: containers of containers
    are walked, every other value is one C-encoder call.

    >>> list(canonical_chunks({"b": [{"y": 1}], "a": 1}))
    ['{', '"a":', '1', ',"b":', '[', '{"y":1}', ']', '}']
    """
    if not isinstance(value, _CONTAINERS) or not any(
        isinstance(item, _CONTAINERS) for item in (value.values() if isinstance(value, dict) else value)
    ):
        yield _CANONICAL.encode(value)
        return
    if isinstance(value, dict):
        yield "{"
        for index, (key, item) in enumerate(sorted(value.items())):
            yield f"{',' if index else ''}{_key_text(key)}:"
            yield from canonical_chunks(item)
        yield "}"
        return
    yield "["
    for index, item in enumerate(value):
        if index:
            yield ","
        yield from canonical_chunks(item)
    yield "]"


@lru_cache(maxsize=64)
def _flat_encoder(level: int) -> json.JSONEncoder:
    """The C encoder writing items ``level`` deep as the indented form does (no line break at the ends)."""
    return json.JSONEncoder(separators=(",\n" + " " * (INDENT * level), ": "))


def _key_text(key: object) -> str:
    """A dict key as JSON writes it: a string, the other scalars as their JSON text in quotes.

    >>> _key_text("a"), _key_text(1), _key_text(True), _key_text(None)
    ('"a"', '"1"', '"true"', '"null"')
    """
    return _KEYS.encode({key: 0})[1:-3]
