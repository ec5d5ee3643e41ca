"""Cannot judge is not pass (issue 25, part 3): approve, drift and the compatibility key take the safe side.

An approval needs every check passed or not applicable by design; a check that cannot be judged refuses
with exit 2 and its reason, unless ``--allow-unjudged NAME`` accepts it, which the bundle records.
"""

import json

import pytest

from kvplan import MODELS_DIR, evidence
from kvplan.checks.key import check_compatibility_key
from kvplan.cli import main
from kvplan.evidence.record import record_chunks
from tests.conftest import SAMPLE_LOG

MODEL_CHECK = "model config matches the logs"


@pytest.fixture
def log_without_sizes(tmp_path):
    """The sample boot without the "GPU KV cache size" and "Maximum concurrency" lines vLLM printed."""
    path = tmp_path / "boot.log"
    lines = SAMPLE_LOG.read_text().splitlines(keepends=True)
    path.write_text(
        "".join(line for line in lines if "KV cache size" not in line and "concurrency" not in line)
    )
    return path


@pytest.fixture
def half_layers(tmp_path):
    """Llama-3.1-70B's config with half its layers (40 of 80): a wrong config that halves each token's bytes."""
    config = json.loads((MODELS_DIR / "llama-3.1-70b.json").read_text())
    config["num_hidden_layers"] //= 2
    path = tmp_path / "half-layers.json"
    path.write_text(json.dumps(config))
    return path


def approve(log, config, out, *flags):
    return main(
        ["approve", str(log), "--reserve", "0.9GiB", "--model", str(config), "--tp", "4",
         "--target-concurrency", "9", "--seq-len", "32768", "--approver", "t", "--out", str(out), *flags]
    )  # fmt: skip


def test_a_wrong_model_config_without_the_size_line_is_not_approved(
    log_without_sizes, half_layers, tmp_path, capsys
):
    # issue 25: with the "GPU KV cache size" line the half-layer config is refused; without it the
    # cross-check "cannot judge" and a 9-sequence plan was approved that vLLM holds 4.8 of. The budget is
    # 12 GiB; 80 layers × 2 × 2 KV heads per rank × 128 × 2 B = 80 KiB a token, 12 GiB = 9,830 blocks of 16
    # tokens = 157,280 tokens = 4.8 sequences of 32,768; the 40-layer config claims 9.6, so "9 fit".
    assert approve(log_without_sizes, half_layers, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert f"cannot judge {MODEL_CHECK}: nothing to cross-check" in err
    assert f"--allow-unjudged '{MODEL_CHECK}'" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_size_line_still_refuses_the_wrong_config(half_layers, tmp_path, capsys):
    assert approve(SAMPLE_LOG, half_layers, tmp_path / "out") == 1  # a failed check (issue 24: exit 1)
    assert "model config DISAGREES" in capsys.readouterr().err


def test_allow_unjudged_accepts_a_named_check_and_the_bundle_records_it(log_without_sizes, tmp_path, capsys):
    # issue 25: --allow-unjudged NAME (repeatable) accepts the named check; the bundle records it
    llama = MODELS_DIR / "llama-3.1-70b.json"
    out = tmp_path / "out"
    assert main(
        ["approve", str(log_without_sizes), "--reserve", "0.9GiB", "--model", str(llama), "--tp", "4",
         "--approver", "t", "--out", str(out), "--allow-unjudged", MODEL_CHECK]
    ) == 0  # fmt: skip
    [bundle] = out.iterdir()
    record = json.loads((bundle / "budget.json").read_text())
    assert record["allowed_unjudged"] == [MODEL_CHECK]
    assert [c["passed"] for c in record["checks"] if c["name"] == MODEL_CHECK] == [None]
    assert f"(`--allow-unjudged`): {MODEL_CHECK}" in (bundle / "SUMMARY.md").read_text()
    assert evidence.verify_bundle(bundle) == []
    # the names are approval settings: the inputs digest covers them, so removing one is a difference
    changed = {key: value for key, value in record.items() if key not in ("allowed_unjudged", "seal_sha256")}
    changed["seal_sha256"] = evidence.seal(changed)
    (bundle / "budget.json").write_bytes(b"".join(record_chunks(changed)))
    assert any(d.startswith("inputs digest") for d in evidence.verify_bundle(bundle))


def test_allow_unjudged_names_a_check_of_the_approval(log_without_sizes, tmp_path, capsys):
    llama = MODELS_DIR / "llama-3.1-70b.json"
    code = main(
        ["approve", str(log_without_sizes), "--reserve", "0.9GiB", "--model", str(llama), "--tp", "4",
         "--approver", "t", "--out", str(tmp_path / "out"), "--allow-unjudged", "model config"]
    )  # fmt: skip
    assert code == 2
    assert "--allow-unjudged 'model config': no check of that name" in capsys.readouterr().err


def test_drift_refuses_a_reference_budget_above_its_free_memory(capsys):
    # issue 25: 50 GiB of KV budget cannot come out of 42 GiB free; drift returned 48 GiB (50 − 2), exit 0
    code = main(
        ["drift", "--ref-free", "42GiB", "--ref-budget", "50GiB", "--boot-free", "40GiB", "--guard", "0"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "rank 0: reference budget 50 GiB is above the reference free memory 42 GiB" in err


def test_drift_of_the_founding_example_still_holds(capsys):
    # 30 − max(0, 42 − 40.75) − 0.5 = 28.25 GiB
    assert main(["drift", "--ref-free", "42GiB", "--ref-budget", "30GiB", "--boot-free", "40.75GiB",
                 "--guard", "0.5GiB", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["uniform_budget_bytes"] == int(28.25 * 2**30)


def test_a_default_on_both_sides_is_not_counted_unchanged():
    # issue 25: a block size neither side's logs show (the reader filled vLLM's default 16 on both) is
    # "not compared", never one of the unchanged fields
    key = {"model": "m", "block_size": 16}
    check = check_compatibility_key(key, key, approved_defaults={"block_size"}, boot_defaults={"block_size"})
    shown = check_compatibility_key(key, key)  # the same key, both sides shown
    assert check.passed is True and shown.passed is True
    assert check.detail.endswith("not shown on either side (not compared): block_size")
    count = int(check.detail.split()[0])
    assert shown.detail.startswith(f"{count + 1} fields unchanged")


def test_the_sample_canary_names_its_unshown_block_size(tmp_path, capsys):
    # the sample's logs print no block size: approval and canary both have the reader's default
    assert (
        main(["approve", str(SAMPLE_LOG), "--reserve", "0.9GiB", "--approver", "t", "--out", str(tmp_path)])
        == 0
    )
    [bundle] = tmp_path.iterdir()
    capsys.readouterr()
    assert main(["gate", "--approved", str(bundle), str(SAMPLE_LOG), "--json"]) == 0
    [key] = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "compatibility key"]
    unchanged, _, not_compared = key["detail"].partition("not shown on either side (not compared): ")
    assert not_compared.split(", ") == ["block_size", "driver_version", "gpu_name"]
    # the 17 key fields of SUMMARY.md's table, less the three no side shows (was 15: block_size counted)
    assert unchanged.startswith("14 fields unchanged")
