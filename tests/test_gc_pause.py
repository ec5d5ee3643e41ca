"""The reader pauses the cyclic garbage collector while it reads, and leaves it as it found it."""

import gc
import io

import pytest

from kvplan.config import DATA_DIR
from kvplan.io.gc_pause import gc_paused
from kvplan.io.vllm.read import LogParseError, read_vllm_log, read_vllm_logs

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


class WatchedLog(io.BytesIO):
    """A log stream that notes, at each read, how many collections have started so far."""

    def __init__(self, data: bytes, started: list[int]) -> None:
        super().__init__(data)
        self.started, self.seen = started, []

    def read(self, size: int = -1) -> bytes:
        self.seen.append(len(self.started))
        return super().read(size)


def test_no_collection_runs_during_a_read(collections):
    log = WatchedLog(BOOTS.encode(), collections)
    ledger, _ = read_vllm_log(log)
    # the lines are read and their boot built between the first read and the last (end of file)
    assert len(ledger) == 300 * 4 and len(log.seen) >= 2 and log.seen[0] == log.seen[-1]


def test_the_same_read_unpaused_collects(collections):
    # the control: the same read does start collections when the collector runs
    log = WatchedLog(BOOTS.encode(), collections)
    read_vllm_log.__wrapped__(log)
    # a few are enough to show it (fewer objects a line are made than when this test was written)
    assert log.seen[-1] - log.seen[0] >= 2


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_found(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        read_vllm_log(SAMPLE)
        read_vllm_logs([SAMPLE, SAMPLE])
        assert gc.isenabled() is enabled
        with pytest.raises(LogParseError):  # a refused read restores it too
            read_vllm_log(b"\x00binary")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()


def test_pauses_nest():
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
