"""Pre-flight check of a GGUF file, in Python, before llama.cpp's native loader sees it.

Defence in depth: llama.cpp's own parser is careful, but it is native code with a history of
heap overflows, and a crash there takes the whole window with it. This parser reads the header,
the metadata and the tensor table with every length bounded by what is left of the file, and
checks what the loader would trust: the magic and version, the counts, every string and array
length, the value types, the alignment, an architecture name, every tensor's name, shape, type
(known to this llama.cpp) and data range (inside the file, in order, aligned). A file that fails
gets one sentence naming the first problem; nothing here raises anything else or allocates more
than the file's size.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from specdec_studio.engine.errors import ModelFileError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_NAME = 64  # GGML_MAX_NAME: a tensor name is shorter than this
INT64_MAX = (1 << 63) - 1

# GGUF value types: 0..12; 9 is an array (of one element type, never of arrays).
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
T_STRING, T_ARRAY, T_UINT32 = 8, 9, 4
VOCAB_KEY = b"tokenizer.ggml.tokens"

# ggml tensor types of the pinned llama.cpp: (elements per block, bytes per block), from
# ggml.c's type_traits and the block sizes ggml-common.h asserts.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}


class GgufProblem(Exception):
    """The first thing wrong with the file, as a sentence fragment."""


@dataclass
class GgufLayout:
    """What the check read, and where its fields sit (the fuzz test aims mutations at them)."""

    version: int = 0
    n_tensors: int = 0
    n_kv: int = 0
    architecture: str = ""
    alignment: int = DEFAULT_ALIGNMENT
    data_start: int = 0
    # rows of a learned absolute-position table (gpt2, starcoder, mpt: "position_embd.weight"), 0
    # if the model has none; llama.cpp reads row p for position p and asserts when p is past the end
    position_rows: int = 0
    # (kind, byte offset of the field in the file): "count", "key_length", "string_length",
    # "array_length", "value_type", "n_dims", "dim", "tensor_type", "tensor_offset"
    fields: list[tuple[str, int]] = field(default_factory=list)


_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


class _Reader:
    """Bounded little-endian reads from ``buf`` (the file's bytes, or its first part) of a file
    of ``size`` bytes: nothing past ``size`` is ever read, and a read past ``buf`` is a problem."""

    def __init__(self, buf, size: int, layout: GgufLayout) -> None:
        self.buf, self.size, self.pos, self.layout = buf, size, 0, layout
        self.end = min(size, len(buf))

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GgufProblem(f"the file ends inside {what} (at byte {self.pos}, {n} bytes wanted)")
        if self.pos + n > self.end:
            raise GgufProblem(f"{what} could not be read (at byte {self.pos})")

    def take(self, n: int, what: str) -> bytes:
        self._need(n, what)
        data = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return data

    def _int(self, fmt: struct.Struct, what: str, kind: str | None) -> int:
        if kind:
            self.layout.fields.append((kind, self.pos))
        self._need(fmt.size, what)
        value = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return value

    def u32(self, what: str, kind: str | None = None) -> int:
        return self._int(_U32, what, kind)

    def u64(self, what: str, kind: str | None = None) -> int:
        return self._int(_U64, what, kind)

    def string(self, what: str, kind: str | None = "string_length", limit: int | None = None) -> bytes:
        n = self.u64(what, kind)
        if limit is not None and n > limit:
            raise GgufProblem(f"{what} is {n} bytes long, more than {limit}")
        if n > self.size - self.pos:
            raise GgufProblem(f"{what} claims {n} bytes but only {self.size - self.pos} are left in the file")
        return self.take(n, what)

    def skip(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise GgufProblem(f"{what} claims {n} bytes but only {self.size - self.pos} are left in the file")
        self.pos += n


def check_buffer(buf, size: int) -> GgufLayout:
    """Check a GGUF whose bytes are ``buf`` (anything sliceable with the buffer protocol: an mmap,
    bytes) and whose length is ``size``; raise :class:`GgufProblem` on the first fault. ``buf``
    may hold only the file's head: the tensor data is never read, only its range checked."""
    layout = GgufLayout()
    r = _Reader(buf, size, layout)
    if r.take(4, "the magic") != MAGIC:
        raise GgufProblem("it does not start with 'GGUF'")
    layout.version = r.u32("the version")
    if layout.version not in VERSIONS:
        raise GgufProblem(f"GGUF version {layout.version} is not supported (expected 2 or 3)")
    layout.n_tensors = r.u64("the tensor count", "count")
    layout.n_kv = r.u64("the metadata count", "count")
    # every metadata entry takes at least 8 + 1 + 4 + 1 bytes, every tensor entry 8 + 1 + 4 + 8 + 4 + 8
    if layout.n_kv > (size - r.pos) // 14:
        raise GgufProblem(f"it claims {layout.n_kv} metadata entries, more than the file can hold")
    if layout.n_tensors > (size - r.pos) // 33:
        raise GgufProblem(f"it claims {layout.n_tensors} tensors, more than the file can hold")

    keys: set[bytes] = set()
    for i in range(layout.n_kv):
        key = r.string(f"metadata key {i}", "key_length", limit=65535)
        if not key:
            raise GgufProblem(f"metadata key {i} is empty")
        if key in keys:
            raise GgufProblem(f"metadata key {key[:60]!r} appears twice")
        keys.add(key)
        name = key.decode("utf-8", "replace")[:60]
        layout.fields.append(("value_type", r.pos))
        vtype = r.u32(f"the type of {name}")
        if vtype == T_ARRAY:
            layout.fields.append(("value_type", r.pos))
            etype = r.u32(f"the element type of {name}")
            count = r.u64(f"the length of {name}", "array_length")
            if etype == T_ARRAY or (etype != T_STRING and etype not in _SCALAR):
                raise GgufProblem(f"metadata {name} is an array of unknown type {etype}")
            if etype == T_STRING:
                if count > (size - r.pos) // 8:
                    raise GgufProblem(f"metadata {name} claims {count} strings, more than the file can hold")
                _check_strings(r, count, name, distinct=key == VOCAB_KEY)
            else:
                r.skip(count * _SCALAR[etype], f"the values of {name}")
        elif vtype == T_STRING:
            if key == b"general.architecture":
                layout.architecture = r.string(f"the value of {name}", limit=256).decode("utf-8", "replace")
            else:  # skipped, not read: a chat template or a licence can be long
                r.skip(r.u64(f"the length of {name}", "string_length"), f"the value of {name}")
        elif vtype in _SCALAR:
            value = r.take(_SCALAR[vtype], f"the value of {name}")
            if key == b"general.alignment":
                if vtype != T_UINT32:
                    raise GgufProblem("general.alignment is not a 32-bit unsigned integer")
                layout.alignment = struct.unpack("<I", value)[0]
        else:
            raise GgufProblem(f"metadata {name} has unknown type {vtype}")
    if not layout.architecture.strip():
        raise GgufProblem("it names no architecture (general.architecture)")
    if layout.alignment == 0 or layout.alignment & (layout.alignment - 1):
        raise GgufProblem(f"its alignment {layout.alignment} is not a power of two")

    tensors = []
    names: set[bytes] = set()
    for i in range(layout.n_tensors):
        tname = r.string(f"the name of tensor {i}", limit=MAX_NAME - 1)
        if tname in names:
            raise GgufProblem(f"tensor {tname[:60]!r} appears twice")
        names.add(tname)
        label = tname.decode("utf-8", "replace")
        n_dims = r.u32(f"the dimensions of {label}", "n_dims")
        if n_dims > MAX_DIMS:
            raise GgufProblem(f"tensor {label} has {n_dims} dimensions (at most {MAX_DIMS})")
        dims = [r.u64(f"a dimension of {label}", "dim") for _ in range(n_dims)]
        if any(d > INT64_MAX for d in dims):
            raise GgufProblem(f"tensor {label} has a negative dimension")
        n_elements = 1
        for d in dims:
            n_elements *= d
        if n_elements > INT64_MAX:
            raise GgufProblem(f"tensor {label} has more elements than fit in 64 bits")
        if tname == b"position_embd.weight" and n_dims >= 2:
            layout.position_rows = dims[1]
        ttype = r.u32(f"the type of {label}", "tensor_type")
        if ttype not in GGML_TYPES:
            raise GgufProblem(f"tensor {label} has unknown type {ttype}")
        _type_name, block, block_bytes = GGML_TYPES[ttype]
        if dims and dims[0] % block:
            raise GgufProblem(f"tensor {label} has rows of {dims[0]} elements, not a multiple of {block}")
        offset = r.u64(f"the data offset of {label}", "tensor_offset")
        tensors.append((label, offset, n_elements // block * block_bytes))

    layout.data_start = _align(r.pos, layout.alignment) if layout.n_tensors else r.pos
    expected = 0
    for label, offset, nbytes in tensors:
        if offset != expected:
            raise GgufProblem(f"tensor {label} starts at data offset {offset}, expected {expected}")
        end = layout.data_start + offset + nbytes
        if end > size:
            raise GgufProblem(f"tensor {label} ends at byte {end}, past the end of the file ({size} bytes)")
        expected = _align(offset + nbytes, layout.alignment)
    return layout


def _check_strings(r: _Reader, count: int, name: str, *, distinct: bool) -> None:
    """Walk an array of ``count`` strings; with ``distinct`` (the vocabulary) their texts must
    differ: llama.cpp maps text to id and aborts (GGML_ASSERT) when two ids share a text. It reads
    a text as a C string, so a NUL byte ends it (found by the fuzz: a text cut short by a flipped
    byte equalled another token's); an empty text is named "[EMPTY_<id>]" there, as here. A tight
    loop: Gemma's vocabulary has 262,144."""
    buf, end, size = r.buf, r.end, r.size
    pos = r.pos
    seen: dict[bytes, int] = {}
    unpack = _U64.unpack_from
    for j in range(count):
        if j < 4:
            r.layout.fields.append(("string_length", pos))
        if pos + 8 > end:
            r.pos = pos
            r._need(8, f"string {j} of {name}")
        n = unpack(buf, pos)[0]
        pos += 8
        if n > size - pos or pos + n > end:
            r.pos = pos
            raise GgufProblem(f"string {j} of {name} claims {n} bytes but only {size - pos} are left in the file")
        if distinct:
            # llama.cpp reads each text as a C string: it ends at the first NUL byte
            text = bytes(buf[pos : pos + n]).split(b"\0", 1)[0] or b"[EMPTY_%d]" % j
            first = seen.setdefault(text, j)
            if first != j:
                raise GgufProblem(f"the vocabulary lists the text {text[:40]!r} twice (tokens {first} and {j})")
        pos += n
    r.pos = pos


def _align(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def check_file(path: str | Path) -> GgufLayout:
    """Check a GGUF file on disk; raise :class:`ModelFileError` naming the first problem."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            if size < 24:
                raise ModelFileError(f"{path.name}: is not a GGUF model file (only {size} bytes)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return check_buffer(mm, size)
    except GgufProblem as exc:
        raise ModelFileError(f"{path.name}: not a usable GGUF model: {exc}") from None
    except OSError as exc:
        raise ModelFileError(f"{path.name}: cannot be read ({exc.strerror or exc})") from None
