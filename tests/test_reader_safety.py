"""No wrong budget from any log: conflicting evidence about a rank, impossible values, failed boots.

The rule (DESIGN.md "Safety rules", issue 11 items 1–5): when evidence about one rank conflicts (two
values, two processes, two launches in one file) the reader takes the safe value (the lower room, the
higher non-KV use) and says so with the lines, or refuses naming the lines; values outside physical
bounds are refused with file and line in bounded time and memory.

Boots are vLLM 0.26.0, TP=2, with each rank's room from its ``--kv-cache-memory`` suggestion
(``gpu_worker.py`` ``compile_or_warm_up_model``): ``to_gpu = free − (weights + activation + non-torch
+ graphs) − 150 MiB`` (vllm-log-formats.md §5), computed here from the printed GiB values.
"""

import json
import os
import resource
import subprocess
import sys

import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.io.model_config import ModelConfigError, read_model_config, resolve_model_config
from kvplan.units import MiB, parse_size
from tests.conftest import TESTS_DATA_DIR
from tests.fidelity_lines import engine_config, log, vllm_line

V = "0.26.0"
TOTAL = "79.19"


def gib(text):
    return parse_size(f"{text}GiB")


def to_gpu(free, weights="15.27", activation="1.45", non_torch="0.43", graphs="0.49"):
    """vLLM's "fully utilize" suggestion from the printed parts (bytes)."""
    return gib(free) - (gib(weights) + gib(activation) + gib(non_torch) + gib(graphs)) - 150 * MiB


def suggestion(free, total=TOTAL):
    """The 0.11.0–0.26.0 suggestion message for a rank with ``free`` GiB free at startup."""
    full = to_gpu(free)
    return (
        f"Free memory on device ({free}/{total} GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). "
        "Actual usage is 15.27 GiB for weight, 1.45 GiB for peak activation, 0.43 GiB for non-torch memory, and "
        "0.49 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=50000000000` "
        f"(46.57 GiB) to fit into requested memory, or `--kv-cache-memory={full}` ({round(full / 2**30, 2)} GiB) to "
        "fully utilize gpu memory. Current kv cache memory in use is 46.0 GiB."
    )


def launch(free0, free1, model="Qwen/Qwen3-8B", engine=200, workers=(300, 301), tp=2):
    """The lines of one TP=2 launch: engine config, both ranks' suggestions, KV size, completion."""
    config = vllm_line(V, engine_config(V, model=model, tp=tp), "EngineCore", engine, where="core.py:139")
    rank0 = vllm_line(V, suggestion(free0), "Worker_TP0", workers[0], where="gpu_worker.py:1066")
    rank1 = vllm_line(V, suggestion(free1), "Worker_TP1", workers[1], where="gpu_worker.py:1066")
    size = vllm_line(
        V, "GPU KV cache size: 400,000 tokens", "EngineCore", engine, where="kv_cache_utils.py:1147"
    )
    done = vllm_line(
        V,
        "init engine (profile, create kv cache, warmup model) took 41.20 seconds",
        "EngineCore",
        engine,
        where="core.py:412",
    )
    return [config, rank0, rank1, size, done]


def budget(tmp_path, text, *extra, name="boot.log"):
    path = tmp_path / name
    path.write_text(text)
    return main(["budget", str(path), "--reserve", "1GiB", "--json", *extra]), path


def uniform(capsys, tmp_path, text):
    code, _path = budget(tmp_path, text)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def refusal(capsys, tmp_path, text, *argv):
    path = tmp_path / "boot.log"
    path.write_text(text)
    code = main([*argv, str(path)] if argv else ["budget", str(path), "--reserve", "1GiB"])
    err = capsys.readouterr().err
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    return errors[0], path


# --- a rank's room printed twice, or by two processes (items 2 and 3) ----------------------------


def test_one_launch_alone(capsys, tmp_path):
    # rank 1 limits: to_gpu(70.0) − 1 GiB reserve
    data = uniform(capsys, tmp_path, log(*launch("76.5", "70.0")))
    assert data["uniform_budget_bytes"] == to_gpu("70.0") - gib("1")


