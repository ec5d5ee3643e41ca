"""The bundle's texts and charts, pure over the record and the decision (verify regenerates them byte for byte);
text from files escaped for its target, unless the bundle predates ``text_escaping``."""

from __future__ import annotations

import functools
import io
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

import kvplan.evidence.record as rec
from kvplan.budget import kv_cache_flag
from kvplan.checks import verdict_word
from kvplan.escape import markdown_code, markdown_text, terminal_text
from kvplan.io.ledger_frame import ledger_frame_csv
from kvplan.io.metadata import RawLines
from kvplan.kvspec.capacity import capacity_rows, sequence_lengths
from kvplan.plan import Decision
from kvplan.units import format_size

#: Rows of ``evidence.log`` whose raw lines are read back from the logs at once.
READ_BACK_ROWS = 4096
_COLUMNS = ("source", "line", "boot", "rank", "column", "value", "raw")
#: What ``SUMMARY.md`` says of ``ledger.csv``'s text cells (a bundle with ``text_escaping``).
CSV_README = (
    "`ledger.csv` holds the ledger, one row per boot × rank; a text cell that begins with `=`, `+`, `-`, "
    "`@`, a tab or a carriage return starts with `'` there, so a spreadsheet shows it as text and never "
    "runs it as a formula (OWASP, CSV injection)."
)

#: What a bundle before ``text_escaping`` escaped in its approver and note: characters, control characters.
_BEFORE = re.compile(r"([\\`*<>\[\]|])")
_BEFORE_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


@dataclass(frozen=True)
class _Markdown:
    """How ``SUMMARY.md`` writes text from files: escaped, or as a bundle before ``text_escaping`` wrote it."""

    escaped: bool

    def person(self, value: object) -> str:
        """The approver or the note: escaped in every bundle (before the rule, as :data:`_BEFORE`)."""
        if self.escaped:
            return markdown_text(value)
        escaped = _BEFORE.sub(r"\\\1", str(value))
        return _BEFORE_CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), escaped)

    def text(self, value: object) -> str:
        return markdown_text(value) if self.escaped else str(value)

    def code(self, value: object) -> str:
        return markdown_code(value) if self.escaped else f"`{value}`"

    def cell(self, value: object) -> str:  # a code span cannot hold a table's escaped pipe
        return markdown_text(value) if self.escaped else f"`{value}`"


def launch_lines(record: Mapping) -> list[str]:
    """``SUMMARY.md``'s launch (none before issue 24): both flags, and each rank whose room is below its KV memory."""
    flags = record["decision"].get("launch_flags")
    if flags is None:
        return []
    lines = [
        f"- **Launch with:** `{' '.join(flags)}`: vLLM refuses to start when a rank's free memory is below "
        "ceil(total × gpu_memory_utilization), also with the byte flag."
    ]
    for row in record.get("ledger") or ():
        room, available = row.get("room_bytes"), row.get("available_kv_bytes")
        if row.get("room_source") == "available_kv" and None not in (room, available) and room < available:
            lines.append(
                f"- **Room below available KV:** rank {row['rank']}: room {format_size(room)} < available KV "
                f"{format_size(available)}: vLLM sized the KV cache before capturing CUDA graphs, which take "
                f"{format_size(available - room)} of it after."
            )
    return lines


