"""Tamper battery: every file and every key of a bundle, changed with every per-file hash fixed, fails verify.

The tamper model (docs/safety.md): an attacker may change any byte of any bundle file and make every per-file
SHA-256 and size in ``budget.json`` match (``files``, ``inputs[].sha256``, ``inputs[].size_bytes``); they do
not recompute the seals (``inputs_digest``, ``seal_sha256``), which only a new approval does and the pin
(``gate --approved-digest``, the folder name) catches. Also here: issue 11 items 6, 10, 11, 14–17, 19, 20.
"""

import json
import os
import re
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kvplan import DATA_DIR, evidence
from kvplan.cli import main
from kvplan.evidence import AdmissionPlan, BundleError, ModelLayout, Policy
from kvplan.io.model_config import resolve_model_config
from kvplan.units import parse_size
from tests.conftest import TESTS_DATA_DIR

FOUR_RANK = DATA_DIR / "boots" / "four-rank"
NOW = datetime(2026, 11, 29, 10, 40, tzinfo=timezone.utc)
[V0_1_0] = (TESTS_DATA_DIR / "bundles" / "v0.1.0").iterdir()
FULL = os.environ.get("KVPLAN_TAMPER_FULL") == "1"


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> Path:
    """Today's bundle of scenario A: four-rank boot, nvidia-smi snapshots, Llama-3.1-70B at TP=4, a plan."""
    layout = ModelLayout(resolve_model_config("llama-3.1-70b"), {"tp": 4})
    return evidence.approve(
        [FOUR_RANK / "boot.log"],
        tmp_path_factory.mktemp("sealed"),
        Policy(parse_size("0.9GiB")),
        "Ana Planner",
        "CHG-1234",
        layout,
        AdmissionPlan(4, 32768),
        now=NOW,
        nvidia_smi_paths=[FOUR_RANK / "nvidia-smi-gpu.csv", FOUR_RANK / "nvidia-smi-apps.csv"],
    )


def copy(bundle: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(bundle, tmp_path / bundle.name))


def fix_hashes(folder: Path, record: dict) -> None:
    """Write ``record`` as approve does, after making every per-file SHA-256 and size match the files."""
    for name in record["files"]:
        if (folder / name).is_file():
            record["files"][name] = evidence.sha256_file(folder / name)
    for entry in record["inputs"]:
        path = folder / entry["bundle_path"]
        if path.is_file():
            entry["sha256"], entry["size_bytes"] = evidence.sha256_file(path), path.stat().st_size
    (folder / "budget.json").write_bytes((json.dumps(record, indent=2) + "\n").encode())


def rejected(folder: Path) -> bool:
    """verify fails: a difference, or the bundle cannot be read at all."""
    try:
        return bool(evidence.verify_bundle(folder))
    except BundleError:
        return True


def changed_value(value: object) -> object:
    """A different value of the same JSON shape where one exists (a number nudged, a string edited)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.01 + 0.001
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value[:-1] if value else [0]
    if isinstance(value, dict):
        return {**value, "added": 1}
    return 0


def leaf_paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every path to a leaf (and to each container) of a JSON value, e.g. ('ranks', 2, 'safe_bytes')."""
    paths = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            paths += leaf_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            paths += leaf_paths(item, (*prefix, i))
    return paths


def set_at(record: dict, path: tuple, value: object) -> None:
    target = record
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


def get_at(record: dict, path: tuple) -> object:
    for part in path:
        record = record[part]
    return record


def key_paths(record: dict, top_level_only: bool = False) -> list[tuple]:
    """One path per key shape (``ranks[*].safe_bytes`` once, at its first element),
    leaving out the per-file hashes the attacker fixes anyway and the seal (tested on its own)."""
    seen, paths = set(), []
    for path in leaf_paths(record):
        shape = tuple("*" if isinstance(part, int) else part for part in path)
        fixed = (path[0] == "files" and len(path) > 1) or (
            path[0] == "inputs" and path[-1] in ("sha256", "size_bytes")
        )
        if shape in seen or fixed or path[0] == evidence.SEAL_KEY or (top_level_only and len(path) > 1):
            continue
        seen.add(shape)
        paths.append(path)
    if FULL:
        return paths
    nested = [path for path in paths if len(path) > 1]
    return [path for path in paths if len(path) == 1] + nested[::3]  # every key of the record, a third of
    # the nested ones (KVPLAN_TAMPER_FULL=1 tries them all: 139 on the v0.1.0 bundle)


