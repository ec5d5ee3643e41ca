"""Write a sample fleet of vLLM hosts (run: python data/fleet/make_fleet.py [--hosts N --out DIR]).

Every host serves meta-llama/Llama-3.1-70B-Instruct, bf16, TP=8, `--max-model-len 32768
--gpu-memory-utilization 0.9`, block 16: 80 layers × (8 KV heads / 8 = 1 head per rank) × 2 × 128 × 2 B
= 40,960 B per token per rank, **655,360 B per block**. Each host folder holds `boot.log` (one profiled
boot in vLLM 0.26.0's exact lines, those of data/boots/four-rank/boot.log with eight ranks) and
`nvidia-smi-gpu.csv` and `nvidia-smi-apps.csv` (the `--query-gpu` and `--query-compute-apps` snapshots taken
after warm-up: GPU type, driver and the memory of other processes).

vLLM 0.26's arithmetic, per rank (GiB = 2^30, MiB = 2^20; see data/README.md):
- requested = ceil(T × 0.9); W = 17,641,562,112 (16.43 GiB: the 70B weights over 8 ranks);
  P = 966,787,072 (0.9 GiB peak activation);
- available = requested − (W + P + NT) − est (the CUDA-graph estimate is subtracted from 0.20);
- room = to_gpu = init_free − (W + P + NT + cg) − 150 MiB;
  to_requested = requested − (W + P + NT + cg) − 150 MiB;
- blocks = available // 655,360; the engine prints the minimum: tokens = blocks × 16, concurrency =
  blocks / 2,048 (`%.2fx`).

GPU classes: H100 80GB (T = 81,089 MiB, nvidia-smi 81,559 MiB) and H200 (T = 143,156 MiB, nvidia-smi
143,771 MiB), drivers 580.95.05 and 570.172.08. A clean rank starts with T − 512 MiB ± 48 MiB free (the CUDA
context), NT = 368 MiB ± 16 MiB, est = 1,000 MiB ± 8 MiB, cg = est − 64 MiB ± 8 MiB (all whole MiB).
Kinds of host: `clean`; `cotenant` (one GPU has a colocated job: 2–6 GiB less free at startup);
`graphs` (a heavier CUDA-graph footprint: +1.5 GiB est and cg on every rank); `nontorch` (+1.25 GiB
non-torch on every rank: larger NCCL buffers); `oom` (CUDA out of memory on one rank during graph
capture); `cut` (the log stops before the KV cache is sized); `noboot` (API-server lines only);
`mixed` (a second log of an earlier boot at `--max-model-len 16384`: two compatibility keys);
`other-version` (vLLM 0.27.0, whose lines are 0.26's at other file lines; its suggestion counts the
graph estimate twice, vllm#57936: printed peak activation = P + est, room = init_free − (W + P + est + NT
+ cg) − 150 MiB).

`manifest.csv` lists every file as `host,path,zone,image` (paths relative to the manifest) plus one row
whose file is missing (host `h-missing`). The same seed gives the same fleet, byte for byte.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOUR_RANK = HERE.parent / "boots" / "four-rank" / "boot.log"
MiB, GiB = 2**20, 2**30
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
TP = 8
UTIL = 0.9
MAX_MODEL_LEN = 32768
BLOCK_SIZE = 16
BLOCK_BYTES = 655_360
WEIGHTS = 17_641_562_112
PEAK = 966_787_072
VLLM_OVERHEAD = 150 * MiB
GPUS = {
    "h100": ("NVIDIA H100 80GB HBM3", 81_089, 81_559),
    "h200": ("NVIDIA H200", 143_156, 143_771),
}
#: vLLM 0.27.0 prints the same memory lines from other file lines (vllm-0.26-0.33.md §1.3).
LINES = {
    "0.26.0": {"available": 466, "hint": 481, "pool": 619, "free": 668, "manual": 392},
    "0.27.0": {"available": 563, "hint": 578, "pool": 726, "free": 789, "manual": 491},
}


@dataclass
class Host:
    """One host of the sample fleet: its GPUs, the kind of its boot, its labels and per-rank draws [bytes]."""

    name: str
    gpu: str
    driver: str
    zone: str
    image: str
    kind: str = "clean"
    version: str = "0.26.0"
    init_free: list[int] = field(default_factory=list)
    non_torch: list[int] = field(default_factory=list)
    estimate: list[int] = field(default_factory=list)
    graphs: list[int] = field(default_factory=list)
    pid: int = 40000


def gib(num_bytes: float) -> float:
    """vLLM's format_gib: round(bytes / GiB, 2)."""
    return round(num_bytes / GiB, 2)


