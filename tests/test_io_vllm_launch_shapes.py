"""Launch shapes of 2026 (issue 26): worker names with several group ranks, one process's own lines,
auto-fit, the lengths in failure lines, excerpts as people paste them; and two hosts reusing pids (issue 25).

Lines are built from vLLM's format strings (:mod:`tests.fidelity_lines`) for the first, a middle and the
last release that prints each form. Worker names: ``v1/executor/multiproc_executor.py``
``setup_proc_title_and_log_prefix`` (0.10.2+): ``Worker`` + ``_DP{d}`` (DP > 1) + ``_PP{p}`` (PP > 1) +
``_PCP{c}`` (PCP > 1, 0.12+) + ``_TP{t}`` (TP > 1) + ``_DCP{k}`` (DCP > 1) + ``_EP{e}`` (expert parallel);
vLLM lays the world out as ``arange(world).reshape(-1, DP, PP, PCP, TP)``, so a global rank is
``((dp·PP + pp)·PCP + pcp)·TP + tp``.
"""

import json

import pandas as pd
import pytest

from kvplan.cli import main
from kvplan.room import read_vllm_log_rooms
from kvplan.units import parse_size
from tests.fidelity_lines import engine_config, engine_process, log, vllm_line

WORKER_NAMES = ["0.10.2", "0.20.0", "0.33.0"]  # Worker_… names, first .. last
DONE = "init engine (profile, create kv cache, warmup model) took 41.20 seconds"


def gib(text):
    return parse_size(f"{text}GiB")


def rank_message(version, free="70.0"):
    """A line every rank prints in ``version``: 'Available KV cache memory' before 0.11.1 (every rank),
    the DEBUG 'Initial free memory' line in 0.11.1-0.25, the --kv-cache-memory suggestion from 0.26."""
    parts = tuple(int(x) for x in version.split(".")[:3])
    if parts < (0, 11, 1):
        return "INFO", "Available KV cache memory: 20.5 GiB"
    if parts < (0, 26, 0):
        return "DEBUG", f"Initial free memory: {free} GiB; Requested memory: 0.900000 (util), 71.27 GiB"
    return "INFO", suggestion(free)


def suggestion(free, full=50_000_000_000, graph="0.49"):
    """v1/worker/gpu_worker.py compile_or_warm_up_model's suggestion, 0.27+ wording."""
    return (
        f"Free memory on device ({free}/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). "
        "Actual usage is 15.7 GiB for consumed memory (weights + non-torch), 1.45 GiB for peak activation, and "
        f"{graph} GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
        f"`--kv-cache-memory=49000000000` (45.63 GiB) to fit into requested memory, or `--kv-cache-memory={full}` "
        f"({round(full / 2**30, 2)} GiB) to fully utilize gpu memory. Current kv cache memory in use is 46.0 GiB."
    )


def workers(version, names, first_pid=300):
    """One rank line from each worker name, pids from ``first_pid``."""
    level, message = rank_message(version)
    return [
        vllm_line(version, message, name, first_pid + index, level, "gpu_worker.py:1")
        for index, name in enumerate(names)
    ]


def ledger_of(text):
    ledger, meta = read_vllm_log_rooms(text)
    return ledger, [str(note) for note in meta.warnings]


# --- worker names with several group ranks ----------------------------------------------------------


@pytest.mark.parametrize("version", WORKER_NAMES)
def test_pp_by_tp_workers_without_the_engine_config_are_all_read(version):
    # issue 26: an excerpt of Worker_PP{p}_TP{t} lines without the engine-config line was "no vLLM boot
    # found"; PP and TP are bounded by the largest ranks seen + 1 (2 and 2): rank = pp·2 + tp
    names = ["Worker_PP0_TP0", "Worker_PP0_TP1", "Worker_PP1_TP0", "Worker_PP1_TP1"]
    ledger, warnings = ledger_of(log(*workers(version, names)))
    assert ledger["rank"].tolist() == [0, 1, 2, 3]
    assert ledger["process"].tolist() == names
    assert ledger["pp_rank"].tolist() == [0, 0, 1, 1] and ledger["tp_rank"].tolist() == [0, 1, 0, 1]
    assert any("PP ≥ 2, TP ≥ 2" in w and "pipeline_parallel_size=N" in w for w in warnings), warnings