@pytest.mark.parametrize("which", ["sealed", "v0.1.0"])
def test_every_key_changed_with_the_hashes_fixed_fails_verify(which, sealed, tmp_path):
    # for the v0.1.0 bundle (no seal) every change must be caught by recomputation alone (a created_utc
    # moved within its day is not: docs/safety.md; the edit here makes it no time at all); the sealed
    # bundle's seal catches any change, so its top-level keys stand for the rest
    source = sealed if which == "sealed" else V0_1_0
    base = json.loads((source / "budget.json").read_text())
    folder = copy(source, tmp_path)
    tried, held, escaped = 0, 0, []
    for path in key_paths(base, top_level_only=which == "sealed"):
        record = json.loads(json.dumps(base))
        set_at(record, path, changed_value(get_at(record, path)))
        fix_hashes(folder, record)
        tried += 1
        if rejected(folder):
            held += 1
        else:
            escaped.append(path)
    assert escaped == [], escaped
    assert tried > 20 and held == tried


@pytest.mark.parametrize("key", ["decision_override", "padding"])
def test_an_added_key_fails_verify(sealed, tmp_path, key):
    # issue 11 item 16: every key is known (an added key, even with the seal recomputed, is a difference)
    folder = copy(sealed, tmp_path)
    record = json.loads((folder / "budget.json").read_text())
    record[key] = {"kv_cache_memory_bytes": 42 << 30} if key == "decision_override" else " " * 1000
    record[evidence.SEAL_KEY] = evidence.seal(record)
    fix_hashes(folder, record)
    assert f"{key}: not a key of a bundle" in evidence.verify_bundle(folder)


def test_created_utc_within_the_day_fails_verify(sealed, tmp_path):
    # issue 11 item 16: 10:40 → 11:55 the same day, SUMMARY.md regenerated to match and its hash fixed
    folder = copy(sealed, tmp_path)
    record = json.loads((folder / "budget.json").read_text())
    record["created_utc"] = "2026-11-29T11:55:00Z"
    summary = folder / "SUMMARY.md"
    summary.write_text(summary.read_text().replace("2026-11-29T10:40:00Z", "2026-11-29T11:55:00Z"))
    fix_hashes(folder, record)
    assert [d.split(":")[0] for d in evidence.verify_bundle(folder)] == [evidence.SEAL_KEY]


@pytest.mark.parametrize("size", [10, 1 << 20])
def test_padding_in_budget_json_fails_verify(sealed, tmp_path, size):
    folder = copy(sealed, tmp_path)
    with open(folder / "budget.json", "ab") as handle:
        handle.write(b" " * size)
    assert evidence.verify_bundle(folder) == [
        "budget.json: its bytes are not what approve writes for its record (padding, other spacing or key "
        "order)"
    ]


def test_a_huge_budget_json_is_refused_before_it_is_read(sealed, tmp_path):
    # 1 GiB of padding (a sparse file: no disk is used) is refused by its size, in bounded memory and time
    folder = copy(sealed, tmp_path)
    with open(folder / "budget.json", "ab") as handle:
        handle.truncate(1 << 30)
    started = time.monotonic()
    with pytest.raises(BundleError, match="above the bound of 67,108,864"):
        evidence.verify_bundle(folder)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "name",
    [
        "SUMMARY.md",
        "ledger.csv",
        "evidence.log",
        "charts/stranded.png",
        "charts/concurrency.png",
        "inputs/boot.log",
        "inputs/nvidia-smi-gpu.csv",
        "inputs/nvidia-smi-apps.csv",
        "inputs/llama-3.1-70b.json",
    ],
)
@pytest.mark.parametrize("which", ["sealed", "v0.1.0"])
def test_every_file_changed_with_its_hash_fixed_fails_verify(which, sealed, tmp_path, name):
    # one byte flipped in the middle of each file; a v0.1.0 bundle (no seal) has its charts checked by hash
    # only, so a chart changed with its hash fixed is a note there (docs/safety.md), a difference when sealed
    folder = copy(sealed if which == "sealed" else V0_1_0, tmp_path)
    path = folder / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    record = json.loads((folder / "budget.json").read_text())
    fix_hashes(folder, record)
    if which == "v0.1.0" and name.startswith("charts/"):
        verified = evidence.verify(folder)
        differences, notes = list(verified.differences), list(verified.notes)
        assert differences == [] and any(note.startswith(f"{name}: differs") for note in notes)
    else:
        assert rejected(folder)


