"""Tokenisation and incremental detokenisation on a model's vocabulary."""

from __future__ import annotations

import codecs
import ctypes
import threading
from collections.abc import Sequence

import llama_cpp as llama

from specdec_studio.engine.errors import PromptError


class Vocab:
    """Tokenizer of one loaded model. Pieces are cached: a run asks for the same ids again and again.

    Shared by the engine thread and the explanation thread (``strategies.explain.ExplainerThread``),
    which both ask for pieces: the caches are dicts whose entries are written whole (a race writes
    the same value twice), and llama.cpp writes each piece into a buffer of the asking thread's own
    (ctypes releases the GIL during the call: one shared buffer let one thread read the other's
    piece and cache it for good)."""

    def __init__(self, vocab_ptr: llama.llama_vocab_p) -> None:
        self.ptr = vocab_ptr
        self.n_tokens = llama.llama_vocab_n_tokens(vocab_ptr)
        self._pieces: dict[int, bytes] = {}
        # a piece's text where its bytes are whole UTF-8 characters (most tokens), else None
        self._texts: dict[int, str | None] = {}
        self._eog: dict[int, bool] = {}
        self._local = threading.local()  # .buffer: the calling thread's piece buffer

    def _piece_buffer(self) -> ctypes.Array:
        buffer = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = self._local.buffer = ctypes.create_string_buffer(256)
        return buffer

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (llama.llama_token * capacity)()
        n = llama.llama_tokenize(self.ptr, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (llama.llama_token * capacity)()
            n = llama.llama_tokenize(self.ptr, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            raise PromptError("the prompt could not be tokenised")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for; control tokens (end of turn, BOS) render as nothing."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buffer = self._piece_buffer()
        n = llama.llama_token_to_piece(self.ptr, token, buffer, len(buffer), 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = llama.llama_token_to_piece(self.ptr, token, big, len(big), 0, False)
            piece = big.raw[:n]
        else:
            piece = buffer.raw[:n]
        self._pieces[token] = piece
        return piece

    def special_text(self, token: int) -> str:
        """A token's text with control tokens spelled out (``<|im_end|>``), as a template writes them."""
        buf = ctypes.create_string_buffer(256)
        n = llama.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, True)
        return buf.raw[: max(0, n)].decode("utf-8", "replace")

    def whole_text(self, token: int) -> str | None:
        """The token's text if its piece is whole UTF-8 characters; None if it starts or ends in
        the middle of one (or is not UTF-8 at all): then only its neighbours can say."""
        try:
            return self._texts[token]
        except KeyError:
            pass
        try:
            text = self.piece(token).decode("utf-8")
        except UnicodeDecodeError:
            text = None
        self._texts[token] = text
        return text

    def is_eog(self, token: int) -> bool:
        # asked for every proposal and every emitted token: a dict hit costs a tenth of the call
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(llama.llama_vocab_is_eog(self.ptr, token))
        return eog

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")


class IncrementalDetokenizer:
    """Turns a token stream into text without ever splitting a multi-byte UTF-8 character.

    A token that ends in the middle of a character yields ``""``; the token that completes it
    yields the whole character. :meth:`flush` returns whatever bytes are left at the end (shown
    with U+FFFD if they never formed a character).
    """

    def __init__(self, vocab: Vocab) -> None:
        self._vocab = vocab
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = False  # the decoder holds the first bytes of an unfinished character

    def feed(self, token: int) -> str:
        if not self._pending:  # the usual token: whole characters after whole characters
            text = self._vocab.whole_text(token)
            if text is not None:
                return text
        text = self._decoder.decode(self._vocab.piece(token))
        self._pending = bool(self._decoder.getstate()[0])
        return text

    def flush(self) -> str:
        self._pending = False
        return self._decoder.decode(b"", final=True)
