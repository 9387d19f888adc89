"""Coverage-guided fuzzing of the GGUF pre-flight check with atheris (libFuzzer for Python).

Each input is turned into mutations of the default model's header, metadata and tensor table
(byte patches at fuzzer-chosen places and an optional cut); the check must answer with a
GgufProblem or pass, and never raise anything else. libFuzzer keeps inputs that reach new code.

    .venv/bin/python tests/fuzz/gguf_atheris.py -atheris_runs=20000
    .venv/bin/python tests/fuzz/gguf_atheris.py -max_total_time=300
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports():
    from specdec_studio.engine.models.gguf_check import GgufProblem, check_buffer, check_file

from specdec_studio.engine.models import catalog  # noqa: E402

PATH = catalog.known_path("default")
LAYOUT = check_file(PATH)
HEAD = PATH.read_bytes()[: LAYOUT.data_start + 4096]
SIZE = PATH.stat().st_size
FIELDS = LAYOUT.fields


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    buf = bytearray(HEAD)
    size = SIZE
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        if fdp.ConsumeBool():  # overwrite a known field (a length, a count, an offset, a type)
            _kind, at = FIELDS[fdp.ConsumeIntInRange(0, len(FIELDS) - 1)]
        else:  # anywhere before the tensor data
            at = fdp.ConsumeIntInRange(0, LAYOUT.data_start - 1)
        patch = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 8))
        buf[at : at + len(patch)] = patch
    if fdp.ConsumeIntInRange(0, 9) == 0:
        size = fdp.ConsumeIntInRange(0, LAYOUT.data_start + 64)
    try:
        check_buffer(bytes(buf[:size]), size)
    except GgufProblem:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