@pytest.mark.parametrize("version", ["0.20.0", "0.26.0", "0.33.0"])
def test_data_parallel_workers_with_expert_parallel_keep_every_dp_rank(version):
    # issue 26: Worker_DP1_TP*_EP* rows were dropped. DP=2, TP=2 stated by the engine config; EP ranks
    # run over DP × TP (0..3) and do not move a global rank: rank = dp·2 + tp
    config = vllm_line(version, engine_config(version, tp=2, data_parallel_size=2), "EngineCore_DP0", 200)
    names = ["Worker_DP0_TP0_EP0", "Worker_DP0_TP1_EP1", "Worker_DP1_TP0_EP2", "Worker_DP1_TP1_EP3"]
    ledger, warnings = ledger_of(log(config, *workers(version, names)))
    assert ledger["rank"].tolist() == [0, 1, 2, 3]
    assert ledger["dp_rank"].tolist() == [0, 0, 1, 1]
    assert not any("no process prefix that names a rank" in w for w in warnings), warnings
    assert not any("parallel size" in w for w in warnings), warnings  # TP stated: nothing bounded


@pytest.mark.parametrize("version", WORKER_NAMES)
def test_a_lone_dp_worker_line_is_read_with_its_group_ranks(version):
    # issue 26: one Worker_DP3_TP1 line gave "no vLLM boot found". TP ≥ 2 (TP rank 1 seen), PP = 1
    # (no PP part): rank = ((3·1 + 0)·1 + 0)·2 + 1 = 7
    ledger, _warnings = ledger_of(log(*workers(version, ["Worker_DP3_TP1"])))
    assert ledger[["rank", "dp_rank", "tp_rank", "pp_rank"]].values.tolist() == [[7, 3, 1, 0]]


@pytest.mark.parametrize("version", WORKER_NAMES)
def test_pipeline_workers_without_a_tp_part_have_tp_one(version):
    # issue 26: Worker_PP1/Worker_PP2 lines were dropped for want of a TP size; no _TP part: TP = 1
    ledger, warnings = ledger_of(log(*workers(version, ["Worker_PP0", "Worker_PP1", "Worker_PP2"])))
    assert ledger["rank"].tolist() == [0, 1, 2] and ledger["pp_rank"].tolist() == [0, 1, 2]
    assert any("PP ≥ 3" in w for w in warnings)


@pytest.mark.parametrize("version", ["0.12.0", "0.20.0", "0.33.0"])
def test_prefill_context_parallel_workers(version):
    # PCP (0.12+) is in no engine-config line: PCP ≥ 2 and TP ≥ 2 bounded from the names:
    # rank = pcp·2 + tp
    names = ["Worker_PCP0_TP0", "Worker_PCP0_TP1", "Worker_PCP1_TP0", "Worker_PCP1_TP1"]
    ledger, warnings = ledger_of(log(*workers(version, names)))
    assert ledger["rank"].tolist() == [0, 1, 2, 3]
    assert any("PCP ≥ 2, TP ≥ 2" in w for w in warnings), warnings


def test_the_0_10_1_worker_names():
    # 0.10.1 only: "VllmWorker PP1_TP0" (vllm-log-formats.md §7); TP = PP = 2 stated: rank = pp·2 + tp
    version = "0.10.1"
    config = vllm_line(version, engine_config(version, tp=2, pipeline_parallel_size=2), "EngineCore_0", 200)
    names = ["VllmWorker PP0_TP0", "VllmWorker PP0_TP1", "VllmWorker PP1_TP0", "VllmWorker PP1_TP1"]
    ledger, _warnings = ledger_of(log(config, *workers(version, names)))
    assert ledger["rank"].tolist() == [0, 1, 2, 3]


