"""The model catalogue ships inside the package: a wheel installed outside the checkout sizes a model
by catalogue name (issue 10, packaging)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """kvplan installed from a freshly built wheel into a folder outside the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next((tmp / "dist").glob("kvplan_kit-*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(tmp / "site"),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return tmp


def _run(installed: Path, *argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(installed / "site")}
    result = subprocess.run(
        [sys.executable, *argv],
        cwd=installed,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def test_wheel_ships_the_catalogue(installed):
    out = _run(
        installed,
        "-c",
        "import kvplan, kvplan.io.model_config as m; "
        "print(kvplan.__file__); print(m.read_model_config('llama-3.1-70b')['num_key_value_heads'])",
    )
    where, heads = out.split()
    assert Path(where).is_relative_to(installed / "site") and heads == "8"


def test_wheel_capacity_by_catalogue_name(installed):
    # Llama-3.1-70B TP 4: 81,920 B per token, 1,310,720 B blocks; 12 GiB → 9,830 blocks = 157,280 tokens
    out = _run(
        installed,
        "-m",
        "kvplan",
        "capacity",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "4",
        "--kv-bytes",
        "12GiB",
        "--max-model-len",
        "32768",
        "--json",
    )
    data = json.loads(out)
    assert (data["blocks"], data["tokens"]) == (9_830, 157_280)
