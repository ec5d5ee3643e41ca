"""The evidence bundle: contents, atomic write, refusal to overwrite, and verify catching every change."""

import json
import os
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kvplan import DATA_DIR, __version__, charts, evidence
from kvplan.cli import main
from kvplan.evidence import AdmissionPlan, ApprovalError, BundleError, BundleExistsError, ModelLayout, Policy
from kvplan.io.model_config import resolve_model_config
from kvplan.units import parse_size
from tests.conftest import GiB, MiB

FOUR_RANK = DATA_DIR / "boots" / "four-rank" / "boot.log"
NOW = datetime(2026, 11, 29, 10, 40, tzinfo=timezone.utc)
RESERVE = parse_size("0.9GiB")
LLAMA_70B_TP4 = {
    "tp": 4,
    "pp": 1,
    "dcp": 1,
    "kv_cache_dtype": "auto",
    "block_size": None,
    "vllm_version": None,
    "max_num_batched_tokens": None,
}
BLOCK_BYTES = 1_310_720  # Llama-3.1-70B at TP=4: 80 layers × 2 × 2 KV heads × 128 × 2 B × 16 tokens


def approve(out: Path, **changes) -> Path:
    """Scenario A approved with a 0.9 GiB reserve, the 70B model at TP=4 and 4 × 32,768-token plan."""
    layout = ModelLayout(resolve_model_config("llama-3.1-70b"), LLAMA_70B_TP4)
    arguments = dict(
        log_paths=[FOUR_RANK],
        out_dir=out,
        policy=Policy(RESERVE),
        approver="Ana Planner",
        note="CHG-1234",
        layout=layout,
        plan=AdmissionPlan(4, 32768),
        now=NOW,
    )
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
            "SUMMARY.md",
            "budget.json",
            "charts/concurrency.png",
            "charts/ledger.png",
            "charts/safe-budget.png",
            "charts/stranded.png",
            "evidence.log",
            "inputs/boot.log",
            "inputs/llama-3.1-70b.json",
            "ledger.csv",
        ]

    def test_decision_is_the_founding_example_in_whole_blocks(self, bundle):
        record = evidence.read_bundle(bundle)
        # min safe = room(12.9 GiB) − 0.9 GiB = 12 GiB (each parse_size to the nearest byte, as logged);
        # 12 GiB / 1.25 MiB = 9,830.4 → 9,830 blocks × 1,310,720 B = 12,884,377,600 B
        assert record["decision"] == {
            "kv_cache_memory_bytes": 12_884_377_600,
            "flag": "--kv-cache-memory-bytes=12884377600",
            "human": "12 GiB",
            "limiting_rank": 2,
            "num_blocks": 9_830,
            # issue 24: rank 2 has 48.61 GiB free of 79.19 GiB; read on their safe side (∓0.005 GiB),
            # 48.605 / 79.195 = 0.6137…, so 0.61 is the largest two-decimal U vLLM's check passes with
            "launch_flags": ["--kv-cache-memory-bytes=12884377600", "--gpu-memory-utilization=0.61"],
            "gpu_memory_utilization": 0.61,
        }
        rounding = {"block_bytes": BLOCK_BYTES, "rule": "down to whole KV blocks"}
        assert record["policy"] == {
            "reserve_bytes": RESERVE,
            "guard_bytes": 0,
            "assume_uniform": False,
            "rounding": rounding,
        }
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
        assert record["capacity"] == [
            {
                "seq_len": 32768,
                "blocks": 9830,
                "tokens": 157_280,
                "max_concurrency": 9830 / 2048,
                "whole_sequences": 4,
            }
        ]
        plan = record["admission_plan"]
        # 4 × 2,048 blocks = 8,192 blocks = 131,072 tokens = 8,192 × 1.25 MiB = 10 GiB ≤ 12 GiB
        assert (plan["blocks_required"], plan["tokens_required"], plan["bytes_required"], plan["fits"]) == (
            8192,
            131_072,
            10 * GiB,
            True,
        )

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
        # issue 24: the start-up checks (free memory vs utilization, one request, footprint) pass too
        assert [c["passed"] for c in record["checks"]] == [True] * 7
        assert record["approver"] == "Ana Planner" and record["note"] == "CHG-1234"
        assert record["created_utc"] == "2026-11-29T10:40:00Z"

    def test_ledger_csv_and_evidence_log_quote_the_source_lines(self, bundle):
        assert (bundle / "ledger.csv").read_text().count("\n") == 5  # header + 4 ranks
        text = (bundle / "evidence.log").read_text()
        line = next(
            n
            for n, raw in enumerate(FOUR_RANK.read_text().splitlines(), 1)
            if "Worker_TP2" in raw and "to fully utilize gpu memory" in raw
        )
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
            evidence.verify_bundle(copy_of_bundle)
        )
        assert main(["verify", str(copy_of_bundle)]) == 1
        assert "CHANGED" in capsys.readouterr().out

    def test_verdict_is_one_word_and_a_changed_bundle_is_never_called_sealed(
        self, bundle, copy_of_bundle, capsys
    ):
        # issue 27: "CHANGED" then "created …: sealed" read as two verdicts on one bundle
        assert main(["verify", str(bundle)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == f"{bundle}: OK, every hash and the recomputed decision agree"
        assert lines[1].endswith(": sealed") and lines[2].startswith("  digest: sha256:")
        (copy_of_bundle / "SUMMARY.md").write_text("edited\n")
        assert main(["verify", str(copy_of_bundle)]) == 1
        out = capsys.readouterr().out
        assert out.startswith(f"{copy_of_bundle}: CHANGED, ")
        assert "sealed" not in out and ": not verified (the bundle changed)" in out

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

    def test_added_empty_folders(self, copy_of_bundle, capsys):
        (copy_of_bundle / "empty").mkdir()
        (copy_of_bundle / "charts" / "old" / "older").mkdir(parents=True)
        assert evidence.verify_bundle(copy_of_bundle) == [
            "charts/old/: not part of the bundle as approved",
            "charts/old/older/: not part of the bundle as approved",
            "empty/: not part of the bundle as approved",
        ]
        assert main(["verify", str(copy_of_bundle)]) == 1

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("approver", "Mallory"),
            ("note", "CHG-9999"),
            ("kvplan_version", "9.9.9"),
            ("created_utc", "2026-11-28T10:40:00Z"),
            ("created_utc", "2026-11-29T11:55:00Z"),
            ("inputs", "path"),
        ],
    )
    def test_edited_approval_fields(self, copy_of_bundle, capsys, key, value):
        # approver, note, version and input paths are in the inputs digest; created_utc (date and time) is
        # printed in SUMMARY.md
        path = copy_of_bundle / "budget.json"
        record = json.loads(path.read_text())
        if key == "inputs":
            record["inputs"][0]["path"] = "/elsewhere/boot.log"
        else:
            record[key] = value
        path.write_text(json.dumps(record))
        differences = evidence.verify_bundle(copy_of_bundle)
        expected = {
            "approver": "inputs digest: recorded",
            "note": "inputs digest: recorded",
            "kvplan_version": "inputs digest: recorded",
            "inputs": "inputs digest: recorded",
            "created_utc": "SUMMARY.md: differs from the text regenerated",
        }
        assert any(d.startswith(expected[key]) for d in differences), differences
        assert main(["verify", str(copy_of_bundle)]) == 1

    @pytest.mark.parametrize(
        ("name", "old", "new"),
        [
            ("SUMMARY.md", "12 GiB per GPU", "16 GiB per GPU"),
            ("SUMMARY.md", "Approved by** Ana Planner", "Approved by** Mallory"),
            ("evidence.log", "rank 2", "rank 3"),
            ("ledger.csv", "\ninputs/boot.log,", "\ninputs/other.log,"),
        ],
    )
    def test_edited_text_file_with_its_hash_updated(self, copy_of_bundle, name, old, new):
        # the edit and a matching `files` hash: the regenerated text still differs
        file = copy_of_bundle / name
        file.write_text(file.read_text().replace(old, new, 1))
        path = copy_of_bundle / "budget.json"
        record = json.loads(path.read_text())
        record["files"][name] = evidence.sha256_file(file)
        path.write_text(json.dumps(record))
        differences = evidence.verify_bundle(copy_of_bundle)
        assert len(differences) == 1
        assert differences[0].startswith(
            f"{name}: differs from the text regenerated from budget.json at line "
        )

    def test_chart_replaced_by_text_with_its_hash_updated(self, copy_of_bundle):
        chart = copy_of_bundle / "charts" / "stranded.png"
        chart.write_text("not a chart")
        path = copy_of_bundle / "budget.json"
        record = json.loads(path.read_text())
        record["files"]["charts/stranded.png"] = evidence.sha256_file(chart)
        path.write_text(json.dumps(record))
        assert evidence.verify_bundle(copy_of_bundle) == ["charts/stranded.png: not a PNG image"]

    @pytest.mark.parametrize("name", ["2026-11-29-renamed", "CHG-1234", "2026-11-30-{digest}"])
    def test_copied_or_renamed_bundle_verifies_with_a_note(self, bundle, tmp_path, capsys, name):
        # the folder name is a label (tickets attach bundles under other names; `cp -r` to elsewhere):
        # the contents are checked against the inputs digest inside budget.json, the name only noted
        digest = evidence.read_bundle(bundle)["inputs_digest"]
        folder = Path(shutil.copytree(bundle, tmp_path / name.format(digest=digest[:12])))
        verified = evidence.verify(folder)
        differences, notes = list(verified.differences), list(verified.notes)
        assert differences == []
        assert notes == [
            f"folder name {folder.name!r} is not the approved name {bundle.name!r} "
            "(created_utc's date and the inputs digest in budget.json): a label only; the "
            "contents are checked against that digest"
        ]
        assert main(["verify", str(folder)]) == 0

    def test_renamed_and_changed_bundle_still_fails(self, bundle, tmp_path):
        folder = Path(shutil.copytree(bundle, tmp_path / "renamed"))
        (folder / "notes.txt").write_text("x")
        verified = evidence.verify(folder)
        differences, notes = list(verified.differences), list(verified.notes)
        assert differences == ["notes.txt: not part of the bundle as approved"] and len(notes) == 1
        assert main(["verify", str(folder)]) == 1

    def test_untouched_bundle_has_no_notes(self, bundle):
        verified = evidence.verify(bundle)
        assert verified.differences == () and verified.notes == ()

    def test_verify_help_documents_names(self, capsys):
        with pytest.raises(SystemExit):
            main(["verify", "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "a copied or renamed bundle folder verifies (exit 0" in text
        assert (
            "a second approver (or a different note) approving the same inputs on the same day gets a "
            "folder of its own" in text
        )

    def test_created_utc_must_be_a_utc_time(self, copy_of_bundle):
        path = copy_of_bundle / "budget.json"
        record = json.loads(path.read_text())
        record["created_utc"] = "2026-11-29 10:40"
        path.write_text(json.dumps(record))
        assert evidence.verify_bundle(copy_of_bundle) == [
            "created_utc: '2026-11-29 10:40' is not an ISO 8601 UTC time"
        ]

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
    # rank 0: room 18.8 GiB − reserve 0.9 GiB = 17.9 GiB = 19,219,978,649 B (each size to the nearest byte)
    assert capsys.readouterr().err == (
        f"error: cannot judge: the approved bundle changed: {folder} fails verification (1 difference; "
        f"`kvplan verify {folder}` lists them), first: ranks[0].safe_bytes: recorded null, recomputed "
        "19219978649\n"
    )
    with pytest.raises(BundleError, match="lacks or garbles what a gate needs: KeyError\\('safe_bytes'\\)"):
        evidence.approved_from_record(record)


class TestWriting:
    def test_existing_bundle_is_refused_and_left_unchanged(self, bundle, capsys):
        before = {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
        with pytest.raises(BundleExistsError, match="never overwritten"):
            approve(bundle.parent)
        assert {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()} == before
        assert list(bundle.parent.iterdir()) == [bundle]  # no temporary folder left either

    @pytest.mark.parametrize("inside", [".", "sub", "inputs", "charts/sub/deeper"])
    def test_out_in_a_bundle_is_refused_and_the_bundle_left_unchanged(self, copy_of_bundle, capsys, inside):
        # an approval into a bundle (or a folder inside one) would change an approved bundle
        before = sorted(p.relative_to(copy_of_bundle).as_posix() for p in copy_of_bundle.rglob("*"))
        out = copy_of_bundle / inside
        with pytest.raises(BundleExistsError, match=f"^{out}: inside the evidence bundle {copy_of_bundle}"):
            approve(out, approver="Bo Reviewer")
        assert (
            main(["approve", str(FOUR_RANK), "--reserve", "0.9GiB", "--approver", "Bo", "--out", str(out)])
            == 2
        )
        assert f"inside the evidence bundle {copy_of_bundle}" in capsys.readouterr().err
        assert sorted(p.relative_to(copy_of_bundle).as_posix() for p in copy_of_bundle.rglob("*")) == before
        assert evidence.verify_bundle(copy_of_bundle) == []

    def test_enclosing_bundle(self, copy_of_bundle, tmp_path):
        assert evidence.enclosing_bundle(copy_of_bundle) == copy_of_bundle.resolve()
        assert evidence.enclosing_bundle(copy_of_bundle / "a" / "b") == copy_of_bundle.resolve()
        assert evidence.enclosing_bundle(tmp_path / "elsewhere") is None

    @pytest.mark.parametrize("where", ["summary_markdown", "stranded_chart", "rename"])
    def test_interrupted_export_leaves_nothing(self, tmp_path, monkeypatch, where):
        # a crash while writing SUMMARY.md, while drawing the third chart, and at the final rename
        def crash(*args, **kwargs):
            raise KeyboardInterrupt("simulated crash")

        modules = {"summary_markdown": evidence.render, "stranded_chart": charts, "rename": evidence.write.os}
        target = modules[where]
        monkeypatch.setattr(target, where, crash)
        with pytest.raises(KeyboardInterrupt):
            approve(tmp_path)
        assert list(tmp_path.iterdir()) == []

    def test_plan_that_does_not_fit_writes_nothing(self, tmp_path):
        # 5 × 32,768 tokens = 10,240 blocks = 12.5 GiB > 12 GiB approved
        with pytest.raises(ApprovalError, match="admission plan fits: 5 × 32,768 tokens needs 10,240 blocks"):
            approve(tmp_path, plan=AdmissionPlan(5, 32768))
        assert list(tmp_path.iterdir()) == []

    def test_tp_that_contradicts_the_logs_is_refused(self, tmp_path):
        with pytest.raises(ValueError, match=r"tp 2\b.* the logs show tensor_parallel_size 4"):
            layout = ModelLayout(resolve_model_config("llama-3.1-70b"), {**LLAMA_70B_TP4, "tp": 2})
            approve(tmp_path, layout=layout)

    def test_without_a_model_the_value_is_not_rounded(self, tmp_path):
        record = evidence.read_bundle(approve(tmp_path, layout=None, plan=None))
        assert record["decision"]["kv_cache_memory_bytes"] == 12 * GiB  # 12.9 − 0.9 GiB, as `kvplan budget`
        assert record["capacity"] is None and record["kv_spec"] is None
        assert evidence.verify_bundle(tmp_path / record_name(record)) == []

    def test_cli_approve_then_verify(self, tmp_path, capsys):
        argv = [
            "approve",
            str(FOUR_RANK),
            "--reserve",
            "0.9GiB",
            "--model",
            "llama-3.1-70b",
            "--tp",
            "4",
            "--approver",
            "Ana Planner",
            "--out",
            str(tmp_path),
            "--json",
        ]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["decision"]["flag"] == "--kv-cache-memory-bytes=12884377600"
        assert main(["verify", out["bundle"]]) == 0
        assert main(argv) == 2  # same inputs, same day: refused
        assert "already exists" in capsys.readouterr().err

    def test_second_approver_same_inputs_same_day_gets_its_own_folder(self, tmp_path):
        first = approve(tmp_path)
        second = approve(tmp_path, approver="Bo Reviewer")
        third = approve(tmp_path, note="CHG-1235")
        assert len({first, second, third}) == 3
        assert evidence.verify_bundle(second) == [] and evidence.verify_bundle(third) == []
        same = "same input files by the same paths, policy, approver and note on the same day"
        with pytest.raises(BundleExistsError, match=same):
            approve(tmp_path, approver="Bo Reviewer")

    def test_the_same_file_by_another_path_gets_its_own_folder(self, tmp_path, monkeypatch):
        # the inputs digest holds the paths as given: `data/x.log` and `/abs/data/x.log` are two approvals
        monkeypatch.chdir(FOUR_RANK.parent)
        relative = approve(tmp_path, log_paths=[Path(FOUR_RANK.name)])
        absolute = approve(tmp_path, log_paths=[FOUR_RANK.resolve()])
        assert relative != absolute
        assert evidence.verify_bundle(relative) == [] and evidence.verify_bundle(absolute) == []

    def test_docs_say_the_same_paths_are_refused(self):
        cli_doc = (
            Path(__file__).resolve().parent.parent / "docs" / "cli.md"
        ).read_text()  # issue 27: moved there
        section = " ".join(cli_doc.split("## `kvplan approve`")[1].split("## `kvplan verify`")[0].split())
        assert "the same files given by the same paths" in section

    def test_bundle_is_readable_under_the_umask(self, tmp_path):
        previous = os.umask(0o022)
        try:
            folder = approve(tmp_path)
        finally:
            os.umask(previous)
        # 0o777 & ~0o022 = 0o755 for folders, 0o666 & ~0o022 = 0o644 for files (was 0o700: mkdtemp)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
        assert stat.S_IMODE((folder / "inputs").stat().st_mode) == 0o755
        assert stat.S_IMODE((folder / "budget.json").stat().st_mode) == 0o644

    def test_a_bundle_written_meanwhile_is_never_replaced(self, tmp_path, monkeypatch):
        # another approval of the same inputs finishes between our claim of the name and our rename
        rename = os.rename

        def other_writer_first(source, target):
            (Path(target) / "budget.json").write_text("the other approval")
            rename(source, target)

        monkeypatch.setattr(evidence.write.os, "rename", other_writer_first)
        with pytest.raises(BundleExistsError, match="never overwritten"):
            approve(tmp_path)
        [folder] = tmp_path.iterdir()  # the other bundle, untouched; our temporary folder is gone
        assert (folder / "budget.json").read_text() == "the other approval"

    def test_an_empty_folder_at_the_name_is_not_replaced(self, tmp_path, monkeypatch):
        # an empty folder appears at the final name after the first check (os.rename would replace it)
        write = evidence.write._write_artifacts

        def appears(staging, decision, record, name):
            (staging.parent / name).mkdir()
            return write(staging, decision, record, name)

        monkeypatch.setattr(evidence.write, "_write_artifacts", appears)
        with pytest.raises(BundleExistsError):
            approve(tmp_path)
        [folder] = tmp_path.iterdir()
        assert list(folder.iterdir()) == []

    def test_missing_or_bootless_input_is_named(self, tmp_path, capsys):
        missing = tmp_path / "missing.log"
        base = ["approve", "--reserve", "0.9GiB", "--approver", "A", "--out", str(tmp_path / "ev")]
        assert main([*base, str(missing)]) == 2
        assert capsys.readouterr().err == f"error: {missing}: no such file (LOG)\n"
        assert main([*base, str(FOUR_RANK), "--load", str(missing)]) == 2
        assert capsys.readouterr().err == f"error: {missing}: no such file (--load)\n"
        garbage = tmp_path / "garbage.log"
        garbage.write_text("hello\n")
        assert main([*base, str(garbage)]) == 2
        assert capsys.readouterr().err.startswith(
            f"error: {garbage}: no vLLM boot found: expected vLLM startup"
        )

    def test_warnings_name_the_users_file(self, tmp_path, capsys):
        # the sample boot without its final newline: the reader warns that the file ends mid-line, at
        # line 87 (the log's last line), naming the file; approve names the user's path, not the copy
        log = tmp_path / "cut.log"
        log.write_bytes(FOUR_RANK.read_bytes()[:-1])
        assert (
            main(
                ["approve", str(log), "--reserve", "0.9GiB", "--approver", "A", "--out", str(tmp_path / "ev")]
            )
            == 0
        )
        err = capsys.readouterr().err
        assert f"warning: {log}:87: the file ends mid-line" in err and "inputs/cut.log" not in err
        [folder] = (tmp_path / "ev").iterdir()  # the bundle itself keeps naming its own copy
        assert evidence.read_bundle(folder)["warnings"][0].startswith("inputs/cut.log:87: the file ends")

    def test_cli_plan_needs_both_halves(self, tmp_path, capsys):
        assert (
            main(
                [
                    "approve",
                    str(FOUR_RANK),
                    "--reserve",
                    "0.9GiB",
                    "--seq-len",
                    "8192",
                    "--approver",
                    "A",
                    "--out",
                    str(tmp_path),
                ]
            )
            == 2
        )
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


LOAD = DATA_DIR / "load"
STEADY = [LOAD / "manual-canary" / "server.log", *sorted((LOAD / "manual-canary" / "metrics").glob("*.prom"))]
OVERLOAD = [LOAD / "manual-canary-overload" / "server.log", LOAD / "manual-canary-overload" / "metrics.prom"]


def settings(record: dict, load: dict | None = None) -> dict:
    """The inputs-digest settings of `approve(...)`: policy, layout, plan, input paths and roles, approval."""
    out = {
        "policy": {"reserve_bytes": RESERVE, "guard_bytes": 0, "assume_uniform": False},
        "model_options": LLAMA_70B_TP4,
        "plan": {"target_concurrency": 4, "seq_len": 32768},
        "inputs": [{"path": entry["path"], "role": entry["role"]} for entry in record["inputs"]],
        "approval": {"approver": "Ana Planner", "note": "CHG-1234", "kvplan_version": __version__},
    }
    return out if load is None else {**out, "load": load}


@pytest.fixture(scope="module")
def load_bundle(tmp_path_factory) -> Path:
    """Scenario A approved together with the steady load test of the manual-value canary at 12 GiB."""
    return approve(
        tmp_path_factory.mktemp("load"),
        load_paths=STEADY,
        load_policy=evidence.LoadPolicy(max_preemptions=0, year=2026),
    )


class TestLoadEvidence:
    def test_steady_canary_approves_with_its_load_summary(self, load_bundle):
        record = evidence.read_bundle(load_bundle)
        load = record["load"]
        # the run: --kv-cache-memory-bytes 12884377600 = 9,830 blocks × 16 = 157,280 tokens, the same the
        # approved 12 GiB holds at max_model_len 32,768 (capacity table above)
        assert (load["kv_cache_memory_bytes"], load["kv_cache_tokens"], load["approved_kv_cache_tokens"]) == (
            12_884_377_600,
            157_280,
            157_280,
        )
        # peak "GPU KV cache usage: 70.1%" (server.log line 304) × 157,280 = 110,253.28 → 110,253 tokens
        assert (load["peak_kv_cache_usage_pct"], load["peak_kv_cache_tokens"]) == (70.1, 110_253)
        assert load["peak_at"] == {
            "source": "inputs/server.log",
            "line": 304,
            "time": "2026-11-27T09:36:28",
            "engine": 0,
        }
        assert (load["preemptions"], load["oom_events"], load["error_events"]) == (0, 0, 0)
        assert (load["max_preemptions"], load["year"], load["notes"]) == (0, 2026, [])
        assert load["sources"] == ["inputs/server.log"] + [f"inputs/scrape-0{i}.prom" for i in range(1, 7)]

    def test_load_files_are_hashed_inputs_with_their_role(self, load_bundle):
        record = evidence.read_bundle(load_bundle)
        loads = [entry for entry in record["inputs"] if entry["role"] == "load"]
        assert [entry["path"] for entry in loads] == [str(path) for path in STEADY]
        for entry in loads:
            assert entry["sha256"] == evidence.sha256_file(load_bundle / entry["bundle_path"])
        load = {"max_preemptions": 0, "year": 2026, "max_capacity_loss_pct": None}
        hashes = [entry["sha256"] for entry in record["inputs"]]  # logs, model config, then load files
        assert record["inputs_digest"] == evidence.inputs_digest(hashes, settings(record, load))

    def test_load_checks_join_the_approval_checks(self, load_bundle):
        checks = {c["name"]: c for c in evidence.read_bundle(load_bundle)["checks"]}
        assert list(checks)[7:] == [  # issue 24: after the 3 start-up checks
            "no OOM under load",
            "preemptions ≤ 0",
            "peak KV cache usage reported",
            "capacity vs profiled canary",
        ]
        assert all(c["passed"] is True for c in checks.values())
        # against the profiled boot's logged 155,856 tokens: 157,280 − 155,856 = 1,424 tokens = 0.914 %
        assert checks["capacity vs profiled canary"]["detail"].startswith(
            "157,280 tokens against 155,856 profiled: gain of 1,424 tokens (0.914%)"
        )

    def test_summary_has_an_under_load_part(self, load_bundle):
        summary = (load_bundle / "SUMMARY.md").read_text()
        part = summary.split("## Under load\n\n")[1].split("\n\n")[0].splitlines()
        assert part[1] == (
            "- **Peak KV cache usage:** 70.1% of 157,280 tokens (≈110,253) at `inputs/server.log:304`."
        )
        assert part[2] == "- **Preemptions:** 0 (policy allows 0); **OOM / error events:** 0 / 0."
        assert part[3].startswith("- **Throughput:** prompt ") and "peak 32 running" in part[3]
        assert part[4] == (
            "- **Capacity:** 157,280 tokens (`--kv-cache-memory-bytes=12884377600`); approved value: 157,280."
        )
        assert "**PASS** preemptions ≤ 0" in summary

    def test_bundle_verifies(self, load_bundle):
        assert evidence.verify_bundle(load_bundle) == []

    def test_changed_load_file_fails_verify(self, load_bundle, tmp_path):
        folder = Path(shutil.copytree(load_bundle, tmp_path / load_bundle.name))
        log = folder / "inputs" / "server.log"
        log.write_text(log.read_text().replace("GPU KV cache usage: 70.1%", "GPU KV cache usage: 75.1%"))
        differences = evidence.verify_bundle(folder)
        assert differences[0].startswith("inputs/server.log: SHA-256 ")
        assert "load.peak_kv_cache_usage_pct: recorded 70.1, recomputed 75.1" in differences
        assert main(["verify", str(folder)]) == 1

    def test_tampered_load_policy_fails_verify(self, load_bundle, tmp_path):
        folder = Path(shutil.copytree(load_bundle, tmp_path / load_bundle.name))
        record = json.loads((folder / "budget.json").read_text())
        record["load"]["max_preemptions"] = 50
        (folder / "budget.json").write_text(json.dumps(record))
        assert any(d.startswith("inputs digest: recorded") for d in evidence.verify_bundle(folder))
        del record["load"]
        (folder / "budget.json").write_text(json.dumps(record))
        assert any(d.startswith("load: recorded null, recomputed {") for d in evidence.verify_bundle(folder))

    def test_overload_run_with_preemptions_is_refused(self, tmp_path):
        # the overload mix preempts 16 + 14 = 30 times (two passes, a restart between them); the first
        # preemption is the "Preemptions: 1" of the stats line at server.log line 8
        message = (
            r"^not approved: preemptions ≤ 0: 30 preemption\(s\) in the run, first seen at "
            f"{OVERLOAD[0]}:8 .*policy allows 0: the KV cache ran out"
        )
        with pytest.raises(ApprovalError, match=message):
            approve(tmp_path, load_paths=OVERLOAD, load_policy=evidence.LoadPolicy(year=2026))
        assert list(tmp_path.iterdir()) == []

    def test_a_policy_that_allows_the_preemptions_approves(self, tmp_path):
        record = evidence.read_bundle(
            approve(
                tmp_path, load_paths=OVERLOAD, load_policy=evidence.LoadPolicy(max_preemptions=30, year=2026)
            )
        )
        assert (record["load"]["preemptions"], record["load"]["max_preemptions"]) == (30, 30)

    def test_without_load_files_there_is_no_load_section(self, bundle):
        # no `load` key, and no load policy in the inputs digest
        record = evidence.read_bundle(bundle)
        assert "load" not in record
        hashes = [entry["sha256"] for entry in record["inputs"]]
        assert record["inputs_digest"] == evidence.inputs_digest(hashes, settings(record))

    def test_cli_approve_with_load(self, tmp_path, capsys):
        # with the model the approved 12 GiB is rounded to 9,830 whole blocks = 12,884,377,600 B, the value the
        # canaries ran (without it 12,884,901,888 B: a load run at another value, refused; issue 25)
        argv = ["approve", str(FOUR_RANK), "--reserve", "0.9GiB", "--approver", "A", "--out", str(tmp_path)]
        argv += ["--model", "llama-3.1-70b", "--tp", "4"]
        # issue 24: a failed check at approval is a verdict, exit 1 (was 2, the exit of bad input)
        assert main([*argv, "--load", *map(str, OVERLOAD), "--year", "2026"]) == 1
        assert "not approved: preemptions ≤ 0: 30 preemption(s)" in capsys.readouterr().err
        assert main([*argv, "--load", *map(str, STEADY), "--year", "2026"]) == 0
        assert "under load   peak KV cache usage 70.1%, 0 preemption(s), 0 OOM" in capsys.readouterr().out
        assert main([*argv, "--year", "2026"]) == 2
        assert "apply to --load files only" in capsys.readouterr().err


SMI_GPUS = FOUR_RANK.parent / "nvidia-smi-gpu.csv"
SMI_APPS = FOUR_RANK.parent / "nvidia-smi-apps.csv"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def smi_bundle(tmp_path_factory) -> Path:
    """Scenario A approved with the --query-gpu and --query-compute-apps snapshots of the profiled boot."""
    return approve(tmp_path_factory.mktemp("smi"), nvidia_smi_paths=[SMI_GPUS, SMI_APPS])


class TestNvidiaSmiSnapshots:
    def test_key_holds_the_snapshots_gpu_name_and_driver(self, smi_bundle):
        record = evidence.read_bundle(smi_bundle)
        # every GPU row of nvidia-smi-gpu.csv: "NVIDIA H100 80GB HBM3, 580.95.05"; the logs show neither
        assert (record["compatibility_key"]["gpu_name"], record["compatibility_key"]["driver_version"]) == (
            H100,
            "580.95.05",
        )
        rank2 = next(row for row in record["ledger"] if row["rank"] == 2)
        # GPU 2 also holds the sidecar server's worker (pid 31879, 24,643 MiB) and a notebook (6,032 MiB)
        assert rank2["other_process_bytes"] == (24_643 + 6_032) * MiB == 32_165_068_800
        assert record["warnings"] == []  # both snapshots given: nothing unknown
        # the snapshots change the key only: the decision is the founding example's 12 GiB in whole blocks
        assert record["decision"]["kv_cache_memory_bytes"] == 12_884_377_600
        assert "| gpu_name | NVIDIA H100 80GB HBM3 |" in (smi_bundle / "SUMMARY.md").read_text()

    def test_snapshots_are_hashed_inputs_with_their_role(self, smi_bundle):
        record = evidence.read_bundle(smi_bundle)
        assert [(e["path"], e["bundle_path"], e["role"]) for e in record["inputs"]] == [
            (str(FOUR_RANK), "inputs/boot.log", "log"),
            (str(SMI_GPUS), "inputs/nvidia-smi-gpu.csv", "nvidia-smi"),
            (str(SMI_APPS), "inputs/nvidia-smi-apps.csv", "nvidia-smi"),
            (str(resolve_model_config("llama-3.1-70b")), "inputs/llama-3.1-70b.json", "model config"),
        ]
        for entry in record["inputs"][1:3]:
            assert entry["sha256"] == evidence.sha256_file(smi_bundle / entry["bundle_path"])
            assert entry["sha256"] == evidence.sha256_file(entry["path"])
        hashes = [entry["sha256"] for entry in record["inputs"]]  # logs, snapshots, then the model config
        assert record["inputs_digest"] == evidence.inputs_digest(hashes, settings(record))

    def test_bundle_verifies(self, smi_bundle, capsys):
        assert evidence.verify_bundle(smi_bundle) == []
        assert main(["verify", str(smi_bundle)]) == 0

    def test_changed_snapshot_fails_verify(self, smi_bundle, tmp_path):
        folder = Path(shutil.copytree(smi_bundle, tmp_path / smi_bundle.name))
        apps = folder / "inputs" / "nvidia-smi-apps.csv"
        apps.write_text(apps.read_text().replace("6032 MiB", "6033 MiB"))  # one byte: the notebook on GPU 2
        differences = evidence.verify_bundle(folder)
        assert differences[0].startswith("inputs/nvidia-smi-apps.csv: SHA-256 ")
        # rank 2's other processes, re-joined from the copy: (24,643 + 6,033) MiB = 32,166,117,376 B
        assert "ledger[2].other_process_bytes: recorded 32165068800, recomputed 32166117376" in differences
        assert main(["verify", str(folder)]) == 1

    def test_without_a_process_snapshot_the_warning_is_in_the_bundle(self, tmp_path, recwarn):
        folder = approve(tmp_path, nvidia_smi_paths=[SMI_GPUS])
        record = evidence.read_bundle(folder)
        assert record["compatibility_key"]["gpu_name"] == H100
        assert [row["other_process_bytes"] for row in record["ledger"]] == [None] * 4  # unknown, never 0
        assert record["warnings"] == [
            "inputs/nvidia-smi-gpu.csv: no nvidia-smi --query-compute-apps snapshot, so the memory of other "
            "processes on each GPU is unknown (other_process_bytes left empty); add one taken with it: "
            "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv"
        ]
        assert not [w for w in recwarn if w.category.__name__ == "NvidiaSmiWarning"]  # no raw Python warning
        assert evidence.verify_bundle(folder) == []
        assert not [w for w in recwarn if w.category.__name__ == "NvidiaSmiWarning"]

    def test_cli_warning_names_the_users_snapshot_once(self, tmp_path, capsys):
        assert (
            main(
                [
                    "approve",
                    str(FOUR_RANK),
                    "--nvidia-smi",
                    str(SMI_GPUS),
                    "--reserve",
                    "0.9GiB",
                    "--approver",
                    "A",
                    "--out",
                    str(tmp_path),
                ]
            )
            == 0
        )
        err = capsys.readouterr().err
        assert err.count(f"warning: {SMI_GPUS}: no nvidia-smi --query-compute-apps snapshot") == 1
        assert "inputs/nvidia-smi-gpu.csv" not in err and "NvidiaSmiWarning" not in err

    def test_snapshot_of_another_gpu_model_is_refused_naming_the_users_file(self, tmp_path):
        # an RTX PRO 6000's 97,887 MiB cannot be the 79.19 GiB (81,089 MiB) vLLM logged on these ranks
        other = tmp_path / "other-gpu.csv"
        other.write_text(SMI_GPUS.read_text().replace("81559 MiB", "97887 MiB"))
        with pytest.raises(ApprovalError, match=f"^{other}, line 2: GPU 0 has memory.total 97,887 MiB"):
            approve(tmp_path / "ev", nvidia_smi_paths=[other, SMI_APPS])
        assert not (tmp_path / "ev").exists() or list((tmp_path / "ev").iterdir()) == []

    def test_without_snapshots_the_digest_is_the_one_before_snapshots(self, tmp_path, monkeypatch):
        # the same approval by kvplan before `approve --nvidia-smi` existed named its bundle
        # 2026-11-29-64429095d68f (the inputs by the same relative path, the kvplan version pinned to 0.0.0)
        monkeypatch.chdir(DATA_DIR.parent)
        monkeypatch.setattr(evidence.write, "__version__", "0.0.0")
        folder = evidence.approve(
            [Path("data/boots/four-rank/boot.log")], tmp_path, Policy(RESERVE), "Ana Planner", now=NOW
        )
        assert folder.name == "2026-11-29-64429095d68f"
        assert [entry["role"] for entry in evidence.read_bundle(folder)["inputs"]] == ["log"]
        assert evidence.verify_bundle(folder) == []
