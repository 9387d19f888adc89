"""Weight formats compared on this machine: a model requantised to the formats llama.cpp's CPU
backend has small-batch kernels for, each measured as the shipped file is.

On a CPU, a decode of B tokens costs nearly B times one token unless the weights' format has a
kernel that shares the weight reads across the batch rows: with the AVX2 build used here, Q4_0,
IQ4_NL and Q4_K are repacked at load (ggml-cpu/repack.cpp: a GEMM for each full group of 4 rows),
and tinyBLAS (llamafile/sgemm.cpp) covers Q4_0, Q5_0, Q8_0 and IQ4_NL for 2 rows or more. The
shipped SmolLM2 file is Q4_1, which gets neither. The _PURE formats put the token embedding in the
same format as the rest (llama.cpp keeps it at a higher precision otherwise, Q8_0 in SmolLM2's
copies): where it is also the output head, as in SmolLM2, the head then gets the repacked kernel
too. For each format this module measures what a user deciding on a copy needs: the file's size,
one token's decode time, the cost of every batch size from 1 to 16 (no interpolation: the repacked
kernels make B = 4 cheaper than B = 3), whether batched decoding stays exact (the exactness
probe), and how often the copy's greedy choice is the original's on the shipped prompts. Every
figure names the file it was measured on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from specdec_studio.engine.models import catalog
from specdec_studio.engine.errors import SpecDecError

FORMATS = ("Q4_0", "IQ4_NL", "Q4_0_PURE", "IQ4_NL_PURE", "Q8_0", "Q4_K_M")
# the copies the best-mode comparison (`specdec sweep --formats`, the Profile tab) runs by default:
# those with small-batch kernels here, and IQ4_NL with its output head in the same format
SPEED_FORMATS = ("Q4_0", "IQ4_NL", "IQ4_NL_PURE")
EVERY_B = tuple(range(1, 17))  # the batch sizes a format's curve is measured at, each one
AGREEMENT_TOKENS = 64  # greedy tokens per prompt the agreement is measured on
RECOMMEND_AGREEMENT = 0.90  # a copy that agrees less often with the original is shown, never recommended
# ... nor one less than this much faster at one token: the side-by-side T(1) varies by a few per
# cent between comparisons (a 1 % lead is noise, not a reason to switch files)
RECOMMEND_MIN_SPEEDUP = 1.05
VERIFY_ROWS = 4  # the verification the offer quotes: 4 rows, a full group of the repacked kernels
T1_ROUNDS = 6  # interleaved rounds of the side-by-side one-token measurement


@dataclass(frozen=True)
class FormatFigures:
    """One file measured: the shipped one (``agreement`` None) or a copy of it."""

    format: str  # "Q4_0", …; the shipped file's own type for the original
    path: str
    size_bytes: int
    t1_s: float  # one token's decode, every row's logits
    relative_all: tuple[float, ...]  # T(B)/T(1) for B in EVERY_B, every row's logits
    relative_last: tuple[float, ...]  # the same with only the last row's logits
    deviation: float  # largest |logit difference| between batched and one-by-one decoding
    deviation_long: float  # the same past 512 cells
    agreement: float | None  # the share of the original's greedy tokens the copy's argmax predicts
    n_agreement_tokens: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def recommendable(self) -> bool:
        return self.agreement is not None and self.agreement >= RECOMMEND_AGREEMENT


def format_of(model) -> str:
    """The weight format a loaded model's file is in (llama.cpp's file type), named as
    ``specdec models requantize`` names it, e.g. "Q4_1"."""
    import llama_cpp as llama

    value = llama.llama_model_ftype(model.ptr)
    for name in dir(llama):
        if name.startswith("LLAMA_FTYPE_MOSTLY_") and getattr(llama, name) == value:
            return name.removeprefix("LLAMA_FTYPE_MOSTLY_")
    return f"type {value}"


def make_copy(src: Path, quant: str, *, n_threads: int = 0, log: Callable[[str], None] = print,
              cancel: threading.Event | None = None) -> Path:
    """``src`` requantised to ``quant``, made once into the model cache (see catalog.make_copy)."""
    return catalog.make_copy(src, quant, n_threads=n_threads, log=log, cancel=cancel)


def measure_file(path: Path, fmt: str, *, n_threads: int, n_ctx: int, original_texts=None,
                 cancel: threading.Event | None = None) -> FormatFigures:
    """One file's figures; ``original_texts`` (prompt and greedy answer pairs of the original)
    gives the agreement, None for the original itself."""
    from specdec_studio.engine.session import Session

    with Session(path, n_ctx=n_ctx, n_threads=n_threads, cancel=cancel) as session:
        return _measure(session, fmt, original_texts, cancel)


def _measure(session, fmt: str, original_texts, cancel: threading.Event | None) -> FormatFigures:
    """:func:`measure_file` on an open session of the file."""
    from specdec_studio.engine.drafts.measure import agreement_on_texts
    from specdec_studio.engine.tuning.probe import probe_exactness
    from specdec_studio.engine.tuning import profile

    path = Path(session.model.info.path)
    curve = profile.load_or_measure(session).curve  # the profile Auto prices steps with: B = 1..16 and on
    agreement, n_agreement = None, 0
    if original_texts is not None:
        agreement, n_agreement = agreement_on_texts(session, original_texts, cancel)
        if agreement is None:
            raise profile.ProfileCancelled("the format comparison was stopped")
    probe = probe_exactness(path, n_threads=session.n_threads)
    every_b = [curve.sizes.index(b) for b in EVERY_B]
    t1 = curve.t_all_logits[0]
    return FormatFigures(fmt, str(path), path.stat().st_size, t1,
                         tuple(curve.t_all_logits[i] / t1 for i in every_b),
                         tuple(curve.t_last_logit[i] / curve.t_last_logit[0] for i in every_b),
                         probe["max_abs_diff"], probe["long_context"]["max_abs_diff"], agreement, n_agreement)


def compare(model_path: Path, formats: Sequence[str] = FORMATS, *, n_threads: int, n_ctx: int,
            prompts: Sequence[Sequence[int]], n_tokens: int = AGREEMENT_TOKENS,
            cancel: threading.Event | None = None, log: Callable[[str], None] = print) -> list[FormatFigures]:
    """The original file and a copy in each of ``formats``, measured alike. ``prompts`` are the
    token ids the agreement is measured on (the shipped prompt sets, one per category)."""
    from specdec_studio.engine.drafts.measure import greedy_texts
    from specdec_studio.engine.session import Session

    unknown = [f for f in formats if f not in known_formats()]
    if unknown:
        raise SpecDecError(f"unknown format {unknown[0]!r}; choose from {', '.join(known_formats())}")
    with Session(model_path, n_ctx=n_ctx, n_threads=n_threads, cancel=cancel) as session:
        shipped_type = format_of(session.model)
        texts = greedy_texts(session, prompts, n_tokens, cancel)
        if texts is None:
            from specdec_studio.engine.tuning.profile import ProfileCancelled

            raise ProfileCancelled("the format comparison was stopped")
        log(f"{model_path.name} ({shipped_type}): measuring…")
        out = [_measure(session, shipped_type, None, cancel)]
    for fmt in formats:
        if fmt == shipped_type:
            continue
        copy = make_copy(model_path, fmt, n_threads=n_threads, log=log, cancel=cancel)
        log(f"{copy.name}: measuring…")
        out.append(measure_file(copy, fmt, n_threads=n_threads, n_ctx=n_ctx, original_texts=texts, cancel=cancel))
    # The curves were measured one file after another; one token's time, the figure every speed-up
    # is a ratio of, is measured again side by side, in interleaved rounds.
    log("one token's decode, every file in turn…")
    t1 = interleaved_t1([Path(f.path) for f in out], n_threads=n_threads, cancel=cancel)
    return [replace(f, t1_s=t) for f, t in zip(out, t1)]


def interleaved_t1(paths: Sequence[Path], *, n_threads: int, rounds: int = T1_ROUNDS,
                   cancel: threading.Event | None = None) -> list[float]:
    """One token's decode time (every row's logits, the KV cache filled as the profile fills it)
    for each file, measured in ``rounds`` rounds that visit every file in turn, forward then back,
    so a drift of the machine's speed hits them alike; each the lower quartile of its rounds."""
    from contextlib import ExitStack

    import numpy as np

    from specdec_studio.engine.session import Session
    from specdec_studio.engine.tuning import profile

    samples: list[list[float]] = [[] for _ in paths]
    with ExitStack() as stack:
        sessions = [stack.enter_context(Session(p, n_ctx=profile.DEFAULT_KV_FILL + 64, n_threads=n_threads,
                                                cancel=cancel)) for p in paths]
        fills = [profile.fill_tokens_for(s.vocab, profile.DEFAULT_KV_FILL) for s in sessions]
        order = list(range(len(paths)))
        for r in range(rounds):
            for i in order if r % 2 == 0 else order[::-1]:
                curve, _ = profile.measure_curve(sessions[i].memory, sessions[i].batch, fills[i], sizes=(1,),
                                                 cancel=cancel)
                samples[i].append(curve.t_all_logits[0])
    return [float(np.percentile(s, profile.LOW_QUANTILE)) for s in samples]


