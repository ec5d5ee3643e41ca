"""Text that came from a file, made inert for where it lands, one function per target (``docs/safety.md``,
"Untrusted text"); every target shows control characters as escapes, so one record stays one line."""

from __future__ import annotations

import hashlib
import html
import os
import re
from pathlib import Path

#: Line breaks, C0 and C1 controls, DEL, bidirectional overrides and isolates, lone surrogates.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: The lone surrogates Python decodes a file name's non-UTF-8 bytes to (``surrogateescape``).
SURROGATE = re.compile("[\ud800-\udfff]")
#: Characters that make Markdown or HTML syntax inside a line (backslash-escaped by :func:`markdown_text`).
_MARKUP = re.compile(r"([\\`*_~<>\[\]|])")
#: First characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: A name that may be a path component as it is: letters, digits, ``.``, ``_``, ``-``, not starting with a
#: dot (no ``.``, ``..`` or hidden name), at most 128 characters.
SAFE_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def shown_controls(text: str) -> str:
    """``text`` with each control character (:data:`CONTROL`) shown as its Python escape: one line, UTF-8."""
    return CONTROL.sub(_escape_one, text)


def _escape_one(match: re.Match) -> str:
    char = match.group(0)
    if "\ud800" <= char <= "\udfff":  # unicode_escape cannot encode a lone surrogate
        return f"\\u{ord(char):04x}"
    return char.encode("unicode_escape").decode("ascii")


def terminal_text(value: object) -> str:
    """``value`` for a terminal line: no escape sequence reaches the terminal."""
    return shown_controls(str(value))


def markdown_text(value: object) -> str:
    r"""``value`` as inert Markdown inside a line: ``\ ` * _ ~ < > [ ] |`` backslash-escaped."""
    return shown_controls(_MARKUP.sub(r"\\\1", str(value)))


def markdown_code(value: object) -> str:
    """``value`` as a Markdown code span, fenced by more backticks than it holds in a row (not for a table cell)."""
    text = shown_controls(str(value))
    runs = [len(run) for run in re.findall("`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(value: object) -> str:
    """``value`` as HTML text or attribute value: ``& < > " '`` as entities."""
    return html.escape(shown_controls(str(value)), quote=True)


def csv_cell(value: object) -> object:
    r"""``value`` for a CSV cell: text starting like a formula gets a leading ``'`` (OWASP), a carriage return
    shows as ``\r``; anything else as is."""
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START):
        value = "'" + value
    return value.replace("\r", "\\r")


def is_safe_component(name: str) -> bool:
    """Whether ``name`` may be one path component as it is (:data:`SAFE_COMPONENT`)."""
    return SAFE_COMPONENT.fullmatch(name) is not None


def safe_component(name: str, prefix: str = "unsafe-") -> str:
    """``name`` as one path component: itself when safe, else ``prefix`` and 16 hex digits of its SHA-256."""
    if is_safe_component(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{prefix}{digest[:16]}"


def path_inside(root: str | os.PathLike, *parts: str) -> Path:
    """``root`` joined with ``parts``; ValueError when the result, symlinks resolved, is not inside ``root``."""
    base = Path(root)
    path = base.joinpath(*parts)
    resolved_base = base.resolve()
    resolved = path.resolve()
    if resolved != resolved_base and resolved_base not in resolved.parents:
        raise ValueError(
            f"{terminal_text(path)}: outside {terminal_text(base)} (a name from a file is a label, never a "
            "way out of the folder)"
        )
    return path
