"""The startup reader's internal helpers, case by case (moved from their docstrings, issue 23): records and
their colour codes, worker names and ranks, configuration values, conflicting observations, row bounds."""

import re

import hyperscan
import pandas as pd
import pytest

from kvplan.io.ledger_frame import ImpossibleValue, check_row
from kvplan.io.vllm.conflicts import Observation, completed, safest, two_launches
from kvplan.io.vllm.families import impossible_in
from kvplan.io.vllm.handlers import failure, family
from kvplan.io.vllm.manual import exact_manual, printed_manual
from kvplan.io.vllm.ranks import _rank_from_name, layout_sizes
from kvplan.io.vllm.records import _bare_codes, _layouts, _walk, rank_name, worker_groups
from kvplan.io.vllm.resolve import group_ranks
from kvplan.io.vllm.scan import _DATABASE, _scan
from kvplan.io.vllm.values import (
    _config_value,
    config_columns,
    config_items,
    cudagraph_mode,
    key_values,
    literal_value,
    split_top_level,
)


def test_a_line_shape_is_laid_out_once_as_slices():
    assert _layouts(b"(W pid=00) INFO 00-00 00:00:00 [a.py:0] x") == (
        None,  # no colour code to cut
        ((slice(40, 41), slice(1, 2), slice(7, 9), None, "INFO", None),),
    )
    # a real colour code (ESC [ 1 m, 4 characters) and one without its ESC byte ([0m) in the head: the text
    # left is the line's pieces around them
    kept, _ = _layouts(b"\x1b[0m(W pid=00)[0m INFO 00-00 00:00:00 [a.py:0] x")
    assert kept("\x1b[1m(W pid=12)[0m INFO 08-14 14:07:22 [a.py:1] x") == (
        "",
        "(W pid=12)",
        " INFO 08-14 14:07:22 [a.py:1] x",
    )


def test_colour_codes_without_their_esc_byte_are_cut_from_a_head_only():
    line = "[1;36m(VllmWorkerProcess pid=902)[0;0m INFO 09-13 10:00:16 [a.py:1] x [1m"
    assert _bare_codes(line) == [(0, 6), (33, 38)]
    assert _bare_codes("[1;36mno head here") == []


def test_a_segment_walks_into_records_at_prefixes_and_headers():
    walked = _walk("(A pid=1) INFO 08-14 14:07:22 [a.py:1] x (B pid=2) y")
    assert [(spans[:3], level) for spans, level in walked] == [
        ([(39, 40), (1, 2), (7, 8)], "INFO"),
        ([(51, 52), (42, 43), (48, 49)], None),
    ]


def test_worker_names_state_their_group_ranks():
    assert worker_groups("Worker_DP1_PP0_TP3_EP7") == (("DP", 1), ("PP", 0), ("TP", 3), ("EP", 7))
    assert worker_groups("VllmWorker PP1_TP0") == (("PP", 1), ("TP", 0))
    assert worker_groups("EngineCore") is None
    assert rank_name("Worker_PP1_TP0") == (("PP", 1), ("TP", 0))
    assert rank_name("VllmWorker rank=2") == (("rank", 2),)
    assert rank_name("Worker") is None and rank_name("EngineCore") is None


def test_a_global_rank_from_a_worker_name_and_the_layout_sizes():
    assert dict(_rank_from_name("Worker_PP1_TP0", (2, 1, 4))) == {
        "tp_rank": 0,
        "pp_rank": 1,
        "dp_rank": 0,
        "pcp_rank": 0,
        "dcp_rank": 0,
        "ep_rank": 0,
        "rank": 4,
    }
    # rank (1·1 + 0)·1·2 + 1
    assert dict(_rank_from_name("Worker_DP1_TP1_EP3", (1, 1, 2))) == {
        "tp_rank": 1,
        "pp_rank": 0,
        "dp_rank": 1,
        "pcp_rank": 0,
        "dcp_rank": 0,
        "ep_rank": 3,
        "rank": 3,
    }
    assert layout_sizes((None, None, None), frozenset({"Worker_PP1_TP3", "Worker_PP0_TP0"})) == (
        (2, 1, 4),
        {"PP": 2, "TP": 4},
    )


def test_group_ranks_from_a_global_rank():
    row: dict = {}
    group_ranks(row, 5, (4, 1), {"decode_context_parallel_size": 1}, (0, 11, 0))
    assert row == {"tp_rank": 1, "pp_rank": 0, "dp_rank": 1, "pcp_rank": 0, "dcp_rank": 0}


