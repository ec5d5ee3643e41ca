"""The light commands start without pandas, matplotlib or the evidence machinery (issue 15, start-up)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "numpy", "matplotlib", "kvplan.evidence", "kvplan.plan.decision", "kvplan.ledger")

#: Run one command in a fresh interpreter and print which heavy modules it left in ``sys.modules``.
PROBE = (
    "import json, sys\n"
    "from kvplan.cli import main\n"
    "status = main(sys.argv[1:])\n"
    f"print(json.dumps([status, [name for name in {HEAVY!r} if name in sys.modules]]))\n"
)


def _heavy_modules(*argv: str) -> list:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "command",
    [
        "budget --room 18.8GiB,17.6GiB,12.9GiB,16.4GiB --reserve 0.9GiB",
        "budget --room 13.1GiB,20GiB --reserve 1GiB --block-bytes 4MiB --json",
        "capacity --kv-bytes 12GiB --bytes-per-token 256KiB --max-model-len 8192 --block-size 32 --json",
        "drift --ref-free 42GiB,42GiB --ref-budget 30GiB --boot-free 41.8GiB,40.6GiB --guard 0.5GiB --json",
    ],
)
def test_light_command_imports_no_pandas(command):
    status, heavy = _heavy_modules(*command.split())
    assert status == 0
    assert heavy == []


#: What the reading commands never need: charts, the model arithmetic, bundles, the other commands' modules, and
#: the Prometheus parser (DCGM scrapes only; issue 23: 2 MiB of a `fleet plan`'s peak).
NOT_FOR_READING = ("matplotlib", "kvplan.kvspec", "kvplan.evidence", "kvplan.cli.approve", "kvplan.cli.gate")
NOT_FOR_READING += ("prometheus_client",)

#: Each command in a fresh interpreter, its output to /dev/null: its exit status and the modules of
#: :data:`NOT_FOR_READING` it left in ``sys.modules``, on stderr.
READING_PROBE = (
    "import json, sys\n"
    "from kvplan.cli import main\n"
    "status = main(sys.argv[1:])\n"
    f"found = sorted(m for m in sys.modules if m.startswith({NOT_FOR_READING!r}))\n"
    "print(json.dumps([status, found]), file=sys.stderr)\n"
)


@pytest.mark.parametrize(
    "command",
    [
        "load data/load/manual-canary-overload/server.log --year 2026 --json",
        "load data/load/manual-canary-overload/server.log --year 2026",
        "ledger data/boots/four-rank/",
        "ledger data/boots/four-rank/ --csv",
        "ledger data/boots/four-rank/ --json --rooms",
    ],
)
def test_reading_commands_import_only_what_they_need(command):
    # issue 23: `kvplan X` imports X's module alone (cli.approve cost `kvplan ledger` 0.07 s of start-up)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", READING_PROBE, *command.split()]
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    assert json.loads(done.stderr.splitlines()[-1]) == [0, []]


def test_budget_room_gives_the_pipelines_answer_without_pandas(capsys):
    # the same four-rank example through kvplan.plan.decide (pandas) and decide_rooms (none): one answer
    from kvplan.cli import main
    from kvplan.plan import Policy, decide, given_rooms
    from kvplan.units import parse_size

    assert main(["budget", "--room", "18.8GiB,17.6GiB,12.9GiB,16.4GiB", "--reserve", "0.9GiB", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    rooms = [parse_size(f"{gib}GiB") for gib in ("18.8", "17.6", "12.9", "16.4")]
    decision = decide(given_rooms(rooms), Policy(parse_size("0.9GiB")))
    expected = decision.budget.to_dict()
    for rank, source in zip(expected["ranks"], decision.room_sources):
        rank["room_source"] = source
    # issue 24: the launch (only the byte flag: rooms by hand show no free memory) and the warning saying so
    launch = {"launch_flags": [decision.budget.flag], "gpu_memory_utilization": None}
    assert printed == {**expected, **launch, "warnings": printed["warnings"]}
    assert len(printed["warnings"]) == 1 and "gpu-memory-utilization" in printed["warnings"][0]


def test_help_and_version_import_no_pandas():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for flag in ("--help", "--version"):
        code = (
            "import sys\nfrom kvplan.cli import main\n"
            "try:\n    main([sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            f"print([name for name in {HEAVY!r} if name in sys.modules])"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, flag], capture_output=True, text=True, env=env, check=True
        )
        assert done.stdout.splitlines()[-1] == "[]", flag


def test_a_table_command_starts_without_orjson():  # issue 23
    # orjson brings uuid, platform and random along (~20 ms of a 60 ms start): only the JSON writers import it
    probe = "import sys\nfrom kvplan.cli import main\nmain(sys.argv[1:])\nprint('orjson' in sys.modules)\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv, imported in (([], "False"), (["--json"], "True")):
        command = [
            sys.executable,
            "-c",
            probe,
            "budget",
            "--room",
            "13.1GiB,20GiB",
            "--reserve",
            "1GiB",
            *argv,
        ]
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
        assert done.stdout.splitlines()[-1] == imported
