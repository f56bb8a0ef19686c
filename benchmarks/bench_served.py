"""Served vs in-process: requests per second of the same work through llama.cpp's OpenAI-compatible server
(llama-cpp-python[server] 0.3.36, the quantized GGUF) and through factprobe's own engines (float32 weights
converted from the same GGUF), on the CPU, one thread each.

Workloads (the probes' own calls):
- generation: QA prompts (countryinfo, 0-shot, the QA probe's `qa_prompt` and stop strings, 16 new tokens),
  SmolLM2-135M: `ServedGenerator.greedy` (one completion request per prompt) vs `Generator.greedy` (batched);
- log-likelihood: IC-LKE-like requests (a context, 3 options each), Gemma-3-270M (the model whose echo
  log-probs the server gets right): `ServedScorer.score_choices` (one echo request per option) vs
  `Scorer.score_choices` (packed).
A request is one prompt (generation) or one option (log-likelihood). Each method runs `--rounds` times,
alternating, and its best round counts (outside load hits both alike). The server and the in-process model
get one thread each (`--n_threads 1`, `torch.set_num_threads(1)`).

`--part transport` (issue 38 item 4) compares the served client before and after, side by side on the same
server: `before` is the client as it was (urllib, a new connection per request, `Connection: close`, one prompt
per request); `after` is `factprobe.lm.served_client.Client` (kept-alive connections, a list of prompts per
request where the server takes one: llama-cpp-python's server does not, so here one prompt per request too), each
with 1 and 4 requests in flight, on three workloads: tiny requests (1 new token, no log-probs: the per-request
overhead), QA generation (SmolLM2) and echo log-likelihoods (Gemma-3).

Writes benchmarks/results/served.json (the parts run replace theirs, the others are kept) and prints the ratios.
Run: `.venv/bin/python benchmarks/bench_served.py [--part in-process|transport|all]` (needs
`make .venv/.llama-server` and `make models`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from portable_paths import portable  # benchmarks/ is sys.path[0] when a bench runs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def start_server(alias: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """`python -m llama_cpp.server` on a free loopback port, serving `alias`'s GGUF; (process, API root)."""
    from factprobe.models.aliases import gguf_cache_path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf_cache_path(alias)),
            "--model_alias",
            alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
            "--n_threads",
            "1",
            "--verbose",
            "false",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(360):
        try:
            urllib.request.urlopen(url + "/models", timeout=5).read()
            return proc, url
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("llama_cpp.server did not start")


def qa_prompts(n: int) -> list[str]:
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe
    from factprobe.probes.qa import exemplar_block, qa_prompt

    cfg = RunConfig.from_dict(
        {
            "probe": "qa",
            "model": "x",
            "relations": "P36,P1376,P30,P37",
            "max_facts_per_relation": n,
            "shots": "0",
            "qa_train_per_relation": 3,
        }
    )
    probe = get_probe("qa")
    prepared = probe.prepare(cfg)
    items = [t.item for ts in probe.groups(cfg, prepared).values() for t in ts]
    return [qa_prompt(exemplar_block([]), it.question) for it in items][:n]


