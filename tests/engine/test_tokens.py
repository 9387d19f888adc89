"""Incremental detokenisation never splits a multi-byte character and round-trips exactly."""

from __future__ import annotations


from specdec_studio.engine.models.loading import LoadedModel
from specdec_studio.engine.tokens import IncrementalDetokenizer, Vocab

TEXT = "Café ☕ — 東京で寿司を食べた 🍣🎉👩‍👩‍👧 naïve 한국어 ok"


def test_incremental_detokenisation_round_trips(any_model_path):
    with LoadedModel(any_model_path) as model:
        vocab = Vocab(model.vocab)
        tokens = vocab.tokenize(TEXT, add_special=False, parse_special=False)
        detok = IncrementalDetokenizer(vocab)
        pieces = [detok.feed(t) for t in tokens]
        pieces.append(detok.flush())
        split_chars = [t for t in tokens if not _is_utf8(vocab.piece(t))]
        arch = model.info.arch
    assert "".join(pieces) == TEXT
    assert all("\ufffd" not in p for p in pieces)
    if arch == "llama":
        # SmolLM2's byte-level BPE splits the emoji and CJK into byte tokens: the case that matters
        assert split_chars
    if split_chars:
        assert any(p == "" for p in pieces[:-1])


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
