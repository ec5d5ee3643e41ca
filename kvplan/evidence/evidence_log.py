"""``evidence.log``: every number of a bundle with the log line it came from, written line by line."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pandas as pd

from kvplan.escape import terminal_text
from kvplan.evidence.record import int_or_none, json_value
from kvplan.io.metadata import RawLines
from kvplan.plan import Decision

#: Rows of ``evidence.log`` whose raw lines are read back from the logs at once.
READ_BACK_ROWS = 4096


def evidence_lines(provenance: pd.DataFrame) -> list[str]:
    """``evidence.log``: each source line once, with ``file:line``, boot, rank and every value read from it.

    >>> prov = pd.DataFrame({"source": ["a.log"] * 2, "line": [9, 9], "boot": [0, 0], "rank": [2, 2],
    ...     "column": ["init_free_bytes", "room_bytes"], "value": [100, 90], "raw": ["the line"] * 2})
    >>> evidence_lines(prov)[3:]
    ['a.log:9  boot 0  rank 2  init_free_bytes = 100; room_bytes = 90', '    the line']
    """
    return list(iter_evidence_lines(provenance))


def iter_evidence_lines(
    provenance: pd.DataFrame, raw_lines: RawLines | None = None, escaped: bool = True
) -> Iterator[str]:
    """The lines of :func:`evidence_lines` one by one, in (source, line) order, holding one line's values.

    With ``raw_lines``, a ``raw`` that is a byte offset is read back from its log in batches of
    :data:`READ_BACK_ROWS` rows; file names and raw lines are escaped (:func:`kvplan.escape.terminal_text`)
    unless not ``escaped`` (a bundle written before that rule).
    """
    yield "# kvplan evidence: every number in budget.json and ledger.csv, with the line it came from"
    yield "# file:line  boot  rank  column = value; ...   then the line as logged"
    yield ""
    if provenance.empty:
        yield "(the reader recorded no provenance)"
        return
    keys = pd.DataFrame(
        {"source": provenance["source"], "_line": provenance["line"].astype("Int64").fillna(0)}
    ).reset_index(drop=True)
    order = list(keys.sort_values(["source", "_line"], kind="stable").index)
    at_sort_line = list(keys["_line"])
    at_source, at_line, at_boot, at_rank, at_column, at_value, at_raw = (
        list(provenance[name]) for name in ("source", "line", "boot", "rank", "column", "value", "raw")
    )
    whole: dict[object, int | None] = {}  # int_or_none of each line, boot and rank number seen
    stripped: dict[object, str] = {}  # str(raw).rstrip() of each raw text seen
    groups: dict[tuple, dict] = {}  # the places of one (source, line), in the order first seen
    run = None
    for start in range(0, len(order), READ_BACK_ROWS):
        batch = order[start : start + READ_BACK_ROWS]
        texts = _read_back(batch, at_source, at_raw, raw_lines) if raw_lines is not None else {}
        stripped.clear()  # the texts of one batch at a time
        for i in batch:
            source, line, boot, rank, raw = str(at_source[i]), at_line[i], at_boot[i], at_rank[i], at_raw[i]
            if texts and type(raw) is int:
                raw = texts[at_source[i], raw]
            if (source, at_sort_line[i]) != run:
                yield from _place_lines(groups, escaped)
                groups, run = {}, (source, at_sort_line[i])
            if line not in whole:
                whole[line] = int_or_none(line)
            if boot not in whole:
                whole[boot] = int_or_none(boot)
            if rank not in whole:
                whole[rank] = int_or_none(rank)
            if raw not in stripped:
                stripped[raw] = str(raw).rstrip()
            shown_values = groups.setdefault((source, whole[line], whole[boot], stripped[raw]), {})
            shown_values.setdefault(whole[rank], []).append(f"{at_column[i]} = {json_value(at_value[i])}")
    yield from _place_lines(groups, escaped)


def _read_back(
    positions: Sequence[int], sources: Sequence[object], raws: Sequence[object], raw_lines: RawLines
) -> dict[tuple, str]:
    """``(source, offset) → line text`` of the rows at ``positions`` whose raw is a byte offset."""
    offsets: dict[object, set[int]] = {}
    for i in positions:
        raw = raws[i]
        if type(raw) is int:
            offsets.setdefault(sources[i], set()).add(raw)
    return {
        (source, offset): text
        for source, wanted in offsets.items()
        for offset, text in raw_lines.lines(str(source), wanted).items()
    }


def _place_lines(groups: Mapping[tuple, Mapping], escaped: bool) -> Iterator[str]:
    """The two lines of each (source, line, boot, raw) place: where and its values by rank, then the raw."""
    for (source, line, boot, raw), by_rank in groups.items():
        if escaped:
            source, raw = terminal_text(source), terminal_text(raw)
        where = f"{source}:{line}" if line is not None else source
        ranks = ", ".join("-" if rank is None else str(rank) for rank in by_rank)
        shown = list(by_rank.values())
        if all(values == shown[0] for values in shown):
            text = f"rank{'s' if len(by_rank) > 1 else ''} {ranks}  " + "; ".join(shown[0])
        else:
            text = "  ".join(f"rank {rank}: " + "; ".join(values) for rank, values in by_rank.items())
        yield f"{where}  boot {'-' if boot is None else boot}  {text}"
        yield f"    {raw}" if line is not None else f"    (not a log line: {raw})"


def decision_evidence_lines(decision: Decision, escaped: bool) -> Iterator[str]:
    """The lines of ``evidence.log``: from the reader's compact rows when the decision has them."""
    if decision.metadata is not None:
        return iter_evidence_lines(
            decision.metadata.compact_provenance(), decision.metadata.raw_lines, escaped
        )
    return iter_evidence_lines(decision.provenance, escaped=escaped)