def test_a_budget_refuses_bounded_sizes_naming_what_is_unknown(tmp_path, capsys):
    # the ledger shows every row; a budget needs TP × PP × DP stated to know every rank is there
    path = tmp_path / "excerpt.log"
    version = "0.33.0"
    path.write_text(log(*workers(version, ["Worker_PP0_TP0", "Worker_PP1_TP1"]), vllm_line(version, DONE)))
    assert main(["budget", str(path), "--reserve", "1GiB"]) == 2
    error = capsys.readouterr().err
    assert "tensor_parallel_size" in error and "pipeline_parallel_size" in error and "engine-config" in error


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
@pytest.mark.parametrize("command", ["budget", "approve"])
def test_dp_named_workers_without_a_stated_dp_size_are_refused(version, command, tmp_path, capsys):
    # issue 26: DP=2, PP=2, TP=4 with expert parallelism: 16 workers Worker_DP{d}_PP{p}_TP{t}_EP{e}
    # (EP ranks over DP × TP: e = d·4 + t). With data_parallel_size cut from the engine-config line and
    # the DP1 workers dropped, DP was read as 1, so the 8 DP0 ranks looked like the whole world and
    # 'budget' printed a number (exit 0). vLLM adds '_DP{d}' only when DP > 1: the DP size is unknown
    config = engine_config(version, tp=4, pipeline_parallel_size=2, data_parallel_size=2)
    config = config.replace(", data_parallel_size=2", "")
    names = [f"Worker_DP0_PP{p}_TP{t}_EP{t}" for p in range(2) for t in range(4)]
    path = tmp_path / "dp.log"
    path.write_text(
        log(
            vllm_line(version, config, "EngineCore_DP0", 200),
            *workers(version, names),
            vllm_line(version, DONE),
        )
    )
    flags = ["--approver", "t", "--out", str(tmp_path / "out")] if command == "approve" else []
    assert main([command, str(path), "--reserve", "1GiB", *flags]) == 2
    error = capsys.readouterr().err
    assert "do not show data_parallel_size" in error and "data_parallel_size=N" in error
    assert "engine-config" in error and "DP > 1" in error
    assert not list(tmp_path.glob("out/**/budget.json"))  # approve wrote no budget


# --- group-rank columns: pcp_rank, dcp_rank, ep_rank beside dp/pp/tp (issue 26) --------------------------

GROUPS = ["rank", "dp_rank", "pp_rank", "pcp_rank", "tp_rank", "dcp_rank", "ep_rank"]


def group_ranks(ledger):
    """Each row's global and group ranks, NA as None."""
    return [
        [None if value is pd.NA else int(value) for value in row] for row in ledger[GROUPS].values.tolist()
    ]


@pytest.mark.parametrize("version", ["0.11.1", "0.20.0", "0.33.0"])  # _DCP parts: 0.11.1 .. last
def test_dp_by_tp_workers_with_dcp_and_ep_keep_each_group_rank(version):
    # issue 26: DP=2, TP=2, DCP=2 stated, --enable-expert-parallel: names Worker_DP{d}_TP{t}_DCP{k}_EP{e}.
    # DCP splits each TP group into groups of 2 (= TP here): dcp = t. EP spans DP × PCP × TP in that
    # order: e = (d·1 + 0)·2 + t. No _PP/_PCP part: one member each, rank 0. rank = (d·1 + 0)·2 + t
    dims = {"data_parallel_size": 2, "decode_context_parallel_size": 2}
    config = vllm_line(version, engine_config(version, tp=2, **dims), engine_process(version, 0), 200)
    names = [f"Worker_DP{d}_TP{t}_DCP{t}_EP{2 * d + t}" for d in (0, 1) for t in (0, 1)]
    ledger, _warnings = ledger_of(log(config, *workers(version, names)))
    assert group_ranks(ledger) == [
        [0, 0, 0, 0, 0, 0, 0],
        [1, 0, 0, 0, 1, 1, 1],
        [2, 1, 0, 0, 0, 0, 2],
        [3, 1, 0, 0, 1, 1, 3],
    ]


