"""Every command is documented in the README and has --help text (sqlite-utils' test_docs idea)."""

import argparse
from pathlib import Path

import pytest

from kvplan.cli import build_parser

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_command_is_documented_in_readme(name):
    assert f"### `kvplan {name}`" in README


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_command_has_help_with_an_example(name):
    parser = _subcommands()[name]
    text = parser.format_help()
    assert parser.description, f"kvplan {name} has no description"
    assert "Example:" in text or "example:" in text, f"kvplan {name} --help shows no example"
