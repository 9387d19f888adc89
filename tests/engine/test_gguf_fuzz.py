"""Fuzzing the GGUF pre-flight check with mutations of the two real model files.

Mutations aim at the header, the metadata and the tensor table: bit flips anywhere before the
tensor data, truncations, huge values written over length and count fields, and wrong tensor
offsets, types and shapes. The check must answer with a GgufProblem or pass, never raise anything
else and never hang; and every mutated file it passes must load in llama.cpp, in a child process,
without a crash.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_studio.engine.models.gguf_check import GgufProblem, check_buffer, check_file

# 2,000 cases in all with -m slow, 135 in the regular run; Gemma's check walks 262,144 vocabulary
# entries (0.15 s), SmolLM2's 49,152, so the regular run takes most of its cases from SmolLM2
CASES = {"default": 1500, "gemma": 500}
REGULAR_SHARE = {"default": 12, "gemma": 48}  # the regular run checks CASES / REGULAR_SHARE of each
# passing files loaded in llama.cpp in the regular run (all of them with -m slow): each load starts
# llama.cpp on a mutated file, so a spread covers the kinds of mutation at a fraction of the cost
# (a load of Gemma's 262,144-entry vocabulary takes ~0.7 s)
LOADED = {"default": 12, "gemma": 4}


class Mutated:
    """The original file's head with patches applied and an optional cut."""

    def __init__(self, head: bytes, patches: dict[int, bytes], size: int) -> None:
        self.patches, self.size = patches, size
        buf = bytearray(head[:size])
        for at, patch in patches.items():
            buf[at : at + len(patch)] = patch
        self.buf = bytes(buf[: len(head)])

    def write(self, dest: Path) -> None:
        """The mutated head, then a sparse hole to the file's size: a load maps the tensor data but
        never reads it, so zeros there test the same and cost no disk writes."""
        with dest.open("wb") as f:
            f.write(self.buf[: self.size])
            f.truncate(self.size)


@pytest.fixture(scope="module", params=["default", "gemma"])
def model(request):
    from specdec_studio.engine.models import catalog

    path = catalog.known_path(request.param)
    layout = check_file(path)
    with path.open("rb") as f:
        head = f.read(layout.data_start + 4096)  # the data is never read by the check, only its range
    return request.param, path, layout, head, path.stat().st_size


HUGE = [2**64 - 1, 2**63, 2**63 - 1, 2**32, 2**32 - 1, 2**31, 10**12]
WIDTH = {"value_type": 4, "n_dims": 4, "tensor_type": 4}  # every other field is 8 bytes


def mutation(layout, head: bytes, size: int):
    """A strategy for one mutation of the file: (patches by byte offset, new size)."""
    def write(f, value):
        kind, at = f
        width = WIDTH.get(kind, 8)
        return {at: (value % (1 << (8 * width))).to_bytes(width, "little")}, size

    def shift(f, delta):
        old = int.from_bytes(head[f[1] : f[1] + 8], "little")
        return write(f, old + delta)

    fields = st.sampled_from(layout.fields)
    offsets = st.sampled_from([f for f in layout.fields if f[0] == "tensor_offset"])
    flip = st.tuples(st.integers(0, layout.data_start - 1), st.integers(0, 7)).map(
        lambda t: ({t[0]: bytes([head[t[0]] ^ (1 << t[1])])}, size))
    cut = st.integers(0, layout.data_start + 64).map(lambda n: ({}, n))
    huge = st.tuples(fields, st.sampled_from(HUGE)).map(lambda t: write(*t))
    small = st.tuples(fields, st.integers(0, 300)).map(lambda t: write(*t))
    shifted = st.tuples(offsets, st.integers(-4096, 4096)).map(lambda t: shift(*t))
    return st.one_of(flip, cut, huge, small, shifted)