def test_a_chart_swapped_in_a_bundle_without_a_seal_is_noted(tmp_path):
    # issue 11 item 15 on the unsealed 0.1.0 bundle: its stranded chart replaced by its ledger chart, hashes
    # fixed. Charts drawn by an older release cannot be redrawn byte for byte, so the swap is a note (the
    # known limit in docs/safety.md); a sealed bundle fails any such change
    # (test_every_file_changed_with_its_hash_fixed_fails_verify).
    folder = copy(V0_1_0, tmp_path)
    shutil.copyfile(folder / "charts" / "ledger.png", folder / "charts" / "stranded.png")
    record = json.loads((folder / "budget.json").read_text())
    fix_hashes(folder, record)
    verified = evidence.verify(folder)
    differences, notes = list(verified.differences), list(verified.notes)
    assert differences == []
    assert any(note.startswith("charts/stranded.png: differs from the chart") for note in notes)


class TestPathsStayInside:
    """Issue 11 item 14: every path in a bundle resolves inside it; no symlink, FIFO or hash oracle."""

    @pytest.mark.parametrize("name", ["/etc/hostname", "../outside.txt", "inputs/../../outside.txt"])
    def test_a_path_outside_the_bundle_is_a_difference_and_never_opened(self, sealed, tmp_path, name):
        secret = tmp_path / "outside.txt"
        secret.write_text("not part of any bundle")
        folder = copy(sealed, tmp_path / "b")
        record = json.loads((folder / "budget.json").read_text())
        record["files"][name] = "0" * 64  # a wrong hash: verify must not print the file's real one
        (folder / "budget.json").write_bytes((json.dumps(record, indent=2) + "\n").encode())
        differences = evidence.verify_bundle(folder)
        assert any(d.startswith(f"{name!r}:") and d.endswith("not opened") for d in differences)
        assert not any(evidence.sha256_file(secret) in d for d in differences)

    def test_a_symlinked_input_is_refused(self, sealed, tmp_path):
        folder = copy(sealed, tmp_path)
        target = tmp_path / "boot.log"
        shutil.copyfile(folder / "inputs" / "boot.log", target)
        (folder / "inputs" / "boot.log").unlink()
        (folder / "inputs" / "boot.log").symlink_to(target)
        assert "inputs/boot.log: a symlink, not a regular file" in evidence.verify_bundle(folder)

    def test_a_fifo_as_budget_json_is_refused_without_waiting(self, sealed, tmp_path):
        folder = copy(sealed, tmp_path)
        (folder / "budget.json").unlink()
        os.mkfifo(folder / "budget.json")
        with pytest.raises(BundleError, match="a FIFO, not a regular file"):
            evidence.verify_bundle(folder)

    def test_a_fifo_as_an_input_is_refused_without_waiting(self, sealed, tmp_path):
        folder = copy(sealed, tmp_path)
        (folder / "inputs" / "boot.log").unlink()
        os.mkfifo(folder / "inputs" / "boot.log")
        assert "inputs/boot.log: a FIFO, not a regular file" in evidence.verify_bundle(folder)


def test_a_model_config_outside_the_working_folder_verifies(tmp_path, monkeypatch):
    # issue 11 item 6: a config that names no model was named by the temporary .partial folder it was
    # read from, so the fresh bundle failed verify; it is named by its bundle copy now
    config = json.loads(resolve_model_config("llama-3.1-70b").read_text())
    config.pop("_name_or_path", None)
    config.pop("_source", None)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(DATA_DIR)
    bundle = evidence.approve(
        [FOUR_RANK / "boot.log"],
        tmp_path / "out",
        Policy(parse_size("0.9GiB")),
        "QA",
        layout=ModelLayout(tmp_path / "cfg" / "config.json", {"tp": 4}),
        now=NOW,
    )
    record = evidence.read_bundle(bundle)
    assert record["kv_spec"]["model"] == "inputs/config.json"
    assert ".partial" not in (bundle / "budget.json").read_text()
    assert evidence.verify_bundle(bundle) == []


