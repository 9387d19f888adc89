"""Stop ends the long jobs that used to ignore it within a second (issue 79, item 10): the exactness
check (it opened its own session without the job's Stop) and making a copy in another weight format
(llama.cpp's quantiser has no abort: it runs in a child process Stop ends)."""

from __future__ import annotations

import threading
import time

import pytest

from specdec_studio.engine.models.quantize import QuantizeStopped, requantize
from specdec_studio.engine.tuning.probe import ProbeStopped, probe_exactness
from tests.conftest import N_THREADS


def _stopped_after(call, delay_s: float, error: type, *, once=lambda: True) -> float:
    """Seconds from Stop to ``call`` raising ``error``, Stop set ``delay_s`` after it started and
    once ``once()`` says the work is under way (polled every 10 ms for at most a minute)."""
    cancel = threading.Event()
    stopped_at: list[float] = []

    def stop() -> None:
        time.sleep(delay_s)
        deadline = time.monotonic() + 60
        while not once() and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped_at.append(time.perf_counter())
        cancel.set()

    threading.Thread(target=stop, daemon=True).start()
    with pytest.raises(error, match="stopped"):
        call(cancel)
    return time.perf_counter() - stopped_at[0]


def test_stop_ends_the_exactness_check(smollm_path):
    late = _stopped_after(lambda cancel: probe_exactness(smollm_path, n_threads=N_THREADS, cancel=cancel), 1.0,
                          ProbeStopped)
    assert late < 1.0


def test_stop_ends_making_a_copy_and_keeps_nothing(smollm_path, tmp_path):
    dest = tmp_path / "copy-q8_0.gguf"
    # Stop while llama.cpp writes the copy: a fixed delay once outlasted a fast machine's whole copy
    late = _stopped_after(lambda cancel: requantize(smollm_path, dest, "Q8_0", n_threads=N_THREADS, cancel=cancel),
                          0.0, QuantizeStopped, once=lambda: any(tmp_path.iterdir()))
    assert late < 1.0
    assert list(tmp_path.iterdir()) == []  # neither the copy nor its temporary file