def summary_markdown(record: Mapping, name: str) -> str:
    """``SUMMARY.md``: the decision, per-rank table, stranded, capacity, key, checks and inputs."""
    md = _Markdown(rec.TEXT_ESCAPING_KEY in record)
    lines = [*_decision_lines(record, name, md), *_rank_lines(record, md), *_capacity_lines(record)]
    if record["admission_plan"]:
        lines += ["", f"**Admission plan:** {record['admission_plan']['detail']}."]
    if record.get("load") is not None:
        lines += ["", "## Under load", "", *under_load_lines(record["load"], md.escaped)]
    lines.append(
        "\n## Compatibility key (reuse only where all of these are unchanged)\n\n| field | value |\n|---|---|"
    )
    lines += [
        f"| {k} | {'not shown' if v is None else md.text(v)} |"
        for k, v in record["compatibility_key"].items()
    ]
    lines += ["", "## Checks at approval", ""]
    lines += [
        f"- **{verdict_word(c['passed'])}** {md.text(c['name'])}: {md.text(c['detail'])}"
        for c in record["checks"]
    ]
    if record.get(rec.ALLOWED_UNJUDGED_KEY):
        accepted = ", ".join(md.text(name) for name in record[rec.ALLOWED_UNJUDGED_KEY])
        lines.append(f"- **Accepted by the approver without a verdict** (`--allow-unjudged`): {accepted}")
    lines.append("\n## Inputs\n\n| file | SHA-256 |\n|---|---|")
    lines += [
        f"| {md.cell(entry['bundle_path'])} (was {md.cell(entry['path'])}) | `{entry['sha256']}` |"
        for entry in record["inputs"]
    ]
    if md.escaped:
        lines += ["", CSV_README]
    lines.append(
        f"\nRe-check: `kvplan verify {name}`. Gate a canary boot: `kvplan gate --approved {name} CANARY.log`.\n"
    )
    return "\n".join(lines)


def _decision_lines(record: Mapping, name: str, md: _Markdown) -> list[str]:
    """``SUMMARY.md``'s title, decision, approval, launch, note and policy."""
    decision, policy = record["decision"], record["policy"]
    rounding = policy["rounding"]
    lines = [
        f"# KV-cache budget: {decision['human']} per GPU (`{decision['flag']}`)",
        "",
        f"- **Decision:** `{decision['flag']}`: {decision['kv_cache_memory_bytes']:,} bytes = "
        f"{decision['human']} per GPU, on every rank; rank {decision['limiting_rank']} limits.",
        f"- **Approved by** {md.person(record['approver'])} at {record['created_utc']} with kvplan "
        f"{record['kvplan_version']}; bundle `{name}`.",
        *launch_lines(record),
    ]
    if record.get("note"):
        lines.append(f"- **Note:** {md.person(record['note'])}")
    blocks = uniform = ""
    if rounding["block_bytes"]:
        blocks = f" of {format_size(rounding['block_bytes'])} ({decision['num_blocks']:,} blocks)"
    if policy["assume_uniform"]:
        uniform = "; rank 0's room assumed for every rank (--assume-uniform)"
    lines.append(
        f"- **Policy:** reserve {format_size(policy['reserve_bytes'])} per GPU; canary guard "
        f"{format_size(policy['guard_bytes'])}; rounding {rounding['rule']}{blocks}{uniform}."
    )
    return lines


def _rank_lines(record: Mapping, md: _Markdown) -> list[str]:
    """``SUMMARY.md``'s per-rank table and stranded capacity."""
    human = record["decision"]["human"]
    lines = [
        "\n## Per rank\n\n| rank | room | room from | safe = room − reserve | approved | stranded | startup free |"
        "\n|---:|---:|---|---:|---:|---:|---:|"
    ]
    for rank in record["ranks"]:
        marker = " (limits)" if rank["limiting"] else ""
        free = format_size(rank["init_free_bytes"]) if rank["init_free_bytes"] is not None else "not shown"
        lines.append(
            f"| {rank['rank']}{marker} | {format_size(rank['room_bytes'])} | {md.text(rank['room_source'] or '?')} | "
            f"{format_size(rank['safe_bytes'])} | {human} | {format_size(rank['stranded_bytes'])} | {free} |"
        )
    summary, stranded = record["summary"], record["stranded"]
    return [
        *lines,
        "",
        f"**Stranded:** {format_size(stranded['total_bytes'])} over all ranks (of which block rounding "
        f"{format_size(stranded['rounding_loss_bytes'])} per rank); allocated "
        f"{format_size(summary['allocated_total_bytes'])}. Min/median safe budget "
        f"{summary['min_median_ratio']:.3f}: the weakest rank removes {1 - summary['min_median_ratio']:.0%} "
        "of typical capacity.",
    ]


