"""The report's notebook pages: each notebook run once, exported for readers (``<name>.html``: no code, PNGs
with alt text, nothing from a CDN) and for auditors (``code/<name>.html``: with code)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Output types a page may show, best first: no widget view (it needs a kernel), so a panel shows its snapshot.
DISPLAY_PRIORITY = (
    "text/html",
    "text/markdown",
    "image/svg+xml",
    "text/latex",
    "image/png",
    "image/jpeg",
    "text/plain",
)

#: The page template: JupyterLab's, with no script from a CDN, alt text on every PNG and tables that fit.
TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block extra_css %}
<style type="text/css">
main { max-width: 1400px; margin: 0 auto; }
.jp-OutputArea-output { overflow-x: auto; }
main .jp-RenderedHTMLCommon table { font-size: 11px; table-layout: auto; }
main .jp-RenderedHTMLCommon td { padding: 0.3em 0.5em; overflow-wrap: anywhere; max-width: 40em; }
.jp-RenderedText pre { white-space: pre-wrap; overflow-wrap: anywhere; }
main .jp-RenderedHTMLCommon th { padding: 0.3em 0.5em; }
.jp-RenderedImage img, .kvplan-snapshot img { max-width: 100%; height: auto; }
.kvplan-back { font-family: sans-serif; margin: 0.5em 0 1em; }
</style>
{% endblock extra_css %}
{%- block body_header -%}
{{ super() }}
<p class="kvplan-back"><a href="{{ resources.kvplan_index }}">← kvplan report</a>{{ resources.kvplan_other }}</p>
{%- endblock body_header -%}
{% block data_png scoped %}
{%- set alt = output.metadata.get('image/png', {}).get('alt') -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="
{%- if 'image/png' in output.metadata.get('filenames', {}) -%}
{{ output.metadata.filenames['image/png'] | posix_path | escape_html }}
{%- else -%}
data:image/png;base64,{{ output.data['image/png'] | escape_html }}
{%- endif -%}"
{%- if alt %} alt="{{ alt | escape_html }}"{% endif %}>
</div>
{% endblock data_png %}
"""

_MARKER = re.compile(r"^\s*# NBVAL_[A-Z_]+\s*\n?", re.MULTILINE)


@dataclass(frozen=True)
class Page:
    """A notebook's pages in the report: its title, the reader's page and the auditor's."""

    name: str
    title: str
    href: str
    code_href: str


def notebook_title(notebook) -> str:
    """The notebook's first Markdown heading without its ``#``, else ""."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


def without_markers(notebook):
    """A copy of a notebook without its ``# NBVAL_…`` test markers."""
    stripped = copy.deepcopy(notebook)
    for cell in stripped.cells:
        if cell.cell_type == "code":
            cell.source = _MARKER.sub("", cell.source)
    return stripped


def with_parameters(notebook, values: Mapping[str, object]):
    """A copy of a notebook with ``values`` set after its ``parameters`` cell (papermill's way), those it sets."""
    import nbformat

    changed = copy.deepcopy(notebook)
    for index, cell in enumerate(changed.cells):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            names = [
                name for name in values if re.search(rf"^{re.escape(name)}\s*=", cell.source, re.MULTILINE)
            ]
            if names:
                source = "\n".join(f"{name} = {values[name]!r}" for name in names)
                injected = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
                changed.cells.insert(index + 1, injected)
            break
    return changed


def without_machine_paths(notebook, roots: Mapping[str, str]):
    """A copy of a notebook whose outputs name no folder of this machine."""
    cleaned = copy.deepcopy(notebook)
    for cell in cleaned.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = without_roots(output["text"], roots)
            for kind, value in output.get("data", {}).items():
                if kind.startswith("text/") and isinstance(value, str):
                    output["data"][kind] = without_roots(value, roots)
    return cleaned


def without_roots(text: str, roots: Mapping[str, str]) -> str:
    """``text`` with each of ``roots`` (a folder) replaced by its short name, longer roots first."""
    for root, name in sorted(roots.items(), key=lambda item: -len(item[0])):
        text = text.replace(root, name)
    return text


def shown_folder(path: str | Path) -> str:
    """A folder as a page names it: from its short root, else by its name alone."""
    absolute = str(Path(path).absolute())
    shown = without_roots(absolute, machine_roots())
    return f"…/{Path(path).name}" if shown == absolute else shown


def machine_roots() -> dict[str, str]:
    """The folders a page must not name, by short name: the project's, the temporary and the home folder."""
    import tempfile

    from kvplan import DATA_DIR

    return {
        f"{DATA_DIR.parent}/": "",
        f"{Path(tempfile.gettempdir()).resolve()}/": "$TMPDIR/",
        f"{tempfile.gettempdir()}/": "$TMPDIR/",
        f"{Path.home()}/": "~/",
    }


def execute_notebook(path: Path, parameters: Mapping[str, object] | None = None, timeout_s: int = 300):
    """The notebook at ``path`` run in its folder by a fresh kernel with ``parameters`` set; a failing cell
    raises nbclient's ``CellExecutionError``."""
    import nbformat
    from nbclient import NotebookClient

    notebook = with_parameters(nbformat.read(path, as_version=4), parameters or {})
    client = NotebookClient(
        notebook,
        timeout=timeout_s,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=False,
        extra_arguments=["--IPKernelApp.log_level=CRITICAL"],  # its own log; cell errors come back as errors
    )
    client.log.setLevel("ERROR")
    client.execute()
    return notebook


def _exporter(with_code: bool):
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    config = Config()
    config.NbConvertBase.display_data_priority = list(DISPLAY_PRIORITY)
    hidden = {
        "exclude_input": not with_code,
        "exclude_input_prompt": not with_code,
        "exclude_output_prompt": True,
    }
    loader = DictLoader({"kvplan-page.html.j2": TEMPLATE})
    exporter = HTMLExporter(
        config=config,
        template_name="lab",
        extra_loaders=[loader],
        template_file="kvplan-page.html.j2",
        **hidden,
    )
    exporter.log.setLevel("ERROR")
    if not with_code:
        exporter.register_preprocessor("nbconvert.preprocessors.ExtractOutputPreprocessor", enabled=True)
    return exporter


def write_pages(notebook, name: str, out_dir: Path) -> Page:
    """Write an executed notebook's reader page (``name.html``, PNGs in ``name_files/``) and auditor page
    (``code/name.html``), each linking to the index and the other, naming no folder of this machine."""
    (out_dir / "code").mkdir(parents=True, exist_ok=True)
    notebook = without_machine_paths(notebook, machine_roots())
    reader, resources = _exporter(with_code=False).from_notebook_node(
        notebook,
        resources={
            "metadata": {"name": name},
            "output_files_dir": f"{name}_files",
            "kvplan_index": "index.html",
            "kvplan_other": f' · <a href="code/{name}.html">show code</a>',
        },
    )
    (out_dir / f"{name}.html").write_text(reader, encoding="utf-8")
    for filename, data in resources.get("outputs", {}).items():
        target = out_dir / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    auditor, _ = _exporter(with_code=True).from_notebook_node(
        without_markers(notebook),
        resources={
            "metadata": {"name": name},
            "kvplan_index": "../index.html",
            "kvplan_other": f' · <a href="../{name}.html">hide code</a>',
        },
    )
    (out_dir / "code" / f"{name}.html").write_text(auditor, encoding="utf-8")
    return Page(name, notebook_title(notebook) or name, f"{name}.html", f"code/{name}.html")