@pytest.mark.parametrize(
    ("first", "extra", "pid", "names"),
    [
        ("66.0", "70.0", 301, (":3", ":4")),  # rank 1 prints its suggestion again, higher: the first stays
        ("70.0", "66.0", 301, (":3", ":4")),  # again, lower: the second
        ("70.0", "61.0", 302, ("301", "302")),  # a second process claims rank 1 with less room: not dropped
    ],
)
def test_a_rank_observed_twice_keeps_the_lower_room_and_says_so(capsys, tmp_path, first, extra, pid, names):
    # issue 11 items 2 (a room printed twice: the last won) and 3 (a second process: dropped)
    lines = launch("76.5", first)
    lines.insert(3, vllm_line(V, suggestion(extra), "Worker_TP1", pid, where="gpu_worker.py:1066"))
    data = uniform(capsys, tmp_path, log(*lines))
    assert data["uniform_budget_bytes"] == to_gpu(min(first, extra, key=float)) - gib("1")
    assert any("rank 1" in w and all(n in w for n in names) for w in data["warnings"]), data["warnings"]


# --- two launches in one file (item 1) ------------------------------------------------------------


def interleave(first, second):
    return [line for pair in zip(first, second) for line in pair]


def test_two_launches_interleaved_give_no_more_than_the_weaker(capsys, tmp_path):
    # issue 11 item 1: the second launch's workers were dropped and the first launch's 12 GiB approved
    # replica A allows to_gpu(70.0), replica B to_gpu(61.0) on rank 1: the file's budget is B's or less
    text = log(*interleave(launch("76.5", "70.0"), launch("76.0", "61.0", engine=210, workers=(310, 311))))
    data = uniform(capsys, tmp_path, text)
    assert data["uniform_budget_bytes"] <= to_gpu("61.0") - gib("1")


def test_two_containers_with_the_same_pids_interleaved(capsys, tmp_path):
    # issue 11 item 1 (two containers with the same pids)
    # the weaker launch first: keeping the last value (the other launch's) would be the unsafe one
    text = log(*interleave(launch("76.0", "61.0"), launch("76.5", "70.0")))
    data = uniform(capsys, tmp_path, text)
    assert data["uniform_budget_bytes"] <= to_gpu("61.0") - gib("1")


def test_two_models_interleaved_are_refused_naming_both(capsys, tmp_path):
    # issue 11 item 1: two different models gave one budget under one key, with ranks of both
    text = log(
        *interleave(
            launch("76.5", "70.0"),
            launch("76.0", "61.0", model="meta-llama/Llama-3.1-8B", engine=210, workers=(310, 311)),
        )
    )
    error, path = refusal(capsys, tmp_path, text)
    assert "Qwen/Qwen3-8B" in error and "meta-llama/Llama-3.1-8B" in error
    assert f"{path}:1" in error and f"{path}:2" in error


