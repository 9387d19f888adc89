"""What keeping the KV mirror costs: its share of decode time in a lookahead (15,5,15) run with
n_ctx = 4096 (target < 3%). The mirror's work is timed inside the run that it follows."""

from __future__ import annotations

import time

from _common import CODE_PROMPT, THREADS, model_path

from specdec_studio.engine.config import LookaheadParams, RunConfig
from specdec_studio.engine.kv.cells import KvMirror
from specdec_studio.engine.session import Session

N_TOKENS = 128


def main() -> None:
    spent = [0.0]
    timed = {}
    for name in ("on_decode", "on_seq_rm", "on_seq_cp", "on_seq_keep", "on_seq_add", "on_clear"):
        original = getattr(KvMirror, name)

        def wrapper(self, *args, _original=original):
            t0 = time.perf_counter()
            _original(self, *args)
            spent[0] += time.perf_counter() - t0

        timed[name] = wrapper
    for name, wrapper in timed.items():
        setattr(KvMirror, name, wrapper)

    session = Session(model_path("default"), n_ctx=4096, n_threads=THREADS)
    config = RunConfig(mode="lookahead", max_tokens=N_TOKENS, lookahead=LookaheadParams(15, 5, 15))
    tokens = session.tokenize_prompt(CODE_PROMPT)
    final = None
    for event in session.run(config, tokens):
        final = event
    decode = session.memory.t_decode_s
    print(f"lookahead W=15 N=5 G=15, n_ctx=4096, {final.stats['steps']} steps, {N_TOKENS} tokens")
    print(f"time in llama_decode: {decode:.3f} s; time keeping the mirror: {spent[0] * 1e3:.1f} ms")
    print(f"mirror share of decode time: {100 * spent[0] / decode:.2f}%")
    session.close()


if __name__ == "__main__":
    main()
