"""The bundle's text and charts, pure over the record and the decision: ``SUMMARY.md``, ``evidence.log``,
``ledger.csv`` and ``charts/*.png`` (verify regenerates the texts byte for byte).

Text that people or logs wrote is escaped for its file (:mod:`kvplan.escape`): in ``SUMMARY.md`` it adds no
headings, tables or HTML, in ``ledger.csv`` it is never a formula, in ``evidence.log`` it never spans two
lines. A bundle without ``text_escaping`` (written before the rule) is regenerated as it was written.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd

from kvplan.budget import kv_cache_flag
from kvplan.checks import verdict_word
from kvplan.escape import markdown_code, markdown_text
from kvplan.evidence.evidence_log import decision_evidence_lines
from kvplan.evidence.record import (
    ALLOWED_UNJUDGED_KEY,
    CHARTS_DIR,
    TEXT_ESCAPING_KEY,
    int_or_none,
)
from kvplan.io.ledger_frame import ledger_frame_csv
from kvplan.kvspec.capacity import capacity_rows, sequence_lengths
from kvplan.plan import Decision
from kvplan.units import format_size

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

    def cell(self, value: object) -> str:
        """A file name in a table cell: escaped text (a code span cannot hold a table's ``\\|``)."""
        return markdown_text(value) if self.escaped else f"`{value}`"


def escaped_text(record: Mapping) -> bool:
    """Whether the bundle of ``record`` escapes every text from files (its ``text_escaping`` key)."""
    return TEXT_ESCAPING_KEY in record


def launch_lines(record: Mapping) -> list[str]:
    """``SUMMARY.md``'s launch (none before issue 24): both flags, and why a rank's room is below its available
    KV memory (vLLM sized the KV cache before capturing CUDA graphs)."""
    flags = record["decision"].get("launch_flags")
    if flags is None:
        return []
    lines = [
        f"- **Launch with:** `{' '.join(flags)}`: vLLM refuses to start when a rank's free memory is below "
        "ceil(total × gpu_memory_utilization), also with the byte flag."
    ]
    for row in record.get("ledger") or ():
        room, available = row.get("room_bytes"), row.get("available_kv_bytes")
        if (
            row.get("room_source") == "available_kv"
            and room is not None
            and available is not None
            and room < available
        ):
            lines.append(
                f"- **Room below available KV:** rank {row['rank']}: room {format_size(room)} < available KV "
                f"{format_size(available)}: vLLM sized the KV cache before capturing CUDA graphs, which take "
                f"{format_size(available - room)} of it after."
            )
    return lines


def summary_markdown(record: Mapping, name: str) -> str:
    """``SUMMARY.md``: the decision, per-rank table, stranded, capacity, key, checks and inputs."""
    md = _Markdown(escaped_text(record))
    lines = [*_decision_lines(record, name, md), *_rank_lines(record, md), *_capacity_lines(record)]
    if record["admission_plan"]:
        lines += ["", f"**Admission plan:** {record['admission_plan']['detail']}."]
    if record.get("load") is not None:
        lines += ["", "## Under load", "", *under_load_lines(record["load"], md.escaped)]
    lines += [
        "",
        "## Compatibility key (reuse only where all of these are unchanged)",
        "",
        "| field | value |",
        "|---|---|",
    ]
    lines += [
        f"| {k} | {'not shown' if v is None else md.text(v)} |"
        for k, v in record["compatibility_key"].items()
    ]
    lines += ["", "## Checks at approval", ""]
    lines += [
        f"- **{verdict_word(c['passed'])}** {md.text(c['name'])}: {md.text(c['detail'])}"
        for c in record["checks"]
    ]
    if record.get(ALLOWED_UNJUDGED_KEY):
        accepted = ", ".join(md.text(name) for name in record[ALLOWED_UNJUDGED_KEY])
        lines.append(f"- **Accepted by the approver without a verdict** (`--allow-unjudged`): {accepted}")
    lines += ["", "## Inputs", "", "| file | SHA-256 |", "|---|---|"]
    lines += [
        f"| {md.cell(entry['bundle_path'])} (was {md.cell(entry['path'])}) | `{entry['sha256']}` |"
        for entry in record["inputs"]
    ]
    if md.escaped:
        lines += ["", CSV_README]
    lines += [
        "",
        f"Re-check: `kvplan verify {name}`. Gate a canary boot: `kvplan gate --approved {name} CANARY.log`.",
        "",
    ]
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
    lines.append(
        f"- **Policy:** reserve {format_size(policy['reserve_bytes'])} per GPU; canary guard "
        f"{format_size(policy['guard_bytes'])}; rounding {rounding['rule']}"
        + (
            f" of {format_size(rounding['block_bytes'])} ({decision['num_blocks']:,} blocks)"
            if rounding["block_bytes"]
            else ""
        )
        + ("; rank 0's room assumed for every rank (--assume-uniform)" if policy["assume_uniform"] else "")
        + "."
    )
    return lines


def _rank_lines(record: Mapping, md: _Markdown) -> list[str]:
    """``SUMMARY.md``'s per-rank table and stranded capacity."""
    human = record["decision"]["human"]
    lines = [
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
    lines = ["", "## Capacity at the approved value", ""]
    if not record["capacity"]:
        return [*lines, "Not computed: approve with `--model CONFIG --tp N` to turn bytes into tokens."]
    spec = record["kv_spec"]
    lines += [
        f"{format_size(spec['bytes_per_token'])} per token per rank, blocks of {spec['block_size']} tokens "
        f"({format_size(spec['block_bytes'])}).",
        "",
        "| sequence length | blocks | tokens | full-length sequences at once |",
        "|---:|---:|---:|---:|",
    ]
    return lines + [
        f"| {row['seq_len']:,} | {row['blocks']:,} | {row['tokens']:,} | {row['max_concurrency']:.2f} |"
        for row in record["capacity"]
    ]


def under_load_lines(load: Mapping, escaped: bool = True) -> list[str]:
    """The "Under load" bullets of ``SUMMARY.md`` from a ``budget.json`` ``load`` section; file names and notes
    escaped unless not ``escaped`` (a bundle written before that rule)."""
    md = _Markdown(escaped)
    peak, tokens, preemptions = load["peak_kv_cache_usage_pct"], load["kv_cache_tokens"], load["preemptions"]
    span = (
        f", {md.text(load['start'])} to {md.text(load['end'])} ({load['duration_s']:g} s)"
        if load["start"]
        else ""
    )
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
    """A count or rate with thousands separators, rounded to whole units; ``?`` when unknown.

    >>> _count_text(1520.5), _count_text(None)
    ('1,520', '?')
    """
    return "?" if value is None else f"{value:,.0f}"


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
    escaped = escaped_text(record)
    ledger = ledger_frame_csv(decision.ledger) if escaped else decision.ledger.to_csv(index=False)
    return {
        "ledger.csv": iter([ledger]),
        "SUMMARY.md": iter([summary_markdown(record, name)]),
        "evidence.log": (f"{line}\n" for line in decision_evidence_lines(decision, escaped)),
    }


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
