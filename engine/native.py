"""Process-wide llama.cpp state: backend initialisation and the log callback.

llama.cpp has one global log callback. The engine installs its own once, keeps the most recent
warnings and errors (so a failed model load can say *why*), and lets other parts of the engine
subscribe to every line (the KV-cache debug dump is read this way). Output goes to stderr only when
``SPECDEC_LLAMA_LOG=1``.
"""

from __future__ import annotations

import collections
import ctypes
import os
import sys
import threading
from collections.abc import Callable

import llama_cpp as llama

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


def supports_gpu_offload() -> bool:
    """Whether this llama.cpp build has a GPU backend (the app shows "GPU layers" only then)."""
    ensure_backend()
    return bool(llama.llama_supports_gpu_offload())
