"""Warnings as one structured channel: a :class:`Note` is a warning's text (a ``str``) with its code, file
and line; :func:`aggregate_notes` folds repeated notes of one kind in one file into one line."""

from __future__ import annotations

from collections.abc import Iterable

#: How many line numbers an aggregated note quotes.
SHOWN_LINES = 3


class Note(str):
    """A warning's text with ``code`` (its kind; "" is never folded), ``file``, ``line`` (1-based) and, folded,
    ``count`` and ``lines``."""

    code: str
    file: str | None
    line: int | None
    count: int  # type: ignore[assignment]  # how many occurrences, not str.count
    lines: tuple[int, ...]

    def __new__(
        cls,
        text: str,
        code: str = "",
        file: str | None = None,
        line: int | None = None,
        count: int = 1,
        lines: tuple[int, ...] = (),
    ) -> Note:
        note = super().__new__(cls, text)
        note.code = code or getattr(text, "code", "")
        note.file = file if file is not None else getattr(text, "file", None)
        note.line = line if line is not None else getattr(text, "line", None)
        note.count = count
        note.lines = lines or ((note.line,) if note.line is not None else ())
        return note

    def __reduce__(self):  # pickled across processes (Dask workers) with its fields
        return (Note, (str(self), self.code, self.file, self.line, self.count, self.lines))

    def to_dict(self) -> dict:
        """One entry of ``"warning_details"``."""
        return {
            "code": self.code,
            "message": str(self),
            "file": self.file,
            "line": self.line,
            "count": self.count,
            "lines": list(self.lines),
        }


def aggregate_notes(notes: Iterable[str]) -> list[Note]:
    """Notes in first-seen order, a kind (code, file) seen ``n > 1`` times folded into one line
    (``a.log: boot restarted: 4 times, first at lines 5, 9, 12``); duplicates without a code print once."""
    groups: dict[tuple, list[Note]] = {}
    for text in notes:
        note = text if isinstance(text, Note) else Note(text)
        key = (note.code, note.file) if note.code else ("", str(note))
        groups.setdefault(key, []).append(note)
    folded = []
    for (code, file), members in groups.items():
        if len(members) == 1 or not code:
            folded.append(members[0])
            continue
        varied = " (the first shown)" if len({_without_place(member) for member in members}) > 1 else ""
        lines = tuple(sorted({line for member in members for line in member.lines}))[:SHOWN_LINES]
        count = sum(member.count for member in members)
        where = f", first at lines {', '.join(map(str, lines))}" if lines else ""
        text = f"{file}: " if file else ""
        text += f"{_without_place(members[0])}: {count:,} times{varied}{where}"
        folded.append(Note(text, code, file, lines[0] if lines else None, count, lines))
    return folded


def _without_place(note: Note) -> str:
    """The note's text without a leading ``FILE:LINE:`` or ``FILE:``."""
    text = str(note)
    for prefix in (f"{note.file}:{note.line}: ", f"{note.file}: "):
        if note.file and text.startswith(prefix):
            return text[len(prefix) :]
    return text
