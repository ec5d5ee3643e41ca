"""The report a review meeting opens: ``index.html`` leads with the decision, then links every notebook page.

:func:`decision_facts` is what the index says first (flag, limiting rank, tokens, stranded capacity, the
checks); :func:`index_html` lays it out with the date, the kvplan version, the bundle and the pages of
:mod:`kvplan.notebook.pages`. ``python -m kvplan.notebook.report OUT BUNDLE NOTEBOOK...`` (``make demo``)
verifies the bundle, executes each notebook once into its pages and writes the index from the bundle's
recomputed decision.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvplan.escape import html_text, terminal_text
from kvplan.notebook.headlines import limiting_text
from kvplan.notebook.pages import Page
from kvplan.plan import Decision
from kvplan.units import format_budget, format_policy_size, format_size

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
.kvplan-flag { font-family: monospace; font-size: 1.3em; background: #f2f2f2; padding: 0.4em 0.6em; }
table.kvplan-decision th { text-align: left; padding: 0.2em 1.5em 0.2em 0; font-weight: 600; }
table.kvplan-decision td { padding: 0.2em 0; }
.kvplan-meta { color: #555; }
li { margin: 0.3em 0; }
"""


def decision_facts(decision: Decision) -> dict[str, str]:
    """What a reviewer reads first about a decision, as (name, text): the figures of the flag it deploys.

    Tokens and concurrency appear when the decision has a model spec; ``plan`` when it has an admission
    plan; a tie names no limiting rank.

    >>> from kvplan.plan import Policy, decide_rooms
    >>> GiB = 2**30
    >>> facts = decision_facts(decide_rooms([13 * GiB, 18 * GiB], Policy(GiB)))
    >>> facts["flag"], facts["limiting rank"], facts["stranded capacity"]
    ('--kv-cache-memory-bytes=12884901888', '0', '5 GiB on the stronger ranks')
    """
    budget = decision.budget
    facts = {
        "flag": budget.flag,
        "uniform budget": f"{format_budget(budget.uniform_budget_bytes)} per GPU over {len(budget.ranks)} GPUs",
        "limiting rank": limiting_text(budget.ranks, budget.safe_bytes),
        "stranded capacity": f"{format_size(budget.stranded_total_bytes)} on the stronger ranks",
        "reserve": f"{format_policy_size(budget.reserve_bytes)} per GPU",
    }
    capacity: Any = decision.capacity_at_max_len  # a kvplan.capacity.Capacity or None
    if capacity is not None:
        facts["tokens"] = (
            f"{capacity.tokens:,} tokens in {capacity.blocks:,} blocks of {format_size(capacity.block_bytes)}"
        )
        facts["max concurrency"] = f"{capacity.max_concurrency:.2f}× at {capacity.max_model_len:,} tokens"
    if decision.plan:
        fits = "fits" if decision.plan["fits"] else "DOES NOT FIT"
        facts["admission plan"] = f"{fits}: {decision.plan['detail']}"
    failed = [check.name for check in decision.checks if check.applicable and not check.passed]
    facts["checks"] = f"failed: {', '.join(failed)}" if failed else f"all {len(decision.checks)} pass"
    return facts


def index_html(
    decision: Decision,
    pages: Sequence[Page],
    created_utc: str,
    version: str,
    bundle: Mapping[str, str] | None = None,
) -> str:
    """The report's ``index.html``: the decision first, its date and kvplan version, then every page.

    ``bundle`` (e.g. ``{"name": ..., "digest": ..., "verified": ...}``) is listed under the decision.

    >>> from kvplan.plan import Policy, decide_rooms
    >>> GiB = 2**30
    >>> page = index_html(decide_rooms([13 * GiB, 18 * GiB], Policy(GiB)), [], "2026-12-02T00:00:00Z", "0.1.0")
    >>> "--kv-cache-memory-bytes=12884901888" in page, "kvplan 0.1.0" in page
    (True, True)
    """
    facts = decision_facts(decision)
    flag = facts.pop("flag")
    rows = "".join(
        f"<tr><th>{html_text(name)}</th><td>{html_text(text)}</td></tr>" for name, text in facts.items()
    )
    bundle_rows = "".join(
        f"<tr><th>{html_text(name)}</th><td>{html_text(text)}</td></tr>"
        for name, text in (bundle or {}).items()
    )
    links = "".join(
        f'<li><a href="{html_text(page.href)}">{html_text(page.title)}</a>'
        f' <span class="kvplan-meta">(<a href="{html_text(page.code_href)}">with code</a>)</span></li>'
        for page in pages
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>kvplan report: {html_text(flag)}</title><style>{_STYLE}</style></head><body>\n"
        "<h1>KV-cache budget: the decision</h1>\n"
        f'<p class="kvplan-meta">{html_text(created_utc)} · kvplan {html_text(version)}</p>\n'
        f'<p>Deploy with</p><p class="kvplan-flag">{html_text(flag)}</p>\n'
        f'<table class="kvplan-decision">{rows}</table>\n'
        + (
            f'<h2>Evidence bundle</h2><table class="kvplan-decision">{bundle_rows}</table>\n'
            if bundle
            else ""
        )
        + "<h2>The notebooks</h2>\n<p>Each page shows the charts and tables without code; "
        "“with code” is the same page for auditors.</p>\n"
        f"<ol>{links}</ol>\n</body></html>\n"
    )


def build_report(out_dir: Path, bundle: Path, notebooks: Sequence[Path]) -> tuple[Path, list[str]]:
    """Verify ``bundle``, write every notebook's pages into ``out_dir`` and the index; returns (index, errors).

    A notebook that fails is an error line naming it and its failing cell, and is left out of the index.
    """
    from kvplan.evidence.verify import verify
    from kvplan.notebook.pages import execute_notebook, write_pages

    verified = verify(bundle)
    if verified.decision is None or not verified.ok:
        return out_dir / "index.html", [f"{bundle}: {difference}" for difference in verified.differences]
    pages, errors = [], []
    for path in notebooks:
        try:
            notebook = execute_notebook(path, {"BUNDLE": str(bundle)})
            pages.append(write_pages(notebook, path.stem, out_dir))
        except Exception as exc:  # nbclient's CellExecutionError names the cell; anything else is shown too
            errors.append(f"{path}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1]}")
    record = verified.record
    facts = {
        "folder": str(bundle),
        "digest": f"sha256:{verified.digest}",
        "approved by": f"{record.get('approver', '')}: {record.get('note', '')}",
        "verified": "ok: every hash and the recomputed decision agree",
    }
    index = out_dir / "index.html"
    index.write_text(
        index_html(
            verified.decision, pages, str(record["created_utc"]), str(record["kvplan_version"]), facts
        ),
        encoding="utf-8",
    )
    return index, errors


def run_report(argv: Sequence[str] | None = None) -> int:
    """``python -m kvplan.notebook.report OUT BUNDLE NOTEBOOK...``: exit 0, or 1 with an ``error:`` line each."""
    parser = argparse.ArgumentParser(prog="python -m kvplan.notebook.report", description=run_report.__doc__)
    parser.add_argument("out", type=Path, help="report folder (index.html, one page per notebook)")
    parser.add_argument("bundle", type=Path, help="the evidence bundle the index shows (kvplan approve)")
    parser.add_argument("notebooks", type=Path, nargs="+", help="notebooks to execute, in order")
    args = parser.parse_args(argv)
    index, errors = build_report(args.out, args.bundle, args.notebooks)
    for error in errors:
        print(f"error: {terminal_text(error)}", file=sys.stderr)
    if not errors:
        print(f"report: {index} ({len(args.notebooks)} notebooks)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(run_report())