class TestGatePinsTheApproval:
    """Issue 11 items 10 and 11: the gate judges the verified record and names the bundle's digest."""

    def test_every_verdict_prints_the_digest(self, sealed, capsys):
        digest = evidence.bundle_digest((sealed / "budget.json").read_bytes())
        assert main(["gate", "--approved", str(sealed), str(FOUR_RANK / "boot.log")]) == 2  # no snapshot
        assert capsys.readouterr().out.startswith(f"approved bundle {sealed} (digest sha256:{digest})\n")
        main(["gate", "--approved", str(sealed), str(FOUR_RANK / "boot.log"), "--json"])
        assert json.loads(capsys.readouterr().out)["approved_digest"] == digest

    def test_approved_digest_pins_the_bundle(self, sealed, tmp_path, capsys):
        digest = evidence.bundle_digest((sealed / "budget.json").read_bytes())
        argv = [
            "gate",
            "--approved",
            str(sealed),
            str(FOUR_RANK / "boot.log"),
            "--nvidia-smi",
            str(FOUR_RANK / "nvidia-smi-gpu.csv"),
            "--nvidia-smi",
            str(FOUR_RANK / "nvidia-smi-apps.csv"),
        ]
        assert main([*argv, "--approved-digest", digest]) == 0
        assert main([*argv, "--approved-digest", f"sha256:{digest[:12]}"]) == 0
        capsys.readouterr()
        assert main([*argv, "--approved-digest", "0" * 64]) == 2
        assert "is not the approved bundle" in capsys.readouterr().err

    def test_another_approval_at_the_approved_path_is_not_judged_against(self, sealed, tmp_path, capsys):
        # a self-consistent bundle of another approval (another approver), renamed to the approved name
        other = evidence.approve(
            [FOUR_RANK / "boot.log"], tmp_path / "other", Policy(parse_size("0.5GiB")), "Mallory", now=NOW
        )
        assert evidence.verify_bundle(other) == []
        placed = Path(shutil.copytree(other, tmp_path / "approved" / sealed.name))
        assert main(["gate", "--approved", str(placed), str(FOUR_RANK / "boot.log")]) == 2
        assert "another approval was put at the approved path" in capsys.readouterr().err

    def test_the_gate_judges_the_record_it_verified(self, sealed, tmp_path, monkeypatch):
        # swap budget.json for a forged one right after verification: the gate still holds the verified
        # record (it never reads the file again)
        folder = copy(sealed, tmp_path)
        verified, approved = evidence.verified_approval(folder)
        (folder / "budget.json").write_text("{}")
        assert approved.budget_bytes == verified.record["decision"]["kv_cache_memory_bytes"] == 12_884_377_600


def test_the_note_and_approver_are_quoted_in_summary(tmp_path):
    # issue 11 item 17: a note cannot add a heading, a list item or an HTML comment
    note = "CHG-1\n# KV-cache budget: 40 GiB per GPU\n<!-- the real tables follow -->"
    bundle = evidence.approve(
        [FOUR_RANK / "boot.log"],
        tmp_path,
        Policy(parse_size("0.9GiB")),
        "Eve\n- **Decision:** 40 GiB",
        note,
        now=NOW,
    )
    summary = (bundle / "SUMMARY.md").read_text()
    assert summary.count("\n# ") == 0 and summary.startswith("# KV-cache budget: 12 GiB")
    assert re.search(r"(?<!\\)<!--", summary) is None  # only the escaped \<!-- is left
    note_line = r"- **Note:** CHG-1\n# KV-cache budget: 40 GiB per GPU\n\<!-- the real tables follow --\>"
    assert note_line in summary
    assert "\n- **Decision:** 40 GiB" not in summary
    assert evidence.verify_bundle(bundle) == []


