"""Write the sample load-test evidence in data/load/ (run: python data/load/make_load_samples.py).

Scenario A: meta-llama/Llama-3.1-70B-Instruct, bf16, TP=4, vLLM 0.26.0, block 16, max_model_len 32768,
1,310,720 B per block per rank. A closed-loop client (`vllm bench serve --dataset-name random
--random-input-len L --random-output-len O --random-range-ratio 0.5 --max-concurrency C --num-prompts P
--seed S`) drives a small model of vLLM V1's scheduler, one step per second:

- a request holds ceil(tokens / 16) blocks; block 0 is vLLM's null block, so num_gpu_blocks − 1 blocks
  serve requests and usage = 1 − free / (num_gpu_blocks − 1) (BlockPool.get_usage);
- running requests grow first, oldest first; when a block is missing the newest running request is
  preempted (its blocks freed, back to the front of the queue, recomputed on resume), and no waiting
  request is admitted in that step; otherwise waiting requests are admitted while their blocks fit and the
  prefill budget (16,384 tokens per second) lasts;
- a decode step takes 22 ms + 0.30 ms per running request, in what the previous second's prefill left of
  the second (prefill takes 1/16,384 s per token);
- the API server logs every 10 s (loggers.py:310 in 0.26, Preemptions only when > 0); an interval with
  zero throughput after another one is not logged at INFO (idle demotion);
- the random dataset shares no prefix, so the prefix cache hit rate is 0.0 % and hits stay 0.

Every number in the files comes out of this arithmetic; the same seed gives the same request mix to the
profiled and the manual-value canary.

The /metrics dumps follow vLLM 0.26's PrometheusStatLogger as prometheus_client prints it (labels sorted by
name, `_created` gauges for counters), with `vllm:engine_sleep_state` (0.11.1+, registered after
`vllm:num_requests_waiting`; awake = 1 by default) and `vllm:cache_config_info`, whose labels are
`CacheConfig.metrics_info()` = every CacheConfig field as a string, plus `engine`. The field set is the one
of mid-2026 releases (vllm#44691 shows it; later releases add more fields). A server started without
`--gpu-memory-utilization` reports the default, 0.92 from vLLM 0.20.0 (vllm-log-formats.md §9), also when
`--kv-cache-memory-bytes` makes vLLM ignore it. The /federate dump is what Prometheus serves: families
sorted by name, `# TYPE … untyped`, label names sorted (instance and job among them), times in ms.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from prometheus_client.utils import floatToGoString

HERE = Path(__file__).resolve().parent
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
BLOCK_SIZE = 16
BLOCK_BYTES = 1_310_720
MAX_MODEL_LEN = 32768
MANUAL_BLOCKS = 9_830  # 12 GiB // 1,310,720 B
PROFILED_BLOCKS = 9_741  # data/boots/four-rank/boot.log: "GPU KV cache size: 155,856 tokens" = 9,741 × 16
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # CacheConfig default from vLLM 0.20.0 (0.9 before)
PREFILL_TOKENS_PER_S = 16_384
LOG_INTERVAL_S = 10


@dataclass
class Request:
    prompt: int
    output: int
    generated: int = 0
    computed: int = 0  # tokens whose KV is in the cache

    def blocks(self, tokens: int | None = None) -> int:
        return math.ceil((self.computed if tokens is None else tokens) / BLOCK_SIZE)


@dataclass
class Server:
    num_blocks: int
    running: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    used: int = 0
    prompt_total: int = 0
    generation_total: int = 0
    preemptions_total: int = 0
    last_prefill: int = 0

    @property
    def free(self) -> int:
        return self.num_blocks - 1 - self.used  # block 0 is the null block, never free

    @property
    def usage(self) -> float:
        return 1.0 - self.free / (self.num_blocks - 1)

    def step(self) -> tuple[int, int, int, int]:
        """One second of serving: (prompt tokens, generated tokens, preemptions, finished requests)."""
        prompt = generated = preempted = finished = 0
        decode_s = max(0.2, 1.0 - self.last_prefill / PREFILL_TOKENS_PER_S)  # what the last prefill left
        per_request = max(1, int(decode_s * 1000 / (22 + 0.30 * max(1, len(self.running)))))
        survivors = []
        while self.running:
            request = self.running.pop(0)
            want = min(per_request, request.output - request.generated)
            need = request.blocks(request.computed + want) - request.blocks()
            while need > self.free and self.running:
                victim = self.running.pop()  # newest first
                self.used -= victim.blocks()
                victim.computed = 0
                self.waiting.insert(0, victim)
                preempted += 1
            if need > self.free:
                self.used -= request.blocks()
                request.computed = 0
                self.waiting.insert(0, request)
                preempted += 1
                continue
            self.used += need
            request.computed += want
            request.generated += want
            generated += want
            if request.generated >= request.output:
                self.used -= request.blocks()
                finished += 1
            else:
                survivors.append(request)
        self.running = survivors
        budget = PREFILL_TOKENS_PER_S
        while not preempted and self.waiting and budget > 0:
            request = self.waiting[0]
            tokens = request.prompt + request.generated
            if request.blocks(tokens) > self.free:
                break
            self.waiting.pop(0)
            request.computed = tokens
            self.used += request.blocks()
            self.running.append(request)
            prompt += tokens
            budget -= tokens
        self.last_prefill = prompt
        self.prompt_total += prompt
        self.generation_total += generated
        self.preemptions_total += preempted
        return prompt, generated, preempted, finished


@dataclass
class Mix:
    input_len: int
    output_len: int
    concurrency: int
    prompts: int
    seed: int

    def requests(self) -> list[Request]:
        rng = random.Random(self.seed)
        half_in, half_out = self.input_len // 2, self.output_len // 2
        return [
            Request(
                rng.randint(self.input_len - half_in, self.input_len + half_in),
                rng.randint(self.output_len - half_out, self.output_len + half_out),
            )
            for _ in range(self.prompts)
        ]


STEADY = Mix(input_len=3072, output_len=512, concurrency=32, prompts=480, seed=7)
OVERLOAD = Mix(input_len=6144, output_len=1024, concurrency=64, prompts=320, seed=11)


def stamp(when: datetime) -> str:
    return when.strftime("%m-%d %H:%M:%S")


def startup(
    api: int, core: int, start: datetime, blocks: int, manual: bool, util: float, took_s: float
) -> list[str]:
    """The startup lines kvplan reads (the full profiled boot is data/boots/four-rank/boot.log)."""
    args = (
        f"'model_tag': '{MODEL}', 'host': '0.0.0.0', 'model': '{MODEL}', 'max_model_len': {MAX_MODEL_LEN}, "
        "'tensor_parallel_size': 4, "
    )
    args += (
        f"'kv_cache_memory_bytes': {blocks * BLOCK_BYTES}" if manual else f"'gpu_memory_utilization': {util}"
    )
    concurrency = blocks / math.ceil(MAX_MODEL_LEN / BLOCK_SIZE)  # 0.9.1–0.26: blocks / cdiv(len, block)
    tokens = int(concurrency * MAX_MODEL_LEN)  # 0.21+: int(max_concurrency × max_model_len)
    a, c = f"(APIServer pid={api}) ", f"(EngineCore pid={core}) "
    at = [stamp(start + timedelta(seconds=offset)) for offset in (0, 121, 139, 140)]
    return [
        f"{a}INFO {at[0]} [api_server.py:1977] vLLM API server version 0.26.0",
        f"{a}INFO {at[0]} [utils.py:233] non-default args: {{{args}, 'max_num_seqs': 256}}",
        f"{c}INFO {at[1]} [kv_cache_utils.py:1733] GPU KV cache size: {tokens:,} tokens",
        f"{c}INFO {at[1]} [kv_cache_utils.py:1734] Maximum concurrency for {MAX_MODEL_LEN:,} tokens per request: "
        f"{concurrency:.2f}x",
        f"{c}INFO {at[2]} [core.py:296] init engine (profile, create kv cache, warmup model) took {took_s:.2f} seconds",
        f"{a}INFO {at[3]} [api_server.py:2021] Starting vLLM API server 0 on http://0.0.0.0:8000",
    ]


def stats_line(api: int, when: datetime, prompt: int, generated: int, server: Server, preempted: int) -> str:
    preemptions = f"Preemptions: {preempted}, " if preempted else ""
    return (
        f"(APIServer pid={api}) INFO {stamp(when)} [loggers.py:310] Engine 000: Avg prompt throughput: "
        f"{prompt / LOG_INTERVAL_S:.1f} tokens/s, Avg generation throughput: {generated / LOG_INTERVAL_S:.1f} "
        f"tokens/s, Running: {len(server.running)} reqs, Waiting: {len(server.waiting)} reqs, "
        f"{preemptions}GPU KV cache usage: {server.usage * 100:.1f}%, Prefix cache hit rate: 0.0%"
    )


def scrape(server: Server, blocks: int, util: float | None, created: float) -> dict[str, float]:
    return {
        "running": len(server.running),
        "waiting": len(server.waiting),
        "usage": server.usage,
        "prompt": server.prompt_total,
        "generation": server.generation_total,
        "preemptions": server.preemptions_total,
        "queries": server.prompt_total,
        "created": created,
        "blocks": blocks,
        "util": util,
    }


HELP = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:engine_sleep_state": (
        "gauge",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 "
        "means engine is awake; weights_offloaded = 1 means sleep level 1; "
        "discard_all = 1 means sleep level 2.",
    ),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:prefix_cache_queries": ("counter", "Prefix cache queries, in terms of number of queried tokens."),
    "vllm:prefix_cache_hits": ("counter", "Prefix cache hits, in terms of number of cached tokens."),
    "vllm:num_preemptions": ("counter", "Cumulative number of preemption from the engine."),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:cache_config_info": ("gauge", "Information of the LLMEngine CacheConfig"),
}
SLEEP_STATES = {"awake": 1, "weights_offloaded": 0, "discard_all": 0}  # record_sleep_state() defaults


def cache_config(blocks: int, util: float | None) -> dict[str, str]:
    """`CacheConfig.metrics_info()` of the sample servers: str() of each field (Llama: no Mamba, no window)."""
    return {
        "block_size": str(BLOCK_SIZE),
        "_block_size_resolved": "True",
        "user_specified_block_size": "False",
        "user_specified_mamba_block_size": "False",
        "hash_block_size": "None",
        "gpu_memory_utilization": str(util or DEFAULT_GPU_MEMORY_UTILIZATION),
        "cache_dtype": "auto",
        "is_attention_free": "False",
        "num_gpu_blocks_override": "None",
        "sliding_window": "None",
        "enable_prefix_caching": "True",
        "prefix_caching_hash_algo": "sha256",
        "calculate_kv_scales": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "mamba_page_size_padded": "None",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "num_gpu_blocks": str(blocks),
        "num_cpu_blocks": "None",
        "kv_sharing_fast_prefill": "False",
        "kv_cache_memory_bytes": str(blocks * BLOCK_BYTES if util is None else None),
        "kv_offloading_size": "None",
        "kv_offloading_backend": "native",
    }


def families(values: dict) -> list[tuple[str, str, list[tuple[dict, float]]]]:
    """(family name, type, [(labels, value)]) in the order vLLM registers them; counters keep their stem."""
    labels = {"engine": "0", "model_name": MODEL}
    gauges = {"vllm:num_requests_running": values["running"], "vllm:num_requests_waiting": values["waiting"]}
    out = [(name, "gauge", [(labels, value)]) for name, value in gauges.items()]
    out.append(
        (
            "vllm:engine_sleep_state",
            "gauge",
            [({**labels, "sleep_state": state}, value) for state, value in SLEEP_STATES.items()],
        )
    )
    out.append(("vllm:kv_cache_usage_perc", "gauge", [(labels, values["usage"])]))
    counters = {
        "vllm:prefix_cache_queries": values["queries"],
        "vllm:prefix_cache_hits": 0,
        "vllm:num_preemptions": values["preemptions"],
        "vllm:prompt_tokens": values["prompt"],
        "vllm:generation_tokens": values["generation"],
    }
    out += [(name, "counter", [(labels, value)]) for name, value in counters.items()]
    out.append(
        (
            "vllm:cache_config_info",
            "gauge",
            [({**cache_config(values["blocks"], values["util"]), "engine": "0"}, 1.0)],
        )
    )
    return out


def go_float(value: float) -> str:
    """Go's strconv.FormatFloat(value, 'g', -1, 64), as Prometheus' /federate prints a value: 32, 0, 1e+06."""
    number = Decimal(repr(float(value))).normalize()
    if number == 0:
        return "0"
    sign, digits, exponent = number.as_tuple()
    power = len(digits) - 1 + exponent
    if -4 <= power < 6:
        return format(number, "f")
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"


def sample(name: str, labels: dict, value: float, suffix: str = "", federate: bool = False) -> str:
    text = ",".join(f'{key}="{labels[key]}"' for key in sorted(labels))  # both print label names sorted
    return f"{name}{{{text}}} {go_float(value) if federate else floatToGoString(value)}{suffix}"


def exposition(values: dict) -> list[str]:
    """prometheus_client's text exposition of one /metrics scrape (counters as `_total` + `_created`)."""
    lines = []
    for name, kind, samples in families(values):
        text = HELP[name][1]
        exposed = f"{name}_total" if kind == "counter" else name
        lines += [f"# HELP {exposed} {text}", f"# TYPE {exposed} {kind}"]
        lines += [sample(exposed, labels, value) for labels, value in samples]
        if kind == "counter":
            lines += [f"# HELP {name}_created {text}", f"# TYPE {name}_created gauge"]
            lines += [sample(f"{name}_created", labels, values["created"]) for labels, _ in samples]
    return lines