def known_formats() -> tuple[str, ...]:
    """The formats a model can be requantised to here (``specdec models requantize`` knows them)."""
    from specdec_studio.engine.models.quantize import QUANT_TYPES

    return tuple(QUANT_TYPES)


def verify_time(f: FormatFigures, rows: int = VERIFY_ROWS) -> float:
    """One decode of ``rows`` tokens with every row's logits, as a verification makes it."""
    return f.t1_s * f.relative_all[rows - 1]


def recommendation(figures: Sequence[FormatFigures]) -> FormatFigures | None:
    """The copy to offer: the fastest at one token among those that agree with the original on at
    least RECOMMEND_AGREEMENT of its greedy tokens, are RECOMMEND_MIN_SPEEDUP faster at one token
    and verify no slower than the original."""
    original = figures[0]
    copies = [f for f in figures[1:] if f.recommendable() and original.t1_s >= RECOMMEND_MIN_SPEEDUP * f.t1_s
              and verify_time(f) <= verify_time(original)]
    return min(copies, key=lambda f: f.t1_s, default=None)


def verdict(figures: Sequence[FormatFigures]) -> str:
    """What the comparison means for the user, in one sentence: the recommended copy's
    :func:`sentence`, or why there is none."""
    pick = recommendation(figures)
    if pick is not None:
        return sentence(figures[0], pick)
    return (f"No copy decodes at least {RECOMMEND_MIN_SPEEDUP:.2f}× faster than the {figures[0].format} original "
            f"here, verifies no slower and agrees with it on {100 * RECOMMEND_AGREEMENT:.0f} % of greedy tokens; "
            "the original stays the one to use.")


