"""Small whole-number codes for strings that repeat in packed rows (sources, column names)."""

from __future__ import annotations


def string_code(name: str, names: list[str], codes: dict[str, int]) -> int:
    """The code of ``name``: its position in ``names``, appended (and entered in ``codes``) the first time.

    >>> names, codes = [], {}
    >>> [string_code(n, names, codes) for n in ("a.log", "b.log", "a.log")], names
    ([0, 1, 0], ['a.log', 'b.log'])
    """
    code = codes.get(name)
    if code is None:
        code = codes[name] = len(names)
        names.append(name)
    return code