def federation(values: dict, when_ms: int) -> list[str]:
    """Prometheus /federate output of one evaluation: series sorted by name and labels, `untyped`, ms times."""
    target = {"instance": "canary-0:8000", "job": "vllm"}
    series: dict[str, list[tuple[dict, float]]] = {}
    for name, kind, samples in families(values):
        if kind == "counter":
            series[f"{name}_total"] = samples
            series[f"{name}_created"] = [(labels, values["created"]) for labels, _ in samples]
        else:
            series[name] = samples
    lines = []
    for name in sorted(series):
        lines.append(f"# TYPE {name} untyped")
        ordered = sorted(series[name], key=lambda pair: sorted({**pair[0], **target}.items()))
        lines += [
            sample(name, {**labels, **target}, value, f" {when_ms}", federate=True)
            for labels, value in ordered
        ]
    return lines


def serve(
    requests: list[Request],
    concurrency: int,
    server: Server,
    begin: datetime,
    api: int,
    scrape_every: int,
    created: float,
    util: float | None,
) -> tuple[list[str], list, datetime]:
    """One benchmark pass from ``begin``: log lines, (time, values) of each /metrics scrape, end time."""
    lines, scrapes = [], []
    sent = min(concurrency, len(requests))
    server.waiting.extend(requests[:sent])
    interval, idle, second, clock = [0, 0, 0], 0, 0, begin
    while server.running or server.waiting or sent < len(requests) or idle < 2:
        second += 1
        clock = begin + timedelta(seconds=second)
        prompt, generated, preempted, finished = server.step()
        interval = [interval[0] + prompt, interval[1] + generated, interval[2] + preempted]
        for _ in range(finished):
            lines.append(
                f"(APIServer pid={api}) INFO:     10.4.0.17:{40000 + sent} - "
                '"POST /v1/completions HTTP/1.1" 200 OK'
            )
            if sent < len(requests):
                server.waiting.append(requests[sent])
                sent += 1
        if second % LOG_INTERVAL_S == 0:
            if interval[0] or interval[1] or not idle:  # idle demotion: a second idle interval goes to DEBUG
                lines.append(stats_line(api, clock, interval[0], interval[1], server, interval[2]))
            idle = 0 if interval[0] or interval[1] else idle + 1
            interval = [0, 0, 0]
        if second % scrape_every == 0:
            scrapes.append((clock, scrape(server, server.num_blocks, util, created)))
            lines.append(
                f'(APIServer pid={api}) INFO:     10.4.0.9:{50000 + second} - "GET /metrics HTTP/1.1" 200 OK'
            )
    return lines, scrapes, clock


