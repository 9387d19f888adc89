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

    partial = dst.with_name(dst.name + ".partial")
    dst.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(partial), ARCH)
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = f.contents()
        is_array = f.types[0] == gguf.GGUFValueType.ARRAY
        if is_array and not value:
            continue  # the writer refuses empty arrays; llama.cpp reads them as absent
        if key == f"{ARCH}.block_count":
            value = n_layer + 1
        elif key == f"{ARCH}.nextn_predict_layers":
            value = 1
        elif key == f"{ARCH}.attention.recurrent_layers":
            value = [*value, 0]  # the MTP block is attention, not recurrent
        elif is_array and len(value) == n_layer and key.startswith(ARCH + "."):
            value = [*value, value[-1]]  # a per-layer value: the MTP block takes the last layer's
        sub_type = f.types[-1] if is_array else None
        writer.add_key_value(key, value, f.types[0], sub_type=sub_type)

    residual_outputs = (".ssm_out.weight", ".attn_output.weight", ".ffn_down.weight")
    for t in reader.tensors:
        data = np.array(t.data)
        if t.name.startswith("blk.") and t.name.endswith(residual_outputs):
            data = (data * trunk_scale).astype(data.dtype)
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)

    mtp = f"blk.{n_layer}"
    prefix = f"blk.{attn_layer}."
    for name, t in tensors.items():
        if not name.startswith(prefix):
            continue
        data = np.array(t.data)
        if name.endswith((".attn_output.weight", ".ffn_down.weight")):
            data = np.zeros_like(data)  # the block passes its input through
        writer.add_tensor(mtp + "." + name[len(prefix):], data, raw_dtype=t.tensor_type)
    eh_proj = np.concatenate([np.eye(n_embd), np.zeros((n_embd, n_embd))], axis=1)
    eh_proj += noise * rng.standard_normal(eh_proj.shape) / np.sqrt(n_embd)
    writer.add_tensor(f"{mtp}.nextn.eh_proj.weight", eh_proj.astype(np.float32))
    writer.add_tensor(f"{mtp}.nextn.enorm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor(f"{mtp}.nextn.hnorm.weight", np.ones(n_embd, dtype=np.float32))
    head_norm = np.array(tensors["output_norm.weight"].data) * head_sharpness
    writer.add_tensor(f"{mtp}.nextn.shared_head_norm.weight", head_norm.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(dst)
    return dst


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tests.mtp_model QWEN35_DENSE_GGUF OUT_GGUF")
    print(write_mtp_model(Path(sys.argv[1]), Path(sys.argv[2])))
