"""Examples that were doctests of kvplan's core modules (issue 23: the docstrings went to the house form)."""

import pandas as pd

from kvplan.checks import Check, format_check, gate_verdict


def test_check_to_dict_and_format():  # issue 23: from kvplan.checks
    check = Check("every rank present", True, "ranks 0-3 of 4")
    assert check.to_dict() == {
        "name": "every rank present",
        "passed": True,
        "detail": "ranks 0-3 of 4",
        "applicable": True,
    }
    assert gate_verdict([Check("a", True, ""), Check("b", None, "")]) is None
    shown = format_check(Check("every rank present", False, "missing rank 3; rank 2: ok"))
    assert shown == "FAIL  every rank present\n      missing rank 3\n      rank 2: ok"


def test_key_examples():  # issue 23: from kvplan.checks.key
    from kvplan.checks.key import (
        _rank_span,
        check_compatibility_key,
        check_outcomes,
        check_ranks_present,
        defaulted_key_fields,
        read_defaulted_key_fields,
    )
    from kvplan.io.metadata import ReadMetadata, provenance_part

    provenance = pd.DataFrame(
        {"column": ["block_size", "model"], "line": [None, 3], "raw": ["default of vLLM 0.26.0", "model=m"]}
    )
    assert defaulted_key_fields(provenance) == frozenset({"block_size"})
    rows = [
        ("a.log", pd.NA, 0, pd.NA, "block_size", 16, "default of vLLM 0.26.0"),
        ("a.log", 3, 0, pd.NA, "model", "m", 120),
    ]
    assert read_defaulted_key_fields(ReadMetadata(provenance_parts=(provenance_part(rows),))) == frozenset(
        {"block_size"}
    )
    none_shown = check_compatibility_key({"model": "m", "gpu_name": None}, {"model": "m", "gpu_name": None})
    assert none_shown.detail == "3 fields unchanged; not shown on either side (not compared): gpu_name"
    quantized = check_compatibility_key({"model": "m"}, {"model": "m", "quantization": "fp8"})
    assert quantized.detail == "quantization: approved None, boot fp8"
    assert check_compatibility_key({"model": "m", "gpu_name": "H100"}, {"model": "m"}).passed is None
    assert check_ranks_present([0, 1], pd.DataFrame({"rank": [0]})).detail == (
        "missing rank 1 (the boot shows rank 0 of approved 0-1)"
    )
    frame = pd.DataFrame(
        {"source": ["c.log"], "rank": [2], "outcome": ["oom"], "error": ["CUDA out of memory"]}
    )
    assert check_outcomes(frame).detail == "c.log rank 2: oom: CUDA out of memory"
    assert (_rank_span([0, 1, 2, 3]), _rank_span([0, 2])) == ("0-3", "0, 2")


GiB = 1 << 30


def test_gate_examples():  # issue 23: from kvplan.checks.gate
    from kvplan.checks.gate import (
        Approved,
        _blocks,
        _lower_value_text,
        check_budget_fits,
        check_reserve_after_warmup,
        check_tokens,
    )

    approved = Approved(30 * GiB, (0,), (30 * GiB,), (42 * GiB,), GiB, 0, None, {})
    frame = pd.DataFrame({"rank": [0], "init_free_bytes": [42 * GiB], "room_bytes": [30 * GiB]})
    assert check_budget_fits(approved, frame, 0).detail.split("; ")[0] == (  # the lower estimate first
        "rank 0: the boot's own room 30 GiB − reserve 1 GiB − 0 B = 29 GiB < 30 GiB "
        "(also 30 GiB − max(0, 42 GiB − 42 GiB) − 0 B = 30 GiB ≥ 30 GiB)"
    )
    warm = pd.DataFrame({"rank": [0], "room_bytes": [31 << 30], "manual_kv_bytes": [None]})
    assert check_reserve_after_warmup(approved, warm).applicable is False
    plan = Approved(1, (0,), (1,), (1,), 0, 0, None, {}, tokens_required=49_152)
    assert check_tokens(plan, pd.DataFrame({"rank": [0], "kv_cache_tokens": [40_000]})).passed is False
    assert _lower_value_text(30_332_682_240, 2, 655_360, 0.9) == (
        "a lower value fits: 28.25 GiB (whole blocks), --kv-cache-memory-bytes=30332682240 "
        "--gpu-memory-utilization=0.90 (limiting rank 2)"
    )
    assert _blocks(12_884_377_600 + 1_000_000, 1_310_720) == _blocks(
        12_884_377_600, 1_310_720
    )  # 9,830 blocks


