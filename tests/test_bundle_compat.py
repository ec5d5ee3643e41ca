"""The compatibility promise: a bundle written by kvplan 0.1.0 (``tests/data/bundles/v0.1.0``) still verifies.

The fixture is ``make demo``'s approval, made with the 0.1.0 code and committed unchanged: the four-rank
boot, a 0.9 GiB reserve, Llama-3.1-70B at TP=4, both nvidia-smi snapshots, 4 × 32,768 tokens. It must verify
from any checkout location and any working directory: nothing in a bundle depends on where it lies.
"""

import shutil
from pathlib import Path

from kvplan import evidence
from kvplan.cli import main
from tests.conftest import TESTS_DATA_DIR

[V0_1_0] = (TESTS_DATA_DIR / "bundles" / "v0.1.0").iterdir()


def test_the_0_1_0_bundle_verifies(capsys):
    # 0.1.0 wrote no seal: its charts are redrawn and compared byte for byte, and a note says its
    # created_utc is pinned only by the bundle's digest
    verified = evidence.verify(V0_1_0)
    differences, notes = list(verified.differences), list(verified.notes)
    assert differences == []
    digest = evidence.bundle_digest((V0_1_0 / "budget.json").read_bytes())
    assert notes[0] == (
        "no seal_sha256 (written by kvplan 0.1.0 or before): its created_utc is not sealed; "
        f"pin the bundle with kvplan gate --approved-digest sha256:{digest}"  # issue 27: with its prefix
    )
    # charts drawn by 0.1.0 are checked by hash; where today's chart code draws other bytes, a note says so
    assert all(note.startswith("charts/") and "checked by hash only" in note for note in notes[1:])
    assert main(["verify", str(V0_1_0)]) == 0
    assert ": OK, " in capsys.readouterr().out  # issue 27: the one-word verdict


def test_it_verifies_moved_elsewhere_and_from_another_folder(tmp_path, monkeypatch):
    # the checkout's location is in no hash: a copy under another parent, verified from another cwd
    copy = Path(shutil.copytree(V0_1_0, tmp_path / "elsewhere" / V0_1_0.name))
    monkeypatch.chdir(tmp_path)
    assert evidence.verify_bundle(copy) == []


def test_it_records_relative_paths_only():
    record = evidence.read_bundle(V0_1_0)
    assert [entry["path"] for entry in record["inputs"]] == [
        "data/boots/four-rank/boot.log",
        "data/boots/four-rank/nvidia-smi-gpu.csv",
        "data/boots/four-rank/nvidia-smi-apps.csv",
        "data/models/llama-3.1-70b.json",
    ]
    # the decision is the founding example: room 12.9 GiB − 0.9 GiB reserve = 12 GiB, rounded down to whole
    # 1.25 MiB blocks: 12 GiB = 9,830.4 blocks → 9,830 × 1,310,720 B = 12,884,377,600 B
    assert record["decision"]["kv_cache_memory_bytes"] == 9_830 * 1_310_720


def test_the_group_rank_columns_added_since_0_1_0_do_not_fail_it(monkeypatch):
    # issue 26: the reader now writes pcp_rank, dcp_rank and ep_rank (the four-rank boot's Worker_TP{t}
    # names: each 0); 0.1.0 recorded none of them, so verify compares the columns it recorded
    import importlib

    from kvplan import columns, room

    verify = importlib.import_module("kvplan.evidence.verify")

    recorded = (V0_1_0 / "ledger.csv").read_text().splitlines()[0].split(",")
    fresh, _ = room.read_vllm_logs_rooms([str(V0_1_0 / "inputs" / "boot.log")])
    added = ["pcp_rank", "dcp_rank", "ep_rank"]
    assert not set(added) & set(recorded)
    assert fresh[added].values.tolist() == [[0, 0, 0]] * 4
    assert evidence.verify_bundle(V0_1_0) == []
    # without their entry in NEWER_THAN_0_1_0 the rebuilt ledger.csv would differ from the recorded bytes
    older = tuple(column for column in columns.NEWER_THAN_0_1_0 if column not in added)
    monkeypatch.setattr(verify, "NEWER_THAN_0_1_0", older)
    assert evidence.verify_bundle(V0_1_0) != []