def test_configuration_values_as_python_reads_them():
    assert [literal_value(t) for t in ("32768", "'fp8'", "None", "torch.bfloat16")] == [
        32768,
        "fp8",
        None,
        "torch.bfloat16",
    ]
    assert [literal_value(t) for t in ("0.90", "007", "'a\\'b'", "[1, 2]")] == [0.9, "007", "a'b", [1, 2]]
    assert split_top_level("a=1, b={'x': 1, 'y': [2, 3]}, c='p,q'") == [
        "a=1",
        " b={'x': 1, 'y': [2, 3]}",
        " c='p,q'",
    ]
    assert config_items("model='m', seed=0, max_seq_len=4096") == (("model", "m"), ("max_seq_len", 4096))
    text = 'model=\'m\', max_seq_len=32768, compilation_config={"level":3, "x":[1,2]}'
    assert key_values(text) == {
        "model": "m",
        "max_seq_len": 32768,
        "compilation_config": {"level": 3, "x": [1, 2]},
    }
    text = "'tensor_parallel_size': 4, 'kv_cache_dtype': 'fp8'"
    assert key_values(text, ":", names={"kv_cache_dtype"}) == {"kv_cache_dtype": "fp8"}


def test_cuda_graph_modes_by_their_enum_name():
    text = "compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}"
    assert cudagraph_mode(text) == "FULL_AND_PIECEWISE"
    assert cudagraph_mode('compilation_config={"cudagraph_mode":[2,1]}') == "FULL_AND_PIECEWISE"
    assert cudagraph_mode('{"cudagraph_mode":1}') == "PIECEWISE"


def test_config_values_as_the_ledger_holds_them():
    values = {"max_seq_len": "4096", "disable_hybrid_kv_cache_manager": True, "seed": 0}
    assert config_columns(values) == (("max_model_len", 4096), ("hybrid_kv_cache_manager", False))
    assert _config_value("block_size", "16") == 16 and _config_value("enforce_eager", "True") is True
    assert _config_value("model", None) is pd.NA
    assert _config_value("max_model_len", -1) is pd.NA  # auto-fit: the fitted length is printed later


def test_a_table_row_turns_its_groups_into_values():
    row = family(
        "pool",
        "pool",
        "rank",
        ("cuda_graph_bytes", None, "kv_cache_tokens"),
        r"pool {num} GiB(?: (x))? ([\d,]+)",
    )
    assert row.handler(row.pattern.search("pool 1.5 GiB 12,288")) == {
        "cuda_graph_bytes": 1610612736,
        "kv_cache_tokens": 12288,
    }
    assert failure("error", 3)(re.match("x", "x failed")) == {
        "outcome": "error",
        "text": "x failed",
        "priority": 3,
    }


def test_a_value_no_vllm_line_can_show_is_named():
    assert impossible_in("Available KV cache memory: 12.5 GiB") is None
    assert impossible_in("Available KV cache memory: 900000000 GiB")[1:] == (
        "available_kv_bytes",
        966367641600000000,
    )


def test_a_printed_manual_figure_and_the_flags_exact_bytes():
    # "53.52 GiB": the flag is at most 53.525 GiB
    assert printed_manual(57_466_662_420) == {
        "manual_kv_bytes": 57466662420,
        "manual_kv_max_bytes": 57472031130,
    }
    rows = {0: printed_manual(57_466_662_420)}
    exact_manual(rows, {"manual_kv_bytes": ("57465241600", 2, 0, "non_default_args")}, {}, "a.log", [])
    assert (rows[0]["manual_kv_bytes"], rows[0]["manual_kv_max_bytes"]) == (57465241600, 57465241600)


def test_conflicting_observations_keep_the_lowest_room():
    first = Observation((7, None), {"available_kv_bytes": 9}, {"available_kv_bytes": (3, "")}, start=3)
    last = Observation((7, None), {"available_kv_bytes": 8, "suggested_full_bytes": 5}, start=5)
    assert [item.values for item in completed([first, last])] == [
        {"available_kv_bytes": 9, "suggested_full_bytes": 5},
        {"available_kv_bytes": 8, "suggested_full_bytes": 5},
    ]
    one = Observation((1, None), {"r": 9}, {"r": (3, "")}, start=3)
    two = Observation((2, None), {"r": 7}, {"r": (4, "")}, start=4)
    chosen, note = safest(0, [one, two], lambda v, o: v["r"], "a.log", 0)
    assert (chosen.values, note.code, note.line) == ({"r": 7}, "conflicting-rank-evidence", 4)
    refusal = str(two_launches([("model", ("a", 3), ("b", 4))], "x.log"))
    assert refusal.startswith("x.log:3: two launches in one boot: model 'a' at x.log:3 vs 'b'")


def test_the_scan_of_one_block():
    found = _scan(b"Available KV cache memory: 1 GiB\nnoise\n", 1, 2, hyperscan.Scratch(_DATABASE))
    assert found == [(2, 2, b"Available KV cache memory: 1 GiB")]


def test_a_row_above_the_gpus_total_memory_is_refused():
    with pytest.raises(ImpossibleValue) as refused:
        check_row({"total_bytes": 80 << 30, "room_bytes": 900 << 30}, 1, {(1, "room_bytes"): (3, "")}, "a")
    assert (
        str(refused.value)
        == "a:3: rank 1: room_bytes 900 GiB is impossible: above the GPU's total memory 80 GiB"
    )
