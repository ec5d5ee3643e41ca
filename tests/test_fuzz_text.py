"""Fuzz the untrusted-text escaping: generated text in every field a file writes never changes an output's structure.

Text is drawn from the hostile corpus of ``tests/test_untrusted_text.py`` cut and joined with generated
text over an alphabet heavy in markup, formula and control characters (``< > ! - [ ] ( ) | ` * _ ~ = + @``,
newlines, ESC, BEL, bidi overrides, lone surrogates). For each example, each output must keep the
structure the benign string gives: ``SUMMARY.md`` rendered to HTML elements, the report index's HTML
elements, the ledger CSV's rows and columns (and no text cell a spreadsheet runs), a command's terminal
lines (no control character), and a path under ``--out`` (inside it, whatever the host name).

Bounded for CI (``KVPLAN_FUZZ_EXAMPLES``, default 40); ``make fuzz`` runs 5,000 and prints the cases
tried and held per output (``-s``).
"""

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.checks import Check, format_checks
from kvplan.escape import FORMULA_START, is_safe_component, path_inside, safe_component
from kvplan.evidence.render import summary_markdown
from kvplan.io.ledger_frame import ledger_csv_text
from kvplan.notebook.pages import Page
from kvplan.notebook.report import index_html
from kvplan.plan import Policy, decide_rooms
from tests.conftest import GiB
from tests.test_untrusted_text import (
    BENIGN,
    CONTROL,
    HOSTILE,
    csv_rows,
    html_structure,
    markdown_structure,
    with_text,
)
from tests.test_untrusted_text import record as record  # the module's approved record (a fixture)

EXAMPLES = int(os.environ.get("KVPLAN_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="KVPLAN_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ALPHABET = st.sampled_from(
    [*"<>!-[]()|`*_~=+@#&;:/\\.\"' aZ09\n\r\t", "\x1b", "\x07", "\x00", "\x7f", "\x85", "\u202e", "\udcff"]
)
#: Text with something to show (an empty or blank field renders as an empty cell, which is not hostile).
TEXT = (
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(ALPHABET, max_size=12)), min_size=1, max_size=4)
    .map("".join)
    .filter(str.strip)
)
#: Cases per output: tried, held (structure unchanged).
COUNTS: dict[str, Counter] = {}


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    """Print the cases tried and held per output when the module ends (shown with ``-s`` or ``-rA``)."""
    yield
    for output, counts in sorted(COUNTS.items()):
        print(f"\nhostile text, {output}: tried {counts['tried']}, held {counts['held']}")


def count(output: str, held: bool) -> None:
    counts = COUNTS.setdefault(output, Counter())
    counts["tried"] += 1
    counts["held"] += held
    assert held, output


@FUZZ
@given(text=TEXT)
def test_summary_md(record, text):
    benign = summary_markdown(with_text(record, BENIGN), "b")
    hostile = summary_markdown(with_text(record, text), "b")
    count(
        "SUMMARY.md",
        markdown_structure(hostile) == markdown_structure(benign)
        and hostile.count("\n") == benign.count("\n"),
    )


DECISION = decide_rooms([13 * GiB, 18 * GiB], Policy(GiB))


@FUZZ
@given(text=TEXT)
def test_report_html(text):
    def index(value):
        pages = [Page(value, value, f"{value}.html", f"code/{value}.html")]
        return index_html(DECISION, pages, value, value, {"folder": value, "approved by": value})

    count("report index.html", html_structure(index(text)) == html_structure(index(BENIGN)))


@FUZZ
@given(text=TEXT)
def test_ledger_csv(text):
    def rows(value):
        return [{"source": value, "rank": r, "model": value, "error": value, "outcome": "ok"} for r in (0, 1)]

    benign, hostile = csv_rows(ledger_csv_text(rows(BENIGN))), csv_rows(ledger_csv_text(rows(text)))
    header = hostile[0]
    cells = [row[header.index(column)] for row in hostile[1:] for column in ("source", "model", "error")]
    count(
        "ledger CSV",
        [len(row) for row in hostile] == [len(row) for row in benign]
        and not any(cell.startswith(FORMULA_START) for cell in cells),
    )


@FUZZ
@given(text=TEXT)
def test_terminal_lines(text):
    # each check is one line at the margin (its evidence parts indented below it), then the verdict line
    shown = format_checks([Check(text, True, f"{text}; {text}"), Check("b", False, text)])
    at_margin = [line for line in shown.split("\n") if not line.startswith("      ")]
    count("terminal lines", len(at_margin) == 3 and not CONTROL.search(shown))


@FUZZ
@given(text=TEXT)
def test_paths_stay_inside_out(tmp_path_factory, text):
    out = tmp_path_factory.getbasetemp() / "fuzz-out"
    component = safe_component(text)
    path = path_inside(out, component, "boot.log")
    count("paths under --out", is_safe_component(component) and out in path.parents)
