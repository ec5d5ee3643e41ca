"""The docs agree with the code and with each other (sqlite-utils' test_docs idea, issue 27).

Every command and flag of ``--help`` is in ``docs/cli.md`` (add yours there when you add one); the README
stays a short first hour with links that resolve; and the contradictions a new planner met are gone: each
has a test that greps for the wrong text.
"""

import argparse
import os
import re

import pytest

from kvplan import MODELS_DIR, PROJECT_DIR
from kvplan.cli import build_parser

README = (PROJECT_DIR / "README.md").read_text()
CLI_DOC = (PROJECT_DIR / "docs" / "cli.md").read_text()
NOTEBOOKS_DOC = (PROJECT_DIR / "docs" / "notebooks.md").read_text()
NOTEBOOKS = sorted(path.stem for path in (PROJECT_DIR / "notebooks").glob("*.ipynb"))
NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
]


def _commands(parser: argparse.ArgumentParser, prefix: str = "kvplan") -> dict[str, argparse.ArgumentParser]:
    """Every command and sub-command (``kvplan fleet plan``) with its parser."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix} {name}"] = sub
                found.update(_commands(sub, f"{prefix} {name}"))
    return found


COMMANDS = _commands(build_parser())
FLAGS = sorted(
    {
        (command, option)
        for command, parser in COMMANDS.items()
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_is_documented_in_docs_cli(command):
    if command.count(" ") == 1:
        assert f"## `{command}`" in CLI_DOC
    else:
        assert f"`{command}" in CLI_DOC


@pytest.mark.parametrize(("command", "flag"), FLAGS, ids=[f"{c[7:]} {f}" for c, f in FLAGS])
def test_every_flag_of_help_is_in_docs_cli(command, flag):
    # issue 27: a flag added to a command is added to docs/cli.md too
    assert re.search(rf"{re.escape(flag)}(?![a-z0-9-])", CLI_DOC), f"{command} {flag} is not in docs/cli.md"


@pytest.mark.parametrize("name", sorted(name for name in COMMANDS if name.count(" ") == 1))
def test_command_has_help_with_an_example(name):
    parser = COMMANDS[name]
    text = parser.format_help()
    assert parser.description, f"{name} has no description"
    assert "Example:" in text or "example:" in text, f"{name} --help shows no example"


def _all_help() -> str:
    return build_parser().format_help() + "".join(parser.format_help() for parser in COMMANDS.values())


DOCS = {
    path.name: path.read_text() for path in [PROJECT_DIR / "README.md", *(PROJECT_DIR / "docs").glob("*.md")]
}


@pytest.mark.parametrize("name", sorted(DOCS))
def test_the_catalogue_is_kvplan_models_everywhere(name):
    # issue 27: budget/approve --help and notebooks 02/03 said data/models; the catalogue is kvplan/models/
    assert MODELS_DIR == PROJECT_DIR / "kvplan" / "models"
    assert "data/models" not in DOCS[name]


def test_the_catalogue_is_kvplan_models_in_help():
    text = _all_help()
    assert "data/models" not in text
    assert "kvplan/models" in text


def test_readme_counts_and_names_every_notebook():
    # issue 27: "six notebooks" while there were seven, and the table lacked 07
    count = NUMBER_WORDS[len(NOTEBOOKS)]
    assert re.search(rf"\b{count} notebooks\b", README, re.I), f"the README says how many: {count}"
    for wrong in set(NUMBER_WORDS) - {count}:
        assert not re.search(rf"\b{wrong} notebooks\b", README, re.I)
    for stem in NOTEBOOKS:
        assert stem in NOTEBOOKS_DOC, f"docs/notebooks.md lacks {stem}"
        assert stem[:2] in README


def test_readme_gives_model_paths_as_the_notebooks_read_them():
    # issue 27: "give it as an absolute path" beside a papermill example with a relative one (which works)
    for text in (README, NOTEBOOKS_DOC):
        assert "absolute path" not in text


def test_the_digest_pin_that_approve_and_verify_print_is_documented():
    assert "--approved-digest" in (PROJECT_DIR / "kvplan" / "cli" / "approve.py").read_text()
    assert "kvplan gate --approved-digest" in README or "--approved-digest" in README
    assert "--approved-digest" in CLI_DOC


def test_readme_is_a_first_hour_with_the_quickstart_on_its_first_screen():
    lines = README.splitlines()
    assert len(lines) <= 160
    first_screen = "\n".join(lines[:45])
    assert "## Quickstart on your own launch" in first_screen
    assert "docs/safe-budget.png" in "\n".join(lines[:15])
    for command in (
        "kvplan ledger",
        "kvplan budget",
        "kvplan approve",
        "kvplan verify",
        "kvplan gate",
        "kvplan export",
    ):
        assert command in README, command
    assert "## Choosing the reserve" in README


@pytest.mark.parametrize(
    "link",
    ["docs/safety.md", "docs/architecture.md", "docs/cli.md", "docs/notebooks.md", "docs/budget-json.md"],
)
def test_readme_links_the_reference(link):
    assert f"]({link})" in README


@pytest.mark.parametrize("name", sorted(DOCS))
def test_relative_links_resolve(name):
    folder = PROJECT_DIR if name == "README.md" else PROJECT_DIR / "docs"
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", DOCS[name]):
        assert (folder / target).exists(), f"{name} links {target}, which does not exist"


def test_the_first_example_reads_logs():
    # issue 27: the first examples (README, kvplan --help) used --room, not logs
    assert "--room" not in build_parser().format_help()
    first_command = re.search(r"^\s*(?:\$ )?(kvplan \w+ .*)$", README, re.M)
    assert first_command and "--room" not in first_command.group(1)


def test_the_ledger_example_in_docs_cli_is_what_kvplan_prints(capsys):
    # issue 27: the example had lost the `reason` column the table gained (issue 26); the docs show the real output
    from kvplan.cli import main

    command = "kvplan ledger data/boots/four-rank/boot.log"
    text = (PROJECT_DIR / "docs" / "cli.md").read_text()
    shown = text.split(f"$ {command}\n", 1)[1].split("```", 1)[0]
    cwd = os.getcwd()
    os.chdir(PROJECT_DIR)  # the example's relative path, as a reader types it from the checkout
    try:
        assert main(command.split()[1:]) == 0
    finally:
        os.chdir(cwd)
    assert capsys.readouterr().out == shown
