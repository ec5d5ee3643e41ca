"""The review meeting over a verified bundle's decision: the report (``python -m kvplan.notebook.report OUT
BUNDLE NOTEBOOK...``: each notebook run once into pages, and an index) and review mode (``--serve``: Voilà on
127.0.0.1). Each notebook takes the bundle as ``BUNDLE`` and states its digest, else it is refused."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.escape import html_text, markdown_code, terminal_text
from kvplan.notebook.headlines import limiting_text
from kvplan.notebook.launch import ParameterError, parameter_path
from kvplan.notebook.pages import Page, shown_folder, with_parameters
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
    """What a reviewer reads first about a decision, as (name, text): the flag and its figures."""
    budget = decision.budget
    facts = {
        "flag": budget.flag,
        "uniform budget": f"{format_budget(budget.uniform_budget_bytes)} per GPU over {len(budget.ranks)} GPUs",
        "limiting rank": limiting_text(budget.ranks, budget.safe_bytes),
        "stranded capacity": f"{format_size(budget.stranded_total_bytes)} on the stronger ranks",
        "reserve": f"{format_policy_size(budget.reserve_bytes)} per GPU",
    }
    capacity: Any = decision.capacity_at_max_len  # a kvplan.kvspec.capacity.Capacity or None
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
    """The report's ``index.html``: the decision, its date and kvplan version, the ``bundle``'s facts, the pages."""
    facts = decision_facts(decision)
    flag = facts.pop("flag")
    rows = _rows(facts)
    evidence = (
        f'<h2>Evidence bundle</h2><table class="kvplan-decision">{_rows(bundle)}</table>\n' if bundle else ""
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
        + evidence
        + "<h2>The notebooks</h2>\n<p>Each page shows the charts and tables without code; "
        "“with code” is the same page for auditors.</p>\n"
        f"<ol>{links}</ol>\n</body></html>\n"
    )


def _rows(facts: Mapping[str, str], th_style: str = "") -> str:
    """(name, text) pairs as escaped HTML table rows."""
    return "".join(
        f"<tr><th{th_style}>{html_text(k)}</th><td>{html_text(v)}</td></tr>" for k, v in facts.items()
    )


@dataclass(frozen=True)
class ShownBundle:
    """A verified bundle as a notebook's parameters; displayed, it states the bundle and its digest."""

    folder: Path
    digest: str
    logs: list[Path]
    snapshots: list[Path]
    model_config: Path | None
    tp: int | None
    reserve_bytes: int
    guard_bytes: int
    assume_uniform: bool
    target_concurrency: int | None
    seq_len: int | None

    @property
    def plan(self) -> tuple[int | None, int | None]:
        """The approved admission plan: (full sequences at once, tokens each), else (None, None)."""
        return self.target_concurrency, self.seq_len

    @property
    def model(self) -> Path:
        """The bundle's model config (:class:`ParameterError` without one)."""
        if self.model_config is None:
            folder = str(self.folder)
            raise ParameterError(f"BUNDLE = {folder!r} was approved without --model: no model config")
        return self.model_config

    def _repr_markdown_(self) -> str:
        return (
            f"**This page shows the evidence bundle** {markdown_code(self.folder.name)}, digest "
            f"`sha256:{self.digest}` (verified: every hash and the recomputed decision agree); its inputs and "
            "policy replace the sample parameters."
        )


