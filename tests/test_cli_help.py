"""Every ``--help`` page: its examples are runnable commands, one per line, never re-wrapped."""

import argparse
import shlex

import pytest

from kvplan.cli import build_parser
from kvplan.cli.common import EXAMPLES_HEADING


def _pages(parser: argparse.ArgumentParser | None = None, name: str = "kvplan") -> dict:
    """Every help page by its command line: kvplan, kvplan budget, ..., kvplan fleet plan."""
    parser = parser or build_parser()
    pages = {name: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                pages.update(_pages(sub, f"{name} {sub_name}"))
    return pages


def _examples(text: str) -> list[str]:
    """The indented lines under the examples heading of a help page."""
    lines = text.splitlines()
    start = lines.index(EXAMPLES_HEADING) + 1
    return [line.strip() for line in lines[start:] if line.startswith("  ")]


@pytest.mark.parametrize("page", sorted(_pages()))
def test_every_example_parses_as_one_command(page, monkeypatch):
    # a terminal of 60 columns: argparse re-wraps prose to it, so a re-wrapped example would break in two
    monkeypatch.setenv("COLUMNS", "60")
    examples = _examples(_pages()[page].format_help())
    assert examples, f"{page} --help shows no example"
    command = page.split()[1:]
    for example in examples:
        argv = shlex.split(example)
        assert argv[0] == "kvplan", example
        args = build_parser().parse_args(argv[1:])  # argparse exits 2 on anything it cannot take
        assert [args.command, getattr(args, "fleet_command", None)][
            : len(command)
        ] == command or page == "kvplan"


def test_capacity_help_says_one_of_bytes_per_token_or_model_is_required():
    text = " ".join(_pages()["kvplan capacity"].format_help().split())
    assert "Give exactly one of --bytes-per-token or --model (one of them is required)" in text
    assert "--max-model-len 8192" in text  # the example the old wrapping split into "--max-" / "model-len"


def test_drift_help_says_the_lists_are_per_rank():
    parser = _pages()["kvplan drift"]
    text = " ".join(parser.format_help().split())
    assert "lists per rank: comma-separated sizes in rank order" in text
    options = {action.option_strings[0]: action for action in parser._actions if action.option_strings}
    for flag in ("--ref-free", "--ref-budget", "--boot-free"):
        assert f"{flag} SIZE,..." in text
        assert options[flag].help.endswith("per rank (comma-separated, rank order)")


def test_kv_cache_dtype_names_are_shown_and_checked():
    text = " ".join(_pages()["kvplan capacity"].format_help().split())
    assert "one of auto, bfloat16, float16, fp8," in text
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(
            ["capacity", "--kv-bytes", "1GiB", "--max-model-len", "8", "--kv-cache-dtype", "fp7"]
        )
    assert exit_info.value.code == 2
