"""The Room rule is the core's (:mod:`kvplan.room`): the readers report what the logs say and fill a
rank's room only when given the rule, as :mod:`kvplan.room`'s readers give it."""

from kvplan import io, room
from tests.conftest import SAMPLE_LOG, GiB, MiB

ROOM_COLUMNS = ["room_bytes", "room_source"]


def test_the_reader_alone_reports_no_room_and_the_core_reader_fills_it():
    # the sample prints vLLM's --kv-cache-memory suggestion on each of its four ranks: that is each room
    raw, _ = io.read_vllm_log(SAMPLE_LOG)
    ledger, _ = room.read_vllm_log_rooms(SAMPLE_LOG)
    assert raw[ROOM_COLUMNS].isna().all().all()
    assert ledger["room_source"].tolist() == ["suggestion"] * 4
    assert ledger["room_bytes"].tolist() == ledger["suggested_full_bytes"].tolist()
    # every other column is what the log says, the same with or without the rule
    assert raw.drop(columns=ROOM_COLUMNS).equals(ledger.drop(columns=ROOM_COLUMNS))


def test_a_csv_of_parts_has_a_room_only_through_the_rule(tmp_path):
    # vLLM 0.19 (no graph estimate before sizing): room = free − (weights + activation + non-torch +
    # graphs) − vLLM's 150 MiB buffer (kvplan.room.SUGGESTION_BUFFER_BYTES) = 70 − (40 + 2 + 1 + 1) GiB − 150 MiB
    path = tmp_path / "parts.csv"
    path.write_text(
        "rank,init_free_bytes,weights_bytes,activation_peak_bytes,non_torch_bytes,cuda_graph_bytes,vllm_version\n"
        "0,70GiB,40GiB,2GiB,1GiB,1GiB,0.19.0\n"
    )
    raw, _ = io.read_ledger_csv(path)
    ledger, _ = room.read_ledger_csv_rooms(path)
    assert ledger.loc[0, "room_bytes"] == 26 * GiB - 150 * MiB
    assert (ledger.loc[0, "room_source"], ledger.loc[0, "outcome"]) == ("parts", "ok")
    # the reader alone states no room for the row, so it takes no outcome from one
    assert raw[ROOM_COLUMNS].isna().all().all() and raw.loc[0, "outcome"] == "incomplete"
