"""A llama.cpp call that failed, as the one sentence a user reads: which call, on which model, what
its return code means, and the cause llama.cpp logged while it ran (its log is kept by
:mod:`engine.native`), with the model property behind it where one is known.

"llama_decode failed with code -1" alone tells a user nothing; "llama_decode refused a batch of
5 tokens on smollm2.gguf (llama): invalid seq_id[0][0] = 7 >= 4" names what to look at.
"""

from __future__ import annotations

import re

from specdec_studio.engine import native
from specdec_studio.engine.errors import DecodeError

# llama.h's return codes of llama_decode, as words (1, "no KV slot", and 2, "aborted", are not
# failures: the engine handles them itself)
DECODE_CODES = {
    -1: "refused",  # an invalid batch: a token, position or sequence id llama.cpp does not accept
    -2: "could not allocate memory for",  # the compute buffers, or the memory could not take the batch
    -3: "failed while computing",  # a backend's graph compute failed
}
# lines llama.cpp logs around every failure, which say only that it failed
_GENERIC = ("failed to decode", "failed to initialize batch", "failed to process ubatch", "decode: failed")
_FUNCTION = re.compile(r"^[A-Za-z_][\w:]*: ")  # the C function's name llama.cpp puts first ("init: ")
MAX_CAUSE = 400  # characters of llama.cpp's own words kept in the sentence


def llama_cause(mark: int) -> str:
    """What llama.cpp logged since ``mark`` (:func:`native.problem_mark`) that says why, on one line."""
    lines = [_FUNCTION.sub("", " ".join(line.split())) for line in native.problems_since(mark)]
    specific = [line for line in lines if line and not any(g in line for g in _GENERIC)]
    cause = "; ".join(dict.fromkeys(specific))  # in order, each once
    return cause if len(cause) <= MAX_CAUSE else cause[: MAX_CAUSE - 1] + "…"


def _sentence(head: str, cause: str, memory_words: str) -> str:
    parts = [head]
    if cause:
        parts.append(f"llama.cpp says: {cause.rstrip('.')}")
    if memory_words:
        parts.append(memory_words)
    return "; ".join(parts)


def decode_failure(rc: int, n_tokens: int, model_label: str, mark: int, memory_words: str = "") -> DecodeError:
    """The error of a llama_decode that returned ``rc`` (not 0, 1 or 2) on ``n_tokens`` tokens."""
    verb = DECODE_CODES.get(rc, f"failed (code {rc}) on")
    return DecodeError(_sentence(f"llama_decode {verb} a batch of {n_tokens} tokens on {model_label}",
                                 llama_cause(mark), memory_words))


def memory_edit_failure(seq_id: int, p0: int, p1: int, model_label: str, mark: int,
                        memory_words: str = "") -> DecodeError:
    """The error of a llama_memory_seq_rm that refused to remove positions [p0, p1) of ``seq_id``."""
    span = "every position" if p0 < 0 and p1 < 0 else \
        f"positions {max(p0, 0)} to {'the end' if p1 < 0 else p1 - 1}"
    return DecodeError(_sentence(f"llama_memory_seq_rm could not remove {span} of sequence {seq_id} "
                                 f"from the cache of {model_label}", llama_cause(mark), memory_words))


def logits_failure(row: int, model_label: str, mark: int) -> DecodeError:
    """The error of a llama_get_logits_ith that returned no logits for batch row ``row``."""
    return DecodeError(_sentence(f"llama_get_logits_ith has no logits for row {row} of the last batch on "
                                 f"{model_label}", llama_cause(mark), ""))