def test_the_sample_of_two_launches(capsys):
    # issue 11 item 1
    # tests/data/fidelity-two-launches.log: two replicas of one model writing into one file; replica B's
    # rank 1 (free 61.0 GiB) bounds the launch
    path = TESTS_DATA_DIR / "fidelity-two-launches.log"
    assert main(["budget", str(path), "--reserve", "1GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["uniform_budget_bytes"] <= to_gpu("61.0") - gib("1")


# --- impossible values (items 4 and 5, 18) --------------------------------------------------------


def test_room_above_the_gpu_total_is_refused_with_its_line(capsys, tmp_path):
    # issue 11 item 4: a 900 GB room on an 80 GB card was accepted
    lines = launch("76.5", "70.0")
    lines[2] = vllm_line(V, suggestion("900.0"), "Worker_TP1", 301, where="gpu_worker.py:1066")
    error, path = refusal(capsys, tmp_path, log(*lines))
    assert f"{path}:3" in error and "79.19" in error and "impossible" in error


def test_negative_free_memory_is_refused(capsys, tmp_path):
    # issue 11 item 5: a negative startup free memory was accepted at approval
    lines = launch("76.5", "70.0")
    lines[2] = vllm_line(V, suggestion("-3.0"), "Worker_TP1", 301, where="gpu_worker.py:1066")
    error, path = refusal(capsys, tmp_path, log(*lines))
    assert f"{path}:3" in error and "impossible" in error


def test_free_memory_above_total_on_a_manual_boot_is_refused(capsys, tmp_path):
    # issue 11 item 4 (free memory above the total)
    message = "Initial free memory 95.0 GiB, reserved 40.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling."
    lines = launch("76.5", "70.0")
    lines[1] = vllm_line(
        V,
        "worker init memory snapshot: torch_peak=0.0GiB, free_memory=78.0GiB, total_memory=79.19GiB, cuda_memory=1.19GiB, torch_memory=0.0GiB, non_torch_memory=0.5GiB, timestamp=1.0, auto_measure=True",
        "Worker_TP0",
        300,
        "DEBUG",
    )  # rank 0 booted manually: no suggestion
    lines.insert(2, vllm_line(V, message, "Worker_TP0", 300, where="gpu_worker.py:676"))
    error, path = refusal(capsys, tmp_path, log(*lines))
    assert f"{path}:3" in error and "impossible" in error


def run_bounded(argv, memory_bytes=2 << 30):
    """``kvplan argv`` in a child limited to ``memory_bytes`` of address space and 60 s."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run(
        [sys.executable, "-m", "kvplan", *argv], capture_output=True, text=True, timeout=60, preexec_fn=limit
    )


def test_tensor_parallel_size_zero_is_refused_with_its_line(tmp_path):
    # issue 11 item 18: TP=0 in a log divided by zero
    path = tmp_path / "boot.log"
    path.write_text(log(*launch("76.5", "70.0", tp=0)))
    result = run_bounded(["budget", str(path), "--reserve", "1GiB"])
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {path}:1:") and "tensor_parallel_size" in result.stderr
    assert "Traceback" not in result.stderr


def test_absurd_tensor_parallel_size_is_refused_in_bounded_memory(tmp_path):
    # issue 11 item 18: TP=99999999999 took 22 GB of memory until the kernel killed it
    path = tmp_path / "boot.log"
    path.write_text(log(*launch("76.5", "70.0", tp=99999999999)))
    for command in (["budget", str(path), "--reserve", "1GiB"], ["ledger", str(path)]):
        result = run_bounded(command)
        assert result.returncode == 2, result.stderr
        assert f"{path}:1" in result.stderr and "tensor_parallel_size" in result.stderr


# --- failed boots (issue 12) ----------------------------------------------------------------------


def failure_only_log():
    lines = [vllm_line(V, "EngineCore failed to start.", "EngineCore", 7, "ERROR", "core.py:1584")]
    lines += [vllm_line(V, "Traceback (most recent call last):", "EngineCore", 7, "ERROR", "core.py:1584")]
    lines += [
        vllm_line(
            V,
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 4211, in capture_model',
            "EngineCore",
            7,
            "ERROR",
            "core.py:1584",
        )
    ]
    lines += [
        vllm_line(
            V,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 11.06 MiB is free.",
            "EngineCore",
            7,
            "ERROR",
            "core.py:1584",
        )
    ]
    return log(*lines)


def test_a_failure_only_log_is_a_failed_boot_in_the_ledger(capsys, tmp_path):
    path = tmp_path / "boot.log"
    path.write_text(failure_only_log())
    assert main(["ledger", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["outcome"] for row in rows] == ["oom"]


def test_budget_refuses_a_failure_only_log_naming_the_failure_and_its_line(capsys, tmp_path):
    error, path = refusal(capsys, tmp_path, failure_only_log())
    assert "no vLLM boot found" not in error
    assert f"{path}:4" in error and "out of memory" in error and "CUDA graphs" in error


def test_approve_refuses_a_failure_only_log_naming_the_failure(capsys, tmp_path):
    path = tmp_path / "boot.log"
    path.write_text(failure_only_log())
    code = main(
        ["approve", str(path), "--reserve", "1GiB", "--approver", "A", "--out", str(tmp_path / "out")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "no vLLM boot found" not in err and f"{path}:4" in err and "CUDA graphs" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("lines", "line", "words"),
    [
        # v1/engine/core.py: the EngineCore's one line, the traceback went elsewhere
        (
            [vllm_line(V, "EngineCore failed to start.", "EngineCore", 7, "ERROR", "core.py:1584")],
            1,
            "EngineCore failed to start",
        ),
        # executor/multiproc_worker_utils.py (V0, 0.5–0.10.2)
        (
            [
                vllm_line(
                    "0.6.6",
                    "Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks.",
                    "VllmWorkerProcess",
                    902,
                    "ERROR",
                    "multiproc_worker_utils.py:226",
                )
            ],
            1,
            "determine_num_available_blocks",
        ),
        # v1/engine/core.py 0.7.0–0.8.4
        (
            [
                vllm_line(
                    "0.8.0",
                    "EngineCore hit an exception: Traceback (most recent call last):",
                    None,
                    None,
                    "ERROR",
                    "core.py:340",
                )
            ],
            1,
            "EngineCore hit an exception",
        ),
    ],
)
def test_failure_only_logs_are_failed_boots_never_no_boot_found(capsys, tmp_path, lines, line, words):
    error, path = refusal(capsys, tmp_path, log(*lines))
    assert "no vLLM boot found" not in error
    assert f"{path}:{line}" in error and words in error
    assert main(["ledger", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(row["outcome"] == "error" for row in rows)


def csv_ledger(tmp_path, **change):
    row = {
        "source": "a.log",
        "boot": "0",
        "rank": "0",
        "model": "m",
        "vllm_version": "0.26.0",
        "tensor_parallel_size": "1",
        "pipeline_parallel_size": "1",
        "data_parallel_size": "1",
        "outcome": "ok",
        "total_bytes": "80GiB",
        "room_bytes": "60GiB",
        **change,
    }
    path = tmp_path / "ledger.csv"
    path.write_text(",".join(row) + "\n" + ",".join(row.values()) + "\n")
    return path


def test_a_ledger_csv_with_room_above_the_gpu_total_is_refused(capsys, tmp_path):
    # issue 11 item 4, through the ledger-CSV reader
    path = csv_ledger(tmp_path, room_bytes="900GiB")
    assert main(["budget", str(path), "--reserve", "1GiB"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}:2: rank 0: room_bytes 900 GiB is impossible")


def test_a_ledger_csv_with_an_absurd_parallel_size_is_refused_in_bounded_memory(tmp_path):
    # issue 11 item 18, through the ledger-CSV reader
    for size in ("0", "99999999999"):
        path = csv_ledger(tmp_path, tensor_parallel_size=size)
        result = run_bounded(["budget", str(path), "--reserve", "1GiB"])
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"error: {path}:2: tensor_parallel_size={size} is impossible")


# --- bad model configs and layout flags at every entry point (item 18) ----------------------------

FOUR_RANK_LOG = str(DATA_DIR / "boots" / "four-rank" / "boot.log")
LLAMA_70B = {k: v for k, v in read_model_config("llama-3.1-70b").items() if not k.startswith("_")}


def entry_points(config, out, *flags):
    """The commands that take a model config and a layout: capacity, budget (logs) and approve."""
    model = ["--model", str(config), *flags]
    return [
        ["capacity", *model, "--kv-bytes", "12GiB", "--max-model-len", "8192"],
        ["budget", FOUR_RANK_LOG, "--reserve", "0.9GiB", *model],
        ["approve", FOUR_RANK_LOG, "--reserve", "0.9GiB", *model, "--approver", "QA", "--out", str(out)],
    ]


class Result:
    """What ``kvplan argv`` run in this process returned and printed (as :func:`run_bounded` gives it)."""

    def __init__(self, argv, capsys):
        try:
            self.returncode = main(argv)
        except SystemExit as exited:  # argparse refuses a flag by exiting
            self.returncode = exited.code
        self.stdout, self.stderr = capsys.readouterr()


def one_error_line(result, path=None):
    """exit 2, no traceback, exactly one ``error:`` line (naming ``path`` when given)."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert path is None or str(path) in errors[0], errors[0]
    assert ".partial" not in errors[0]  # approve names the user's file, not its unfinished bundle copy
    return errors[0]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--tp", "0"], "argument --tp: must be positive"),
        (["--tp", "4", "--pp", "0"], "argument --pp: must be positive"),
        (["--tp", "4", "--dcp", "0"], "argument --dcp: must be positive"),
        (["--tp", "-4"], "argument --tp: must be positive"),
        (["--tp", "99999999999"], "99999999999"),  # never enumerated: refused by the logs' TP or the heads
        (["--tp", "4", "--pp", "99999999999"], "99999999999"),
        (["--tp", "9" * 5000], "--tp: not a whole number"),
    ],
)
def test_absurd_layout_flags_are_one_error_line_at_every_entry_point(tmp_path, capsys, flags, words):
    # issue 11 item 18: TP=0 / PP=0 gave ZeroDivisionError, TP=99999999999 a MemoryError (the huge ones in
    # a child process bounded to 2 GiB)
    for argv in entry_points("llama-3.1-70b", tmp_path / "out", *flags):
        huge = "99999999999" in flags
        result = run_bounded(argv) if huge else Result(argv, capsys)
        assert words in one_error_line(result), argv


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"num_attention_heads": 0}, "'num_attention_heads' must be a positive integer"),
        ({"num_key_value_heads": -8}, "'num_key_value_heads' must be a positive integer"),
        ({"num_hidden_layers": 0}, "'num_hidden_layers' must be a positive integer"),
        ({"num_hidden_layers": -80}, "'num_hidden_layers' must be a positive integer"),
        ({"num_hidden_layers": 99999999999}, "'num_hidden_layers' must be a positive integer"),
        ({"hidden_size": 10**30}, "'hidden_size' must be a positive integer"),
        ({"head_dim": 128.5}, "'head_dim' must be a positive integer"),
        ({"head_dim": "128"}, "'head_dim' must be a positive integer"),
        ({"num_hidden_layers": True}, "'num_hidden_layers' must be a positive integer"),
        ({"torch_dtype": "int3"}, "'torch_dtype' = 'int3' is not one of"),
    ],
)
def test_impossible_model_config_fields_are_one_error_line_at_every_entry_point(
    tmp_path, capsys, change, words
):
    # issue 11 item 18: a config with zero heads or layers divided by zero; huge sizes were enumerated
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA_70B, **change}, indent=2))
    for argv in entry_points(config, tmp_path / "out", "--tp", "4"):
        assert words in one_error_line(Result(argv, capsys), config), argv