@pytest.mark.parametrize("version", ["0.12.0", "0.20.0", "0.33.0"])  # _PCP parts: 0.12 .. last
def test_pcp_workers_keep_their_pcp_rank(version):
    # issue 26: Worker_PCP{c}_TP{t}, sizes bounded from the names (PCP ≥ 2, TP ≥ 2): rank = c·2 + t; no
    # _DP/_PP/_DCP/_EP part: those groups have one member (EP off), rank 0
    names = [f"Worker_PCP{c}_TP{t}" for c in (0, 1) for t in (0, 1)]
    ledger, _warnings = ledger_of(log(*workers(version, names)))
    assert group_ranks(ledger) == [[2 * c + t, 0, 0, c, t, 0, 0] for c in (0, 1) for t in (0, 1)]


@pytest.mark.parametrize("version", WORKER_NAMES)
def test_a_tp_only_worker_name_says_every_other_group_has_one_member(version):
    # issue 26: Worker_TP{t} (TP=4 stated) lacks every other part: DP, PP, PCP, DCP and EP are groups of
    # one, so their ranks are 0, not unknown
    config = vllm_line(version, engine_config(version, tp=4), engine_process(version), 200)
    ledger, _warnings = ledger_of(log(config, *workers(version, [f"Worker_TP{t}" for t in range(4)])))
    assert group_ranks(ledger) == [[t, 0, 0, 0, t, 0, 0] for t in range(4)]


@pytest.mark.parametrize("version", ["0.12.0", "0.26.0", "0.33.0"])
def test_the_rank_line_states_the_pcp_rank(version):
    # issue 26: parallel_state.py's "rank R in world size W is assigned as DP rank d, PP rank p, PCP rank c,
    # TP rank t, EP rank N/A, EPLB rank N/A" (PCP from 0.12) ties pid 300 to rank 3 = c·2 + t = 1·2 + 1;
    # its EP rank is not read (the group exists in some releases without expert parallelism): NA, as no
    # name of this process (bare 'Worker') says EP is off
    assign = (
        "rank 3 in world size 4 is assigned as DP rank 0, PP rank 0, PCP rank 1, TP rank 1, "
        "EP rank N/A, EPLB rank N/A"
    )
    level, message = rank_message(version)
    lines = [vllm_line(version, assign, "Worker", 300), vllm_line(version, message, "Worker", 300, level)]
    ledger, _warnings = ledger_of(log(*lines))
    assert group_ranks(ledger) == [[3, 0, 0, 1, 1, None, None]]


@pytest.mark.parametrize("version", ["0.7.0", "0.8.5", "0.10.0"])  # "VllmWorker rank=N": 0.7.0-0.10.0
def test_workers_named_by_global_rank_only_leave_unknown_groups_unknown(version):
    # issue 26: "VllmWorker rank=N" names no group. TP=2 stated: t = rank % 2, p = 0, d = 0; PCP came in
    # 0.12, so before it every rank's PCP rank is 0; DCP size and EP are not stated: rank 1's DCP and EP
    # ranks are unknown (NA), rank 0's are 0 (rank 0 is first in every group)
    config = vllm_line(version, engine_config(version, tp=2), engine_process(version), 200)
    names = ["VllmWorker rank=0", "VllmWorker rank=1"]
    lines = [
        vllm_line(version, "Available KV cache memory: 20.5 GiB", name, 300 + i)
        for i, name in enumerate(names)
    ]
    ledger, _warnings = ledger_of(log(config, *lines))
    assert group_ranks(ledger) == [[0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 1, None, None]]


