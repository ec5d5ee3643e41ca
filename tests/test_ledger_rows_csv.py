"""``kvplan ledger --csv`` writes rows straight to CSV (no frame): the bytes pandas writes of the ledger.

The expected text is always pandas' own (``to_csv`` of the frame the readers build), never a literal:
the streamed path must match it for every sample and test log, for mutated copies of them, for mixed
ledger CSV input and for rows whose cells are not their column's native type.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.io.ledger_frame import ledger_csv_text, ledger_frame
from kvplan.notes import aggregate_notes
from kvplan.room import read_vllm_logs_rooms

ROOT = DATA_DIR.parent
LOGS = sorted({*ROOT.glob("data/**/*.log"), *ROOT.glob("tests/data/**/*.log")})


def _frame_path(paths: list[str]) -> tuple[str, str]:
    """What ``kvplan ledger --csv`` printed before it streamed: pandas' CSV of the ledger, and the
    warnings as the CLI prints them (a ledger without rows is refused)."""
    ledger, metadata = read_vllm_logs_rooms(paths)
    if ledger.empty:
        raise ValueError("no boot: the CLI refuses the logs")
    warnings = "".join(f"warning: {note}\n" for note in aggregate_notes(list(metadata.warnings)))
    return ledger.to_csv(index=False), warnings


def _cli_csv(paths: list[str], capsys) -> tuple[int, str, str]:
    code = main(["ledger", *paths, "--csv"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _mutants(data: bytes, seed: int) -> list[bytes]:
    """A sample log twice (a restart), cut mid-line, with CRLF and colour codes, with digits changed."""
    rnd = random.Random(seed)
    lines = data.split(b"\n")
    coloured = [b"\x1b[32m" + line + b"\x1b[0m" if i % 3 else line + b"\r" for i, line in enumerate(lines)]
    digits = bytes(b if not 48 <= b <= 57 or rnd.random() > 0.05 else rnd.randrange(48, 58) for b in data)
    return [data + data, data[: rnd.randrange(1, max(2, len(data)))], b"\n".join(coloured), digits]


def _expected_or_refusal(paths: list[str]) -> tuple[str, str] | None:
    try:
        return _frame_path(paths)
    except Exception:  # a log the reader refuses: the CLI refuses it too (checked below)
        return None


@pytest.mark.parametrize("log", LOGS, ids=[str(log.relative_to(ROOT)) for log in LOGS])
def test_the_streamed_csv_is_pandas_csv_of_the_ledger_for_every_log_and_its_mutants(log, tmp_path, capsys):
    paths = [log]
    for index, data in enumerate(_mutants(log.read_bytes(), len(log.name))):
        mutant = tmp_path / f"m{index}.log"
        mutant.write_bytes(data)
        paths.append(mutant)
    for path in paths:
        expected = _expected_or_refusal([str(path)])
        code, out, err = _cli_csv([str(path)], capsys)
        if expected is None:
            assert (code, out) == (2, "") and err.startswith("error: "), path
            continue
        assert code == 0, err
        assert (out, err) == expected, path


def test_many_logs_and_a_ledger_csv_stream_in_file_order(tmp_path, capsys):
    four = DATA_DIR / "boots" / "four-rank" / "boot.log"
    ledger_csv = tmp_path / "ledger.csv"
    read_vllm_logs_rooms([str(LOGS[0])])[0].to_csv(ledger_csv, index=False)
    paths = [str(four), str(ledger_csv), str(LOGS[0]), str(four)]
    code, out, err = _cli_csv(paths, capsys)
    assert code == 0
    assert (out, err) == _frame_path(paths)


def test_a_log_without_a_boot_is_refused_with_nothing_on_stdout(tmp_path, capsys):
    empty = tmp_path / "empty.log"
    empty.write_text("INFO 01-01 00:00:00 [api.py:1] hello\n")
    code, out, err = _cli_csv([str(empty)], capsys)
    assert (code, out) == (2, "")
    assert "no vLLM boot found" in err


ODD_ROWS = [
    [{"rank": 0, "num_gpu_blocks": 4.0}],  # a whole float in a count column: pandas writes 4
    [{"rank": 0, "gpu_memory_utilization": 1}],  # an int in a fraction column: pandas writes 1.0
    [{"rank": 0, "gpu_memory_utilization": float("nan")}],  # NaN is missing, not "nan"
    [{"rank": 0, "model": 7}],  # a number in a text column is its text
    [{"rank": 0, "enforce_eager": 1}],  # a number in a flag column
    [{"rank": 0, "rank_extra": 1, "model": 'a "quoted", \n two-line name'}],
    [{"rank": 0, "room_bytes": pd.NA, "outcome": None}, {"rank": 1, "room_bytes": 12 << 30}],
    [],
]


@pytest.mark.parametrize("rows", ODD_ROWS)
def test_rows_of_any_cell_types_are_written_as_pandas_writes_their_frame(rows):
    assert ledger_csv_text(rows) == ledger_frame(rows).to_csv(index=False)
    assert ledger_csv_text(rows, header=False) == ledger_frame(rows).to_csv(index=False, header=False)


@pytest.mark.parametrize("missing", [None, pd.NA])
def test_a_count_beyond_int64_is_refused_as_the_frame_refuses_it(missing):
    rows = [{"rank": 0, "num_gpu_blocks": missing}, {"rank": 1, "num_gpu_blocks": 2**63}]
    with pytest.raises((OverflowError, TypeError, ValueError)) as by_frame:
        ledger_frame(rows)
    with pytest.raises(type(by_frame.value)):
        ledger_csv_text(rows)