def show_bundle(bundle: str | Path | None) -> ShownBundle | None:
    """The verified ``bundle`` a notebook shows (None: None); :class:`ParameterError` when it does not verify."""
    from kvplan.evidence.verify import verify

    if bundle is None:
        return None
    folder = parameter_path(bundle, "BUNDLE")
    verified = verify(folder)
    if not verified.ok:
        raise ParameterError(f"BUNDLE = {str(bundle)!r} does not verify: {verified.differences[0]}")
    record = verified.record
    by_role: dict[str, list[Path]] = {}
    for entry in record["inputs"]:
        by_role.setdefault(entry["role"], []).append(folder / entry["bundle_path"])
    policy = {key: record["policy"][key] for key in ("reserve_bytes", "guard_bytes", "assume_uniform")}
    approved = record.get("admission_plan") or {}
    plan: dict[str, Any] = {key: approved.get(key) for key in ("target_concurrency", "seq_len")}
    return ShownBundle(
        folder=folder,
        digest=verified.digest,
        logs=by_role.get("log", []),
        snapshots=by_role.get("nvidia-smi", []),
        model_config=next(iter(by_role.get("model config", [])), None),
        tp=(record.get("model_options") or {}).get("tp"),
        **policy,
        **plan,
    )


def takes_bundle(notebook: Any) -> bool:
    """Whether a notebook's ``parameters`` cell sets ``BUNDLE``."""
    return any(
        "parameters" in cell.get("metadata", {}).get("tags", [])
        and re.search(r"^BUNDLE\s*=", cell.source, re.MULTILINE)
        for cell in notebook.cells
    )