def config_text(kind):
    """A config.json no reader should take: each is the Llama-3.1-70B config made bad one way."""
    text = json.dumps(LLAMA_70B, indent=2)
    if kind == "nested":  # 100,000 nested lists exhaust a recursive parser's stack
        return text[:-2] + ',\n  "x": ' + "[" * 100_000 + "]" * 100_000 + "\n}"
    if kind == "digits":  # above Python's 4,300-digit limit for int(str)
        return text[:-2] + ',\n  "head_dim": ' + "9" * 5000 + "\n}"
    # "twice": num_hidden_layers given again (80, then 8): json.loads keeps the last one silently
    return text[:-2] + ',\n  "num_hidden_layers": 8\n}'


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("nested", "nested too deeply to be a config.json"),
        ("digits", "Exceeds the limit (4300 digits)"),
        ("twice", "key 'num_hidden_layers' given twice in one object"),
    ],
)
def test_a_malformed_config_file_is_one_error_line_naming_it(tmp_path, capsys, kind, words):
    # issue 11 items 18 and 20: RecursionError with exit 1; "Exceeds the limit (4300 digits)" naming no
    # file; a key given twice took its last value with no word (the conflict rule: refuse, name the lines)
    config = tmp_path / "config.json"
    config.write_text(config_text(kind))
    for argv in entry_points(config, tmp_path / "out", "--tp", "4"):
        error = one_error_line(Result(argv, capsys), config)
        assert words in error, argv
    if kind == "twice":
        # the second num_hidden_layers: the config is 10 lines before its closing brace (architectures
        # takes three), then the added key
        assert f"{config}, line 11:" in error