def test_canary_examples():  # issue 23: from kvplan.checks.canary
    from kvplan.checks.canary import (
        check_canary_value,
        check_running_values,
        check_startup_plan,
        judged_on_complete_evidence,
        manual_values,
    )
    from kvplan.checks.gate import Approved
    from kvplan.checks.key import RANKS_CHECK
    from kvplan.io.prometheus import RunningValue
    from kvplan.io.vllm.manual import APPLIED, StartupPlanLine

    judged = judged_on_complete_evidence(
        [
            Check(RANKS_CHECK, False, "missing rank 3"),
            Check("tokens", False, "rank 2: …; a lower value fits: …"),
        ]
    )
    assert [(c.passed, c.detail) for c in judged] == [
        (None, "cannot judge: missing rank 3"),
        (None, "not judged: the canary misses or adds ranks"),
    ]
    approved = Approved(100, (0,), (100,), (None,), 0, 0, None, {})
    assert check_canary_value(approved, pd.DataFrame({"rank": [0], "manual_kv_bytes": [90]})).detail == (
        "rank 0: ran --kv-cache-memory-bytes=90, approved --kv-cache-memory-bytes=100"
    )
    frame = pd.DataFrame({"rank": [0], "manual_kv_bytes": [100], "manual_kv_max_bytes": [105]})
    assert manual_values(frame) == {0: (100, 105)}
    line = StartupPlanLine(9, "Worker_TP0", 7, APPLIED, "ab" * 8, 100, 50, 40)
    plan = Approved(120, (0,), (120,), (None,), 0, 0, None, {})
    boot = pd.DataFrame({"source": ["c.log"], "rank": [0], "pid": [7]})
    assert check_startup_plan(plan, boot, {"c.log": [line]}, {"ab" * 8: 100}).detail == (
        "rank 0: applied plan abababababababab, kv_cache_memory_bytes=100 = the plan (c.log:9)"
    )
    value = RunningValue("canary.prom:12", "0", 16_106_127_360, 12_288)
    check = check_running_values([value], 12_884_377_600, 1_310_720)[0]
    assert check.passed is False
    assert check.detail.split(";")[0] == (
        "canary.prom:12 engine 0: kv_cache_memory_bytes=16106127360 ≠ the approved 12884377600"
    )
    # 12,288 blocks ≥ 12,884,377,600 // 1,310,720 = 9,830
    assert check.detail.split("; ")[1] == "num_gpu_blocks=12288 ≥ the approved 9830"


def test_launch_examples():  # issue 23: from kvplan.checks.launch
    from kvplan.checks.launch import (
        _room_boot_parts,
        check_footprint,
        check_full_request,
        check_startup_memory,
        largest_length,
        launch_flags,
        request_bytes,
    )
    from kvplan.kvspec import kv_spec

    assert launch_flags([None], [None], 0, 0.6)[1].startswith("no rank's free memory")
    assert check_startup_memory([0], [85_029_615_043], [52_194_590_065], 0, 0.61, "0.33.0").detail == (
        "rank 0: free 48.61 GiB − margin 5.12 MiB − guard 0 B ≥ ceil(79.2 GiB × 0.61) = 48.31 GiB"
    )
    config = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
    spec = kv_spec({**config, "torch_dtype": "bfloat16"}, vllm_version="0.6.6")  # 2 MiB blocks
    assert largest_length(spec, 4 * 2**30, 131072) == 32768  # V0: 2,048 blocks × 16 tokens
    seventy = {**config, "num_hidden_layers": 80, "num_attention_heads": 64, "torch_dtype": "bfloat16"}
    spec = kv_spec(seventy, tp=4, vllm_version="0.33.0")
    assert request_bytes(spec, 32768) // spec.block_bytes == 2049  # 2,048 blocks + the null block
    assert check_full_request(
        kv_spec(seventy, tp=4, vllm_version="0.26.0"), 12_884_377_600, 32768, None
    ).passed
    assert (
        check_footprint([0], 10, [100], [80], 5).detail
        == "rank 0: 10 B + non-KV 80 B = 90 B ≤ free 100 B − guard 5 B"
    )
    ledger = pd.DataFrame(
        {
            "source": ["a", "b"],
            "boot": [0, 0],
            "rank": [0, 0],
            "weights_bytes": [5, 9],
            "activation_peak_bytes": [1, 1],
            "non_torch_bytes": [1, 1],
            "cuda_graph_bytes": [1, 1],
        }
    )
    assert _room_boot_parts(ledger, pd.DataFrame({"source": ["a"], "boot": [0]}, index=[0])) == [8]