def draw(host: Host, rng: random.Random) -> Host:
    """Fill the per-rank memory draws of ``host`` from its GPU and kind (whole MiB, see the module doc)."""
    total_mib = GPUS[host.gpu][1]
    host.init_free = [(total_mib - 512 + rng.randint(-48, 48)) * MiB for _ in range(TP)]
    host.non_torch = [(368 + rng.randint(-16, 16)) * MiB for _ in range(TP)]
    host.estimate = [(1000 + rng.randint(-8, 8)) * MiB for _ in range(TP)]
    host.graphs = [est - (64 + rng.randint(-8, 8)) * MiB for est in host.estimate]
    if host.kind == "cotenant":
        rank = rng.randrange(TP)
        host.init_free[rank] -= rng.randint(2048, 6144) * MiB
    elif host.kind == "graphs":
        host.estimate = [value + 1536 * MiB for value in host.estimate]
        host.graphs = [value + 1536 * MiB for value in host.graphs]
    elif host.kind == "nontorch":
        host.non_torch = [value + 1280 * MiB for value in host.non_torch]
    host.pid = rng.randrange(10_000, 60_000)
    return host


def total_bytes(host: Host) -> int:
    return GPUS[host.gpu][1] * MiB


def requested_bytes(host: Host) -> int:
    return math.ceil(total_bytes(host) * UTIL)


def peak_printed(host: Host, rank: int) -> int:
    """The suggestion's "peak activation": P, plus the graph estimate from 0.27.0 (vllm#57936)."""
    return PEAK + (host.estimate[rank] if host.version == "0.27.0" else 0)


def rank_numbers(host: Host, rank: int) -> dict:
    """vLLM 0.26's per-rank figures for ``host``'s rank (bytes; see the module doc)."""
    used = WEIGHTS + peak_printed(host, rank) + host.non_torch[rank] + host.graphs[rank]
    available = requested_bytes(host) - (WEIGHTS + PEAK + host.non_torch[rank]) - host.estimate[rank]
    return {
        "available": available,
        "blocks": available // BLOCK_BYTES,
        "to_gpu": host.init_free[rank] - used - VLLM_OVERHEAD,
        "to_requested": requested_bytes(host) - used - VLLM_OVERHEAD,
    }


@functools.lru_cache(maxsize=1)
def _engine_lines() -> tuple[str, str]:
    """The non-default args and engine config of data/boots/four-rank/boot.log, for TP=8, util 0.9."""
    lines = FOUR_RANK.read_text(encoding="utf-8").splitlines()
    args = next(line for line in lines if "non-default args" in line).split("] ", 1)[1]
    config = next(line for line in lines if "Initializing a V1 LLM engine" in line).split("] ", 1)[1]
    args = args.replace("'tensor_parallel_size': 4", f"'tensor_parallel_size': {TP}")
    args = args.replace("'gpu_memory_utilization': 0.6", f"'gpu_memory_utilization': {UTIL}")
    return args, config.replace("tensor_parallel_size=4", f"tensor_parallel_size={TP}")


