"""Review mode (``make review``): the notebooks served as live dashboards by Voilà, the decision first.

:func:`prepare` writes the served folder: ``00-decision.ipynb``, the verified bundle's decision as the
report's index leads with it (:func:`kvplan.notebook.report.decision_facts`) with a link to each dashboard,
and a copy of every notebook with the bundle as its ``BUNDLE`` parameter. :func:`voila_command` serves that
folder on 127.0.0.1 with Voilà: code hidden, each page with its own live kernel, so the what-if panels move.
``python -m kvplan.notebook.review OUT BUNDLE NOTEBOOK... [--port N]`` prepares and serves until stopped.
"""

from __future__ import annotations

import argparse
import html
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from kvplan.notebook.pages import with_parameters
from kvplan.notebook.report import decision_facts

#: The first page of the review: the decision, then the dashboards.
DECISION_PAGE = "00-decision.ipynb"

#: Voilà's port unless ``--port`` (``make review REVIEW_PORT=…``) says otherwise.
DEFAULT_PORT = 8866


def decision_html(bundle: str | Path, pages: Sequence[str]) -> str:
    """The decision of a verified ``bundle`` as HTML, then a link to each dashboard (notebook file names).

    A bundle that does not verify is said plainly, with its differences, and no flag is shown.
    """
    from kvplan.evidence.verify import verify

    verified = verify(bundle)
    links = "".join(
        f'<li><a href="{html.escape(name)}">{html.escape(Path(name).stem)}</a></li>' for name in pages
    )
    if verified.decision is None or not verified.ok:
        problems = "".join(f"<li>{html.escape(text)}</li>" for text in verified.differences)
        return (
            f"<h2>The bundle does not verify: no decision to review</h2><ul>{problems}</ul><ol>{links}</ol>"
        )
    facts = decision_facts(verified.decision)
    flag = facts.pop("flag")
    facts["bundle"] = f"{Path(bundle).name} (sha256:{verified.digest}), verified"
    rows = "".join(
        f'<tr><th style="text-align:left;padding-right:1.5em">{html.escape(name)}</th>'
        f'<td style="text-align:left">{html.escape(text)}</td></tr>'
        for name, text in facts.items()
    )
    return (
        f'<p>Deploy with</p><p style="font-family:monospace;font-size:1.3em">{html.escape(flag)}</p>'
        f"<table>{rows}</table><h2>The dashboards</h2>"
        "<p>Each opens with its own live kernel: move the what-if panels' controls to ask questions.</p>"
        f"<ol>{links}</ol>"
    )


def decision_notebook(bundle: str | Path, pages: Sequence[str]):
    """The review's first page: a heading and one cell showing :func:`decision_html` of ``bundle``."""
    import nbformat

    source = (
        "from IPython.display import HTML\nfrom kvplan.notebook.review import decision_html\n"
        f"HTML(decision_html({str(bundle)!r}, {list(pages)!r}))"
    )
    return nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# KV-cache budget: the decision"),
            nbformat.v4.new_code_cell(source),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def prepare(out_dir: Path, bundle: Path, notebooks: Sequence[Path]) -> Path:
    """Write the served folder into ``out_dir``: the decision page and each notebook with ``BUNDLE`` set.

    Returns ``out_dir``. Existing pages there are replaced (the folder is the review's own).
    """
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
    """Voilà serving ``folder`` on 127.0.0.1:``port``: code hidden, no browser opened, no tracebacks shown.

    >>> voila_command(Path("build/review"), 9000)[3:6]
    ['--no-browser', '--port=9000', '--Voila.ip=127.0.0.1']
    """
    return [
        sys.executable,
        "-m",
        "voila",
        "--no-browser",
        f"--port={port}",
        "--Voila.ip=127.0.0.1",
        "--VoilaConfiguration.strip_sources=True",
        "--VoilaConfiguration.show_tracebacks=False",
        str(folder),
    ]


def serve(argv: Sequence[str] | None = None) -> int:
    """``python -m kvplan.notebook.review OUT BUNDLE NOTEBOOK... [--port N]``: serve until stopped."""
    parser = argparse.ArgumentParser(prog="python -m kvplan.notebook.review", description=serve.__doc__)
    parser.add_argument("out", type=Path, help="folder the served pages are written to")
    parser.add_argument("bundle", type=Path, help="the evidence bundle whose decision comes first")
    parser.add_argument("notebooks", type=Path, nargs="+", help="notebooks to serve, in order")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    args = parser.parse_args(argv)
    folder = prepare(args.out, args.bundle, args.notebooks)
    print(f"review: http://127.0.0.1:{args.port}/voila/render/{DECISION_PAGE} (Ctrl-C stops it)", flush=True)
    try:
        return subprocess.run(voila_command(folder, args.port), check=False).returncode
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(serve())
