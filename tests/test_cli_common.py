"""The CLI's shared helpers (issue 23: worked examples moved from their docstrings, checked here)."""

import argparse
import warnings

from kvplan.cli import build_parser
from kvplan.cli.common import describe, labels, reader_warnings_into, size_list
from kvplan.cli.ledger import _reason, short_names
from kvplan.ledger import LedgerWarning


def test_drift_parses_its_per_rank_lists():  # issue 23
    argv = [
        "drift",
        "--ref-free",
        "42GiB",
        "--ref-budget",
        "30GiB",
        "--boot-free",
        "40.75GiB",
        "--guard",
        "0.5GiB",
    ]
    assert sorted(build_parser().parse_args(argv).__dict__)[:3] == ["block_bytes", "boot_free", "command"]


def test_describe_rewraps_prose_and_keeps_examples():  # issue 23
    page = "The sum of A\nand B.\n\nFor example:\n  kvplan add 1 2\n"
    added = describe(argparse.ArgumentParser(prog="kvplan add"), page)
    assert added.description == "The sum of A and B."
    assert added.format_help().splitlines()[-1] == "  kvplan add 1 2"


def test_size_list_and_labels():  # issue 23
    assert size_list("13GiB,14GiB") == [13 * 2**30, 14 * 2**30]
    assert labels("gpu-1, gpu-2,") == ("gpu-1", "gpu-2")


def test_reader_warnings_are_collected_once():  # issue 23
    notes: list[str] = []
    with reader_warnings_into(notes):
        warnings.warn(LedgerWarning("rank 1 shows no room"), stacklevel=1)
        warnings.warn(LedgerWarning("rank 1 shows no room"), stacklevel=1)
    assert notes == ["rank 1 shows no room"]


def test_short_names_tell_files_apart():  # issue 23
    assert short_names(["data/a/boot.log", "data/b/boot.log", "data/b/restart.log"]) == {
        "data/a/boot.log": "a/boot.log",
        "data/b/boot.log": "b/boot.log",
        "data/b/restart.log": "restart.log",
    }
    # 12 characters: "…" and the last 11
    assert short_names(["logs/" + "x" * 30 + ".log"], width=12) == {
        "logs/" + "x" * 30 + ".log": "…xxxxxxx.log"
    }


def test_reason_of_a_row_in_a_few_words():  # issue 26
    cut = {
        "outcome": "incomplete",
        "error": "the log stops before the KV cache was sized (last line read: 40)",
    }
    assert _reason(cut) == "cut before KV sizing"
    oom = {"outcome": "oom", "error": "torch.OutOfMemoryError: …", "failed_in": "capture_model"}
    assert _reason(oom) == "OOM in capture_model"
    assert _reason({"outcome": "ok", "error": None}) == "-"