def test_export_examples():  # issue 23: from kvplan.export
    from kvplan.export import EXPORTERS, Launch, _helm_name, launch_layout, plan_values

    launch = Launch("ab" * 32, 12_884_377_600, 0.61, {"model": "m", "tensor-parallel-size": 4})
    assert EXPORTERS["args"](launch) == (
        "# kvplan.io/bundle-digest: sha256:" + "ab" * 32 + "\n--model=m\n--tensor-parallel-size=4\n"
        "--kv-cache-memory-bytes=12884377600\n--gpu-memory-utilization=0.61\n"
    )
    # 9,830 − 819.2 blocks → 9,010 blocks of 1,310,720 B; baseline F_ref − 1 GiB
    assert plan_values(12_884_377_600, 0, 2**30, 1_310_720, 52_194_590_065) == (11809587200, 51120848241)
    assert launch_layout({"dtype": "torch.bfloat16", "enforce_eager": True, "cudagraph_mode": "FULL"}) == {
        "dtype": "bfloat16",
        "enforce-eager": True,
        "compilation-config.cudagraph_mode": "FULL",
    }
    assert _helm_name("meta-llama/Llama-3.1-70B-Instruct") == "llama-3-1-70b-instruct"


def test_base_examples():  # issue 23: from kvplan.columns, kvplan.notes, kvplan.releases
    from kvplan.columns import failure_phase, is_known, world_size
    from kvplan.notes import Note, aggregate_notes
    from kvplan.releases import MAMBA_ALIGN_FROM, local_rank0_only, rank0_only_advice, version_tuple

    assert (failure_phase("capture_model"), failure_phase(None)) == (
        "while capturing CUDA graphs (capture_model)",
        "",
    )
    assert world_size({"tensor_parallel_size": 4, "pipeline_parallel_size": 1, "data_parallel_size": 2}) == 8
    assert world_size({"tensor_parallel_size": 4}) is None
    assert [is_known(v) for v in (pd.NA, float("nan"), 0, [1])] == [False, False, True, True]
    note = Note("a.log:7: rank 1 shows no room", code="no-room", file="a.log", line=7)
    assert (note, note.code, note.line, "no room" in note) == (
        "a.log:7: rank 1 shows no room",
        "no-room",
        7,
        True,
    )
    notes = [Note("boot restarted", code="restart", file="a.log", line=n) for n in (5, 9, 12, 40)]
    assert [str(n) for n in aggregate_notes([*notes, "plain", "plain"])] == [
        "a.log: boot restarted: 4 times, first at lines 5, 9, 12",
        "plain",
    ]
    boots = [
        Note(f"a.log:{n}: boot {n}: rank 1 shows no room", code="no-room", file="a.log", line=n)
        for n in (3, 8)
    ]
    assert [str(n) for n in aggregate_notes(boots)] == [
        "a.log: boot 3: rank 1 shows no room: 2 times (the first shown), first at lines 3, 8"
    ]
    assert (version_tuple("v0.11.0"), version_tuple("0.6.6.post1"), version_tuple(None)) == (
        (0, 11, 0),
        (0, 6, 6),
        None,
    )
    assert version_tuple("0.11.1rc2") == (0, 11, 1) and version_tuple("0.26.1") >= MAMBA_ALIGN_FROM
    assert [local_rank0_only(v) for v in ((0, 11, 0), (0, 14, 0), (0, 26, 0))] == [False, True, False]
    assert rank0_only_advice((0, 26, 0)).startswith("vLLM 0.26.0 prints the --kv-cache-memory suggestion")
    assert "RAY_DEDUP_LOGS=0" in rank0_only_advice((0, 7, 2))
    assert "Ray" not in rank0_only_advice((0, 7, 2), False)


