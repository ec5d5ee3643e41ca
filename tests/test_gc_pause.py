"""The CLI pauses the cyclic garbage collector for a command and leaves it as it found it; the library
readers never touch it (a Jupyter kernel runs them beside other threads)."""

import gc
import io
import os
import sys

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


def test_the_process_command_leaves_what_is_left_to_the_exit(monkeypatch, capsys):  # issue 23
    # run as the process's own command (no argv: sys.argv), main freezes the objects left so that the
    # interpreter's exit does not trace them again (~0.1 CPU s of `kvplan load` with pandas loaded);
    # called with an argv (a test, a notebook), it freezes nothing
    monkeypatch.setattr(sys, "argv", ["kvplan", "load"])
    before = gc.get_freeze_count()
    try:
        assert main(["load"]) == 2  # no files: refused
        assert gc.get_freeze_count() == before
        assert main() == 2
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
    capsys.readouterr()


def test_numpy_blas_runs_one_thread_unless_told(monkeypatch, capsys):  # issue 23
    # numpy's OpenBLAS threads spin after import (~0.05 CPU s a command) and kvplan does no BLAS work;
    # a value the user set is kept
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert main(["load"]) == 2
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert main(["load"]) == 2
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
    capsys.readouterr()