def _capacity_lines(record: Mapping) -> list[str]:
    """``SUMMARY.md``'s capacity at the approved value."""
    if not record["capacity"]:
        return [
            "\n## Capacity at the approved value\n\n"
            "Not computed: approve with `--model CONFIG --tp N` to turn bytes into tokens."
        ]
    spec = record["kv_spec"]
    lines = [
        f"\n## Capacity at the approved value\n\n{format_size(spec['bytes_per_token'])} per token per rank, blocks of "
        f"{spec['block_size']} tokens ({format_size(spec['block_bytes'])}).\n\n"
        "| sequence length | blocks | tokens | full-length sequences at once |\n|---:|---:|---:|---:|"
    ]
    return lines + [
        f"| {row['seq_len']:,} | {row['blocks']:,} | {row['tokens']:,} | {row['max_concurrency']:.2f} |"
        for row in record["capacity"]
    ]


def under_load_lines(load: Mapping, escaped: bool = True) -> list[str]:
    """The "Under load" bullets of ``SUMMARY.md`` from a record's ``load`` section."""
    md = _Markdown(escaped)
    peak, tokens, preemptions = load["peak_kv_cache_usage_pct"], load["kv_cache_tokens"], load["preemptions"]
    span = ""
    if load["start"]:
        span = f", {md.text(load['start'])} to {md.text(load['end'])} ({load['duration_s']:g} s)"
    files = ", ".join(md.code(source) for source in load["sources"])
    lines = [f"- **Evidence:** {load['rows']} rows from {files}{span}."]
    if peak is None:
        lines.append("- **Peak KV cache usage:** not reported.")
    else:
        of = f" of {tokens:,} tokens (≈{load['peak_kv_cache_tokens']:,})" if tokens is not None else ""
        where = f"{load['peak_at']['source']}:{load['peak_at']['line']}"
        lines.append(f"- **Peak KV cache usage:** {peak:.1f}%{of} at {md.code(where)}.")
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
    lines += [f"- **Note:** {md.text(note)}." for note in load["notes"]]
    if load["warnings"]:
        lines.append(f"- {len(load['warnings'])} reader warning(s) in `budget.json` (`load.warnings`).")
    return lines


def _count_text(value: float | None) -> str:
    """A count or rate with thousands separators, rounded to whole units; ``?`` when unknown."""
    return "?" if value is None else f"{value:,.0f}"


def artifact_pieces(decision: Decision, record: Mapping, name: str) -> dict[str, Iterator[str]]:
    """The text files of bundle ``name`` in pieces, made as they are read (``evidence.log`` line by line)."""
    escaped = rec.TEXT_ESCAPING_KEY in record
    ledger = ledger_frame_csv(decision.ledger) if escaped else decision.ledger.to_csv(index=False)
    if decision.metadata is not None:  # the reader's compact rows, raw lines read back from the logs
        metadata = decision.metadata
        lines = evidence_lines(metadata.compact_provenance(), metadata.raw_lines, escaped)
    else:
        lines = evidence_lines(decision.provenance, escaped=escaped)
    return {
        "ledger.csv": iter([ledger]),
        "SUMMARY.md": iter([summary_markdown(record, name)]),
        "evidence.log": (f"{line}\n" for line in lines),
    }


def chart_names(decision: Decision) -> list[str]:
    """Names of the bundle's charts; ``concurrency`` needs a model and ``max_model_len``."""
    names = ["ledger", "safe-budget", "stranded"]
    if decision.spec is not None and rec.int_or_none(decision.compatibility_key.get("max_model_len")):
        names.append("concurrency")
    return names


def chart_images(decision: Decision) -> dict[str, bytes]:
    """Each chart's PNG bytes by bundle path, unstamped (redrawn byte for byte); matplotlib is imported only here."""
    from kvplan import charts

    budget = decision.budget
    figures = {
        "ledger": lambda: charts.ledger_chart(decision.ledger, budget),
        "safe-budget": lambda: charts.safe_budget_chart(budget),
        "stranded": lambda: charts.stranded_chart(budget),
        "concurrency": lambda: _concurrency_chart(decision, charts),
    }
    images = {}
    for chart_name in chart_names(decision):
        buffer = io.BytesIO()
        figures[chart_name]().savefig(buffer, format="png", dpi=100, metadata={"Software": None})
        images[f"{rec.CHARTS_DIR}/{chart_name}.png"] = buffer.getvalue()
    return images