def test_units_examples():  # issue 23: from kvplan.units
    from kvplan.units import GiB, format_budget, format_policy_size, parse_size, parse_size_list

    assert (parse_size("256 KiB"), parse_size(4096)) == (262144, 4096)
    assert (format_budget(12 * GiB), format_budget(12_884_377_600), format_budget(0)) == (
        "12 GiB",
        "11.99 GiB",
        "0 B",
    )
    texts = ("512MiB", "1.5GiB", "12GiB", "0B", "1000")
    assert [format_policy_size(parse_size(t)) for t in texts] == [
        "512 MiB",
        "1.5 GiB",
        "12 GiB",
        "0 B",
        "1000 B",
    ]
    assert parse_size_list("18.8GiB, 12GiB") == [20186346291, 12884901888]


def test_escape_examples():  # issue 23: from kvplan.escape
    import pytest

    from kvplan.escape import (
        csv_cell,
        html_text,
        is_safe_component,
        markdown_code,
        markdown_text,
        path_inside,
        safe_component,
        shown_controls,
        terminal_text,
    )

    assert (
        terminal_text("llama\n# KV-cache budget: 40 GiB \x1b[2J")
        == "llama\\n# KV-cache budget: 40 GiB \\x1b[2J"
    )
    assert (csv_cell('=HYPERLINK("http://x")'), csv_cell(-3)) == ('\'=HYPERLINK("http://x")', -3)
    assert shown_controls("a\tb\r\n\u202ec") == "a\\tb\\r\\n\\u202ec"
    assert markdown_text("ok\n# 40 GiB <!-- hide") == "ok\\n# 40 GiB \\<!-- hide"
    assert (markdown_code("inputs/boot.log"), markdown_code("a`b")) == ("`inputs/boot.log`", "``a`b``")
    assert html_text('<img src=x onerror="alert(1)">') == "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    cells = [csv_cell(v) for v in ("@SUM(A1)", "meta-llama/x", None, "\rcmd")]
    assert cells == ["'@SUM(A1)", "meta-llama/x", None, "'\\rcmd"]
    assert [is_safe_component(n) for n in ("gpu-00019.zone-a", "../../escaped", ".")] == [True, False, False]
    assert (safe_component("gpu-7"), safe_component("../../../escaped")) == (
        "gpu-7",
        "unsafe-e9d20ae4e6d4311d",
    )
    with pytest.raises(ValueError, match=r"^/out/\.\./etc: outside /out \(a name from a file is a label"):
        path_inside("/out", "..", "etc")


def test_budget_examples():  # issue 23: from kvplan.budget
    from kvplan.budget import (
        kv_cache_flag,
        largest_utilization,
        launch_flags_text,
        limiting_ranks,
        median_bytes,
        passes_startup_check,
        round_down_to_blocks,
        uniform_budget,
    )

    assert kv_cache_flag(12 * GiB) == "--kv-cache-memory-bytes=12884901888"
    assert launch_flags_text(12_884_377_600, 0.61) == (
        "--kv-cache-memory-bytes=12884377600",
        "--gpu-memory-utilization=0.61",
    )
    assert (passes_startup_check(100, 61, 0.61), passes_startup_check(100, 60, 0.61)) == (True, False)
    assert largest_utilization([80 * GiB], [10 * GiB], GiB) == 0.11  # (10 GiB − 1 GiB − margin) / 80 GiB
    assert round_down_to_blocks(10_000, 4096) == 8192
    assert (median_bytes([12, 18, 30]), median_bytes([12, 17, 18, 30])) == (18, 17)
    assert limiting_ranks(uniform_budget([13 * GiB, 18 * GiB, 13 * GiB], GiB)) == [0, 2]