def test_a_huge_config_file_is_refused_before_it_is_read(tmp_path):
    # issue 11 item 18: a 3 GiB config (a sparse file: no disk used) was read whole: MemoryError
    config = tmp_path / "config.json"
    with open(config, "wb") as handle:
        handle.write(b"{")
        handle.truncate(3 << 30)
    for argv in entry_points(config, tmp_path / "out", "--tp", "4"):
        assert "above the bound of 16,777,216" in one_error_line(run_bounded(argv), config)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_config_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path, kind):
    # issue 11 items 14 and 18: a FIFO would block approve's copy forever; both were "no such file"
    config = tmp_path / "config.json"
    config.mkdir() if kind == "folder" else os.mkfifo(config)
    for argv in entry_points(config, tmp_path / "out", "--tp", "4"):
        assert "not a regular file" in one_error_line(run_bounded(argv), config)


def test_a_config_that_is_not_a_regular_file_names_what_it_is(tmp_path):  # issue 23 (kept when _kind went)
    folder, fifo, dangling = tmp_path / "dir.json", tmp_path / "fifo.json", tmp_path / "gone.json"
    folder.mkdir()
    os.mkfifo(fifo)
    dangling.symlink_to(tmp_path / "missing.json")
    for path, kind in ((folder, "a folder"), (fifo, "a FIFO"), (dangling, "a dangling symlink")):
        with pytest.raises(ModelConfigError, match=f"^model config {path}: {kind}, not a regular file"):
            resolve_model_config(path)


