"""The README's quickstart, run literally on a copy of ``data/boots/four-rank/`` named ``mylaunch/`` (issue 27).

Every ``kvplan`` line of the quickstart's command blocks is run as written, by a shell, in a fresh folder
holding only ``mylaunch/``; the ``vllm`` and ``nvidia-smi`` lines are what produced the sample's files.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

from kvplan import DATA_DIR, PROJECT_DIR
from kvplan.cli import build_parser

README = (PROJECT_DIR / "README.md").read_text()


def quickstart_commands() -> list[str]:
    """The ``kvplan`` command lines of the README's quickstart, continuation lines joined."""
    section = README.split("## Quickstart on your own launch", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in lines if line.startswith("kvplan ")]


def _registered(command: str) -> bool:
    action = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    return command.split()[1] in action.choices


def test_the_quickstart_runs_end_to_end(tmp_path):
    commands = quickstart_commands()
    assert [c.split()[1] for c in commands] == ["ledger", "budget", "approve", "verify", "export", "gate"]
    shutil.copytree(DATA_DIR / "boots" / "four-rank", tmp_path / "mylaunch")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kvplan").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kvplan "$@"\n')
    (bin_dir / "kvplan").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(PROJECT_DIR),
    }
    outputs, not_yet = {}, []
    for command in commands:
        if not _registered(command):  # `kvplan export` (issue 24) lands separately
            not_yet.append(command)
            continue
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs[command.split()[1]] = done.stdout
    # the sample's known answer: rank 2's 12.9 GiB − 0.9 GiB = 12 GiB → 9,830 blocks of 1,310,720 B
    assert "--kv-cache-memory-bytes=12884377600" in outputs["budget"]
    assert "11.99 GiB per GPU (limiting rank 2)" in outputs["budget"]  # never rounded up to 12 GiB
    assert re.search(r"^bundle\s+evidence/\d{4}-\d\d-\d\d-[0-9a-f]{12}$", outputs["approve"], re.M)
    assert re.search(r"^evidence/\S+: OK, ", outputs["verify"])
    assert outputs["gate"].splitlines()[-1].startswith("gate: PASS")
    if not_yet:
        pytest.xfail(f"not on main yet: {not_yet}")
