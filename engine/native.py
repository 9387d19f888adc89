"""Process-wide llama.cpp state: backend initialisation, the log callback, and a failed call as
the one sentence a user reads.

llama.cpp has one global log callback. The engine installs its own once, keeps the most recent
warnings and errors (so a failed model load can say *why*), and lets other parts of the engine
subscribe to every line (the KV-cache debug dump is read this way). Output goes to stderr only when
``SPECDEC_LLAMA_LOG=1``.

A llama.cpp call that fails is named with which call, on which model, what its return code means
and the cause llama.cpp logged while it ran, with the model property behind it where one is known:
"llama_decode failed with code -1" alone tells a user nothing; "llama_decode refused a batch of 1
tokens on smollm2.gguf (llama); llama.cpp says: invalid seq_id[0][0] = 7 >= 4" names what to look at.
"""

from __future__ import annotations

import collections
import ctypes
import os
import re
import sys
import threading
from collections.abc import Callable

import llama_cpp as llama

from specdec_studio.engine.errors import DecodeError

# ggml.h's enum ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (a line's rest)
LOG_LEVEL_WARN = 3
LOG_LEVEL_ERROR = 4
LOG_LEVEL_CONT = 5

LogSink = Callable[[int, str], None]

_lock = threading.Lock()
_backend_ready = False
_sinks: list[LogSink] = []
_recent_problems: collections.deque[str] = collections.deque(maxlen=32)
_n_problems = 0  # warnings and errors logged so far: a mark taken before a call finds its own
_partial_line: list[str] = []
_partial_level = 0
_echo = os.environ.get("SPECDEC_LLAMA_LOG") == "1"


def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _partial_level, _n_problems
    chunk = text.decode("utf-8", errors="replace") if text else ""
    if _echo:
        sys.stderr.write(chunk)
    if level != LOG_LEVEL_CONT:
        _partial_level = level
    _partial_line.append(chunk)
    if not chunk.endswith("\n"):
        return
    line = "".join(_partial_line)[:-1]  # one trailing newline off; a dump block keeps the rest
    _partial_line.clear()
    if _partial_level in (LOG_LEVEL_WARN, LOG_LEVEL_ERROR):
        _recent_problems.append(line.strip())
        _n_problems += 1
    for sink in tuple(_sinks):
        sink(_partial_level, line)


# Kept at module level: ctypes must not collect a callback llama.cpp still holds.
_log_callback = llama.llama_log_callback(_on_log)


def ensure_backend() -> None:
    """Initialise llama.cpp's backend and install the log callback, once per process."""
    global _backend_ready
    with _lock:
        if _backend_ready:
            return
        llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama.llama_backend_init()
        _backend_ready = True


def add_log_sink(sink: LogSink) -> None:
    """Receive every complete llama.cpp log line as ``sink(level, line)``."""
    _sinks.append(sink)


def remove_log_sink(sink: LogSink) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


def take_recent_problems() -> list[str]:
    """Return and forget the warnings and errors llama.cpp logged since the last call."""
    lines = list(_recent_problems)
    _recent_problems.clear()
    return lines


def problem_mark() -> int:
    """A mark for :func:`problems_since`: taken before a llama.cpp call, it finds what that call
    logged (cheap enough for every decode: one global read)."""
    return _n_problems


def problems_since(mark: int) -> list[str]:
    """The warnings and errors logged since ``mark`` (the last 32 at most), oldest first."""
    n = min(_n_problems - mark, len(_recent_problems))
    return list(_recent_problems)[len(_recent_problems) - n:] if n > 0 else []


# ------------------------------------------------------------------------- failed calls
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
    """What llama.cpp logged since ``mark`` (:func:`problem_mark`) that says why, on one line."""
    lines = [_FUNCTION.sub("", " ".join(line.split())) for line in problems_since(mark)]
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