def test_a_million_layers_in_a_thousand_stages_is_sized_in_bounded_time(tmp_path):
    # issue 11 item 18 (bounded time): every pipeline stage counted every layer, O(PP × layers): 1,000
    # stages of a 1,000,000-layer config took minutes; by bisection a few seconds. 1,000,000 layers of
    # 1,000,000 heads of 128 at TP=1,000: 1,000 heads × 128 × 2 (K, V) × 2 bytes = 512,000 bytes per token
    # per layer, 1,000 layers per stage: 512,000,000 bytes per token per rank.
    config = tmp_path / "config.json"
    size = {"num_hidden_layers": 10**6, "num_attention_heads": 10**6, "num_key_value_heads": 10**6}
    config.write_text(json.dumps({**LLAMA_70B, **size, "hidden_size": 10**6, "head_dim": 128}))
    layout = ["--model", str(config), "--tp", "1000", "--pp", "1000"]
    result = run_bounded(["capacity", *layout, "--kv-bytes", "64GiB", "--max-model-len", "16", "--json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bytes_per_token"] == 512_000_000


# --- errors that name their file and line (item 20) ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        # "the ledger is empty" named no file: a log without a boot, a ledger CSV without rows
        ("boot.log", "", "no vLLM boot found"),
        ("ledger.csv", "source,boot,rank,outcome,room_bytes\n", "no rows below the header"),
        # "int too large" (Python int too large to convert to C long) named no file: a rank beyond 64 bits
        (
            "ledger.csv",
            "source,boot,rank,outcome,room_bytes\na.log,0,99999999999999999999999,ok,1GiB\n",
            ":2:",
        ),
        # "truth value of a Series is ambiguous": a column given twice
        ("ledger.csv", "source,boot,rank,rank,outcome,room_bytes\na.log,0,0,1,ok,1GiB\n", "appears twice"),
    ],
)
def test_errors_name_the_file_and_line(capsys, tmp_path, name, text, words):
    # issue 11 item 20, through every command that reads boots: budget, ledger and approve
    path = tmp_path / name
    path.write_text(text)
    out = str(tmp_path / "out")
    for argv in (
        ["budget", str(path), "--reserve", "1GiB"],
        ["ledger", str(path), "--room"],
        ["approve", str(path), "--reserve", "1GiB", "--approver", "QA", "--out", out],
    ):
        error = one_error_line(Result(argv, capsys), path)
        assert error.startswith(f"error: {path}") and words in error, (argv, error)


# --- a suggestion line whose parts do not add up (issue 26, reader safety) ----------------------------------
# gpu_worker.py compile_or_warm_up_model: full = free − Σparts − 150 MiB and fit = requested − Σparts −
# 150 MiB in bytes, every other figure printed to 0.01 GiB (±0.005 GiB), requested = ceil(total × U).
# Here free 78.47, total 79.19, U 0.92: requested 72.85 (79.19 × 0.92 = 72.8548 GiB).

SUGGESTION_FORMS = {  # version → its parts (as printed) and its text
    "0.10.2": ("15.7", "1.65", "0.15", "0.53"),  # weight, activation, non-torch, graphs; bytes in use
    "0.11.0": ("15.7", "1.65", "0.15", "0.53"),  # … with each suggestion's (X GiB), in use in GiB
    "0.20.0": ("15.7", "1.65", "0.15", "0.53"),
    "0.26.0": ("15.7", "1.65", "0.15", "0.53"),
    "0.27.0": ("16.3", "1.65", "0.53"),  # consumed (weights + non-torch), activation, graphs
    "0.30.0": ("16.3", "1.65", "0.53"),
    "0.33.0": ("16.3", "1.65", "0.53"),
}


