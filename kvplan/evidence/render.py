"""The bundle's text and charts, pure over the record and the decision: ``SUMMARY.md``, ``evidence.log``,
``ledger.csv`` and ``charts/*.png``.

:func:`verify <kvplan.evidence.verify.verify_bundle_with_notes>` regenerates the text files byte for byte
(and, for bundles written before the seal, the charts). Text that people or logs wrote (the note, the
approver) is quoted by :func:`quoted` so it cannot add headings, tables or HTML to ``SUMMARY.md``.

>>> quoted("CHG-1234 <!--")
'CHG-1234 \\\\<!--'
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping, Sequence

import pandas as pd

from kvplan.budget import kv_cache_flag
from kvplan.capacity import capacity_rows, sequence_lengths
from kvplan.evidence.record import CHARTS_DIR, int_or_none, json_value
from kvplan.io.metadata import RawLines
from kvplan.plan import Decision
from kvplan.units import format_size
from kvplan.verdict import verdict_word

#: Rows of ``evidence.log`` whose raw lines are read back from the logs at once.
READ_BACK_ROWS = 4096
#: Characters that make Markdown or HTML syntax inside a line: backslash-escaped by :func:`quoted`.
_MARKUP = re.compile(r"([\\`*<>\[\]|])")
#: Line breaks and other control characters: shown as escapes by :func:`quoted`.
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def quoted(text: object) -> str:
    r"""``text`` as inert Markdown on one line: ``\ ` * < > [ ] |`` backslash-escaped, line breaks and
    other control characters shown as escapes (``\n``, ``\x1b``), so a note cannot start a heading, a
    table row or an HTML comment. Words, digits and ``- . , : / ( ) # _`` are unchanged.

    >>> quoted("sample four-rank boot (CHG_1234, #5)")
    'sample four-rank boot (CHG_1234, #5)'
    >>> print(quoted("ok\n# 40 GiB <!-- hide"))
    ok\n# 40 GiB \<!-- hide
    """
    escaped = _MARKUP.sub(r"\\\1", str(text))
    return _CONTROL.sub(lambda match: match.group(0).encode("unicode_escape").decode("ascii"), escaped)


def summary_markdown(record: Mapping, name: str) -> str:
    """``SUMMARY.md``: the decision, per-rank table, stranded, capacity, key, checks and inputs."""
    decision, policy = record["decision"], record["policy"]
    limiting = decision["limiting_rank"]
    rounding = policy["rounding"]
    lines = [
        f"# KV-cache budget: {decision['human']} per GPU (`{decision['flag']}`)",
        "",
        f"- **Decision:** `{decision['flag']}`: {decision['kv_cache_memory_bytes']:,} bytes = "
        f"{decision['human']} per GPU, on every rank; rank {limiting} limits.",
        f"- **Approved by** {quoted(record['approver'])} at {record['created_utc']} with kvplan "
        f"{record['kvplan_version']}; bundle `{name}`.",
    ]
    if record.get("note"):
        lines.append(f"- **Note:** {quoted(record['note'])}")
    lines += [
        f"- **Policy:** reserve {format_size(policy['reserve_bytes'])} per GPU; canary guard "
        f"{format_size(policy['guard_bytes'])}; rounding {rounding['rule']}"
        + (
            f" of {format_size(rounding['block_bytes'])} ({decision['num_blocks']:,} blocks)"
            if rounding["block_bytes"]
            else ""
        )
        + ("; rank 0's room assumed for every rank (--assume-uniform)" if policy["assume_uniform"] else "")
        + ".",
        "",
        "## Per rank",
        "",
        "| rank | room | room from | safe = room − reserve | approved | stranded | startup free |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for rank in record["ranks"]:
        marker = " (limits)" if rank["limiting"] else ""
        free = format_size(rank["init_free_bytes"]) if rank["init_free_bytes"] is not None else "not shown"
        lines.append(
            f"| {rank['rank']}{marker} | {format_size(rank['room_bytes'])} | {rank['room_source'] or '?'} | "
            f"{format_size(rank['safe_bytes'])} | {decision['human']} | "
            f"{format_size(rank['stranded_bytes'])} | {free} |"
        )
    summary, stranded = record["summary"], record["stranded"]
    lines += [
        "",
        f"**Stranded:** {format_size(stranded['total_bytes'])} over all ranks (of which block rounding "
        f"{format_size(stranded['rounding_loss_bytes'])} per rank); allocated "
        f"{format_size(summary['allocated_total_bytes'])}. Min/median safe budget "
        f"{summary['min_median_ratio']:.3f}: the weakest rank removes {1 - summary['min_median_ratio']:.0%} "
        "of typical capacity.",
        "",
        "## Capacity at the approved value",
        "",
    ]
    if record["capacity"]:
        spec = record["kv_spec"]
        lines += [
            f"{format_size(spec['bytes_per_token'])} per token per rank, blocks of {spec['block_size']} "
            "tokens "
            f"({format_size(spec['block_bytes'])}).",
            "",
            "| sequence length | blocks | tokens | full-length sequences at once |",
            "|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {row['seq_len']:,} | {row['blocks']:,} | {row['tokens']:,} | {row['max_concurrency']:.2f} |"
            for row in record["capacity"]
        ]
    else:
        lines.append("Not computed: approve with `--model CONFIG --tp N` to turn bytes into tokens.")
    if record["admission_plan"]:
        lines += ["", f"**Admission plan:** {record['admission_plan']['detail']}."]
    if record.get("load") is not None:
        lines += ["", "## Under load", "", *under_load_lines(record["load"])]
    lines += [
        "",
        "## Compatibility key (reuse only where all of these are unchanged)",
        "",
        "| field | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {'not shown' if v is None else v} |" for k, v in record["compatibility_key"].items()]
    lines += ["", "## Checks at approval", ""]
    lines += [f"- **{verdict_word(c['passed'])}** {c['name']}: {c['detail']}" for c in record["checks"]]
    lines += ["", "## Inputs", "", "| file | SHA-256 |", "|---|---|"]
    lines += [
        f"| `{entry['bundle_path']}` (was `{entry['path']}`) | `{entry['sha256']}` |"
        for entry in record["inputs"]
    ]
    lines += [
        "",
        f"Re-check: `kvplan verify {name}`. Gate a canary boot: `kvplan gate --approved {name} CANARY.log`.",
        "",
    ]
    return "\n".join(lines)


def under_load_lines(load: Mapping) -> list[str]:
    """The "Under load" bullets of ``SUMMARY.md`` from a ``budget.json`` ``load`` section.

    >>> load = {"sources": ["inputs/server.log"], "rows": 40, "start": "2026-11-27T09:32:10",
    ...     "end": "2026-11-27T09:38:58", "duration_s": 408.0, "kv_cache_tokens": 157280,
    ...     "kv_cache_memory_bytes": 12884377600, "approved_kv_cache_tokens": 157280,
    ...     "peak_kv_cache_usage_pct": 70.1, "peak_kv_cache_tokens": 110253,
    ...     "peak_at": {"source": "inputs/server.log", "line": 61, "time": None, "engine": 0},
    ...     "max_running": 32, "max_waiting": 3, "mean_prompt_tokens_per_s": 1520.5,
    ...     "mean_generation_tokens_per_s": 689.25, "preemptions": 0, "max_preemptions": 0,
    ...     "oom_events": 0, "error_events": 0, "warnings": [], "notes": []}
    >>> print("\\n".join(under_load_lines(load)))
    - **Evidence:** 40 rows from `inputs/server.log`, 2026-11-27T09:32:10 to 2026-11-27T09:38:58 (408 s).
    - **Peak KV cache usage:** 70.1% of 157,280 tokens (≈110,253) at `inputs/server.log:61`.
    - **Preemptions:** 0 (policy allows 0); **OOM / error events:** 0 / 0.
    - **Throughput:** prompt 1,520, generation 689 tokens/s on average; peak 32 running, 3 waiting.
    - **Capacity:** 157,280 tokens (`--kv-cache-memory-bytes=12884377600`); approved value: 157,280.
    """
    peak, tokens, preemptions = load["peak_kv_cache_usage_pct"], load["kv_cache_tokens"], load["preemptions"]
    span = f", {load['start']} to {load['end']} ({load['duration_s']:g} s)" if load["start"] else ""
    files = ", ".join(f"`{source}`" for source in load["sources"])
    lines = [f"- **Evidence:** {load['rows']} rows from {files}{span}."]
    if peak is None:
        lines.append("- **Peak KV cache usage:** not reported.")
    else:
        of = f" of {tokens:,} tokens (≈{load['peak_kv_cache_tokens']:,})" if tokens is not None else ""
        where = f"{load['peak_at']['source']}:{load['peak_at']['line']}"
        lines.append(f"- **Peak KV cache usage:** {peak:.1f}%{of} at `{where}`.")
    counted = "not reported" if preemptions is None else preemptions
    lines.append(
        f"- **Preemptions:** {counted} (policy allows {load['max_preemptions']}); "
        f"**OOM / error events:** {load['oom_events']} / {load['error_events']}."
    )
    prompt, generation = load["mean_prompt_tokens_per_s"], load["mean_generation_tokens_per_s"]
    lines.append(
        f"- **Throughput:** prompt {_count_text(prompt)}, generation {_count_text(generation)} "
        f"tokens/s on average; peak {_count_text(load['max_running'])} running, "
        f"{_count_text(load['max_waiting'])} waiting."
    )
    manual = load["kv_cache_memory_bytes"]
    setting = f"`{kv_cache_flag(manual)}`" if manual is not None else "profiled"
    approved = load["approved_kv_cache_tokens"]
    lines.append(
        f"- **Capacity:** {_count_text(tokens)} tokens ({setting}); approved value: {_count_text(approved)}."
    )
    lines += [f"- **Note:** {note}." for note in load["notes"]]
    if load["warnings"]:
        lines.append(f"- {len(load['warnings'])} reader warning(s) in `budget.json` (`load.warnings`).")
    return lines


def _count_text(value: float | None) -> str:
    """A count or rate with thousands separators, rounded to whole units; ``?`` when unknown.

    >>> _count_text(1520.5), _count_text(None)
    ('1,520', '?')
    """
    return "?" if value is None else f"{value:,.0f}"


def evidence_lines(provenance: pd.DataFrame) -> list[str]:
    """``evidence.log``: each source line once, with ``file:line``, boot, rank and every value read from it.

    >>> prov = pd.DataFrame({"source": ["a.log"] * 2, "line": [9, 9], "boot": [0, 0], "rank": [2, 2],
    ...     "column": ["init_free_bytes", "room_bytes"], "value": [100, 90], "raw": ["the line"] * 2})
    >>> evidence_lines(prov)[3:]
    ['a.log:9  boot 0  rank 2  init_free_bytes = 100; room_bytes = 90', '    the line']
    """
    return list(iter_evidence_lines(provenance))


def iter_evidence_lines(provenance: pd.DataFrame, raw_lines: RawLines | None = None) -> Iterator[str]:
    """The lines of :func:`evidence_lines` one by one: the rows are taken in (source, line) order and the
    lines of one source line are written once its rows are all seen, so only one line's values are held.
    With ``raw_lines``, a ``raw`` that is a byte offset (:meth:`~kvplan.io.metadata.ReadMetadata.compact_provenance`) is read back from its
    log in batches of :data:`READ_BACK_ROWS` rows as the lines are made, never all at once.
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
                yield from _place_lines(groups)
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
    yield from _place_lines(groups)


def _read_back(
    positions: Sequence[int], sources: Sequence[object], raws: Sequence[object], raw_lines: RawLines
) -> dict[tuple, str]:
    """``(source, offset) → line text`` of the rows at ``positions`` whose raw is a byte offset."""
    offsets: dict[object, set[int]] = {}
    for i in positions:
        if type(raws[i]) is int:
            offsets.setdefault(sources[i], set()).add(raws[i])
    return {
        (source, offset): text
        for source, wanted in offsets.items()
        for offset, text in raw_lines.lines(str(source), wanted).items()
    }


def _place_lines(groups: Mapping[tuple, Mapping]) -> Iterator[str]:
    """The two lines of each (source, line, boot, raw) place: where and its values by rank, then the raw."""
    for (source, line, boot, raw), by_rank in groups.items():
        where = f"{source}:{line}" if line is not None else source
        ranks = ", ".join("-" if rank is None else str(rank) for rank in by_rank)
        shown = list(by_rank.values())
        if all(values == shown[0] for values in shown):
            text = f"rank{'s' if len(by_rank) > 1 else ''} {ranks}  " + "; ".join(shown[0])
        else:
            text = "  ".join(f"rank {rank}: " + "; ".join(values) for rank, values in by_rank.items())
        yield f"{where}  boot {'-' if boot is None else boot}  {text}"
        yield f"    {raw}" if line is not None else f"    (not a log line: {raw})"


def artifact_texts(decision: Decision, record: Mapping, name: str) -> dict[str, str]:
    """The text files of bundle ``name``: ``ledger.csv``, ``SUMMARY.md`` and ``evidence.log``.

    Pure over the decision and the record, so verify regenerates them byte for byte.
    """
    return {
        file_name: "".join(pieces) for file_name, pieces in artifact_pieces(decision, record, name).items()
    }


def artifact_pieces(decision: Decision, record: Mapping, name: str) -> dict[str, Iterator[str]]:
    """The texts of :func:`artifact_texts` in pieces, made as they are read (``evidence.log`` line by line:
    its text is never held whole)."""
    return {
        "ledger.csv": iter([decision.ledger.to_csv(index=False)]),
        "SUMMARY.md": iter([summary_markdown(record, name)]),
        "evidence.log": (f"{line}\n" for line in _decision_evidence_lines(decision)),
    }


def _decision_evidence_lines(decision: Decision) -> Iterator[str]:
    """The lines of ``evidence.log``: from the reader's compact rows when the decision has them."""
    if decision.metadata is not None:
        return iter_evidence_lines(decision.metadata.compact_provenance(), decision.metadata.raw_lines)
    return iter_evidence_lines(decision.provenance)


def chart_names(decision: Decision) -> list[str]:
    """Names of the bundle's charts (``charts/<name>.png``); ``concurrency`` needs a model and
    ``max_model_len``."""
    names = ["ledger", "safe-budget", "stranded"]
    if decision.spec is not None and int_or_none(decision.compatibility_key.get("max_model_len")):
        names.append("concurrency")
    return names


def chart_images(decision: Decision) -> dict[str, bytes]:
    """The PNG bytes of each chart by bundle path (``charts/ledger.png``, ...), drawn from the decision.

    Deterministic for one matplotlib (no time or software stamp), so a bundle's charts can be redrawn and
    compared byte for byte. matplotlib is imported only here: ``kvplan gate`` and ``verify`` of a sealed
    bundle never load it.
    """
    import matplotlib.pyplot as plt

    images = {}
    for chart_name, figure in _figures(decision):
        buffer = io.BytesIO()
        try:
            figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
        finally:
            plt.close(figure)
        images[f"{CHARTS_DIR}/{chart_name}.png"] = buffer.getvalue()
    return images


def _figures(decision: Decision) -> Iterator[tuple[str, object]]:
    from kvplan import charts  # see chart_images: matplotlib only when drawing

    budget = decision.budget
    yield "ledger", charts.ledger_chart(decision.ledger, budget)
    yield "safe-budget", charts.safe_budget_chart(budget)
    yield "stranded", charts.stranded_chart(budget)
    if "concurrency" in chart_names(decision):
        spec, max_len = decision.spec, int(decision.compatibility_key["max_model_len"])
        planned = [decision.plan["seq_len"]] if decision.plan else []
        lengths = sequence_lengths(max_len, shortest=512, also=planned)
        curve = pd.DataFrame(capacity_rows(spec, budget.uniform_budget_bytes, lengths))
        target = decision.plan["target_concurrency"] if decision.plan else None
        yield "concurrency", charts.concurrency_chart(curve, max_len, target)