def run(
    mix: Mix,
    blocks: int,
    start: datetime,
    api: int,
    core: int,
    manual: bool,
    util: float | None,
    scrape_every: int,
    took_s: float,
    passes: int = 1,
) -> tuple[list[str], list[tuple[datetime, dict]]]:
    """Boot, then serve the mix in ``passes`` equal passes with a server restart between them."""
    requests = mix.requests()
    share = len(requests) // passes
    lines, scrapes = [], []
    for number in range(passes):
        if number:
            lines.append(
                f"(APIServer pid={api}) INFO {stamp(start)} [launcher.py:101] Shutting down FastAPI "
                "HTTP server."
            )
            start, api, core = start + timedelta(seconds=20), api + 811, core + 811
        lines += startup(api, core, start, blocks, manual, util or DEFAULT_GPU_MEMORY_UTILIZATION, took_s)
        begin = start + timedelta(seconds=178)  # the benchmark starts 38 s after "Starting vLLM API server"
        created = (begin - timedelta(seconds=2)).replace(tzinfo=timezone.utc).timestamp()
        part = requests[number * share : (number + 1) * share]
        more, taken, start = serve(
            part, mix.concurrency, Server(blocks), begin, api, scrape_every, created, util
        )
        lines += more
        scrapes += taken
    return lines, scrapes