def suggestion_line(version, free="78.47", requested="72.85", fit_extra=0, full_extra=0, printed_extra=0):
    """The suggestion line of ``version`` whose suggestions are what its printed figures give, plus the
    extras [bytes] (``printed_extra`` is added to the bytes only, not to their GiB figure)."""
    parts = SUGGESTION_FORMS[version]
    held = sum(map(gib, parts)) + 150 * MiB
    fit, full = gib(requested) - held + fit_extra, gib(free) - held + full_extra
    if len(parts) == 4:
        usage = (
            f"{parts[0]} GiB for weight, {parts[1]} GiB for peak activation, {parts[2]} GiB for non-torch memory, "
            f"and {parts[3]}"
        )
    else:
        usage = f"{parts[0]} GiB for consumed memory (weights + non-torch), {parts[1]} GiB for peak activation, and {parts[2]}"
    old = version == "0.10.2"
    fit_gib, full_gib = ("" if old else f" ({round(value / 2**30, 2)} GiB)" for value in (fit, full))
    in_use = "51943436288 bytes" if old else "48.38 GiB"
    message = (
        f"Free memory on device ({free}/79.19 GiB) on startup. Desired GPU memory utilization is (0.92, "
        f"{requested} GiB). Actual usage is {usage} GiB for CUDAGraph memory. Replace gpu_memory_utilization "
        f"config with `--kv-cache-memory={fit + printed_extra}`{fit_gib} to fit into requested memory, or "
        f"`--kv-cache-memory={full + printed_extra}`{full_gib} to fully utilize gpu memory. Current kv cache "
        f"memory in use is {in_use}."
    )
    level = "DEBUG" if (0, 11) <= tuple(map(int, version.split(".")[:2])) < (0, 26) else "INFO"
    return vllm_line(version, message, "Worker_TP0", 300, level, "gpu_worker.py:1")