def build_report(out_dir: Path, bundle: Path, notebooks: Sequence[Path]) -> tuple[Path, list[str]]:
    """Verify ``bundle``, write each notebook's pages and the index into ``out_dir``: (index, errors); a notebook
    that fails, takes no ``BUNDLE`` or whose page lacks the digest is an error, left out."""
    import nbformat

    from kvplan.evidence.verify import verify
    from kvplan.notebook.pages import execute_notebook, write_pages

    verified = verify(bundle)
    if verified.decision is None or not verified.ok:
        return out_dir / "index.html", [f"{bundle}: {difference}" for difference in verified.differences]
    pages, errors = [], []
    for path in notebooks:
        if not takes_bundle(nbformat.read(path, as_version=4)):
            errors.append(f"{path}: takes no BUNDLE parameter: its page would not show the bundle; refused")
            continue
        try:
            notebook = execute_notebook(path, {"BUNDLE": str(bundle)})
            page = write_pages(notebook, path.stem, out_dir)
        except Exception as exc:  # nbclient's CellExecutionError names the cell; anything else is shown too
            errors.append(f"{path}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1]}")
            continue
        if verified.digest not in (out_dir / page.href).read_text(encoding="utf-8"):
            errors.append(
                f"{path}: its page does not state the bundle's digest sha256:{verified.digest}: refused"
            )
            continue
        pages.append(page)
    record = verified.record
    facts = {
        "folder": shown_folder(bundle),
        "digest": f"sha256:{verified.digest}",
        "approved by": f"{record.get('approver', '')}: {record.get('note', '')}",
        "verified": "ok: every hash and the recomputed decision agree",
    }
    index, created, version = (
        out_dir / "index.html",
        str(record["created_utc"]),
        str(record["kvplan_version"]),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    index.write_text(index_html(verified.decision, pages, created, version, facts), encoding="utf-8")
    return index, errors


#: The first page of the review: the decision, then the dashboards.
DECISION_PAGE = "00-decision.ipynb"

#: Voilà's port unless ``--port`` (``make review REVIEW_PORT=…``) says otherwise.
DEFAULT_PORT = 8866


def decision_html(bundle: str | Path, pages: Sequence[str]) -> str:
    """A verified ``bundle``'s decision as HTML, then a link to each dashboard (notebook file names); a bundle
    that does not verify shows its differences and no flag."""
    from kvplan.evidence.verify import verify

    verified = verify(bundle)
    links = "".join(
        f'<li><a href="{html_text(name)}">{html_text(Path(name).stem)}</a></li>' for name in pages
    )
    if verified.decision is None or not verified.ok:
        problems = "".join(f"<li>{html_text(text)}</li>" for text in verified.differences)
        return (
            f"<h2>The bundle does not verify: no decision to review</h2><ul>{problems}</ul><ol>{links}</ol>"
        )
    facts = decision_facts(verified.decision)
    flag = facts.pop("flag")
    facts["bundle"] = f"{Path(bundle).name} (sha256:{verified.digest}), verified"
    rows = _rows(facts, ' style="text-align:left;padding-right:1.5em"')
    return (
        f'<p>Deploy with</p><p style="font-family:monospace;font-size:1.3em">{html_text(flag)}</p>'
        f"<table>{rows}</table><h2>The dashboards</h2>"
        "<p>Each opens with its own live kernel: move the what-if panels' controls to ask questions.</p>"
        f"<ol>{links}</ol>"
    )


def decision_notebook(bundle: str | Path, pages: Sequence[str]):
    """The review's first page: a heading and :func:`decision_html` of ``bundle``."""
    import nbformat

    source = (
        "from IPython.display import HTML\nfrom kvplan.notebook.report import decision_html\n"
        f"HTML(decision_html({str(bundle)!r}, {list(pages)!r}))"
    )
    cells = [
        nbformat.v4.new_markdown_cell("# KV-cache budget: the decision"),
        nbformat.v4.new_code_cell(source),
    ]
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": kernel})


def prepare(out_dir: Path, bundle: Path, notebooks: Sequence[Path]) -> Path:
    """Write the served folder ``out_dir``: the decision page and each notebook with ``BUNDLE`` set."""
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    bundle = bundle.resolve()
    names = [path.name for path in notebooks]
    nbformat.write(decision_notebook(bundle, names), out_dir / DECISION_PAGE)
    for path in notebooks:
        notebook = with_parameters(nbformat.read(path, as_version=4), {"BUNDLE": str(bundle)})
        nbformat.write(notebook, out_dir / path.name)
    return out_dir


def voila_command(folder: Path, port: int = DEFAULT_PORT) -> list[str]:
    """Voilà serving ``folder`` on 127.0.0.1:``port``, code and tracebacks hidden."""
    hidden = ["--VoilaConfiguration.strip_sources=True", "--VoilaConfiguration.show_tracebacks=False"]
    served = ["--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1", *hidden, str(folder)]
    return [sys.executable, "-m", "voila", *served]


def serve(out_dir: Path, bundle: Path, notebooks: Sequence[Path], port: int = DEFAULT_PORT) -> int:
    """:func:`prepare` the review's folder and serve it with Voilà until stopped (``make review``)."""
    folder = prepare(out_dir, bundle, notebooks)
    print(f"review: http://127.0.0.1:{port}/voila/render/{DECISION_PAGE} (Ctrl-C stops it)", flush=True)
    try:
        return subprocess.run(voila_command(folder, port), check=False).returncode
    except KeyboardInterrupt:
        return 0


def run_report(argv: Sequence[str] | None = None) -> int:
    """``python -m kvplan.notebook.report OUT BUNDLE NOTEBOOK... [--serve [--port N]]``: the report (exit 0,
    or 1 with an ``error:`` line each), or review mode served until stopped."""
    parser = argparse.ArgumentParser(prog="python -m kvplan.notebook.report", description=run_report.__doc__)
    parser.add_argument("out", type=Path, help="report folder (index.html, one page per notebook)")
    parser.add_argument("bundle", type=Path, help="the evidence bundle the index shows (kvplan approve)")
    parser.add_argument("notebooks", type=Path, nargs="+", help="notebooks, in order")
    parser.add_argument("--serve", action="store_true", help="serve the notebooks live with Voilà instead")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"Voilà's port (default {DEFAULT_PORT})"
    )
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.out, args.bundle, args.notebooks, args.port)
    index, errors = build_report(args.out, args.bundle, args.notebooks)
    for error in errors:
        print(f"error: {terminal_text(error)}", file=sys.stderr)
    if not errors:
        print(f"report: {index} ({len(args.notebooks)} notebooks)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(run_report())