class Clock:
    """vLLM's `MM-DD HH:MM:SS` stamps, advancing by whole seconds."""

    def __init__(self, day: int, start: int) -> None:
        self.day, self.seconds = day, start

    def tick(self, seconds: int = 0) -> str:
        self.seconds += seconds
        hours, rest = divmod(self.seconds, 3600)
        return f"11-{self.day:02d} {hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def boot_log(
    host: Host,
    rng: random.Random,
    max_model_len: int = MAX_MODEL_LEN,
    serving_lines: int = 0,
    manual_bytes: int | None = None,
    day: int = 24,
) -> str:
    """One boot of ``host`` in vLLM's lines: profiled, or at ``manual_bytes`` (--kv-cache-memory-bytes)."""
    args, config = _engine_lines()
    version, at = host.version, LINES[host.version]
    args = args.replace("'max_model_len': 32768", f"'max_model_len': {max_model_len}")
    config = config.replace("max_seq_len=32768", f"max_seq_len={max_model_len}").replace(
        "v0.26.0", f"v{version}"
    )
    if manual_bytes is not None:
        args = args.replace(
            "'max_num_seqs': 256}", f"'max_num_seqs': 256, 'kv_cache_memory_bytes': {manual_bytes}}}"
        )
    api, core = host.pid, host.pid + 256
    workers = [host.pid + 391 + rank for rank in range(TP)]
    clock = Clock(day, 9 * 3600 + rng.randrange(3600))
    out: list[str] = []

    def emit(prefix: str, message: str, where: str = "", level: str = "INFO", seconds: int = 0) -> None:
        out.append(f"({prefix}) {level} {clock.tick(seconds)} [{where}] {message}")

    def each_rank(message, where: str, seconds: int = 0, order=None, named: bool = True) -> None:
        for index, rank in enumerate(order or range(TP)):
            prefix = f"Worker_TP{rank} pid={workers[rank]}" if named else f"Worker pid={workers[rank]}"
            emit(prefix, message(rank), where, seconds=seconds if index == 0 else 0)

    def shuffled() -> list[int]:
        order = list(range(TP))
        rng.shuffle(order)
        return order

    api_p, core_p = f"APIServer pid={api}", f"EngineCore pid={core}"
    emit(api_p, f"vLLM API server version {version}", "api_server.py:1977")
    emit(api_p, f"non-default args: {args}", "utils.py:233")
    emit(api_p, "Resolved architecture: LlamaForCausalLM", "model.py:554", seconds=6)
    emit(api_p, f"Using max model len {max_model_len}", "model.py:1685")
    emit(api_p, "Chunked prefill is enabled with max_num_batched_tokens=8192.", "scheduler.py:239")
    emit(api_p, "Asynchronous scheduling is enabled.", "vllm.py:834")
    if host.kind == "noboot":
        return "\n".join(out) + "\n"
    emit(core_p, config, "core.py:107", seconds=12)
    port = rng.randrange(30000, 60000)
    each_rank(
        lambda r: (
            f"world_size={TP} rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:{port} "
            "backend=nccl"
        ),
        "parallel_state.py:1400",
        order=shuffled(),
        named=False,
    )
    each_rank(
        lambda r: "vLLM is using nccl==2.28.3", "pynccl.py:111", seconds=1, order=shuffled(), named=False
    )
    each_rank(
        lambda r: (
            f"rank {r} in world size {TP} is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank {r}, "
            "EP rank N/A, EPLB rank N/A"
        ),
        "parallel_state.py:1713",
        seconds=2,
        named=False,
    )
    each_rank(
        lambda r: f"Starting to load model {MODEL}...",
        "gpu_model_runner.py:5163",
        seconds=3,
        order=shuffled(),
    )
    emit(
        f"Worker_TP0 pid={workers[0]}",
        f"Model loading took {gib(WEIGHTS)} GiB memory and 40.371823 seconds",
        "gpu_model_runner.py:5187",
        seconds=40,
    )
    emit(f"Worker_TP0 pid={workers[0]}", "torch.compile took 34.12 s in total", "monitor.py:48", seconds=40)
    if manual_bytes is None:
        each_rank(
            lambda r: "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)",
            "gpu_model_runner.py:6279",
            seconds=3,
            order=shuffled(),
        )
    if host.kind == "cut":
        return "\n".join(out) + "\n"
    if manual_bytes is None:
        _profiled(host, emit, each_rank, shuffled, at, workers, core_p)
    else:
        each_rank(
            lambda r: (
                f"Initial free memory {gib(host.init_free[r])} GiB, reserved {gib(manual_bytes)} GiB "
                "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory "
                "profiling. "
                "This does not respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes "
                "config when you want manual control of KV cache memory size. If OOM'ed, check the "
                "difference "
                "of initial free memory between the current run and the previous run where "
                "kv_cache_memory_bytes is suggested and update it correspondingly."
            ),
            f"gpu_worker.py:{at['manual']}",
            seconds=4,
            order=shuffled(),
        )
        _engine_kv(emit, core_p, manual_bytes // BLOCK_BYTES, max_model_len)
    if host.kind == "oom":
        _oom(host, emit, rng, workers, core_p, api_p)
        return "\n".join(out) + "\n"
    emit(
        core_p,
        "init engine (profile, create kv cache, warmup model) took 97.36 seconds",
        "core.py:296",
        seconds=1,
    )
    emit(api_p, "Supported tasks: ['generate']", "api_server.py:1553", seconds=1)
    emit(api_p, "Starting vLLM API server 0 on http://0.0.0.0:8000", "api_server.py:2021")
    out.append(f"({api_p}) INFO:     Started server process [{api}]")
    out.append(f"({api_p}) INFO:     Waiting for application startup.")
    out.append(f"({api_p}) INFO:     Application startup complete.")
    for _ in range(serving_lines):
        running = rng.randint(8, 64)
        emit(
            api_p,
            f"Engine 000: Avg prompt throughput: {rng.uniform(1000, 9000):.1f} tokens/s, Avg generation "
            f"throughput: {rng.uniform(200, 900):.1f} tokens/s, Running: {running} reqs, "
            "Waiting: 0 reqs, GPU KV "
            f"cache usage: {rng.uniform(5, 80):.1f}%, Prefix cache hit rate: 0.0%",
            "loggers.py:310",
            seconds=10,
        )
    return "\n".join(out) + "\n"


def _profiled(host: Host, emit, each_rank, shuffled, at: dict, workers: list[int], core_p: str) -> None:
    """The profiled boot's sizing lines: estimate, Available (TP0), hint, engine KV, graphs, suggestions."""
    total, requested = total_bytes(host), requested_bytes(host)
    numbers = [rank_numbers(host, rank) for rank in range(TP)]
    each_rank(
        lambda r: f"Estimated CUDA graph memory: {gib(host.estimate[r])} GiB total",
        "gpu_model_runner.py:6365",
        seconds=6,
        order=shuffled(),
    )
    emit(
        f"Worker_TP0 pid={workers[0]}",
        f"Available KV cache memory: {gib(numbers[0]['available'])} GiB",
        f"gpu_worker.py:{at['available']}",
    )
    each_rank(
        lambda r: (
            "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={UTIL:.4f} is equivalent to --gpu-memory-utilization="
            f"{UTIL - host.estimate[r] / total:.4f} without CUDA graph memory profiling. "
            "To maintain the same "
            f"effective KV cache size as before, increase --gpu-memory-utilization to "
            f"{UTIL + host.estimate[r] / total:.4f}. "
            "To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
        ),
        f"gpu_worker.py:{at['hint']}",
        order=shuffled(),
    )
    _engine_kv(emit, core_p, min(number["blocks"] for number in numbers), MAX_MODEL_LEN)
    emit(
        f"Worker_TP0 pid={workers[0]}",
        f"Graph capturing finished in 15 secs, took {gib(host.graphs[0])} GiB",
        "gpu_model_runner.py:6456",
        seconds=17,
    )
    if host.kind == "oom":
        return

    def pool(r: int) -> str:
        difference = host.estimate[r] - host.graphs[r]
        return (
            f"CUDA graph pool memory: {gib(host.graphs[r])} GiB (actual), {gib(host.estimate[r])} GiB "
            f"(estimated), difference: {gib(difference)} GiB ({difference / host.graphs[r] * 100:.1f}%)."
        )

    each_rank(pool, f"gpu_worker.py:{at['pool']}", order=shuffled())

    def suggestion(r: int) -> str:
        n = numbers[r]
        return (
            f"Free memory on device ({gib(host.init_free[r])}/{gib(total)} GiB) on startup. "
            "Desired GPU memory "
            f"utilization is ({UTIL}, {gib(requested)} GiB). Actual usage is {gib(WEIGHTS)} GiB for weight, "
            f"{gib(peak_printed(host, r))} GiB for peak activation, "
            f"{gib(host.non_torch[r])} GiB for non-torch memory, and "
            f"{gib(host.graphs[r])} GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
            f"`--kv-cache-memory={n['to_requested']}` ({gib(n['to_requested'])} GiB) to fit into requested "
            f"memory, or `--kv-cache-memory={n['to_gpu']}` ({gib(n['to_gpu'])} GiB) to fully utilize gpu "
            f"memory. Current kv cache memory in use is {gib(n['available'])} GiB."
        )

    each_rank(suggestion, f"gpu_worker.py:{at['free']}", order=shuffled())


def _engine_kv(emit, core_p: str, blocks: int, max_model_len: int) -> None:
    per_sequence = math.ceil(max_model_len / BLOCK_SIZE)
    emit(core_p, f"GPU KV cache size: {blocks * BLOCK_SIZE:,} tokens", "kv_cache_utils.py:1733", seconds=1)
    emit(
        core_p,
        f"Maximum concurrency for {max_model_len:,} tokens per request: {blocks / per_sequence:.2f}x",
        "kv_cache_utils.py:1734",
    )


def _oom(host: Host, emit, rng: random.Random, workers: list[int], core_p: str, api_p: str) -> None:
    """CUDA out of memory on one rank during graph capture, as vLLM 0.26's workers and engine print it."""
    rank = rng.randrange(TP)
    worker = f"Worker_TP{rank} pid={workers[rank]}"
    total = gib(total_bytes(host))
    message = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU {rank} has a total "
        f"capacity of {total} GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has "
        f"{total - 0.01:.2f} GiB memory in use."
    )
    emit(worker, "WorkerProc hit an exception.", "multiproc_executor.py:671", "ERROR", seconds=2)
    emit(worker, "Traceback (most recent call last):", "multiproc_executor.py:671", "ERROR")
    emit(worker, message, "multiproc_executor.py:671", "ERROR")
    emit(core_p, "EngineCore failed to start.", "core.py:708", "ERROR")
    emit(
        core_p,
        f"RuntimeError: Worker failed with error '{message.split(': ', 1)[1]}', please check the stack trace "
        "above for the root cause",
        "core.py:708",
        "ERROR",
    )