def _concurrency_chart(decision: Decision, charts: types.ModuleType) -> object:
    """Full-length sequences at once against the sequence length, at the approved value."""
    spec, max_len = decision.spec, int(decision.compatibility_key["max_model_len"])
    planned = [decision.plan["seq_len"]] if decision.plan else []
    lengths = sequence_lengths(max_len, shortest=512, also=planned)
    curve = pd.DataFrame(capacity_rows(spec, decision.budget.uniform_budget_bytes, lengths))
    target = decision.plan["target_concurrency"] if decision.plan else None
    return charts.concurrency_chart(curve, max_len, target)


def evidence_lines(
    provenance: pd.DataFrame, raw_lines: RawLines | None = None, escaped: bool = True
) -> Iterator[str]:
    """``evidence.log`` line by line: each source line once, with ``file:line``, boot, rank and every value read
    from it; a ``raw`` that is a byte offset is read back from ``raw_lines`` :data:`READ_BACK_ROWS` rows at a
    time; file names and raw lines escaped for the terminal unless not ``escaped`` (before the rule).

    >>> prov = pd.DataFrame({"source": ["a.log"] * 2, "line": [9, 9], "boot": [0, 0], "rank": [2, 2],
    ...     "column": ["init_free_bytes", "room_bytes"], "value": [100, 90], "raw": ["the line"] * 2})
    >>> list(evidence_lines(prov))[3:]
    ['a.log:9  boot 0  rank 2  init_free_bytes = 100; room_bytes = 90', '    the line']
    """
    yield "# kvplan evidence: every number in budget.json and ledger.csv, with the line it came from"
    yield "# file:line  boot  rank  column = value; ...   then the line as logged"
    yield ""
    if provenance.empty:
        yield "(the reader recorded no provenance)"
        return
    frame = provenance.reset_index(drop=True)
    sort_line = frame["line"].astype("Int64").fillna(0)
    keys = pd.DataFrame({"source": frame["source"], "_line": sort_line})
    order = keys.sort_values(["source", "_line"], kind="stable").index.to_numpy()
    groups: dict[tuple, dict] = {}  # the places of one (source, line), in the order first seen
    run = None
    for start in range(0, len(order), READ_BACK_ROWS):  # one batch of rows as lists at a time
        at = order[start : start + READ_BACK_ROWS]
        rows = list(zip(sort_line.take(at).tolist(), *(frame[name].take(at).tolist() for name in _COLUMNS)))
        texts = _read_back(rows, raw_lines) if raw_lines is not None else {}
        stripped: dict[object, str] = {}  # str(raw).rstrip() of each raw text of the batch
        for sort_at, source, line, boot, rank, column, value, raw in rows:
            if texts and type(raw) is int:
                raw = texts[source, raw]
            if (str(source), sort_at) != run:
                yield from _place_lines(groups, escaped)
                groups, run = {}, (str(source), sort_at)
            if raw not in stripped:
                stripped[raw] = str(raw).rstrip()
            place = (str(source), _whole(line), _whole(boot), stripped[raw])
            groups.setdefault(place, {}).setdefault(_whole(rank), []).append(
                f"{column} = {rec.json_value(value)}"
            )
    yield from _place_lines(groups, escaped)


@functools.lru_cache(maxsize=1 << 16)
def _whole(value: object) -> int | None:
    """:func:`~kvplan.evidence.record.int_or_none` of a line, boot or rank number (they repeat)."""
    return rec.int_or_none(value)


def _read_back(rows: Sequence[tuple], raw_lines: RawLines) -> dict[tuple, str]:
    """``(source, offset) → line text`` of the ``rows`` whose raw is a byte offset."""
    offsets: dict[object, set[int]] = {}
    for _, source, *_, raw in rows:
        if type(raw) is int:
            offsets.setdefault(source, set()).add(raw)
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