# the regular run checks a share of the cases and loads a spread of the passing files; -m slow all
@pytest.mark.parametrize(
    "slow", [pytest.param(False, id="regular"), pytest.param(True, id="full", marks=pytest.mark.slow)]
)
def test_fuzzed_headers_get_a_clear_answer_and_passing_files_load(model, tmp_path_factory, slow):
    key, path, layout, head, size = model
    passed: list[tuple[dict[int, bytes], int]] = []
    counts = {"cases": 0, "rejected": 0}
    n_cases = CASES[key] if slow else CASES[key] // REGULAR_SHARE[key]

    @settings(max_examples=n_cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(spec=mutation(layout, head, size))
    def check_one(spec):
        patches, new_size = spec
        m = Mutated(head, patches, new_size)
        t0 = time.perf_counter()
        try:
            check_buffer(m.buf, new_size)
        except GgufProblem as exc:
            assert str(exc)  # a sentence, never empty
            counts["rejected"] += 1
        else:
            passed.append((patches, new_size))
        finally:
            counts["cases"] += 1
        assert time.perf_counter() - t0 < 10, "the check must never hang"

    check_one()
    assert counts["cases"] >= n_cases
    print(f"\n{key}: {counts['cases']} cases, {counts['rejected']} rejected, {len(passed)} passed")

    # every passing mutation loads in llama.cpp in a child process (a crash there would be a crash
    # of the app)
    chosen = passed if slow else passed[:: max(1, len(passed) // LOADED[key])][: LOADED[key]]
    folder = tmp_path_factory.mktemp(f"fuzz-{key}")
    for start in range(0, len(chosen), 10):
        files = []
        for i, (patches, new_size) in enumerate(chosen[start : start + 10]):
            dest = folder / f"case{start + i}.gguf"
            Mutated(head, patches, new_size).write(dest)
            files.append(str(dest))
        done = subprocess.run([sys.executable, "-c", LOADER, json.dumps(files)], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "SPECDEC_LLAMA_LOG": "0"})
        assert done.returncode == 0, f"llama.cpp crashed on a file the check passed: {done.stderr[-2000:]}"
        for f in files:
            os.unlink(f)


# Loads each file with the engine (pre-flight check, then llama.cpp) and reports; a native crash
# ends the process with a signal, which the test sees as a non-zero return code.
LOADER = """
import json, sys
from specdec_studio.engine.errors import ModelFileError
from specdec_studio.engine.models.loading import LoadedModel
for path in json.loads(sys.argv[1]):
    try:
        with LoadedModel(path) as model:
            pass
    except ModelFileError:
        pass
"""


def test_the_check_answers_for_every_truncation_of_the_header(smollm_path):
    head = smollm_path.read_bytes()[:4096]
    for n in range(0, 4096, 7):
        with pytest.raises(GgufProblem):
            check_buffer(head, n)
    assert struct.unpack("<I", head[4:8])[0] == 3


@pytest.mark.slow
def test_coverage_guided_fuzzing_with_atheris():
    """libFuzzer-driven mutations (tests/fuzz/gguf_atheris.py): an exception other than
    GgufProblem, or a hang, makes atheris exit non-zero."""
    pytest.importorskip("atheris")
    script = Path(__file__).resolve().parents[1] / "fuzz" / "gguf_atheris.py"
    done = subprocess.run([sys.executable, str(script), "-atheris_runs=2000"], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Done 2000" in done.stderr


def test_a_vocabulary_text_cut_short_by_a_nul_byte_is_a_duplicate(smollm_path):
    """llama.cpp reads each vocabulary text as a C string: a NUL byte ends it there, and two ids
    with the same text abort the load (GGML_ASSERT). Found by the fuzz (a flipped byte); the
    check must see the text as llama.cpp will."""
    from gguf import GGUFReader

    reader = GGUFReader(str(smollm_path))
    field = reader.fields["tokenizer.ggml.tokens"]
    texts = {bytes(field.parts[i]) for i in field.data}
    # a token whose text is another token's text plus one byte: that byte becomes NUL
    index = next(i for i in field.data if len(bytes(field.parts[i])) >= 2 and bytes(field.parts[i])[:-1] in texts)
    text = bytes(field.parts[index])
    offset = field.parts[index].ctypes.data - reader.data.ctypes.data
    head = bytearray(smollm_path.read_bytes()[: reader.tensors[0].data_offset])
    head[offset + len(text) - 1] = 0
    with pytest.raises(GgufProblem, match="lists the text .* twice"):
        check_buffer(bytes(head), smollm_path.stat().st_size)