def snapshots_csv(host: Host, kv_bytes: int | None = None) -> tuple[str, str]:
    """The host's nvidia-smi --query-gpu and --query-compute-apps snapshots after warm-up (whole MiB).

    A vLLM worker uses W + P + NT + cg + its KV blocks (``kv_bytes`` for a boot at a manual value); free = startup free − that; a co-tenant uses what
    it took from the startup free memory; memory.used = memory.total − free − 470 MiB (driver reserve).
    """
    name, total_mib, smi_total = GPUS[host.gpu]
    gpus = ["index, uuid, name, driver_version, memory.total [MiB], memory.used [MiB], memory.free [MiB]"]
    apps = ["gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
    rng = random.Random(host.name)
    for rank in range(TP):
        blocks = rank_numbers(host, rank)["blocks"]
        kv = blocks * BLOCK_BYTES if kv_bytes is None else kv_bytes
        vllm = WEIGHTS + PEAK + host.non_torch[rank] + host.graphs[rank] + kv
        free = (host.init_free[rank] - vllm) // MiB
        uuid = (
            f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-"
            f"{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
        )
        gpus.append(
            f"{rank}, {uuid}, {name}, {host.driver}, {smi_total} MiB, {smi_total - free - 470} MiB, "
            f"{free} MiB"
        )
        apps.append(f"{uuid}, {host.pid + 391 + rank}, VLLM::Worker_TP{rank}, {vllm // MiB} MiB")
        cotenant = (total_mib - 512) * MiB - host.init_free[rank]
        if cotenant > 48 * MiB:
            apps.append(f"{uuid}, {host.pid + 2000 + rank}, /usr/bin/python3, {cotenant // MiB} MiB")
    return "\n".join(gpus) + "\n", "\n".join(apps) + "\n"


#: The committed sample: (how many, gpu, driver, zone, kind) in host order.
SMALL_FLEET = [
    (22, "h100", "580.95.05", "us-east-1a", "clean"),
    (3, "h100", "580.95.05", "us-east-1b", "cotenant"),
    (1, "h100", "580.95.05", "us-east-1b", "graphs"),
    (1, "h100", "580.95.05", "us-east-1a", "nontorch"),
    (8, "h200", "580.95.05", "us-west-2a", "clean"),
    (1, "h200", "580.95.05", "us-west-2a", "cotenant"),
    (1, "h100", "580.95.05", "us-east-1a", "oom"),
    (1, "h100", "580.95.05", "us-east-1a", "cut"),
    (1, "h200", "580.95.05", "us-west-2a", "noboot"),
    (1, "h100", "580.95.05", "us-east-1b", "mixed"),
    (1, "h100", "580.95.05", "us-east-1a", "other-version"),
]


def plan_hosts(groups, seed: int) -> list[Host]:
    """The fleet's hosts from ``(count, gpu, driver, zone, kind)`` groups, shuffled into host-name order."""
    rng = random.Random(seed)
    kinds = [spec for count, *spec in groups for _ in range(count)]
    rng.shuffle(kinds)
    hosts = []
    for index, (gpu, driver, zone, kind) in enumerate(kinds):
        host = Host(
            f"gpu-{index:05d}",
            gpu,
            driver,
            zone,
            "vllm-0.26.0-cu129",
            kind="clean" if kind == "other-version" else kind,
            version="0.27.0" if kind == "other-version" else "0.26.0",
        )
        if kind == "other-version":
            host.image = "vllm-0.27.0-cu129"
        hosts.append(draw(host, rng))
    return hosts


def scale_groups(hosts: int) -> list[tuple]:
    """A large fleet: 70 % H100, 25 % H200, 5 % H100 on driver 570; 6 % co-tenants, 2 % failed."""
    h100, h200 = int(hosts * 0.70), int(hosts * 0.25)
    old = hosts - h100 - h200
    cotenant, failed = max(1, hosts * 6 // 100), max(1, hosts // 100)
    return [
        (h100 - cotenant - 2 * failed, "h100", "580.95.05", "us-east-1a", "clean"),
        (cotenant, "h100", "580.95.05", "us-east-1b", "cotenant"),
        (failed, "h100", "580.95.05", "us-east-1a", "oom"),
        (failed, "h100", "580.95.05", "us-east-1a", "cut"),
        (h200, "h200", "580.95.05", "us-west-2a", "clean"),
        (old, "h100", "570.172.08", "eu-west-1a", "clean"),
    ]


def write_fleet(out: Path, hosts: list[Host], seed: int, serving_lines: int = 0) -> Path:
    """Write every host's folder and ``manifest.csv`` under ``out``; returns the manifest's path."""
    rng = random.Random(seed + 1)
    rows = ["host,path,zone,image"]
    for host in hosts:
        folder = out / host.name
        folder.mkdir(parents=True, exist_ok=True)
        lines = (
            serving_lines if not serving_lines else rng.randint(serving_lines // 2, serving_lines * 3 // 2)
        )
        (folder / "boot.log").write_text(boot_log(host, rng, serving_lines=lines), encoding="utf-8")
        files = ["boot.log"]
        if host.kind == "mixed":
            (folder / "boot-earlier.log").write_text(
                boot_log(host, rng, max_model_len=16384, day=23), encoding="utf-8"
            )
            files.append("boot-earlier.log")
        gpus, apps = snapshots_csv(host)
        (folder / "nvidia-smi-gpu.csv").write_text(gpus, encoding="utf-8")
        (folder / "nvidia-smi-apps.csv").write_text(apps, encoding="utf-8")
        files += ["nvidia-smi-gpu.csv", "nvidia-smi-apps.csv"]
        rows += [f"{host.name},{host.name}/{name},{host.zone},{host.image}" for name in files]
    rows.append("h-missing,h-missing/boot.log,us-east-1a,vllm-0.26.0-cu129")
    manifest = out / "manifest.csv"
    manifest.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, help="a large fleet of N hosts (default: the committed sample)")
    parser.add_argument(
        "--out", type=Path, default=HERE / "small", help="folder to write (default data/fleet/small)"
    )
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--serving-lines",
        type=int,
        default=0,
        help="about N stats lines after start-up per host (logs of 30–200 KB)",
    )
    args = parser.parse_args()
    groups = SMALL_FLEET if args.hosts is None else scale_groups(args.hosts)
    manifest = write_fleet(args.out, plan_hosts(groups, args.seed), args.seed, args.serving_lines)
    print(f"wrote {manifest.parent}")


if __name__ == "__main__":
    main()
