"""Test models made from llama.cpp's tiny random ones: a GGUF copied with some metadata, tensors
or extra tensors changed, through the ``gguf`` package (tests/mtp_model.py, the disagreeing
drafts of tests/engine/archs_matrix.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np


def rewrite_gguf(src: Path, dst: Path, *, field_value: Callable[[str, object], object] | None = None,
                 tensor_data: Callable[[str, np.ndarray], np.ndarray] | None = None,
                 extra_tensors: Iterable[tuple[str, np.ndarray, object]] = ()) -> Path:
    """Copy ``src`` to ``dst``: each metadata value through ``field_value(key, value)``, each tensor
    through ``tensor_data(name, data)``, then ``extra_tensors`` (name, data, GGML type or None for
    the array's own) appended. Written beside ``dst`` and renamed, so a reader never sees half a
    file."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    partial = dst.with_name(dst.name + ".partial")
    dst.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(partial), str(reader.fields["general.architecture"].contents()))
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        is_array = field.types[0] == gguf.GGUFValueType.ARRAY
        if is_array and not value:
            continue  # the writer refuses empty arrays; llama.cpp reads them as absent
        if field_value is not None:
            value = field_value(key, value)
        writer.add_key_value(key, value, field.types[0], sub_type=field.types[-1] if is_array else None)
    for t in reader.tensors:
        data = np.array(t.data)
        if tensor_data is not None:
            data = tensor_data(t.name, data)
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    for name, data, raw_dtype in extra_tensors:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(dst)
    return dst


def write_disagreeing_draft(src: Path, dst: Path) -> Path:
    """``src`` with its output head's rows shifted by one token: its argmax is the token id after
    the one its own model would choose. The tiny random models of two architectures can agree on
    every token of a repetitive prompt (their logits are mostly the shared-seed embeddings'); this
    draft cannot, so speculation with it rolls back on nearly every step."""
    import gguf

    names = {t.name for t in gguf.GGUFReader(str(src)).tensors}
    head = "output.weight" if "output.weight" in names else "token_embd.weight"
    return rewrite_gguf(src, dst, tensor_data=lambda name, data: np.roll(data, 1, axis=0) if name == head else data)
