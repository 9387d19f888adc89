"""``specdec serve`` under load, on 127.0.0.1 only, bounded in count and time: N clients send chat
requests (one of each shipped prompt category, in turn) for ``--seconds``, then a burst of twice the
queue's bound at once; printed: requests sent, served and refused, errors, time to first token and
each request's tokens per second (p50 and p95), for ``specdec serve`` decoding with Auto and with
plain, and for llama.cpp's ``llama-server`` from the same sdist with ``--spec-type ngram-mod`` and
without (``scripts/build_llama_tools.sh`` builds it; skipped, and said, where it is not built). Each
server is a process of its own, started and stopped here, one after another, with the same model,
threads, context and slots (nothing else may run meanwhile: on 2 cores a second process skews every
figure).

    .venv/bin/python tests/bench/serve_load.py [-m default] [--clients 4] [--seconds 60] [--parallel 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from _common import THREADS

import httpx

from specdec_studio.engine.models import catalog
from specdec_studio.engine.tuning.prompts import shipped
from tests.rpc_local import free_port

REPO = Path(__file__).resolve().parents[2]
STARTUP_S = 180  # a server that does not answer /v1/models by then is stopped and reported

MAX_TOKENS = 96


def one_request(url: str, messages: list[dict]) -> dict:
    """One streamed chat request: when its first token came, its tokens, its status. The tokens are
    the answer's ``usage`` (both servers send it in the last chunk when asked), else its chunks."""
    t0 = time.perf_counter()
    first = None
    n_chunks = 0
    n_tokens = None
    with httpx.stream("POST", url + "/chat/completions", timeout=120,
                      json={"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}) as response:
        if response.status_code != 200:
            response.read()
            return {"status": response.status_code}
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                n_tokens = chunk["usage"]["completion_tokens"]
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", ())):
                n_chunks += 1
                if first is None:
                    first = time.perf_counter() - t0
    elapsed = time.perf_counter() - t0
    n_tokens = n_chunks if n_tokens is None else n_tokens
    return {"status": 200, "ttft_s": first or elapsed, "tokens": n_tokens,
            "tokens_per_second": n_tokens / max(elapsed - (first or 0.0), 1e-9)}


def unique(messages: list[dict], n: int) -> list[dict]:
    """``messages`` made a request no server has seen: its first message opens with the request's number."""
    first = {**messages[0], "content": f"(request {n}) {messages[0]['content']}"}
    return [first, *messages[1:]]


def load(url: str, prompts: list[list[dict]], clients: int, seconds: float, fresh: bool = False) -> list[dict]:
    """``clients`` threads each sending requests one after another until ``seconds`` have passed
    (``fresh``: every prompt made unseen, so that no prompt cache can answer it)."""
    results: list[dict] = []
    deadline = time.monotonic() + seconds
    lock = threading.Lock()

    def client(index: int) -> None:
        n = index
        while time.monotonic() < deadline:
            try:
                messages = prompts[n % len(prompts)]
                found = one_request(url, unique(messages, n) if fresh else messages)
            except httpx.HTTPError as exc:
                found = {"status": "error", "error": repr(exc)}
            with lock:
                results.append(found)
            n += clients

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 180)
    return results


def burst(url: str, prompt: list[dict], n: int) -> list[dict]:
    """``n`` requests at once: past the queue's bound some are refused (429) at once."""
    results: list[dict] = []
    lock = threading.Lock()

    def send() -> None:
        try:
            found = one_request(url, prompt)
        except httpx.HTTPError as exc:
            found = {"status": "error", "error": repr(exc)}
        with lock:
            results.append(found)

    threads = [threading.Thread(target=send) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return results


def quantiles(values: list[float]) -> str:
    if not values:
        return "–"
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    return f"p50 {statistics.median(values):.3g}, p95 {p95:.3g}"


def report(label: str, results: list[dict], elapsed_s: float) -> float:
    """One line: the requests' fates, time to first token and tokens/s per request (p50, p95), and
    every served token over the phase's wall time (the server's throughput, all slots together)."""
    served = [r for r in results if r["status"] == 200]
    refused = sum(r["status"] == 429 for r in results)
    errors = [r for r in results if r["status"] not in (200, 429)]
    together = sum(r["tokens"] for r in served) / elapsed_s
    print(f"{label}: {len(results)} sent, {len(served)} served, {refused} refused (429), {len(errors)} errors; "
          f"time to first token {quantiles([r['ttft_s'] for r in served])} s; "
          f"tokens/s per request {quantiles([r['tokens_per_second'] for r in served])}; "
          f"{together:.1f} tokens/s together", flush=True)
    for error in errors[:3]:
        print(f"  error: {error}")
    return together


@contextlib.contextmanager
def server_process(command: list[str], port: int, log: Path) -> Iterator[str | None]:
    """The server ``command`` as a process of its own, listening on 127.0.0.1:``port``; its base URL
    once it answers (None, with the reason printed, where it did not within STARTUP_S)."""
    url = f"http://127.0.0.1:{port}/v1"
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            print(f"  {command[0]} did not start (see {log})")
            yield None
            return
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def llama_server_binary() -> Path | None:
    """llama-server from scripts/build_llama_tools.sh's build, where it was built (never built here)."""
    built = subprocess.run([str(REPO / "scripts" / "build_llama_tools.sh")], cwd=REPO, capture_output=True,
                           text=True, env={**os.environ, "SPECDEC_TOOLS_NO_BUILD": "1"})
    binary = Path(built.stdout.strip()) / "llama-server" if built.returncode == 0 else None
    return binary if binary is not None and binary.is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default="default")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--queue", type=int, default=8)
    parser.add_argument("-c", "--ctx", type=int, default=4096, help="the context all slots share")
    parser.add_argument("--fresh", action="store_true",
                        help="every request's prompt unseen (opened with its number): no prompt cache answers it")
    parser.add_argument("--rounds", type=int, default=1,
                        help="load every server this many times, taking turns, and print the medians")
    parser.add_argument("--only", action="append", help="only the servers whose label contains this (repeatable)")
    args = parser.parse_args()
    prompts = [[{"role": role, "content": content} for role, content in p.as_messages()]
               for p in shipped(per_category=1)]
    path = str(catalog.resolve(args.model))
    common = ["-m", path, "--host", "127.0.0.1", "-t", str(THREADS), "-c", str(args.ctx)]
    servers: list[tuple[str, list[str]]] = [
        (f"specdec serve, {mode}", [sys.executable, "-m", "specdec_studio.engine.cli", "serve", *common,
                                    "--parallel", str(args.parallel), "--queue", str(args.queue), "--mode", mode])
        for mode in ("auto", "plain")]
    binary = llama_server_binary()
    if binary is None:
        print("llama-server is not built (scripts/build_llama_tools.sh builds it): only specdec serve is measured")
    else:
        # llama-server has no queue bound: its burst shows every request waiting for a slot instead
        base = [str(binary), *common, "-np", str(args.parallel), "--no-webui"]
        servers += [("llama-server, ngram-mod", [*base, "--spec-type", "ngram-mod"]),
                    ("llama-server, no drafting", base)]
    print(f"{Path(path).name}, {THREADS} threads, context {args.ctx}, {args.parallel} slots, queue {args.queue}, "
          f"{MAX_TOKENS} tokens a request, greedy")
    if args.only:
        servers = [(label, command) for label, command in servers if any(o in label for o in args.only)]
    together: dict[str, list[float]] = {label: [] for label, _ in servers}
    for round_ in range(1, args.rounds + 1):  # the servers take turns: a slow spell of the machine hits each
        for label, command in servers:
            port = free_port()
            with server_process([*command, "--port", str(port)], port, Path(f"/tmp/serve_load_{port}.log")) as url:
                if url is None:
                    continue
                t0 = time.perf_counter()
                results = load(url, prompts, args.clients, args.seconds, args.fresh)
                named = f"{label}, {args.clients} clients × {args.seconds:g} s" + (
                    f", round {round_}" if args.rounds > 1 else "")
                together[label].append(report(named, results, time.perf_counter() - t0))
                if round_ == args.rounds:
                    t0 = time.perf_counter()
                    results = burst(url, prompts[0], 2 * args.queue)
                    report(f"{label}, a burst of {2 * args.queue}", results, time.perf_counter() - t0)
    if args.rounds > 1:
        print("tokens/s together, median of the rounds: " + "; ".join(
            f"{label} {statistics.median(found):.1f}" for label, found in together.items() if found))

if __name__ == "__main__":
    main()
