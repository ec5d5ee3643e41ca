"""The evidence bundle: contents, atomic write, refusal to overwrite, and verify catching every change."""

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kvplan import evidence
from kvplan.cli import main
from kvplan.config import DATA_DIR
from kvplan.evidence import ApprovalError, BundleError, BundleExistsError, ModelLayout, Plan, Policy
from kvplan.io.model_config import resolve_model_config
from kvplan.units import parse_size
from tests.conftest import GiB

FOUR_RANK = DATA_DIR / "boots" / "four-rank" / "boot.log"
NOW = datetime(2026, 11, 29, 10, 40, tzinfo=timezone.utc)
RESERVE = parse_size("0.9GiB")
LLAMA_70B_TP4 = {"tp": 4, "pp": 1, "dcp": 1, "kv_cache_dtype": "auto", "block_size": None,
                 "vllm_version": None, "max_num_batched_tokens": None}
BLOCK_BYTES = 1_310_720  # Llama-3.1-70B at TP=4: 80 layers × 2 × 2 KV heads × 128 × 2 B × 16 tokens


def approve(out: Path, **changes) -> Path:
    """Scenario A approved with a 0.9 GiB reserve, the 70B model at TP=4 and 4 × 32,768-token plan."""
    layout = ModelLayout(resolve_model_config("llama-3.1-70b"), LLAMA_70B_TP4)
    arguments = dict(log_paths=[FOUR_RANK], out_dir=out, policy=Policy(RESERVE), approver="Ana Planner",
                     note="CHG-1234", layout=layout, plan=Plan(4, 32768), now=NOW)
    arguments.update(changes)
    return evidence.approve(**arguments)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return approve(tmp_path_factory.mktemp("evidence"))


@pytest.fixture
def copy_of_bundle(bundle, tmp_path) -> Path:
    """A private copy to tamper with (the folder name, which carries the inputs digest, is kept)."""
    return Path(shutil.copytree(bundle, tmp_path / bundle.name))


class TestBundleContents:
    def test_folder_named_by_date_and_inputs_hash(self, bundle):
        record = evidence.read_bundle(bundle)
        assert bundle.name == f"2026-11-29-{record['inputs_digest'][:12]}"
        assert sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()) == [
            "SUMMARY.md", "budget.json", "charts/concurrency.png", "charts/ledger.png",
            "charts/safe-budget.png", "charts/stranded.png", "evidence.log", "inputs/boot.log",
            "inputs/llama-3.1-70b.json", "ledger.csv",
        ]

    def test_decision_is_the_founding_example_in_whole_blocks(self, bundle):
        record = evidence.read_bundle(bundle)
        # min safe = room(12.9 GiB) − 0.9 GiB = 12 GiB (each parse_size to the nearest byte, as logged);
        # 12 GiB / 1.25 MiB = 9,830.4 → 9,830 blocks × 1,310,720 B = 12,884,377,600 B
        assert record["decision"] == {
            "kv_cache_memory_bytes": 12_884_377_600, "flag": "--kv-cache-memory-bytes=12884377600",
            "human": "12 GiB", "limiting_rank": 2, "num_blocks": 9_830,
        }
        rounding = {"block_bytes": BLOCK_BYTES, "rule": "down to whole KV blocks"}
        assert record["policy"] == {"reserve_bytes": RESERVE, "guard_bytes": 0, "assume_uniform": False,
                                    "rounding": rounding}
        rooms = [parse_size(f"{g}GiB") for g in ("18.8", "17.6", "12.9", "16.4")]
        assert [r["room_bytes"] for r in record["ranks"]] == rooms
        assert [r["safe_bytes"] for r in record["ranks"]] == [room - RESERVE for room in rooms]
        assert [r["limiting"] for r in record["ranks"]] == [False, False, True, False]
        # stranded = Σ safe − 4 × decision (includes 4 × the 0.4-block rounding loss of 524,288 B)
        assert record["stranded"]["total_bytes"] == sum(rooms) - 4 * RESERVE - 4 * 12_884_377_600
        assert record["stranded"]["rounding_loss_bytes"] == 12 * GiB - 12_884_377_600 == 524_288

    def test_reference_free_memory_per_rank_is_recorded_for_the_gate(self, bundle):
        record = evidence.read_bundle(bundle)
        # "Free memory on device (48.61/79.19 GiB) on startup" on rank 2
        assert record["ranks"][2]["init_free_bytes"] == parse_size("48.61GiB")

    def test_capacity_table_and_admission_plan(self, bundle):
        record = evidence.read_bundle(bundle)
        # 9,830 blocks × 16 = 157,280 tokens; 32,768 tokens = 2,048 blocks → 9,830 / 2,048 = 4.80 sequences
        assert record["capacity"] == [{"seq_len": 32768, "blocks": 9830, "tokens": 157_280,
                                       "max_concurrency": 9830 / 2048, "whole_sequences": 4}]
        plan = record["admission_plan"]
        # 4 × 2,048 blocks = 8,192 blocks = 131,072 tokens = 8,192 × 1.25 MiB = 10 GiB ≤ 12 GiB
        assert (plan["blocks_required"], plan["tokens_required"], plan["bytes_required"], plan["fits"]) == (
            8192, 131_072, 10 * GiB, True)

    def test_inputs_hashed_and_copied(self, bundle):
        record = evidence.read_bundle(bundle)
        log = record["inputs"][0]
        assert (log["path"], log["bundle_path"], log["role"]) == (str(FOUR_RANK), "inputs/boot.log", "log")
        assert log["sha256"] == evidence.sha256_file(FOUR_RANK)
        assert log["sha256"] == evidence.sha256_file(bundle / "inputs/boot.log")
        assert record["inputs"][1]["role"] == "model config"

    def test_key_checks_and_provenance(self, bundle):
        record = evidence.read_bundle(bundle)
        assert record["compatibility_key"]["model"] == "meta-llama/Llama-3.1-70B-Instruct"
        assert record["compatibility_key"]["tensor_parallel_size"] == 4
        assert [c["passed"] for c in record["checks"]] == [True, True, True, True]
        assert record["approver"] == "Ana Planner" and record["note"] == "CHG-1234"
        assert record["created_utc"] == "2026-11-29T10:40:00Z"

    def test_ledger_csv_and_evidence_log_quote_the_source_lines(self, bundle):
        assert (bundle / "ledger.csv").read_text().count("\n") == 5  # header + 4 ranks
        text = (bundle / "evidence.log").read_text()
        line = next(n for n, raw in enumerate(FOUR_RANK.read_text().splitlines(), 1)
                    if "Worker_TP2" in raw and "to fully utilize gpu memory" in raw)
        assert f"inputs/boot.log:{line}  boot 0  rank 2  " in text
        assert f"suggested_full_bytes = {parse_size('12.9GiB')}" in text

    def test_summary_reads_as_a_ticket(self, bundle):
        summary = (bundle / "SUMMARY.md").read_text()
        assert summary.startswith("# KV-cache budget: 12 GiB per GPU (`--kv-cache-memory-bytes=12884377600`)")
        assert "| 2 (limits) | 12.9 GiB | suggestion | 12 GiB |" in summary
        assert "**Stranded:** 14.1 GiB" in summary
        assert "| 32,768 | 9,830 | 157,280 | 4.80 |" in summary
        assert "**PASS** admission plan fits" in summary