def choice_requests(n: int):
    from factprobe.lm.scorer import ChoiceRequest

    capitals = [
        ("France", "Paris"),
        ("Germany", "Berlin"),
        ("Italy", "Rome"),
        ("Spain", "Madrid"),
        ("Japan", "Tokyo"),
        ("Egypt", "Cairo"),
        ("Canada", "Ottawa"),
        ("Kenya", "Nairobi"),
        ("Peru", "Lima"),
        ("Chile", "Santiago"),
    ]
    names = [c for _, c in capitals]
    return [
        ChoiceRequest(f"The capital of {country} is", [f" {city}", f" {names[(i + 1) % 10]}", f" {names[(i + 2) % 10]}"])
        for i, (country, city) in enumerate((capitals * (n // 10 + 1))[:n])
    ]


def best_rate(fn, requests: int, rounds: int) -> tuple[float, object]:
    best, out = 0.0, None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        best = max(best, requests / (time.perf_counter() - t0))
    return best, out


class BeforeClient:
    """The served client's transport as it was before issue 38 item 4, for the side-by-side: `urllib.request` with a
    new connection per request (urllib sends `Connection: close`), one prompt per request, same JSON."""

    def __new__(cls, url: str, concurrency: int):
        from factprobe.lm import served

        client = served.Client(url, concurrency=concurrency)

        def send(method: str, path: str, payload: dict | None):
            data = None if payload is None else json.dumps(payload).encode()
            req = urllib.request.Request(client.url + path, data=data, method=method)
            req.add_header("Accept", "application/json")
            if data is not None:
                req.add_header("Content-Type", "application/json")
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, resp.headers, resp.read()

        client._send = send
        return client


def transport(args) -> dict:
    """Requests per second of the client before and after (module docstring), on the same llama.cpp server."""
    from factprobe.lm import served
    from factprobe.lm.served_client import accepts_lists, completions
    from factprobe.models.loading import served_tokenizer
    from factprobe.probes.qa import STOP

    prompts = qa_prompts(args.prompts)
    reqs = choice_requests(max(1, args.choices // 5))
    out: dict = {"server_takes_lists": None}
    for alias in ("smollm2-135m-instruct", "gemma-3-270m"):
        proc, url = start_server(alias)
        try:
            m = served.connect(f"openai:{alias}@{url}", check=alias == "gemma-3-270m", tokenizer_of=served_tokenizer)
            out["server_takes_lists"] = accepts_lists(m.client, alias)
            for concurrency in (1, 4):
                clients = {"before": BeforeClient(url, concurrency), "after": served.Client(url, concurrency=concurrency)}
                clients["after"].lists = out["server_takes_lists"]
                for name, client in clients.items():
                    m.client = client
                    if alias == "smollm2-135m-instruct":
                        tiny = [f"Count: {i}," for i in range(args.prompts * 4)]
                        work = {
                            "tiny": (
                                lambda c=client, a=alias, t=tiny: completions(c, a, t, max_tokens=1, logprobs=None),
                                len(tiny),
                            ),
                            "generation": (
                                lambda mm=m: mm.make_generator().greedy(prompts, max_new_tokens=16, stop=STOP),
                                len(prompts),
                            ),
                        }
                    else:
                        n_opts = sum(len(r.options) for r in reqs)
                        work = {"log_likelihood": (lambda mm=m: mm.make_scorer().score_choices(reqs), n_opts)}
                    for part, (fn, n) in work.items():
                        rate, _ = best_rate(fn, n, args.rounds)
                        row = out.setdefault(part, {"model": alias, "requests": n})
                        row[f"{name}_rps_concurrency_{concurrency}"] = round(rate, 2)
                        if name == "after":  # (before: one connection per request)
                            row[f"after_connections_concurrency_{concurrency}"] = client.connections
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
    for part in ("tiny", "generation", "log_likelihood"):
        row = out[part]
        for c in (1, 4):
            row[f"after_over_before_concurrency_{c}"] = round(
                row[f"after_rps_concurrency_{c}"] / row[f"before_rps_concurrency_{c}"], 2
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--choices", type=int, default=10, help="log-likelihood requests (3 options each)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--part", choices=["in-process", "transport", "all"], default="all")
    ap.add_argument("--out", default=str(HERE / "results" / "served.json"))
    args = ap.parse_args()
    out = Path(args.out)
    if args.part in ("transport", "all"):
        moved = transport(args)
        old = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
        old["transport"] = moved
        old["transport_machine"] = f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(old, indent=2) + "\n", encoding="utf-8")
        tmp.replace(out)
        for part in ("tiny", "generation", "log_likelihood"):
            r = moved[part]
            print(
                f"{part} ({r['model']}, {r['requests']} requests): "
                + ", ".join(
                    f"concurrency {c}: before {r[f'before_rps_concurrency_{c}']} req/s, after {r[f'after_rps_concurrency_{c}']} "
                    f"req/s ({r[f'after_over_before_concurrency_{c}']}x)"
                    for c in (1, 4)
                )
            )
        if args.part == "transport":
            return

    import torch

    from factprobe.lm import served
    from factprobe.lm.generate import Generator
    from factprobe.lm.scorer import Scorer
    from factprobe.models import load_model
    from factprobe.models.loading import served_tokenizer
    from factprobe.probes.qa import STOP

    torch.set_num_threads(1)
    result: dict = {
        "server": "llama-cpp-python[server] 0.3.36 (CPU, --n_threads 1)",
        "in_process": "factprobe, float32, torch threads 1",
        "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start",
    }

    prompts = qa_prompts(args.prompts)
    proc, url = start_server("smollm2-135m-instruct")
    try:
        remote = served.connect(
            f"openai:smollm2-135m-instruct@{url}", concurrency=1, tokenizer_of=served_tokenizer
        ).make_generator()
        local_model = load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
        local = Generator(local_model.model, local_model.tokenizer)
        rates = {}
        for name, gen in (("in_process", local), ("served", remote)):
            rates[name] = best_rate(lambda g=gen: g.greedy(prompts, max_new_tokens=16, stop=STOP), len(prompts), args.rounds)
        same = sum(a.text.strip() == b.text.strip() for a, b in zip(rates["in_process"][1], rates["served"][1]))
        result["generation"] = {
            "model": "smollm2-135m-instruct",
            "requests": len(prompts),
            "in_process_rps": round(rates["in_process"][0], 2),
            "served_rps": round(rates["served"][0], 2),
            "ratio_in_process_over_served": round(rates["in_process"][0] / rates["served"][0], 2),
            "answers_equal": f"{same}/{len(prompts)}",
        }
    finally:
        os.killpg(proc.pid, signal.SIGKILL)

    reqs = choice_requests(args.choices)
    n_opts = sum(len(r.options) for r in reqs)
    proc, url = start_server("gemma-3-270m")
    try:
        remote_m = served.connect(f"openai:gemma-3-270m@{url}", concurrency=1, tokenizer_of=served_tokenizer)
        local_model = load_model("gemma-3-270m", device="cpu", dtype="float32")
        engines = {"in_process": Scorer(local_model.model, local_model.tokenizer), "served": remote_m.make_scorer()}
        rates = {name: best_rate(lambda s=s: s.score_choices(reqs), n_opts, args.rounds) for name, s in engines.items()}
        diff = max(float(abs(a - b).max()) for a, b in zip(rates["in_process"][1], rates["served"][1]))
        result["log_likelihood"] = {
            "model": "gemma-3-270m",
            "requests": n_opts,
            "alignment": remote_m.alignment.line(),
            "in_process_rps": round(rates["in_process"][0], 2),
            "served_rps": round(rates["served"][0], 2),
            "ratio_in_process_over_served": round(rates["in_process"][0] / rates["served"][0], 2),
            "max_abs_logprob_diff": round(diff, 4),
        }
    finally:
        os.killpg(proc.pid, signal.SIGKILL)

    prior = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    result.update({k: prior[k] for k in ("transport", "transport_machine") if k in prior})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(portable(result), indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    for part in ("generation", "log_likelihood"):
        r = result[part]
        print(
            f"{part}: in-process {r['in_process_rps']} req/s, served {r['served_rps']} req/s, "
            f"ratio {r['ratio_in_process_over_served']}x"
        )


if __name__ == "__main__":
    main()