def ledger_exit(tmp_path, capsys, line):
    """``kvplan ledger`` of a log whose third line is ``line``: exit code and stderr."""
    path = tmp_path / "tampered.log"
    version = "0.33.0"
    path.write_text(log(vllm_line(version, engine_config(version, tp=2), "EngineCore", 200), "", line))
    code = main(["ledger", str(path), "--json"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("version", SUGGESTION_FORMS)
def test_a_real_suggestion_line_adds_up_and_is_read(version, tmp_path, capsys):
    # issue 26: the line as vLLM prints it: its suggestions equal what its figures give; read as ever
    code, err = ledger_exit(tmp_path, capsys, suggestion_line(version))
    assert code == 0, err


@pytest.mark.parametrize("version", ["0.27.0", "0.33.0"])
def test_a_suggestion_below_its_parts_is_read_the_safe_side(version, tmp_path, capsys):
    # issue 26: a suggestion below what its figures give cannot raise a budget (vLLM's own quirks go this
    # way, vllm#57936): 1 GiB below is read, and is the room
    code, err = ledger_exit(tmp_path, capsys, suggestion_line(version, full_extra=-(2**30)))
    assert code == 0, err


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.26.0", "0.27.0", "0.33.0"])
@pytest.mark.parametrize("kind", ["full", "fit"])
def test_a_suggestion_above_what_its_parts_give_is_refused(version, kind, tmp_path, capsys):
    # issue 26: "--kv-cache-memory=B" edited 0.1 GiB up (its GiB figure with it): free − parts − 150 MiB
    # (or requested − …) gives 0.1 GiB less, beyond the 4 × or 5 × 0.005 GiB of its printed figures
    line = suggestion_line(version, **{f"{kind}_extra": gib("0.1")})
    code, err = ledger_exit(tmp_path, capsys, line)
    assert code == 2
    assert err.startswith(
        f"error: {tmp_path / 'tampered.log'}:3: vLLM's --kv-cache-memory suggestion line does"
    )
    assert ("free − the" if kind == "full" else "requested − the") in err and err.count("\n") == 1


@pytest.mark.parametrize("version", ["0.10.2", "0.20.0", "0.33.0"])
def test_requested_memory_above_total_times_utilization_is_refused(version, tmp_path, capsys):
    # issue 26: requested edited from 72.85 to 74.85 GiB (and fit with it, so fit adds up): 79.19 × 0.92 =
    # 72.8548 GiB, so the printed requested is at most 72.8548 + 0.005 × 0.92 + 0.005 = 72.8644 GiB
    code, err = ledger_exit(tmp_path, capsys, suggestion_line(version, requested="74.85"))
    assert code == 2 and "requested memory" in err and "above total × 0.92" in err


@pytest.mark.parametrize("version", ["0.11.0", "0.26.0", "0.33.0"])  # the forms that print (X GiB)
def test_suggested_bytes_above_their_printed_gib_figure_are_refused(version, tmp_path, capsys):
    # issue 26: the bytes edited 0.01 GiB up while their "(X GiB)" stayed: more than the 0.005 GiB its
    # rounding allows (the sums stay within their 0.02-0.025 GiB, so only this check sees it)
    code, err = ledger_exit(tmp_path, capsys, suggestion_line(version, printed_extra=gib("0.01")))
    assert code == 2 and "is above its printed" in err


# --- a suggestion the check cannot verify is refused, never read (issue 26, reader safety) --------------------
# data/boots/four-rank: rank 2's line (Worker_TP2) is free 48.61 − (32.86 + 1.41 + 0.38 + 0.92) − 150 MiB =
# 12.89 GiB ≈ its `--kv-cache-memory=13851269530` (12.9 GiB): 13851269530 / 2^30 = 12.9000. Each edit below
# raises that room and leaves a line the whole-line check cannot match; before the fix the reader still took
# the edited suggestion and approve exited 0 (a 15.49 GiB budget, or a 37.11 GiB room for rank 2).
TAMPERED_SUGGESTIONS = {
    # the room raised to 19851269530 B (/ 2^30 = 18.488: "18.49 GiB") and one word changed so the line no
    # longer matches whole
    "a-word-changed": lambda line: line.replace(
        "13851269530` (12.9 GiB)", "19851269530` (18.49 GiB)"
    ).replace("for weight,", "for weights,"),
    # everything from "Free memory…" up to "Replace…" deleted (no parts left to check), the room raised to
    # 39851269530 B (/ 2^30 = 37.114: "37.11 GiB")
    "parts-deleted": lambda line: (
        line[: line.index("Free memory on device")] + line[line.index("Replace gpu_memory_utilization") :]
    ).replace("13851269530` (12.9 GiB)", "39851269530` (37.11 GiB)"),
    # a forged "fit …, or full …" fragment of 37.11 GiB placed before the real sentence, which adds up
    "forged-fragment-first": lambda line: line.replace(
        "Free memory on device",
        "`--kv-cache-memory=39851269530` (37.11 GiB) to fit into requested memory, or "
        "`--kv-cache-memory=39851269530` (37.11 GiB) to fully utilize gpu memory. Free memory on device",
    ),
}


@pytest.mark.parametrize("edit", TAMPERED_SUGGESTIONS.values(), ids=TAMPERED_SUGGESTIONS)
def test_a_suggestion_the_check_cannot_verify_is_refused_not_read(edit, tmp_path, capsys):
    # issue 26: the reader takes a suggestion only from the whole line the check verified; any other line
    # holding one is refused with its file and line, and no evidence is written
    lines = (DATA_DIR / "boots" / "four-rank" / "boot.log").read_text(encoding="utf-8").split("\n")
    (index,) = [
        i for i, line in enumerate(lines) if line.startswith("(Worker_TP2") and "Free memory on" in line
    ]
    lines[index] = edit(lines[index])
    path = tmp_path / "tampered.log"
    path.write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "evidence"
    model = ["--model", "llama-3.1-70b", "--reserve", "0.9GiB"]
    code = main(["approve", str(path), *model, "--approver", "QA", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(
        f"error: {path}:{index + 1}: a line with a --kv-cache-memory suggestion that cannot be checked"
    )
    assert err.count("\n") == 1 and not list(out.glob("*"))  # approve makes the folder first; nothing in it