class TestVerify:
    def test_untouched_bundle_agrees(self, bundle, capsys):
        assert evidence.verify_bundle(bundle) == []
        assert main(["verify", str(bundle)]) == 0

    def test_tampered_budget_json(self, copy_of_bundle, capsys):
        path = copy_of_bundle / "budget.json"
        record = json.loads(path.read_text())
        record["decision"]["kv_cache_memory_bytes"] = 13 * GiB
        path.write_text(json.dumps(record))
        assert "decision.kv_cache_memory_bytes: recorded 13958643712, recomputed 12884377600" in (
            evidence.verify_bundle(copy_of_bundle))
        assert main(["verify", str(copy_of_bundle)]) == 1
        assert "CHANGED" in capsys.readouterr().out

    def test_consistently_tampered_policy_is_caught_by_the_digest(self, copy_of_bundle):
        # a smaller reserve and the decision it implies: recomputation agrees, the inputs digest does not
        path = copy_of_bundle / "budget.json"
        record = json.loads(path.read_text())
        record["policy"]["reserve_bytes"] = RESERVE // 2
        path.write_text(json.dumps(record))
        assert any(d.startswith("inputs digest: recorded") for d in evidence.verify_bundle(copy_of_bundle))

    def test_changed_log(self, copy_of_bundle):
        log = copy_of_bundle / "inputs" / "boot.log"
        log.write_text(log.read_text().replace("(12.9 GiB) to fully utilize", "(13.9 GiB) to fully utilize"))
        differences = evidence.verify_bundle(copy_of_bundle)
        assert differences[0].startswith("inputs/boot.log: SHA-256 ")

    def test_removed_file(self, copy_of_bundle, capsys):
        (copy_of_bundle / "charts" / "stranded.png").unlink()
        assert evidence.verify_bundle(copy_of_bundle) == ["charts/stranded.png: missing"]
        assert main(["verify", str(copy_of_bundle), "--json"]) == 1
        assert json.loads(capsys.readouterr().out)["differences"] == ["charts/stranded.png: missing"]

    def test_added_file(self, copy_of_bundle):
        (copy_of_bundle / "notes.txt").write_text("x")
        assert evidence.verify_bundle(copy_of_bundle) == ["notes.txt: not part of the bundle as approved"]

    def test_unreadable_bundle_exits_2(self, tmp_path, capsys):
        assert main(["verify", str(tmp_path)]) == 2
        (tmp_path / "budget.json").write_text("{not json")
        with pytest.raises(BundleError, match="unreadable"):
            evidence.read_bundle(tmp_path)
        (tmp_path / "budget.json").write_text(json.dumps({"schema": "kvplan.budget", "schema_version": 99}))
        with pytest.raises(BundleError, match="schema version 99"):
            evidence.read_bundle(tmp_path)


