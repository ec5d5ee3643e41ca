"""The CLI pauses the cyclic garbage collector for a command and leaves it as it found it; the library
readers never touch it (a Jupyter kernel runs them beside other threads)."""

import gc
import io

import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.io import read_vllm_log

# Three hundred boots of the sample four-rank launch: reading them keeps thousands of new objects (rows,
# provenance), more than the 700 after which CPython starts a young-generation collection, so an
# unpaused read collects several times.
SAMPLE = DATA_DIR / "boots" / "four-rank" / "boot.log"
BOOTS = SAMPLE.read_text() * 300


@pytest.fixture
def collections():
    """The collections CPython starts while the test runs."""
    started: list[int] = []

    def note(phase, info):
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(note)
    yield started
    gc.callbacks.remove(note)


@pytest.fixture
def boots_log(tmp_path):
    path = tmp_path / "restarts.log"
    path.write_text(BOOTS)
    return path


def test_no_collection_runs_during_a_command(boots_log, capsys, collections):
    assert main(["ledger", str(boots_log), "--csv"]) == 0
    during = len(collections)  # before anything allocates again: the collector is back on
    # 300 boots x 4 ranks, one CSV line each and the header
    assert len(capsys.readouterr().out.splitlines()) == 1 + 300 * 4
    assert during == 0


def test_the_library_reader_leaves_the_collector_alone(collections):
    # the control, and the rule: the same read through the library collects as any code does
    ledger, _ = read_vllm_log(io.BytesIO(BOOTS.encode()))
    assert len(ledger) == 300 * 4
    assert len(collections) >= 2


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_found(enabled, boots_log, tmp_path, capsys):
    (gc.enable if enabled else gc.disable)()
    try:
        assert main(["ledger", str(boots_log), "--json"]) == 0
        assert gc.isenabled() is enabled
        binary = tmp_path / "binary.log"
        binary.write_bytes(b"\x00binary")
        assert main(["ledger", str(binary)]) == 2  # a refused read restores it too
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    capsys.readouterr()
