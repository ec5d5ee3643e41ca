"""Fuzzing the log reader and the ledger-CSV reader through ``kvplan budget`` (issue 11).

Asserted for every generated input: no uncaught exception; exit 0, or exit 2 with exactly one
``error:`` line; and the metamorphic rules: adding a line that shows less room for a rank never raises
the budget, and interleaving two launches never gives more than either launch alone.

CI runs a bounded number of examples per test (:data:`EXAMPLES`, default 25, the whole file well under
60 s); a longer run sets ``KVPLAN_FUZZ_EXAMPLES``, e.g. ``KVPLAN_FUZZ_EXAMPLES=5000 pytest
tests/test_fuzz_reader.py --hypothesis-show-statistics`` (the ``make fuzz`` target).
"""

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvplan.cli import main
from kvplan.columns import LEDGER_COLUMNS
from tests.fidelity_lines import log, vllm_line
from tests.test_reader_safety import V, launch, suggestion

EXAMPLES = int(os.environ.get("KVPLAN_FUZZ_EXAMPLES", "25"))
#: No shrinking in the bounded run (a failure is reported as found, fast); the long run shrinks.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + (
    [Phase.shrink] if "KVPLAN_FUZZ_EXAMPLES" in os.environ else []
)
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, phases=PHASES, suppress_health_check=[HealthCheck.too_slow]
)

#: Real lines of every kind the reader knows, as building blocks (one TP=2 launch plus failures).
BLOCKS = [
    *launch("76.5", "70.0"),
    vllm_line(V, "Available KV cache memory: 61.52 GiB", "Worker_TP0", 300),
    vllm_line(V, "Available KV cache memory: -2.35 GiB", "Worker_TP1", 301),
    vllm_line(V, "Model loading took 15.27 GiB memory and 4.781181 seconds", "Worker_TP1", 301),
    vllm_line(V, "Graph capturing finished in 12 secs, took 0.49 GiB", "Worker_TP0", 300),
    vllm_line(V, "EngineCore failed to start.", "EngineCore", 200, "ERROR"),
    vllm_line(
        V,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
        "Worker_TP1",
        301,
        "ERROR",
    ),
    vllm_line(V, "Overriding num_gpu_blocks=24576 with num_gpu_blocks_override=4096", "EngineCore", 200),
    vllm_line(
        V,
        "Auto-fit max_model_len: reduced from 131072 to 98304 to fit in available GPU memory (30.0 GiB available for KV cache)",
        "EngineCore",
        200,
    ),
    vllm_line(V, "Chunked prefill is enabled with max_num_batched_tokens=8192.", "APIServer", 100),
    vllm_line(
        V,
        "rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 1, EP rank 1",
        "Worker_TP1",
        301,
    ),
    "INFO:     Application startup complete.",
]


def run(argv):
    """``kvplan argv`` in process: (exit code, stdout, stderr); any uncaught exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def budget_of(text, suffix=".log"):
    """The uniform budget of a log (None when refused), asserting the exit contract."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"boot{suffix}"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        code, out, err = run(["budget", str(path), "--reserve", "1GiB", "--json"])
    assert code in (0, 2), (code, err)
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err
        return None
    return json.loads(out)["uniform_budget_bytes"]


def mutate(line: str, data) -> str:
    """``line`` with a random edit: a cut, a replaced number, an inserted character."""
    kind = data.draw(st.sampled_from(["cut", "number", "insert", "keep"]))
    if kind == "keep" or not line:
        return line
    at = data.draw(st.integers(0, len(line)))
    if kind == "cut":
        return line[:at]
    if kind == "insert":
        return line[:at] + data.draw(st.text(max_size=3)) + line[at:]
    return line[:at] + str(data.draw(st.integers(-(10**20), 10**20))) + line[at:]


@FUZZ
@given(st.data())
def test_logs_made_of_real_lines_mutated(data):
    lines = data.draw(st.lists(st.sampled_from(BLOCKS), max_size=14))
    lines = [mutate(line, data) for line in lines]
    budget_of(log(*lines))


@FUZZ
@given(st.binary(max_size=600))
def test_arbitrary_bytes(blob):
    budget_of(blob)


@FUZZ
@given(st.data())
def test_a_line_with_less_room_for_a_rank_never_raises_the_budget(data):
    free0 = data.draw(st.decimals("40", "79", places=2))
    free1 = data.draw(st.decimals("40", "79", places=2))
    lines = launch(str(free0), str(free1))
    before = budget_of(log(*lines))
    rank = data.draw(st.integers(0, 1))
    lower = data.draw(st.decimals("30", str(min(free0, free1)), places=2))
    pid = data.draw(st.sampled_from([300 + rank, 302 + rank]))  # the rank's own process, or another one
    extra = vllm_line(V, suggestion(str(lower)), f"Worker_TP{rank}", pid, where="gpu_worker.py:1066")
    at = data.draw(st.integers(1, len(lines) - 1))
    after = budget_of(log(*lines[:at], extra, *lines[at:]))
    assert before is not None
    assert after is None or after <= before


@FUZZ
@given(st.data())
def test_interleaving_two_launches_never_gives_more_than_either_alone(data):
    frees = [str(data.draw(st.decimals("40", "79", places=2))) for _ in range(4)]
    same_pids = data.draw(st.booleans())
    first = launch(frees[0], frees[1])
    second = launch(
        frees[2], frees[3], engine=200 if same_pids else 210, workers=(300, 301) if same_pids else (310, 311)
    )
    alone = [budget_of(log(*first)), budget_of(log(*second))]
    order = data.draw(st.permutations([0] * len(first) + [1] * len(second)))
    queues = [list(first), list(second)]
    mixed = [queues[source].pop(0) for source in order]
    together = budget_of(log(*mixed))
    assert None not in alone
    assert together is None or together <= min(alone)


CSV_CELLS = st.one_of(
    st.just(""),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["ok", "oom", "NA", "nan", "inf", "1e400", "0.26.0", "suggestion", "manual", "True"]),
    st.text(alphabet=',"\n\r x0123456789.-', max_size=8),
)


@FUZZ
@given(st.data())
def test_ledger_csv_of_random_cells(data):
    columns = data.draw(st.lists(st.sampled_from(LEDGER_COLUMNS), min_size=1, max_size=12, unique=True))
    rows = data.draw(st.lists(st.lists(CSV_CELLS, min_size=len(columns), max_size=len(columns)), max_size=5))
    text = ",".join(columns) + "\n" + "".join(",".join(row) + "\n" for row in rows)
    budget_of(text, suffix=".csv")


@FUZZ
@given(st.data())
def test_a_valid_ledger_csv_with_one_cell_changed(data):
    base = {
        "source": "a.log",
        "boot": "0",
        "model": "m",
        "vllm_version": "0.26.0",
        "tensor_parallel_size": "2",
        "pipeline_parallel_size": "1",
        "data_parallel_size": "1",
        "outcome": "ok",
        "room_source": "manual",
        "total_bytes": str(80 << 30),
    }
    rows = [dict(base, rank="0", room_bytes=str(60 << 30)), dict(base, rank="1", room_bytes=str(50 << 30))]
    which = data.draw(st.integers(0, 1))
    column = data.draw(st.sampled_from([*sorted(base), "room_bytes", "rank"]))
    rows[which][column] = data.draw(CSV_CELLS)
    header = list(rows[0])
    text = ",".join(header) + "\n" + "".join(",".join(row[name] for name in header) + "\n" for row in rows)
    budget_of(text, suffix=".csv")
