"""A GGUF copied with some of its metadata or tensors changed, through the ``gguf`` package's
reader and writer: a model cut to its first layers (engine.drafts.distill), and the tests' made
models (tests/gguf_edit.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np


def rewrite_gguf(src: Path, dst: Path, *, field_value: Callable[[str, object], object] | None = None,
                 tensor_data: Callable[[str, np.ndarray], np.ndarray | None] | None = None,
                 extra_tensors: Iterable[tuple[str, np.ndarray, object]] = ()) -> Path:
    """Copy ``src`` to ``dst``: each metadata value through ``field_value(key, value)``, each tensor
    through ``tensor_data(name, data)`` (None leaves it out), then ``extra_tensors`` (name, data,
    GGML type or None for the array's own) appended. Written beside ``dst`` and renamed, so a
    reader never sees half a file."""
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
        data = np.asarray(t.data)
        if tensor_data is not None:
            data = tensor_data(t.name, data)
            if data is None:
                continue
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    for name, data, raw_dtype in extra_tensors:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(dst)
    return dst