def test_drift_examples():  # issue 23: from kvplan.drift
    from dataclasses import replace

    from kvplan.drift import drift_budget, per_rank, reference_free_bytes

    frame = pd.DataFrame({"rank": [0, 0, 1], "init_free_bytes": [50, 48, None]})
    assert per_rank(frame, "init_free_bytes", "min") == {0: 48}
    ledger = pd.DataFrame({"rank": [0, 1], "init_free_bytes": [50, 52]})
    rooms = pd.DataFrame(
        {"room_source": ["suggestion", "assumed_uniform"], "init_free_bytes": [50, 50]}, index=[0, 1]
    )
    assert reference_free_bytes(ledger, rooms) == (50, 52)  # rank 1's room is rank 0's: its own free memory
    d = drift_budget(30 * GiB, 42 * GiB, 40 * GiB + 3 * GiB // 4, GiB // 2)
    flags = replace(d, block_bytes=655_360, total_bytes=(47_663_399_567,)).launch_flags  # 46,284 blocks
    assert flags == ("--kv-cache-memory-bytes=30332682240", "--gpu-memory-utilization=0.90")
    d = drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 43 * GiB], guard_bytes=0)
    assert (d.adjusted_uniform_bytes // GiB, d.limiting_rank, d.reprofile_to_raise) == (29, 0, True)


def test_ledger_and_room_examples():  # issue 23: from kvplan.ledger, kvplan.room
    import numpy as np
    import pytest

    from kvplan.ledger import (
        LedgerWarning,
        compatibility_key,
        logged_launch_settings,
        plain_value,
        room_per_rank,
        worst_room_position,
    )
    from kvplan.room import room_evidence
    from tests.test_ledger import budget_from_ledger

    assert (plain_value(np.int64(7)), plain_value(pd.NA)) == (7, None)
    settings = pd.DataFrame({"max_num_batched_tokens": [8192] * 2, "mamba_cache_mode": [None] * 2})
    assert logged_launch_settings(settings) == {"max_num_batched_tokens": 8192}
    frame = pd.DataFrame({"source": ["a.log"], "boot": [0], "rank": [0], "vllm_version": ["0.26.0"]})
    assert compatibility_key(frame)["vllm_version"] == "0.26.0"
    boots = pd.DataFrame(
        {
            "source": ["a.log"] * 4,
            "boot": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "room_bytes": [30, 25, 20, 26],
            "room_source": ["suggestion"] * 4,
            "model": "m",
            "tensor_parallel_size": 2,
            "pipeline_parallel_size": 1,
            "data_parallel_size": 1,
        }
    )
    rooms = room_per_rank(boots)[["room_bytes", "room_max_bytes", "room_spread_bytes", "boots"]]
    assert rooms.values.tolist() == [[20, 30, 10, 2], [25, 26, 1, 2]]  # each rank's worst boot
    assert worst_room_position([30, 20, 25, 20]) == 1
    origin = {(0, "suggested_full_bytes"): (9, "")}
    assert room_evidence({"suggested_full_bytes": 7}, 0, {}, origin, "a.log", []) == (
        7,
        "suggestion",
        (9, ""),
    )
    two = pd.DataFrame(
        {
            "source": ["a.log"] * 2,
            "boot": [0, 0],
            "rank": [0, 1],
            "room_bytes": [13 * GiB, 14 * GiB],
            "room_source": ["suggestion"] * 2,
            "outcome": ["ok", "ok"],
        }
    )
    with pytest.warns(LedgerWarning, match="TP × PP × DP is unknown"):
        budget = budget_from_ledger(two, GiB)
    assert budget.uniform_budget_bytes == 12 * GiB


def test_plan_examples():  # issue 23: from kvplan.plan
    import pytest

    from kvplan import DATA_DIR
    from kvplan.kvspec import kv_spec
    from kvplan.plan import AdmissionPlan, LoadPolicy, ModelLayout, Policy, decide_rooms, read_evidence
    from kvplan.plan.decision import launch_layout_spec, layout_spec, override_check
    from kvplan.plan.inputs import planned_lengths
    from kvplan.plan.reading import InputFileError, renamed, require_boot, require_files

    assert (
        layout_spec(ModelLayout("llama-3.1-8b", {"tp": 1}), {}, room_count=2).bytes_per_token == 131072
    )  # 32×2×8×128×2
    frame = pd.DataFrame({"block_size": [16], "max_num_batched_tokens": [8192]})
    spec = launch_layout_spec(
        ModelLayout("llama-3.1-8b", {"tp": 1}), {"block_size": 16}, frame, frozenset({"block_size"})
    )
    assert spec.block_bytes == 2097152  # vLLM's default 16 × 131,072 B
    config = {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}
    spec = kv_spec({**config, "torch_dtype": "bfloat16"}, tp=4, num_gpu_blocks_override=4096)
    assert override_check(spec, 4 * 2**30).passed is False  # 4,096 × 1,310,720 B = 5 GiB > 4 GiB
    with pytest.raises(ValueError, match=r"^max_preemptions must be a count ≥ 0, got -1$"):
        LoadPolicy(max_preemptions=-1)
    with pytest.raises(ValueError, match=r"^max_capacity_loss_pct must be a percentage ≥ 0, got -2\.0$"):
        LoadPolicy(max_capacity_loss_pct=-2.0)
    assert planned_lengths(32768, AdmissionPlan(6, 8192)) == [8192, 32768]
    assert decide_rooms([13 * GiB, 14 * GiB], Policy(GiB)).room_sources == ("given", "given")
    evidence = read_evidence([DATA_DIR / "boots" / "four-rank" / "boot.log"])
    assert sorted(evidence.ledger["rank"].tolist()) == [0, 1, 2, 3]
    with pytest.raises(InputFileError) as refused:
        require_boot(pd.DataFrame(), ["garbage.log"])
    assert str(refused.value) == (
        "garbage.log: no vLLM boot found: expected vLLM startup lines such as 'Free memory on device (…) on "
        "startup', 'Available KV cache memory: … GiB' or 'GPU KV cache size: N tokens'"
    )
    with pytest.raises(InputFileError, match=r"^no/such\.log: no such file \(BOOT_LOG\)$"):
        require_files(["no/such.log"], "BOOT_LOG")
    names = {"inputs/a.log": "x", "inputs/a.log.1": "y"}
    assert renamed("inputs/a.log.1: bad; inputs/a.log: ok", names) == "y: bad; x: ok"


def test_package_examples():  # issue 23: from kvplan/__init__.py
    import pytest

    from kvplan import DATA_DIR, MODELS_DIR, lazy_names

    assert (MODELS_DIR / "llama-3.1-70b.json").exists() and (DATA_DIR / "README.md").exists()
    names = lazy_names("kvplan.io", {"read_ledger_csv": "ledger_csv"})
    assert names("read_ledger_csv").__module__ == "kvplan.io.ledger_csv"
    with pytest.raises(AttributeError, match=r"^module 'kvplan\.io' has no attribute 'read_everything'$"):
        names("read_everything")


def test_more_examples():  # issue 23: from kvplan.checks, kvplan.checks.key, kvplan.units
    from kvplan.checks.key import check_compatibility_key
    from kvplan.units import MiB, format_policy_size, format_size, parse_size

    assert gate_verdict([Check("a", True, ""), Check("b", None, "no plan", applicable=False)]) is True
    differs = check_compatibility_key({"model": "m", "block_size": 16}, {"model": "m", "block_size": 32})
    assert differs.detail == "block_size: approved 16, boot 32"
    assert (parse_size("12GiB"), parse_size("12g")) == (12884901888, 12000000000)
    sizes = [format_size(n) for n in (19219978650, 262144, -150 * MiB, 512)]
    assert sizes == ["17.9 GiB", "256 KiB", "-150 MiB", "512 B"]
    assert (format_policy_size(parse_size("0.9GiB")), format_size(parse_size("0.9GiB"))) == (
        "0.9 GiB",
        "921.6 MiB",
    )


def test_own_gate_names_the_largest_guard_that_passes():  # issue 23: largest_guard went into check_own_gate
    from kvplan.checks.gate import Approved, check_own_gate

    # the drift rule gives 30 GiB − max(0, 42 − 42 GiB) − guard: with the recorded 2 GiB guard 28 GiB < 29 GiB,
    # without it 30 GiB ≥ 29 GiB, so the largest guard that passes is 30 − 29 = 1 GiB
    approved = Approved(29 * GiB, (0,), (30 * GiB,), (42 * GiB,), GiB, 2 * GiB, None, {})
    check = check_own_gate(approved, pd.DataFrame({"rank": [0], "init_free_bytes": [42 * GiB]}))
    assert check is not None and check.passed is False
    assert "(its weakest rank keeps 1,073,741,824 B (1 GiB) above the approved value)" in check.detail
    assert "approve again with --guard 1,073,741,824 B or less, or --guard 0" in check.detail


def test_room_and_units_small_examples():  # issue 23: from kvplan.room._next_step, kvplan.units.bytes_to_gib
    from kvplan.room import _next_step
    from kvplan.units import bytes_to_gib

    frame = pd.DataFrame({"source": ["a.log"], "boot": [0], "outcome": ["incomplete"]})
    assert _next_step(frame, frame) == (
        "Give the whole log, through its 'Application startup complete' line: it stops before startup completed."
    )
    assert bytes_to_gib(13 * GiB // 2) == 6.5