def test_ledger_wide_shows_the_group_rank_columns(tmp_path, capsys):
    # issue 26: --wide shows every column with a value; the 120-column table keeps its columns
    version = "0.33.0"
    path = tmp_path / "dcp.log"
    config = vllm_line(
        version, engine_config(version, tp=2, decode_context_parallel_size=2), "EngineCore", 200
    )
    path.write_text(log(config, *workers(version, ["Worker_TP0_DCP0", "Worker_TP1_DCP1"])))
    assert main(["ledger", str(path), "--wide"]) == 0
    header, first, second = capsys.readouterr().out.splitlines()[-3:]
    columns = header.split()
    assert columns[columns.index("dp_rank") + 1 : columns.index("dp_rank") + 4] == [
        "pcp_rank",
        "dcp_rank",
        "ep_rank",
    ]
    at = columns.index("dcp_rank")
    assert [first.split()[at], second.split()[at]] == ["0", "1"]
    assert main(["ledger", str(path)]) == 0
    assert "dcp_rank" not in capsys.readouterr().out


# --- two hosts whose containers reuse pids (issue 25) -----------------------------------------------


@pytest.mark.parametrize("version", ["0.26.0", "0.30.0", "0.33.0"])
def test_two_hosts_reusing_pids_are_read_apart_by_their_names(version, tmp_path, capsys):
    # issue 25: TP=4 over two nodes, each node's workers pids 100 and 101: refused as "rank(s) 0, 1
    # missing" although all four printed their room. Each rank's room is its suggestion (50e9 + rank B)
    config = vllm_line(version, engine_config(version, tp=4), "EngineCore", 50)
    ranks = [
        vllm_line(version, suggestion("70.0", 50_000_000_000 + rank), f"Worker_TP{rank}", 100 + rank % 2)
        for rank in range(4)
    ]
    text = log(config, *ranks, vllm_line(version, DONE, "EngineCore", 50))
    ledger, warnings = ledger_of(text)
    assert ledger["rank"].tolist() == [0, 1, 2, 3]
    assert ledger["pid"].tolist() == [100, 101, 100, 101]
    assert ledger["room_bytes"].tolist() == [50_000_000_000 + rank for rank in range(4)]
    assert any("pid 100 printed as Worker_TP0 and as Worker_TP2" in w for w in warnings), warnings
    path = tmp_path / "two-nodes.log"
    path.write_text(text)
    assert main(["budget", str(path), "--reserve", "1GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["uniform_budget_bytes"] == 50_000_000_000 - 2**30


# --- one process's own lines are one observation --------------------------------------------------------


@pytest.mark.parametrize("version", ["0.26.0", "0.30.0", "0.33.0"])
def test_one_process_printing_its_own_lines_is_one_observation(version):
    # issue 26: rank 0's 'Available KV cache memory', two graph captures and its suggestion were split
    # into conflicting observations and one kept whole. One process, one room (its suggestion):
    # every field kept, no conflict warning
    pid, process = 300, "Worker_TP0"
    lines = [
        vllm_line(version, engine_config(version, tp=2), "EngineCore", 200),
        vllm_line(version, "Model loading took 15.27 GiB memory and 4.781181 seconds", process, pid),
        vllm_line(version, "Available KV cache memory: 46.5 GiB", process, pid),
        vllm_line(version, "Graph capturing finished in 5 secs, took 0.30 GiB", process, pid),
        vllm_line(version, "Graph capturing finished in 3 secs, took 0.49 GiB", process, pid),
        vllm_line(version, suggestion("70.0"), process, pid),
        vllm_line(version, suggestion("69.0", 49_000_000_000), "Worker_TP1", 301),
        vllm_line(version, DONE, "EngineCore", 200),
    ]
    ledger, warnings = ledger_of(log(*lines))
    row = ledger.iloc[0]
    assert (row["available_kv_bytes"], row["suggested_full_bytes"]) == (gib("46.5"), 50_000_000_000)
    assert (row["init_free_bytes"], row["kv_in_use_bytes"], row["activation_peak_bytes"]) == (
        gib("70.0"),
        gib("46.0"),
        gib("1.45"),
    )
    assert row["cuda_graph_bytes"] == gib("0.49")  # the last capture, as the suggestion counts it
    assert not any("observations of this rank conflict" in w for w in warnings), warnings


def test_two_processes_with_other_values_still_conflict_naming_both_lines():
    # two pids claim rank 1 with other rooms: the lower is kept and the warning names both lines
    version = "0.33.0"
    lines = [
        vllm_line(version, engine_config(version, tp=2), "EngineCore", 200),
        vllm_line(version, suggestion("70.0"), "Worker_TP0", 300),
        vllm_line(version, suggestion("70.0", 48_000_000_000), "Worker_TP1", 301),
        vllm_line(version, suggestion("70.0", 47_000_000_000), "Worker_TP1", 302),
        vllm_line(version, DONE, "EngineCore", 200),
    ]
    ledger, warnings = ledger_of(log(*lines))
    assert ledger["room_bytes"].tolist() == [50_000_000_000, 47_000_000_000]
    assert any("pid 301 from <text>:3" in w and "pid 302 from <text>:4" in w for w in warnings), warnings


# --- auto-fit and the lengths failure lines print ----------------------------------------------------

FROM_0_27 = ["0.27.0", "0.30.0", "0.33.0"]


@pytest.mark.parametrize("version", FROM_0_27)
def test_max_model_len_minus_one_is_the_length_vllm_fitted(version):
    # issue 26: --max-model-len -1 (0.27+) was read as the launch's length and the concurrency paired
    # with -1; vLLM fitted 262,144 (kv_cache_utils.py: "Maximum concurrency for %s tokens per request")
    args = "non-default args: {'model': 'Qwen/Qwen3-8B', 'max_model_len': -1}"
    lines = [
        vllm_line(version, args, "APIServer", 100, where="utils.py:1"),
        vllm_line(version, "Available KV cache memory: 46.5 GiB", "EngineCore", 200),
        vllm_line(version, "GPU KV cache size: 393,216 tokens", "EngineCore", 200),
        vllm_line(version, "Maximum concurrency for 262,144 tokens per request: 1.50x", "EngineCore", 200),
    ]
    ledger, _warnings = ledger_of(log(*lines))
    row = ledger.iloc[0]
    assert (row["max_model_len"], row["max_concurrency"]) == (262_144, 1.5)


@pytest.mark.parametrize(
    ("version", "tail"),
    [
        ("0.27.0", "available GPU memory"),
        ("0.31.0", "available GPU memory"),
        ("0.33.0", "available KV cache memory (30.0 GiB GPU)"),
    ],
)
def test_auto_fit_keeping_the_full_context_states_the_length(version, tail):
    # kv_cache_utils.py (0.27-0.31) / kv_cache_planning.py (0.32+): "Auto-fit max_model_len: full model
    # context length %d fits in …"
    args = "non-default args: {'model': 'Qwen/Qwen3-8B', 'max_model_len': -1}"
    fit = f"Auto-fit max_model_len: full model context length 40960 fits in {tail}"
    lines = [
        vllm_line(version, args, "APIServer", 100, where="utils.py:1"),
        vllm_line(version, fit, "EngineCore", 200),
        vllm_line(version, "Available KV cache memory: 46.5 GiB", "EngineCore", 200),
    ]
    ledger, _warnings = ledger_of(log(*lines))
    assert ledger.iloc[0]["max_model_len"] == 40960


@pytest.mark.parametrize("version", ["0.9.2", "0.20.0", "0.33.0"])
def test_the_length_in_the_too_small_kv_cache_error_is_read(version):
    # v1/core/kv_cache_utils.py _check_enough_kv_cache_memory: "To serve at least one request with the
    # model's max seq len (%d), (%s GiB KV cache is needed, …" — a fragment of the traceback alone is a
    # failed boot, its length and available memory read, and where it failed named
    error = (
        "ValueError: To serve at least one request with the model's max seq len (131072), (16.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (6.91 GiB). Based on the available memory, "
        "the estimated maximum model length is 56576. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )
    frame = (
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py", line 759, in '
        "_check_enough_kv_cache_memory"
    )
    ledger, _warnings = ledger_of(
        log("Traceback (most recent call last):", frame, "    raise ValueError(", error)
    )
    row = ledger.iloc[0]
    assert (row["outcome"], row["max_model_len"], row["available_kv_bytes"]) == ("error", 131072, gib("6.91"))
    assert row["failed_in"] == "_check_enough_kv_cache_memory"


@pytest.mark.parametrize("version", ["0.5.0", "0.7.3", "0.10.2"])
def test_the_length_in_the_v0_too_small_kv_cache_error_is_read(version):
    # worker/worker.py raise_if_cache_size_invalid: "The model's max seq len (%d) is larger than the maximum
    # number of tokens that can be stored in KV cache (%d)"
    error = (
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
        "stored in KV cache (21520). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    )
    ledger, _warnings = ledger_of(log(vllm_line(version, error, level="ERROR", where="engine.py:1")))
    assert ledger.iloc[0][["outcome", "max_model_len", "kv_cache_tokens"]].tolist() == ["error", 32768, 21520]


# --- excerpts as people paste them ---------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.8.5", "0.20.0", "0.33.0"])
@pytest.mark.parametrize("time", ["...", "…"])
def test_timestamps_replaced_by_dots_keep_the_header(version, time):
    # issue 26: with "..." for the time the header was part of the message, so the anchored families
    # (^Maximum concurrency) missed and the level was lost
    lines = [
        vllm_line(version, "Available KV cache memory: 20.5 GiB", "EngineCore", 9).replace(
            "11-29 10:00:00", time
        ),
        vllm_line(
            version, "Maximum concurrency for 32,768 tokens per request: 3.05x", "EngineCore", 9
        ).replace("11-29 10:00:00", time),
    ]
    ledger, _warnings = ledger_of(log(*lines))
    assert ledger.iloc[0][["max_model_len", "max_concurrency"]].tolist() == [32768, 3.05]


def test_nested_prefixes_name_the_inner_process():
    # EngineCore relays its Ray workers' lines: "(EngineCore pid=1) (RayWorkerWrapper pid=2, ip=…)"
    version = "0.20.0"
    inner = vllm_line(
        version, "world_size=2 rank=1 local_rank=1 distributed_init_method=env://", "RayWorkerWrapper", 22
    )
    inner = inner.replace("(RayWorkerWrapper pid=22)", "(RayWorkerWrapper pid=22, ip=10.0.0.2)")
    avail = vllm_line(version, "Available KV cache memory: 20.5 GiB", "RayWorkerWrapper", 22)
    avail = avail.replace("(RayWorkerWrapper pid=22)", "(RayWorkerWrapper pid=22, ip=10.0.0.2)")
    lines = [
        vllm_line(version, engine_config(version, tp=2), "EngineCore_DP0", 1),
        *(f"(EngineCore_DP0 pid=1) {line}" for line in (inner, avail)),
    ]
    ledger, _warnings = ledger_of(log(*lines))
    one = ledger[ledger["rank"] == 1].iloc[0]
    assert (one["pid"], one["available_kv_bytes"]) == (22, gib("20.5"))


def test_an_only_boot_cut_short_is_not_told_to_leave_itself_out(tmp_path, capsys):
    # issue 26: "leave that boot out" for the only boot; it was cut short: give the whole log
    version = "0.33.0"
    path = tmp_path / "cut.log"
    path.write_text(
        log(
            vllm_line(version, engine_config(version, tp=1), "EngineCore", 9),
            vllm_line(version, suggestion("70.0"), "EngineCore", 9),
        )
    )
    assert main(["budget", str(path), "--reserve", "1GiB"]) == 2
    error = capsys.readouterr().err
    assert "Leave" not in error and "give the whole log" in error.lower()


def test_the_ledger_table_says_why_a_row_is_not_ok(tmp_path, capsys):
    # issue 26: `ledger` showed "incomplete" with no reason (the reason was only in --json's "error")
    version = "0.33.0"
    path = tmp_path / "cut.log"
    weights = "Model loading took 15.27 GiB memory and 4.781181 seconds"
    path.write_text(log(*(vllm_line(version, m, "EngineCore", 9) for m in (engine_config(version), weights))))
    assert main(["ledger", str(path)]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[-1] == "reason"
    assert row.split()[-4:] == [
        "cut",
        "before",
        "KV",
        "sizing",
    ]  # the log stops before the KV cache was sized


# --- the real CUDA graph capture wins over the profiling-time estimate (issue 26) --------------------------

ESTIMATE = (
    "Estimated CUDA graph memory: 2.50 GiB total"  # gpu_model_runner.py profile_cudagraph_memory, 0.18+
)
CAPTURE = "Graph capturing finished in 12 secs, took 3.10 GiB"  # capture_model (and the V2 runner's)


def budget_of(tmp_path, capsys, text):
    """``kvplan budget --reserve 1GiB --json`` of ``text``: its uniform budget [bytes]."""
    path = tmp_path / "graphs.log"
    path.write_text(text)
    assert main(["budget", str(path), "--reserve", "1GiB", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["uniform_budget_bytes"]


@pytest.mark.parametrize("version", ["0.20.0", "0.26.0", "0.33.0"])
def test_the_real_capture_corrects_the_available_kv_figure_not_the_estimate(version, tmp_path, capsys):
    # issue 26: vLLM subtracted the 2.50 GiB estimate before 'Available KV cache memory: 40.00 GiB' (0.20+
    # default); the capture then took 3.10 GiB, 0.60 GiB more: room = 40.00 − (3.10 − 2.50) GiB. Taking
    # the estimate as the graphs' memory would leave the room at 40.00 GiB, 0.60 GiB too high
    engine = engine_process(version)
    lines = [
        vllm_line(version, engine_config(version), engine, 200),
        *(
            vllm_line(version, message, engine, 200)
            for message in (ESTIMATE, "Available KV cache memory: 40.00 GiB")
        ),
        vllm_line(version, CAPTURE, engine, 200),
        vllm_line(version, DONE, engine, 200),
    ]
    ledger, _warnings = ledger_of(log(*lines))
    room = gib("40.00") - (gib("3.10") - gib("2.50"))
    assert ledger[["cuda_graph_bytes", "cuda_graph_estimate_bytes"]].values.tolist() == [
        [gib("3.10"), gib("2.50")]
    ]
    assert ledger[["room_bytes", "room_source"]].values.tolist() == [[room, "available_kv"]]
    assert budget_of(tmp_path, capsys, log(*lines)) == room - 2**30


@pytest.mark.parametrize("version", FROM_0_27)
def test_the_real_capture_is_the_graphs_part_of_the_room(version, tmp_path, capsys):
    # issue 26: a rank with the DEBUG memory lines and no suggestion or available figure: room = free at
    # startup − (weights + activation + non-torch + graphs) − 150 MiB. The profile line (0.27+ form) gives
    # weights 16.00, non-torch 18.00 − 16.00, activation 20.00 − 18.00 (so the three sum to 20.00 GiB);
    # the graphs are the capture's 3.10 GiB, not the estimate's 2.50
    engine = engine_process(version)
    profile = (
        "Memory profiling takes 6.21 seconds. Total non KV cache memory: 20.00GiB; torch peak memory increase: "
        "1.65GiB; total consumed (from mem_get_info): 18.00GiB; weights memory: 16.00GiB."
    )
    free = "Initial free memory: 70.00 GiB; Requested memory: 0.900000 (util), 71.27 GiB"
    lines = [
        vllm_line(version, engine_config(version), engine, 200),
        vllm_line(version, free, engine, 200, "DEBUG"),
        vllm_line(version, profile, engine, 200, "DEBUG"),
        vllm_line(version, ESTIMATE, engine, 200),
        # kv_cache_utils.py, after sizing
        vllm_line(version, "GPU KV cache size: 327,680 tokens", engine, 200),
        vllm_line(version, CAPTURE, engine, 200),
        vllm_line(version, DONE, engine, 200),
    ]
    ledger, _warnings = ledger_of(log(*lines))
    room = gib("70.00") - gib("20.00") - gib("3.10") - 150 * 2**20
    assert ledger[["room_bytes", "room_source"]].values.tolist() == [[room, "parts"]]
    assert budget_of(tmp_path, capsys, log(*lines)) == room - 2**30