class TestStaleClaims:
    """Issue 11 item 19: what a killed approval leaves behind never blocks the next one."""

    def test_an_empty_claim_is_removed_and_reported(self, tmp_path):
        first = evidence.approve(
            [FOUR_RANK / "boot.log"], tmp_path, Policy(parse_size("0.9GiB")), "QA", now=NOW
        )
        shutil.rmtree(first)
        first.mkdir()  # a kill between the claim and the rename
        with pytest.warns(UserWarning, match="removed what a killed approval left"):
            again = evidence.approve(
                [FOUR_RANK / "boot.log"], tmp_path, Policy(parse_size("0.9GiB")), "QA", now=NOW
            )
        assert again == first and evidence.verify_bundle(again) == []

    def test_an_old_partial_folder_is_removed_and_a_fresh_one_kept(self, tmp_path):
        old, fresh = tmp_path / ".2026-11-28-aaaaaaaaaaaa.0000.partial", tmp_path / ".x.1111.partial"
        old.mkdir()
        fresh.mkdir()
        os.utime(old, (time.time() - 7200, time.time() - 7200))
        with pytest.warns(UserWarning):
            evidence.approve([FOUR_RANK / "boot.log"], tmp_path, Policy(parse_size("0.9GiB")), "QA", now=NOW)
        assert not old.exists() and fresh.exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["inputs"][0].__setitem__("path", 5), "inputs[0] is not an input entry"),
        (lambda r: r["policy"].__setitem__("reserve_bytes", "1GiB"), "malformed policy"),
        (lambda r: r.pop("approver"), "malformed policy, plan, load, approval"),  # issue 23: was a KeyError
    ],
)
def test_garbled_records_are_one_error_line(sealed, tmp_path, capsys, edit, message):
    # issue 11 item 18: a non-string input path or a string size: exit 2, one error line naming budget.json
    folder = copy(sealed, tmp_path)
    record = json.loads((folder / "budget.json").read_text())
    edit(record)
    (folder / "budget.json").write_bytes((json.dumps(record, indent=2) + "\n").encode())
    assert main(["verify", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "budget.json" in err and message in err


def test_a_deeply_nested_budget_json_is_one_error_line(sealed, tmp_path, capsys):
    # issue 11 item 18: 100,000 nested lists would exhaust Python's stack in a naive reader
    folder = copy(sealed, tmp_path)
    text = (folder / "budget.json").read_text()
    (folder / "budget.json").write_text(
        text.replace('"note": "CHG-1234"', '"note": ' + "[" * 100_000 + "]" * 100_000)
    )
    assert main(["verify", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {folder / 'budget.json'}: ")


def test_verify_into_a_closed_pipe_is_quiet(sealed, tmp_path):
    # issue 11 item 20: `kvplan verify BUNDLE | head -1` ends without a Broken pipe traceback
    import subprocess
    import sys

    command = f"{sys.executable} -m kvplan verify {sealed} | head -c 1"
    result = subprocess.run(
        command,
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert "Traceback" not in result.stderr and "Broken pipe" not in result.stderr


class TestCreatedDateOfABundleWithoutASeal:
    """Issue 11 item 11, the created-date gap: a 0.1.0 bundle's created_utc is pinned by its digest only.

    No recomputation can check when an approval was made, and a bundle without a seal has nothing else
    that covers ``created_utc``: verify and gate say so, and ``--approved-digest`` is what pins it.
    """

    def test_verify_says_the_created_date_is_not_verified(self, sealed, capsys):
        assert main(["verify", str(V0_1_0), "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["created_utc"] == "2026-12-01T21:07:08Z" and result["created_utc_verified"] is False
        assert main(["verify", str(V0_1_0)]) == 0
        assert (
            "  created 2026-12-01T21:07:08Z: not verified (no seal; only the digest"
            in capsys.readouterr().out
        )
        assert main(["verify", str(sealed), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["created_utc_verified"] is True
        assert main(["verify", str(sealed)]) == 0
        assert "  created 2026-11-29T10:40:00Z: sealed\n" in capsys.readouterr().out

    def test_gate_without_the_digest_says_the_bundle_is_not_pinned(self, capsys):
        canary = str(V0_1_0 / "inputs" / "boot.log")
        digest = evidence.bundle_digest((V0_1_0 / "budget.json").read_bytes())
        main(["gate", "--approved", str(V0_1_0), canary])
        warned = [line for line in capsys.readouterr().err.splitlines() if "has no seal" in line]
        assert len(warned) == 1 and "created 2026-12-01T21:07:08Z: not verified" in warned[0]
        main(["gate", "--approved", str(V0_1_0), canary, "--approved-digest", digest])
        assert "has no seal" not in capsys.readouterr().err

    def test_a_created_date_moved_within_the_day_verifies_with_the_note_and_fails_the_pin(
        self, tmp_path, capsys
    ):
        # the documented limit (docs/safety.md): 21:07 → 09:00 the same day, SUMMARY.md edited to match,
        # hashes fixed: verify finds no difference and says the date is not verified; the pin refuses it
        folder = copy(V0_1_0, tmp_path)
        digest = evidence.bundle_digest((folder / "budget.json").read_bytes())
        record = json.loads((folder / "budget.json").read_text())
        record["created_utc"] = "2026-12-01T09:00:00Z"
        summary = folder / "SUMMARY.md"
        summary.write_text(summary.read_text().replace("2026-12-01T21:07:08Z", "2026-12-01T09:00:00Z"))
        fix_hashes(folder, record)
        verified = evidence.verify(folder)
        assert verified.differences == () and not verified.sealed
        assert "created 2026-12-01T09:00:00Z: not verified" in verified.created_line()
        canary = str(folder / "inputs" / "boot.log")
        assert main(["gate", "--approved", str(folder), canary, "--approved-digest", digest]) == 2
        assert "is not the approved bundle" in capsys.readouterr().err


@pytest.mark.parametrize("limit", [8 << 10, 40 << 10])
def test_a_write_error_names_the_file_and_leaves_nothing(tmp_path, limit):
    # issue 11 items 19 and 20: "[Errno 28]" named no file. A real write error, from the kernel: approve in a
    # child whose files may not grow past `limit` (RLIMIT_FSIZE, SIGXFSZ ignored, so write() fails with
    # errno 27 as a full disk fails with 28). 8 KiB stops the copy of the 17 KB boot log, 40 KiB the first
    # chart (30-75 KB); either way one error line naming the file, exit 2, and no bundle, claim or .partial.
    import resource
    import signal
    import subprocess
    import sys

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "out"
    argv = ["approve", str(FOUR_RANK / "boot.log"), "--reserve", "0.9GiB", "--approver", "QA"]
    result = subprocess.run(
        [sys.executable, "-m", "kvplan", *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert result.returncode == 2, result.stderr
    [error] = result.stderr.splitlines()
    assert error.startswith("error: [Errno 27] ") and f"{out}/" in error and "File too large" in error
    assert list(out.iterdir()) == []


def test_a_chart_swapped_for_another_valid_png_in_a_sealed_bundle_fails_verify(sealed, tmp_path, capsys):
    # issue 11 item 15: charts replaced by other valid PNGs with their hashes updated verified. The seal covers
    # the charts' hashes: a swap fails verify. Recomputing the seal too is forging an approval: the bundle's
    # digest changes and the pin refuses it (docs/safety.md, "the seal's reach").
    digest = evidence.bundle_digest((sealed / "budget.json").read_bytes())
    folder = copy(sealed, tmp_path)
    shutil.copyfile(folder / "charts" / "ledger.png", folder / "charts" / "stranded.png")
    record = json.loads((folder / "budget.json").read_text())
    fix_hashes(folder, record)
    assert [d.split(":")[0] for d in evidence.verify_bundle(folder)] == [evidence.SEAL_KEY]
    record[evidence.SEAL_KEY] = evidence.seal(record)
    (folder / "budget.json").write_bytes((json.dumps(record, indent=2) + "\n").encode())
    canary = str(FOUR_RANK / "boot.log")
    assert main(["gate", "--approved", str(folder), canary, "--approved-digest", digest]) == 2
    assert "is not the approved bundle" in capsys.readouterr().err


def _flip_a_digit(path: Path) -> None:
    text = path.read_bytes()
    at = text.index(b"48.61")  # rank 2's free memory at start-up: same size, another number
    path.write_bytes(text[:at] + b"47.61" + text[at + 5 :])


@pytest.mark.parametrize(
    "change",
    [
        _flip_a_digit,
        lambda p: p.write_bytes(p.read_bytes() + b"one more line\n"),
        lambda p: p.write_bytes(p.read_bytes()[:1000]),
        lambda p: p.write_bytes(b""),
        Path.unlink,
        lambda p: (p.unlink(), p.mkdir()),
        lambda p: (p.unlink(), p.symlink_to(FOUR_RANK / "boot.log")),
    ],
    ids=["same size", "appended", "cut", "emptied", "removed", "a folder", "a symlink"],
)
def test_a_changed_log_is_a_verdict_exit_1_never_bad_input(sealed, tmp_path, capsys, change):
    # review (f): docs/cli.md's contract, which pipelines rely on: 1 = the bundle changed (each difference
    # listed), 2 = budget.json cannot be read. A changed log is a change, whatever the reader makes of it.
    folder = copy(sealed, tmp_path)
    change(folder / "inputs" / "boot.log")
    assert main(["verify", str(folder)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{folder}: CHANGED") and "inputs/boot.log" in out and err == ""
