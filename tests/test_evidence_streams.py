"""evidence.log made from the reader's compact rows is the one made from the provenance frame, and the record
approve_bundle returns is budget.json as it reads back."""

from __future__ import annotations

import json

import pytest

from kvplan import DATA_DIR, evidence, plan
from kvplan.evidence.record import record_chunks
from kvplan.evidence.render import evidence_lines
from kvplan.room import read_vllm_logs_rooms

LOGS = sorted((DATA_DIR / "boots").glob("*/*.log"))


@pytest.mark.parametrize("log", LOGS, ids=lambda path: path.parent.name)
def test_compact_rows_give_the_frames_evidence_log(log, monkeypatch) -> None:
    _, metadata = read_vllm_logs_rooms([log])
    monkeypatch.setattr("kvplan.evidence.render.READ_BACK_ROWS", 7)  # many batches, runs across them
    streamed = list(evidence_lines(metadata.compact_provenance(), metadata.raw_lines))
    assert streamed == list(evidence_lines(metadata.provenance))
    assert any(
        line.startswith("    ") and "not a log line" not in line for line in streamed
    )  # raw lines read


def test_approve_bundle_returns_what_budget_json_reads_back(tmp_path) -> None:
    folder, record = evidence.approve_bundle(
        evidence.Request(
            [DATA_DIR / "boots" / "four-rank" / "boot.log"], tmp_path, plan.Policy(2**30), "test"
        )
    )
    assert json.loads(json.dumps(record)) == evidence.read_bundle(folder)


def test_record_chunks_stream_budget_json(tmp_path) -> None:  # issue 23: approve's peak at 5,000 boots
    _, record = evidence.approve_bundle(
        evidence.Request([DATA_DIR / "boots" / "four-rank" / "boot.log"], tmp_path, plan.Policy(2**30), "t")
    )
    record = {**record, "ledger": record["ledger"] * 2_000}  # the ledger rows of 2,000 such boots
    pieces = list(record_chunks(record))
    assert b"".join(pieces) == json.dumps(record, indent=2).encode() + b"\n"
    assert max(map(len, pieces)) < sum(map(len, pieces)) / 100  # never the whole text at once
