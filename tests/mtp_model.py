"""A tiny Qwen3.5 model with one MTP (NextN) block, made from llama.cpp's tiny random ``qwen35``.

No GGUF with MTP layers is on the package registries this project can reach, and llama.cpp's
``test-llama-archs`` writes none, so the tests make one with the ``gguf`` package: the trunk of
``qwen35-dense.gguf`` plus a block ``blk.<n_layer>`` with the tensors llama.cpp's qwen35 loader asks
for (``nextn.eh_proj``, ``nextn.enorm``, ``nextn.hnorm``, ``nextn.shared_head_norm`` and a
full-attention decoder block), and ``qwen35.nextn_predict_layers = 1``.

Random MTP weights would almost never be accepted, which makes "our acceptance equals llama.cpp's"
vacuous. So the head is built to *know* something: it sees only the next token's embedding
(``eh_proj`` = [I | 0] plus noise), its block adds nothing (zero attention and FFN outputs), and its
head normalises as the trunk's does. It then predicts what a pure bigram model would put after the
token. The trunk's residual branches are scaled by ``trunk_scale``, so the target is mostly bigram
with context on top: the head is right often but not always, as a trained MTP head is. Its head
norm is ``head_sharpness`` times the trunk's: the same argmax, with the confidence of a trained
head (the tiny model's own logits are nearly flat, 0.012 at the top over 128 tokens), which a
source priced by its probabilities (Auto) needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from specdec_studio.engine.models.rewrite import rewrite_gguf

ARCH = "qwen35"


def write_mtp_model(src: Path, dst: Path, *, trunk_scale: float = 0.6, noise: float = 0.15,
                    head_sharpness: float = 20.0, seed: int = 7) -> Path:
    """``src`` (llama.cpp's tiny qwen35) with one MTP block added; written to ``dst``."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    assert str(reader.fields["general.architecture"].contents()) == ARCH, f"{src.name} is not a {ARCH} model"
    n_layer = int(reader.fields[f"{ARCH}.block_count"].contents())
    tensors = {t.name: t for t in reader.tensors}
    n_embd = int(reader.fields[f"{ARCH}.embedding_length"].contents())
    # the MTP block is a full-attention decoder block: copy the shapes of a trunk layer that has one
    attn_layer = next(i for i in range(n_layer) if f"blk.{i}.attn_q.weight" in tensors)
    rng = np.random.default_rng(seed)

    def field_value(key: str, value):
        if key == f"{ARCH}.block_count":
            return n_layer + 1
        if key == f"{ARCH}.nextn_predict_layers":
            return 1
        if key == f"{ARCH}.attention.recurrent_layers":
            return [*value, 0]  # the MTP block is attention, not recurrent
        if isinstance(value, list) and len(value) == n_layer and key.startswith(ARCH + "."):
            return [*value, value[-1]]  # a per-layer value: the MTP block takes the last layer's
        return value

    residual_outputs = (".ssm_out.weight", ".attn_output.weight", ".ffn_down.weight")

    def tensor_data(name: str, data: np.ndarray) -> np.ndarray:
        if name.startswith("blk.") and name.endswith(residual_outputs):
            return (data * trunk_scale).astype(data.dtype)
        return data

    mtp = f"blk.{n_layer}"
    prefix = f"blk.{attn_layer}."
    extra = []
    for name, t in tensors.items():
        if not name.startswith(prefix):
            continue
        data = np.array(t.data)
        if name.endswith((".attn_output.weight", ".ffn_down.weight")):
            data = np.zeros_like(data)  # the block passes its input through
        extra.append((mtp + "." + name[len(prefix):], data, t.tensor_type))
    eh_proj = np.concatenate([np.eye(n_embd), np.zeros((n_embd, n_embd))], axis=1)
    eh_proj += noise * rng.standard_normal(eh_proj.shape) / np.sqrt(n_embd)
    head_norm = np.array(tensors["output_norm.weight"].data) * head_sharpness
    extra += [(f"{mtp}.nextn.eh_proj.weight", eh_proj.astype(np.float32), None),
              (f"{mtp}.nextn.enorm.weight", np.ones(n_embd, dtype=np.float32), None),
              (f"{mtp}.nextn.hnorm.weight", np.ones(n_embd, dtype=np.float32), None),
              (f"{mtp}.nextn.shared_head_norm.weight", head_norm.astype(np.float32), None)]
    return rewrite_gguf(src, dst, field_value=field_value, tensor_data=tensor_data, extra_tensors=extra)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tests.mtp_model QWEN35_DENSE_GGUF OUT_GGUF")
    print(write_mtp_model(Path(sys.argv[1]), Path(sys.argv[2])))
