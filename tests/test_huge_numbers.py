"""Numbers no vLLM line or argument can hold (issue 25): each refused in one ``error:`` line that names
the file, the line and what was expected, exit 2; never a traceback, never ``Infinity`` in a budget.

The logs are the four-rank boot (vLLM 0.19 lines, ``data/boots/four-rank/boot.log``) with one figure of one
line made huge; 10^23 is beyond a 64-bit integer (2^63 ≈ 9.2·10^18) and beyond 8 EiB in GiB.
"""

from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.cli.common import CliError, print_json

BOOT = Path(__file__).resolve().parents[1] / "data" / "boots" / "four-rank" / "boot.log"
HUGE = "99999999999999999999999"  # 10^23 - 1


def edited(tmp_path: Path, number: int, old: str, new: str) -> Path:
    """The boot log with ``old`` replaced by ``new`` on line ``number`` (from 1)."""
    lines = BOOT.read_text().splitlines(keepends=True)
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new)
    path = tmp_path / "boot.log"
    path.write_text("".join(lines))
    return path


def refusal(capsys, argv: list[str]) -> str:
    """The one error line of a refused command (exit 2; argparse's refusals exit through SystemExit)."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize(
    ("number", "old", "new", "expected"),
    [
        (62, "155,856 tokens", f"{HUGE} tokens", "kv_cache_tokens=" + HUGE),  # GPU KV cache size
        (5, "max_num_batched_tokens=8192", f"max_num_batched_tokens={HUGE}", "max_num_batched_tokens="),
        (74, "pid=48602", f"pid={HUGE}", "expected at most 4,194,304"),  # Linux's PID_MAX_LIMIT, 2^22
        (2, "'max_num_seqs': 256", f"'max_num_seqs': 256, 'block_size': {HUGE}", "block_size="),
        (74, "(54.5/79.19 GiB)", f"({HUGE}.5/79.19 GiB)", "expected a GPU memory figure of at most 16 TiB"),
        (74, "(54.5/79.19 GiB)", f"(54.5/{HUGE}.19 GiB)", "expected a GPU memory figure of at most 16 TiB"),
        (38, "took 32.86 GiB", f"took {HUGE}.86 GiB", "expected a GPU memory figure of at most 16 TiB"),
    ],
)
def test_a_huge_figure_in_a_vllm_line_names_its_file_and_line(tmp_path, capsys, number, old, new, expected):
    # issue 25: these were "a number in the input is too large to hold (Python int too large to convert
    # to C long)" or "not a size: '…GiB'", naming neither file nor line
    path = edited(tmp_path, number, old, new)
    error = refusal(capsys, ["budget", str(path), "--reserve", "0.9GiB"])
    assert error.startswith(f"error: {path}:{number}: ") and expected in error, error
    assert "expected" in error


@pytest.mark.parametrize("utilization", ["1e999", "nan", "0", "1.5"])
def test_a_utilization_outside_zero_to_one_is_refused_at_the_reader(tmp_path, capsys, utilization):
    # issue 25: 'gpu_memory_utilization': 1e999 in the non-default args line was approved and budget.json
    # held Infinity (not JSON); vLLM itself accepts only a fraction in (0, 1]
    path = edited(tmp_path, 2, "'gpu_memory_utilization': 0.6", f"'gpu_memory_utilization': {utilization}")
    out = tmp_path / "out"
    argv = ["approve", str(path), "--reserve", "0.9GiB", "--approver", "t", "--out", str(out)]
    error = refusal(capsys, argv)
    assert error.startswith(f"error: {path}:2: gpu_memory_utilization=") and "(0, 1]" in error, error
    assert not list(out.glob("**/budget.json"))


@pytest.mark.parametrize(
    "argv",
    [
        ["capacity", "--kv-bytes", "12GiB", "--bytes-per-token", "256KiB", "--max-model-len", HUGE, "--json"],
        [
            "budget",
            str(BOOT),
            "--reserve",
            "0.9GiB",
            "--model",
            "llama-3.1-70b",
            "--max-model-len",
            HUGE,
            "--json",
        ],
        ["capacity", "--kv-bytes", "17TiB", "--bytes-per-token", "256KiB", "--max-model-len", "8192"],
        ["budget", "--room", "12GiB,99999TiB", "--reserve", "1GiB"],
    ],
)
def test_an_argument_beyond_any_gpu_is_an_argument_error(capsys, argv):
    # issue 25: a 10^23 --max-model-len reached orjson: "TypeError: Integer exceeds 64-bit range", exit 1.
    # Whole numbers and sizes are bounded by 2^44 (16 TiB in bytes, 17,592,186,044,416 tokens)
    error = refusal(capsys, argv)
    assert "is out of range: expected at most 17,592,186,044,416" in error, error


def test_the_json_writer_refuses_a_number_beyond_64_bits():
    # issue 25: the writer's last line of defence: a CliError (one error: line, exit 2), no TypeError
    with pytest.raises(CliError, match="cannot be written as JSON"):
        print_json({"tokens": 2**64})
