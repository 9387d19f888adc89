"""Making draft models and copies in other weight formats: requantise a GGUF with llama.cpp's
quantize API.

A lower-bit copy of the target shares its vocabulary exactly and agrees with it on most tokens
(measured on SmolLM2-135M Q4_1, greedy argmax agreement over 160 tokens: Q8_0 97.5%, Q3_K_M 82.5%,
Q2_K 67.5%), so it gives real acceptances and real rejections.
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import llama_cpp as llama

from specdec_studio.engine import native
from specdec_studio.engine.errors import ModelFileError, SpecDecError
from specdec_studio.engine.jsonfile import made_beside
from specdec_studio.engine.models.loading import check_gguf_file

QUANT_TYPES = {
    "Q2_K": llama.LLAMA_FTYPE_MOSTLY_Q2_K,
    "Q3_K_M": llama.LLAMA_FTYPE_MOSTLY_Q3_K_M,
    # the formats llama.cpp's CPU backend has small-batch kernels for (repacked at load, or
    # tinyBLAS), and the shipped model's own
    "Q4_0": llama.LLAMA_FTYPE_MOSTLY_Q4_0,
    "Q4_1": llama.LLAMA_FTYPE_MOSTLY_Q4_1,
    "IQ4_NL": llama.LLAMA_FTYPE_MOSTLY_IQ4_NL,
    "Q4_K_M": llama.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q8_0": llama.LLAMA_FTYPE_MOSTLY_Q8_0,
    # llama.cpp keeps a model's token embedding at a higher precision than its other weights (Q8_0
    # in SmolLM2's files: Q6_K needs a width that is a multiple of 256, SmolLM2's is 576), and in a
    # model whose output head is tied to its embedding that is the largest matrix a decode reads
    # (49,152 x 576 in SmolLM2): a second row of logits costs ~0.35 T(1) in the Q4_0 copy. A _PURE
    # copy quantises it like every other tensor (llama-quantize's --pure), so the head gets the
    # format's repacked kernels too, and the second row of logits costs next to nothing. Measured
    # on SmolLM2 side by side (`specdec profile --formats`): IQ4_NL_PURE decodes one token in
    # 4.40 ms against IQ4_NL's 5.67 (the shipped Q4_1: 7.07) and 2 rows for 1.46 T(1) against
    # 1.57, for 3 points less greedy agreement with the original (76.4 % against 79.2 %).
    "Q4_0_PURE": llama.LLAMA_FTYPE_MOSTLY_Q4_0,
    "IQ4_NL_PURE": llama.LLAMA_FTYPE_MOSTLY_IQ4_NL,
}
PURE_SUFFIX = "_PURE"


class QuantizeStopped(SpecDecError):
    """Stop ended a requantisation: nothing was written."""


def requantize(src: Path, dst: Path, quant_type: str, *, n_threads: int = 0,
               cancel: threading.Event | None = None) -> Path:
    """Write ``src`` requantised to ``quant_type`` as ``dst``, atomically: llama.cpp writes a
    temporary file of this call's own (two makers never share one), which reaches the disk
    (fsync) before it is renamed into place; a failed or interrupted make removes it.

    llama.cpp's quantize API has no abort callback, so it runs in a child process: ``cancel``
    (Stop) or Ctrl+C ends the child within a tenth of a second (QuantizeStopped)."""
    if quant_type not in QUANT_TYPES:
        raise SpecDecError(f"unknown quantisation type {quant_type!r}; choose one of {', '.join(QUANT_TYPES)}")
    native.ensure_backend()
    check_gguf_file(src)
    with made_beside(dst) as partial:
        rc, problems = _in_child(src, partial, quant_type, n_threads, cancel)
        if rc != 0:
            why = "; ".join(problems[-2:]) or f"code {rc}"
            raise ModelFileError(f"{src.name}: could not be requantised to {quant_type} ({why})")
    return dst


def _quantize(src: str, dst: str, quant_type: str, n_threads: int, results) -> None:
    """The child's work: llama.cpp's quantiser, and its return code and logged problems sent back."""
    native.ensure_backend()
    params = llama.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[quant_type]
    params.allow_requantize = True
    params.nthread = n_threads
    params.pure = quant_type.endswith(PURE_SUFFIX)
    native.take_recent_problems()
    rc = llama.llama_model_quantize(src.encode(), dst.encode(), params)
    results.put((rc, native.take_recent_problems()))


def _in_child(src: Path, partial: Path, quant_type: str, n_threads: int,
              cancel: threading.Event | None) -> tuple[int, list[str]]:
    """(return code, llama.cpp's logged problems) of the quantiser run in a spawned child (no fork
    of a process with other threads), waited on in short slices so Stop and Ctrl+C end it."""
    context = multiprocessing.get_context("spawn")
    results = context.SimpleQueue()
    child = context.Process(target=_quantize, args=(str(src), str(partial), quant_type, n_threads, results),
                            name="requantize", daemon=True)
    child.start()
    try:
        while child.is_alive():
            child.join(0.1)
            if cancel is not None and cancel.is_set():
                raise QuantizeStopped(f"making the {quant_type} copy of {src.name} was stopped; nothing was kept")
    finally:
        if child.is_alive():
            child.terminate()
            child.join(5)
    if results.empty():
        raise ModelFileError(f"{src.name}: requantising to {quant_type} failed inside llama.cpp "
                             f"(its process ended with code {child.exitcode})")
    return results.get()
