"""Plain decoding: the engine against llama-cpp-python's high-level Llama, same model, same run.

Prints ``engine/llama-cpp-python tokens-per-second ratio: X`` (target >= 0.97 on SmolLM2-135M).
"""

from __future__ import annotations

import statistics
import time

from _common import THREADS, model_path
from llama_cpp import Llama

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.session import Session

N_TOKENS = 256
ROUNDS = 3
PROMPT = "The history of the printing press begins in the fifteenth century, when"


def engine_tps(session: Session, tokens: list[int]) -> float:
    final = None
    for event in session.run(RunConfig(max_tokens=N_TOKENS), tokens):
        final = event
    stats = final.stats
    assert stats["n_predict"] == N_TOKENS, final.finish_reason
    return stats["tokens_per_second"]


def llama_tps(llm: Llama, tokens: list[int]) -> float:
    llm.reset()
    n = 0
    start = None
    for _ in llm.generate(tokens, temp=0.0, repeat_penalty=1.0, top_k=1):
        if start is None:  # the first token comes right after the prompt decode, as in the engine
            start = time.perf_counter()
        n += 1
        if n == N_TOKENS:
            break
    # Timed from the first token on: n - 1 decode-and-sample cycles. The engine's figure is
    # n tokens over n samples and n - 1 decodes, so neither side is favoured.
    return (n - 1) / (time.perf_counter() - start)


def main() -> None:
    path = model_path("default")
    session = Session(path, n_ctx=1024, n_threads=THREADS)
    llm = Llama(str(path), n_ctx=1024, n_batch=512, n_threads=THREADS, n_threads_batch=THREADS,
                flash_attn=True, verbose=False)
    tokens = session.tokenize_prompt(PROMPT)
    engine_tps(session, tokens)  # warm-up both
    llama_tps(llm, tokens)
    ours, theirs = [], []
    for r in range(ROUNDS):
        ours.append(engine_tps(session, tokens))
        theirs.append(llama_tps(llm, tokens))
        print(f"round {r + 1}: engine {ours[-1]:7.2f} t/s   llama-cpp-python {theirs[-1]:7.2f} t/s")
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"model: {path.name}, threads: {THREADS}, tokens: {N_TOKENS}")
    print(f"engine/llama-cpp-python tokens-per-second ratio: {ratio:.3f}")
    llm.close()
    session.close()


if __name__ == "__main__":
    main()