def sentence(original: FormatFigures, copy: FormatFigures, batch: int = VERIFY_ROWS) -> str:
    """What a copy buys, in one sentence for the model bar: one token's speed, a verification of
    ``batch`` rows, and the agreement, each measured here on the two files."""
    verify = verify_time(original, batch) / verify_time(copy, batch)
    verifies = (f"verifies {batch} tokens {verify:.2f}× cheaper" if verify >= 1.0
                else f"takes {1 / verify:.2f}× as long to verify {batch} tokens")
    return (f"A {copy.format} copy of {Path(original.path).name} decodes {original.t1_s / copy.t1_s:.2f}× faster here, "
            f"{verifies}, and agrees with it on {100 * (copy.agreement or 0.0):.1f} % of greedy tokens.")


# --------------------------------------------------------------------- threads
def thread_pairs(session, pairs: Sequence[tuple[int, int]], sizes: Sequence[int] = (1, 4, 8),
                 cancel: threading.Event | None = None) -> dict[tuple[int, int], tuple[float, ...]]:
    """T(B), every row's logits, for each (n_threads, n_threads_batch) pair on ``session``'s
    context: llama.cpp decodes a one-token batch with ``n_threads`` and any larger one with
    ``n_threads_batch``, so the two may want different counts. The context's own setting is put
    back after."""
    import llama_cpp as llama

    from specdec_studio.engine.tuning import profile

    fill = profile.fill_tokens_for(session.vocab, min(profile.DEFAULT_KV_FILL, session.n_ctx - max(sizes) - 1))
    out = {}
    try:
        for n_threads, n_threads_batch in pairs:
            llama.llama_set_n_threads(session.ctx, n_threads, n_threads_batch)
            curve, _ = profile.measure_curve(session.memory, session.batch, fill, sizes=sizes, cancel=cancel)
            out[(n_threads, n_threads_batch)] = curve.t_all_logits
    finally:
        llama.llama_set_n_threads(session.ctx, session.n_threads, session.n_threads_batch)
    return out


def best_pair(times: dict[tuple[int, int], tuple[float, ...]]) -> tuple[int, int]:
    """The thread count that decodes one token fastest, and the one that decodes the larger
    batches fastest (summed over the measured sizes past 1)."""
    n_threads = min(times, key=lambda pair: times[pair][0])[0]
    n_threads_batch = min(times, key=lambda pair: sum(times[pair][1:]))[1]
    return n_threads, n_threads_batch
