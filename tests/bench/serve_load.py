"""``specdec serve`` under load, on 127.0.0.1 only, bounded in count and time: N clients send chat
requests (one of each shipped prompt category, in turn) for ``--seconds``, then a burst of twice the
queue's bound at once; printed: requests served and refused, errors, time to first token and each
request's tokens per second (p50 and p95), for the server decoding with Auto and with plain, side by
side in one run (nothing else may run meanwhile: on 2 cores a second process skews every figure).

    .venv/bin/python tests/bench/serve_load.py [-m default] [--clients 4] [--seconds 60] [--parallel 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from specdec_studio.engine.models import catalog  # noqa: E402
from specdec_studio.engine.tuning.prompts import shipped  # noqa: E402
from tests.engine.test_serve import serving  # noqa: E402

MAX_TOKENS = 96


def one_request(url: str, messages: list[dict]) -> dict:
    """One streamed chat request: when its first token came, its tokens, its status."""
    t0 = time.perf_counter()
    first = None
    n_tokens = 0
    with httpx.stream("POST", url + "/chat/completions", timeout=120,
                      json={"messages": messages, "max_tokens": MAX_TOKENS,
                            "temperature": 0, "stream": True}) as response:
        if response.status_code != 200:
            response.read()
            return {"status": response.status_code}
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            tokens = json.loads(line[6:])["specdec"]["tokens"]
            if tokens and first is None:
                first = time.perf_counter() - t0
            n_tokens += len(tokens)
    elapsed = time.perf_counter() - t0
    return {"status": 200, "ttft_s": first or elapsed, "tokens": n_tokens,
            "tokens_per_second": n_tokens / max(elapsed - (first or 0.0), 1e-9)}


def load(url: str, prompts: list[list[dict]], clients: int, seconds: float) -> list[dict]:
    """``clients`` threads each sending requests one after another until ``seconds`` have passed."""
    results: list[dict] = []
    deadline = time.monotonic() + seconds
    lock = threading.Lock()

    def client(index: int) -> None:
        n = index
        while time.monotonic() < deadline:
            try:
                found = one_request(url, prompts[n % len(prompts)])
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


def report(label: str, results: list[dict]) -> None:
    served = [r for r in results if r["status"] == 200]
    refused = sum(r["status"] == 429 for r in results)
    errors = [r for r in results if r["status"] not in (200, 429)]
    print(f"{label}: {len(served)} served, {refused} refused (429), {len(errors)} errors; "
          f"time to first token {quantiles([r['ttft_s'] for r in served])} s; "
          f"tokens/s per request {quantiles([r['tokens_per_second'] for r in served])}")
    for error in errors[:3]:
        print(f"  error: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default="default")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--queue", type=int, default=8)
    args = parser.parse_args()
    prompts = [[{"role": role, "content": content} for role, content in p.as_messages()]
               for p in shipped(per_category=1)]
    path = catalog.resolve(args.model)
    for mode in ("auto", "plain"):
        with serving(path, parallel=args.parallel, queue=args.queue, mode=mode) as (url, _decoder):
            report(f"{mode}, {args.clients} clients × {args.seconds:g} s", load(url, prompts, args.clients,
                                                                                args.seconds))
            report(f"{mode}, a burst of {2 * args.queue}", burst(url, prompts[0], 2 * args.queue))


if __name__ == "__main__":
    main()