def test_gate_refuses_a_garbled_record(bundle, tmp_path, capsys):
    folder = Path(shutil.copytree(bundle, tmp_path / bundle.name))
    record = json.loads((folder / "budget.json").read_text())
    del record["ranks"][0]["safe_bytes"]
    (folder / "budget.json").write_text(json.dumps(record))
    assert main(["gate", "--approved", str(folder), str(FOUR_RANK)]) == 2
    assert "lacks or garbles what a gate needs: KeyError('safe_bytes')" in capsys.readouterr().err


class TestWriting:
    def test_existing_bundle_is_refused_and_left_unchanged(self, bundle, capsys):
        before = {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
        with pytest.raises(BundleExistsError, match="never overwritten"):
            approve(bundle.parent)
        assert {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()} == before
        assert list(bundle.parent.iterdir()) == [bundle]  # no temporary folder left either

    @pytest.mark.parametrize("where", ["summary_markdown", "stranded_chart", "rename"])
    def test_interrupted_export_leaves_nothing(self, tmp_path, monkeypatch, where):
        # a crash while writing SUMMARY.md, while drawing the third chart, and at the final rename
        def crash(*args, **kwargs):
            raise KeyboardInterrupt("simulated crash")

        modules = {"summary_markdown": evidence, "stranded_chart": evidence.charts, "rename": evidence.os}
        target = modules[where]
        monkeypatch.setattr(target, where, crash)
        with pytest.raises(KeyboardInterrupt):
            approve(tmp_path)
        assert list(tmp_path.iterdir()) == []

    def test_plan_that_does_not_fit_writes_nothing(self, tmp_path):
        # 5 × 32,768 tokens = 10,240 blocks = 12.5 GiB > 12 GiB approved
        with pytest.raises(ApprovalError, match="admission plan fits: 5 × 32,768 tokens needs 10,240 blocks"):
            approve(tmp_path, plan=Plan(5, 32768))
        assert list(tmp_path.iterdir()) == []

    def test_tp_that_contradicts_the_logs_is_refused(self, tmp_path):
        with pytest.raises(ValueError, match="--tp 2 but the logs show tensor_parallel_size 4"):
            layout = ModelLayout(resolve_model_config("llama-3.1-70b"), {**LLAMA_70B_TP4, "tp": 2})
            approve(tmp_path, layout=layout)

    def test_without_a_model_the_value_is_not_rounded(self, tmp_path):
        record = evidence.read_bundle(approve(tmp_path, layout=None, plan=None))
        assert record["decision"]["kv_cache_memory_bytes"] == 12 * GiB  # 12.9 − 0.9 GiB, as `kvplan budget`
        assert record["capacity"] is None and record["kv_spec"] is None
        assert evidence.verify_bundle(tmp_path / record_name(record)) == []

    def test_cli_approve_then_verify(self, tmp_path, capsys):
        argv = ["approve", str(FOUR_RANK), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--tp", "4",
                "--approver", "Ana Planner", "--out", str(tmp_path), "--json"]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["decision"]["flag"] == "--kv-cache-memory-bytes=12884377600"
        assert main(["verify", out["bundle"]]) == 0
        assert main(argv) == 2  # same inputs, same day: refused
        assert "already exists" in capsys.readouterr().err

    def test_cli_plan_needs_both_halves(self, tmp_path, capsys):
        assert main(["approve", str(FOUR_RANK), "--reserve", "0.9GiB", "--seq-len", "8192",
                     "--approver", "A", "--out", str(tmp_path)]) == 2
        assert "--target-concurrency and --seq-len" in capsys.readouterr().err


def record_name(record: dict) -> str:
    return f"2026-11-29-{record['inputs_digest'][:12]}"


class TestRankZeroOnly:
    LOG = DATA_DIR / "boots" / "rank0-only" / "boot.log"

    def test_refused_naming_the_users_file(self, tmp_path):
        message = f"^{self.LOG}:\\d+: the logs show the room of local rank 0 only"
        with pytest.raises(ApprovalError, match=message):
            evidence.approve([self.LOG], tmp_path, Policy(GiB), "QA", now=NOW)
        assert list(tmp_path.iterdir()) == []

    def test_assume_uniform_is_recorded_and_verifies(self, tmp_path):
        bundle = evidence.approve([self.LOG], tmp_path, Policy(GiB, assume_uniform=True), "QA", now=NOW)
        record = evidence.read_bundle(bundle)
        assert record["policy"]["assume_uniform"] is True
        assert [r["room_source"] for r in record["ranks"]][1] == "assumed_uniform"
        assert record["ranks"][0]["room_bytes"] == record["ranks"][1]["room_bytes"]
        assert evidence.verify_bundle(bundle) == []
