"""Issue 24: ``kvplan export`` writes an approved launch as deployments read it, from a verified bundle only,
each output parsed back here; ``export startup-plan`` writes vLLM 0.33's own per-rank plan files."""

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kvplan import evidence
from kvplan.cli import main
from kvplan.columns import KEY_COLUMNS
from kvplan.drift import adjusted_budget_bytes
from kvplan.export import EXPORTERS, LAYOUT_FLAGS, NOT_LAUNCH_FLAGS, launch_layout
from kvplan.io.model_config import resolve_model_config
from kvplan.units import GiB, parse_size
from tests.conftest import SAMPLE_LOG, TESTS_DATA_DIR

PLAN_LOG = TESTS_DATA_DIR / "v0.33-llama-3.1-70b-tp4-startup-plan.log"
#: The fingerprint each rank's worker logged ("Saved startup plan to …/startup_plan_<fp>.json"), by pid.
FINGERPRINTS = ["3f1c9a0b7d2e4c61", "a94e07c2d15b3f88", "5d2b8e6f0a1c7e94", "c07f3a9e2b4d6815"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    # vLLM 0.33 Llama-3.1-70B TP4, 0.9 GiB reserve, guard 0.25 GiB: rank 3's room less the reserve, 12,448
    # whole blocks of 1,310,720 B = 16,315,842,560 B
    layout = evidence.ModelLayout(resolve_model_config("llama-3.1-70b"), {"tp": 4})
    policy = evidence.Policy(parse_size("0.9GiB"), GiB // 4)
    return evidence.approve([PLAN_LOG], tmp_path_factory.mktemp("e"), policy, "QA", layout=layout)


def export(capsys, fmt: str, bundle: Path, *argv) -> str:
    assert main(["export", fmt, str(bundle), *map(str, argv)]) == 0
    return capsys.readouterr().out


def vllm_0_33_load_config_file(config: dict) -> list[str]:
    """vLLM 0.33.0 ``FlexibleArgumentParser.load_config_file``, repeated from its source for a flat config:
    each key becomes ``--key`` and its value ``str(value)`` (bool: the flag alone; list: each item)."""
    processed_args: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                processed_args.append("--" + key)
        elif isinstance(value, list):
            if value:
                processed_args.append("--" + key)
                processed_args.extend(str(item) for item in value)
        elif isinstance(value, dict):
            processed_args += ["--" + key, json.dumps(value)]
        else:
            processed_args += ["--" + key, str(value)]
    return processed_args


def test_every_format_carries_the_digest_and_parses_back(capsys, bundle):  # issue 24
    digest = evidence.bundle_digest((bundle / "budget.json").read_bytes())
    record = evidence.read_bundle(bundle)
    value, utilization = (
        record["decision"]["kv_cache_memory_bytes"],
        record["decision"]["gpu_memory_utilization"],
    )
    assert (value, utilization) == (16_315_842_560, 0.98)
    outputs = {name: export(capsys, name, bundle) for name in EXPORTERS}
    for text in outputs.values():
        assert f"sha256:{digest}" in text
    # args: one flag a line after the comment
    args = outputs["args"].splitlines()
    assert args[0] == f"# kvplan.io/bundle-digest: sha256:{digest}"
    # the key as the engine config line shows it (block_size is vLLM's default filled in: not shown)
    assert args[1:] == [
        "--model=meta-llama/Llama-3.1-70B-Instruct",
        "--dtype=bfloat16",
        "--tensor-parallel-size=4",
        "--pipeline-parallel-size=1",
        "--max-model-len=32768",
        "--kv-cache-dtype=auto",
        "--compilation-config.cudagraph_mode=FULL_AND_PIECEWISE",
        f"--kv-cache-memory-bytes={value}",
        "--gpu-memory-utilization=0.98",
    ]
    # vllm-config: what vLLM 0.33's --config loader makes of it is exactly the args
    config = yaml.safe_load(outputs["vllm-config"])
    assert vllm_0_33_load_config_file(config) == [part for arg in args[1:] for part in arg.split("=", 1)]
    assert next(iter(config)) == "model"  # model_in_config: vLLM takes the model from the file
    # Helm production-stack values fragment
    helm = yaml.safe_load(outputs["helm-production-stack"])
    [spec] = helm["servingEngineSpec"]["modelSpec"]
    assert spec["modelURL"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert spec["vllmConfig"]["extraArgs"] == args[2:]
    assert spec["podAnnotations"] == {"kvplan.io/bundle-digest": f"sha256:{digest}"}
    # KServe InferenceService args patch
    kserve = yaml.safe_load(outputs["kserve"])
    assert kserve["kind"] == "InferenceService"
    assert kserve["spec"]["predictor"]["model"]["args"] == args[1:]
    assert kserve["metadata"]["annotations"]["kvplan.io/bundle-digest"] == f"sha256:{digest}"
    # Ray Serve LLM engine_kwargs (vLLM's engine argument names)
    ray = json.loads(outputs["ray-serve"])
    assert ray["engine_kwargs"] == {
        "dtype": "bfloat16",
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 1,
        "max_model_len": 32768,
        "kv_cache_dtype": "auto",
        "compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE"},
        "kv_cache_memory_bytes": value,
        "gpu_memory_utilization": 0.98,
    }


def test_export_writes_a_file_with_out(capsys, bundle, tmp_path):  # issue 24
    out = tmp_path / "serve.yaml"
    assert main(["export", "vllm-config", str(bundle), "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["kv-cache-memory-bytes"] == 16_315_842_560


def test_out_in_a_missing_folder_names_the_users_path(capsys, bundle, tmp_path):
    # issue 27: the error named the temporary file (".x.yaml.<random>.tmp"), not the path the user gave
    out = tmp_path / "missing" / "x.yaml"
    assert main(["export", "vllm-config", str(bundle), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {out}: cannot write (No such file or directory)")
    assert ".tmp" not in error and error.count("\n") == 1
    assert not (tmp_path / "missing").exists()


def test_a_changed_bundle_is_refused(capsys, bundle, tmp_path):  # issue 24
    copy = Path(shutil.copytree(bundle, tmp_path / bundle.name))
    summary = copy / "SUMMARY.md"
    summary.write_text(summary.read_text() + "\nedited\n")
    out = tmp_path / "serve.yaml"
    assert main(["export", "vllm-config", str(copy), "--out", str(out)]) == 2
    assert "cannot judge: the approved bundle changed" in capsys.readouterr().err
    assert not out.exists()
    assert main(["export", "startup-plan", str(copy), "--out", str(tmp_path / "plans")]) == 2
    assert not (tmp_path / "plans").exists()


def parsed_flags(argv: list[str]) -> dict[str, object]:
    """``--name=value`` → ``{name: value}``; a switch alone (``--enforce-eager``) → ``{name: True}``."""
    flags: dict[str, object] = {}
    for arg in argv:
        assert arg.startswith("--"), arg
        name, eq, value = arg[2:].partition("=")
        flags[name] = value if eq else True
    return flags


def launch_of_every_format(capsys, bundle: Path) -> dict[str, dict[str, object]]:
    """Each launch format parsed back to vLLM flag names and their text (what ``vllm serve`` receives)."""
    out = {name: export(capsys, name, bundle) for name in EXPORTERS if name != "prometheus-rules"}
    config_args: list[str] = []  # vLLM 0.33's --config loader gives "--key", "value" (a switch alone)
    for part in vllm_0_33_load_config_file(yaml.safe_load(out["vllm-config"])):
        if part.startswith("--"):
            config_args.append(part)
        else:
            config_args[-1] += f"={part}"
    [spec] = yaml.safe_load(out["helm-production-stack"])["servingEngineSpec"]["modelSpec"]
    ray = json.loads(out["ray-serve"])
    ray_args = [f"--model={ray['model_loading_config']['model_id']}"]
    for name, value in ray["engine_kwargs"].items():  # EngineArgs names; a config dataclass as a dict
        items = (
            [(f".{leaf}", item) for leaf, item in value.items()] if isinstance(value, dict) else [("", value)]
        )
        for leaf, item in items:
            flag = name.replace("_", "-") + leaf
            ray_args.append(f"--{flag}" if item is True else f"--{flag}={item}")
    return {
        "args": parsed_flags(out["args"].splitlines()[1:]),
        "vllm-config": parsed_flags(config_args),
        "helm-production-stack": parsed_flags(
            [f"--model={spec['modelURL']}", *spec["vllmConfig"]["extraArgs"]]
        ),
        "kserve": parsed_flags(yaml.safe_load(out["kserve"])["spec"]["predictor"]["model"]["args"]),
        "ray-serve": parsed_flags(ray_args),
    }


def approved_from_cli(capsys, log: Path, out: Path) -> Path:
    """The one bundle ``kvplan approve LOG`` writes into ``out`` (Llama-3.1-70B, 0.9 GiB reserve), its output read."""
    argv = ["approve", str(log), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--approver", "x"]
    assert main([*argv, "--out", str(out)]) == 0
    [bundle] = out.iterdir()
    capsys.readouterr()
    return bundle


def test_every_format_carries_every_memory_setting_of_the_key(capsys, tmp_path):  # issue 24
    # the reviewer's launch: the sample TP4 boot with enforce_eager=True and quantization=fp8 in the engine
    # config line and the non-default args; eager mode captures no CUDA graphs and fp8 loads other weights
    sample = SAMPLE_LOG.read_text().splitlines(True)
    sample[6] = sample[6].replace("enforce_eager=False", "enforce_eager=True")
    sample[6] = sample[6].replace("quantization=None", "quantization=fp8")
    sample[1] = sample[1].replace(
        "'max_num_seqs': 256}", "'max_num_seqs': 256, 'enforce_eager': True, 'quantization': 'fp8'}"
    )
    log = tmp_path / "boot.log"
    log.write_text("".join(sample))
    bundle = approved_from_cli(capsys, log, tmp_path / "ev")
    key = evidence.read_bundle(bundle)["compatibility_key"]
    assert (key["enforce_eager"], key["quantization"]) == (True, "fp8")
    # vLLM 0.33's flags (engine/arg_utils.py) of every key field the engine config line shows; block_size is
    # vLLM's default filled in by the reader (not shown), revision None is vLLM's default; the value and the
    # companion utilization are the bundle's launch_flags
    expected = {
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "dtype": "bfloat16",
        "quantization": "fp8",
        "tensor-parallel-size": "4",
        "pipeline-parallel-size": "1",
        "max-model-len": "32768",
        "kv-cache-dtype": "auto",
        "enforce-eager": True,
        "compilation-config.cudagraph_mode": "FULL_AND_PIECEWISE",
        "kv-cache-memory-bytes": "12884377600",
        "gpu-memory-utilization": "0.61",
    }
    launch_flags = evidence.read_bundle(bundle)["decision"]["launch_flags"]
    assert [
        f"--{name}={expected[name]}" for name in ("kv-cache-memory-bytes", "gpu-memory-utilization")
    ] == launch_flags
    for name, flags in launch_of_every_format(capsys, bundle).items():
        assert flags == expected, name


def test_expert_parallel_workers_export_the_flag(capsys, tmp_path):  # issue 24
    # the sample TP4 boot whose workers are named Worker_TP<r>_EP<r>: vLLM 0.33 adds the _EP part to a worker's
    # name only when --enable-expert-parallel is on (multiproc_executor.py setup_proc_title_and_log_prefix)
    log = tmp_path / "boot.log"
    log.write_text(re.sub(r"\((Worker_TP(\d)) pid", r"(\1_EP\2 pid", SAMPLE_LOG.read_text()))
    bundle = approved_from_cli(capsys, log, tmp_path / "ev")
    for name, flags in launch_of_every_format(capsys, bundle).items():
        assert flags["enable-expert-parallel"] is True, name
    # the sample as it is (Worker_TP<r>): no expert parallelism, no flag
    plain = approved_from_cli(capsys, SAMPLE_LOG, tmp_path / "plain")
    assert "enable-expert-parallel" not in launch_of_every_format(capsys, plain)["args"]


def test_data_and_decode_context_parallel_sizes_are_written_above_one():  # issue 24
    key = {"pipeline_parallel_size": 1, "data_parallel_size": 2, "decode_context_parallel_size": 4}
    assert launch_layout(key) == {
        "pipeline-parallel-size": 1,
        "data-parallel-size": 2,
        "decode-context-parallel-size": 4,
    }
    # 1 is vLLM's default in every release; 0.6.6 (whose key shows data_parallel_size 1) has no such flag
    assert launch_layout({"data_parallel_size": 1, "decode_context_parallel_size": 1}) == {}
    with pytest.raises(ValueError, match="data_parallel_size is True: not a value a launch flag takes"):
        launch_layout({"data_parallel_size": True})


def test_every_key_field_is_a_flag_or_where_the_launch_runs():  # issue 24
    # a new key field must be given its vLLM flag (or named as not a launch setting) before export writes it
    assert set(LAYOUT_FLAGS) | NOT_LAUNCH_FLAGS == set(KEY_COLUMNS)
    assert not set(LAYOUT_FLAGS) & NOT_LAUNCH_FLAGS


def test_a_key_value_no_flag_expresses_is_refused(capsys, tmp_path):  # issue 24
    # a CUDA graph mode vLLM 0.33's CUDAGraphMode does not name: no flag writes the approved launch
    log = tmp_path / "boot.log"
    sample = SAMPLE_LOG.read_text()
    log.write_text(sample.replace("CUDAGraphMode.FULL_AND_PIECEWISE", "CUDAGraphMode.FULL_AND_SPLIT", 1))
    bundle = approved_from_cli(capsys, log, tmp_path / "ev")
    for name in ("vllm-config", "args", "helm-production-stack", "kserve", "ray-serve"):
        out = tmp_path / f"{name}.out"
        assert main(["export", name, str(bundle), "--out", str(out)]) == 2
        assert "compatibility key cudagraph_mode is 'FULL_AND_SPLIT'" in capsys.readouterr().err
        assert not out.exists()


# --- the startup plan ---------------------------------------------------------------------------------


def vllm_0_33_applicable(plan: dict, fingerprint: str, current_free_memory: int) -> int | None:
    """vLLM 0.33.0 ``_load_plan`` and ``_applicable_kv_cache_memory_bytes``, repeated from its source."""
    if plan.get("schema") != 1 or plan.get("fingerprint") != fingerprint:
        return None
    kv_bytes, baseline = plan.get("kv_cache_memory_bytes"), plan.get("free_memory_baseline")
    if not isinstance(kv_bytes, int) or not isinstance(baseline, int) or kv_bytes <= 0:
        return None
    if current_free_memory < baseline:
        return None  # "Startup plan not applied": vLLM profiles again
    return kv_bytes


def test_one_plan_file_per_rank_from_its_own_line(capsys, bundle, tmp_path):  # issue 24
    drift = GiB  # --tolerate-drift 1GiB
    assert (
        main(["export", "startup-plan", str(bundle), "--out", str(tmp_path), "--tolerate-drift", "1GiB"]) == 0
    )
    record = evidence.read_bundle(bundle)
    approved = record["decision"]["kv_cache_memory_bytes"]
    files = sorted(tmp_path.glob("startup_plan_*.json"))
    assert sorted(path.name for path in files) == sorted(f"startup_plan_{fp}.json" for fp in FINGERPRINTS)
    for rank, fingerprint in enumerate(FINGERPRINTS):
        plan = json.loads((tmp_path / f"startup_plan_{fingerprint}.json").read_text())
        f_ref = record["ranks"][rank]["init_free_bytes"]
        # B − G − D = 16,315,842,560 − 268,435,456 − 1,073,741,824 = 14,973,665,280 B = 11,424 blocks exactly
        assert plan["kv_cache_memory_bytes"] == 11_424 * 1_310_720 == approved - GiB // 4 - drift
        assert plan["free_memory_baseline"] == f_ref - drift
        assert plan["schema"] == 1 and plan["fingerprint"] == fingerprint
        # vLLM applies it while free memory ≥ the baseline: never above kvplan's drift-adjusted value
        for lost in range(0, drift + 1, drift // 8):
            applied = vllm_0_33_applicable(plan, fingerprint, f_ref - lost)
            assert applied is not None
            assert applied <= adjusted_budget_bytes(approved, f_ref, f_ref - lost, GiB // 4)
        # beyond D vLLM profiles again; another rank's fingerprint is never applied
        assert vllm_0_33_applicable(plan, fingerprint, f_ref - drift - 1) is None
        assert vllm_0_33_applicable(plan, FINGERPRINTS[(rank + 1) % 4], f_ref) is None


def test_a_rank_without_its_saved_line_is_refused(capsys, tmp_path):  # issue 24
    log = tmp_path / "boot.log"
    log.write_text(
        "".join(line for line in PLAN_LOG.read_text().splitlines(True) if FINGERPRINTS[2] not in line)
    )
    layout = evidence.ModelLayout(resolve_model_config("llama-3.1-70b"), {"tp": 4})
    folder = evidence.approve(
        [log], tmp_path / "ev", evidence.Policy(parse_size("0.9GiB")), "QA", layout=layout
    )
    assert main(["export", "startup-plan", str(folder), "--out", str(tmp_path / "plans")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: rank 2: no 'Saved startup plan to")
    assert not list(tmp_path.glob("plans/*.json"))


def test_tolerated_drift_is_for_the_startup_plan_only(capsys, bundle):  # issue 24
    assert main(["export", "args", str(bundle), "--tolerate-drift", "1GiB"]) == 2
    assert "startup-plan only" in capsys.readouterr().err


# --- the gate of a canary that ran the plan --------------------------------------------------------------

PIDS = [448, 449, 450, 451]


def plan_canary(tmp_path: Path, values: list[int], refused_rank: int | None = None) -> Path:
    """The approved boot relaunched with the plan files: each worker logs vLLM 0.33's "Applying persisted
    startup plan" line (``startup_plan.py:153``) and the manual-value line (``gpu_worker.py:665``) instead of
    the suggestion and the "Saved" line; ``refused_rank`` logs "Startup plan not applied" (``:123``)."""
    out = []
    for line in PLAN_LOG.read_text().splitlines(True):
        if "[startup_plan.py:189]" in line:
            continue
        if "[gpu_worker.py:1066]" not in line:
            out.append(line)
            continue
        pid = int(line.split("pid=")[1].split(")")[0])
        rank = PIDS.index(pid)
        free = float(line.split("Free memory on device (")[1].split("/")[0])
        prefix = f"(Worker_TP{rank} pid={pid}) INFO 11-29 10:01:10"
        if rank == refused_rank:
            out.append(
                f"{prefix} [startup_plan.py:123] Startup plan not applied: current free memory ({free - 2:.2f} GiB) "
                f"is below the recorded baseline ({free:.2f} GiB); falling back to full memory profiling.\n"
            )
            out.append(line)
            continue
        value = values[rank]
        out.append(
            f"{prefix} [startup_plan.py:153] Applying persisted startup plan (fingerprint {FINGERPRINTS[rank]}): "
            f"kv_cache_memory_bytes={value} ({value / GiB:.2f} GiB), recorded free-memory baseline {free:.2f} GiB, "
            f"current {free:.2f} GiB. Memory profiling will be skipped.\n"
        )
        out.append(
            f"{prefix} [gpu_worker.py:665] Initial free memory {free:.2f} GiB, reserved {value / GiB:.2f} GiB memory "
            "for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not "
            "respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual "
            "control of KV cache memory size. If OOM'ed, check the difference of initial free memory between the "
            "current run and the previous run where kv_cache_memory_bytes is suggested and update it correspondingly.\n"
        )
    path = tmp_path / "canary.log"
    path.write_text("".join(out))
    return path


def gate_plan(capsys, bundle: Path, log: Path, *argv) -> tuple[int, dict]:
    status = main(["gate", "--approved", str(bundle), str(log), *map(str, argv), "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    return status, checks


def test_gate_checks_every_rank_applied_the_approved_plan(capsys, bundle, tmp_path):  # issue 24
    # the default plan (no drift): B − G = 16,315,842,560 − 268,435,456 → 12,243 blocks = 16,047,144,960 B
    plan_value = 12_243 * 1_310_720
    status, checks = gate_plan(capsys, bundle, plan_canary(tmp_path, [plan_value] * 4))
    plan = checks["startup plan applied on every rank"]
    assert plan["passed"] is True, plan["detail"]
    assert (
        f"rank 2: applied plan {FINGERPRINTS[2]}, kv_cache_memory_bytes={plan_value} = the plan"
        in plan["detail"]
    )
    assert checks["canary ran the approved value"]["applicable"] is False
    # a rank that applied another value fails
    status, checks = gate_plan(
        capsys, bundle, plan_canary(tmp_path, [plan_value] * 3 + [plan_value - 1_310_720])
    )
    assert status == 1 and checks["startup plan applied on every rank"]["passed"] is False
    assert "rank 3: applied plan" in checks["startup plan applied on every rank"]["detail"]
    # the files of `export startup-plan --tolerate-drift 1GiB` (11,424 blocks) with --startup-plan DIR
    plans = tmp_path / "plans"
    assert main(["export", "startup-plan", str(bundle), "--out", str(plans), "--tolerate-drift", "1GiB"]) == 0
    capsys.readouterr()
    log = plan_canary(tmp_path, [11_424 * 1_310_720] * 4)
    status, checks = gate_plan(capsys, bundle, log, "--startup-plan", plans)
    assert checks["startup plan applied on every rank"]["passed"] is True


def test_a_rank_that_did_not_apply_the_plan_fails_naming_its_free_memory(
    capsys, bundle, tmp_path
):  # issue 24
    log = plan_canary(tmp_path, [12_243 * 1_310_720] * 4, refused_rank=1)
    status, checks = gate_plan(capsys, bundle, log)
    assert status == 1
    detail = checks["startup plan applied on every rank"]["detail"]
    assert "rank 1: startup plan not applied: free memory 76.62 GiB below the baseline 78.62 GiB" in detail
