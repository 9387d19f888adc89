"""Test models made from llama.cpp's tiny random ones (engine.models.rewrite copies a GGUF with
changes): the disagreeing drafts of tests/engine/archs_matrix.py; tests/mtp_model.py makes the
MTP model the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specdec_studio.engine.models.rewrite import rewrite_gguf


def write_disagreeing_draft(src: Path, dst: Path) -> Path:
    """``src`` with its output head's rows shifted by one token: its argmax is the token id after
    the one its own model would choose. The tiny random models of two architectures can agree on
    every token of a repetitive prompt (their logits are mostly the shared-seed embeddings'); this
    draft cannot, so speculation with it rolls back on nearly every step."""
    import gguf

    names = {t.name for t in gguf.GGUFReader(str(src)).tensors}
    head = "output.weight" if "output.weight" in names else "token_embd.weight"
    return rewrite_gguf(src, dst, tensor_data=lambda name, data: np.roll(data, 1, axis=0) if name == head else data)