def write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    # profiled canary: steady mix, /federate dumps with sample timestamps, many per file
    # the profiled boot of data/boots/four-rank/ (same processes), then the steady mix
    log, scrapes = run(
        STEADY, PROFILED_BLOCKS, datetime(2026, 11, 24, 9, 14, 2), 48211, 48467, False, 0.6, 30, 97.36
    )
    write(HERE / "profiled-canary" / "server.log", log)
    write(
        HERE / "profiled-canary" / "federate.prom",
        [
            line
            for when, values in scrapes
            for line in federation(values, int(when.replace(tzinfo=timezone.utc).timestamp() * 1000))
        ],
    )
    # manual-value canary: the same steady mix, one /metrics scrape per file with a time comment
    log, scrapes = run(
        STEADY, MANUAL_BLOCKS, datetime(2026, 11, 27, 9, 30, 0), 3114, 3301, True, None, 60, 88.12
    )
    write(HERE / "manual-canary" / "server.log", log)
    for number, (when, values) in enumerate(scrapes, start=1):
        write(
            HERE / "manual-canary" / "metrics" / f"scrape-{number:02d}.prom",
            [f"# {when.strftime('%Y-%m-%dT%H:%M:%SZ')}", *exposition(values)],
        )
    # manual-value canary under the overload mix: preemptions, a server restart half-way, many scrapes per file
    log, scrapes = run(
        OVERLOAD, MANUAL_BLOCKS, datetime(2026, 11, 27, 11, 0, 0), 4420, 4597, True, None, 30, 87.95, passes=2
    )
    write(HERE / "manual-canary-overload" / "server.log", log)
    write(
        HERE / "manual-canary-overload" / "metrics.prom",
        [
            line
            for when, values in scrapes
            for line in [f"# {when.strftime('%Y-%m-%dT%H:%M:%SZ')}", *exposition(values)]
        ],
    )


if __name__ == "__main__":
    main()
