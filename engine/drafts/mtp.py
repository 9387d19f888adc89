"""A model's own multi-token-prediction (MTP, "NextN") head as a draft: llama.cpp's ``draft-mtp``.

Qwen3.5/3.6, GLM-4.5 and DeepSeek ship one (or more) extra decoder blocks trained to predict the
token after next. llama.cpp runs them in a second context on the same model
(``LLAMA_CONTEXT_TYPE_MTP``, the model loaded with ``load_mtp``). Its input at position p is the
token x_p and the target's hidden state h_{p-1} (the final-norm output that also gave the target's
logits at p-1); it predicts x_{p+1}, and its own hidden state there feeds the next draft step.

The head keeps a KV cache of its own. For every position the target has accepted, it must hold the
entry (x_p, h_{p-1}); the target's hidden rows come from llama.cpp's NextN embeddings, which the
target context extracts on every decode once asked (``llama_set_embeddings_nextn``). That call and
its readers are in llama.cpp's staging header (``src/llama-ext.h``), exported from libllama as C++
symbols; llama-cpp-python does not bind them, so this module does, by their mangled names.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Iterator, Sequence

import llama_cpp as llama
import numpy as np

from specdec_studio.engine import native
from specdec_studio.engine.errors import ConfigError, DecodeError

# llama-ext.h: void llama_set_embeddings_nextn(llama_context *, bool value, bool masked);
#              float * llama_get_embeddings_nextn(llama_context *);
#              float * llama_get_embeddings_nextn_ith(llama_context *, int32_t i);
_SET_NEXTN = "_Z26llama_set_embeddings_nextnP13llama_contextbb"
_GET_NEXTN = "_Z26llama_get_embeddings_nextnP13llama_context"
_GET_NEXTN_ITH = "_Z30llama_get_embeddings_nextn_ithP13llama_contexti"


class _NextnApi:
    def __init__(self) -> None:
        from llama_cpp import llama_cpp as bindings

        lib = bindings._lib
        try:
            self.set = getattr(lib, _SET_NEXTN)
            self.get = getattr(lib, _GET_NEXTN)
            self.get_ith = getattr(lib, _GET_NEXTN_ITH)
        except AttributeError as exc:
            raise ConfigError("this build of llama.cpp does not export its NextN embeddings, "
                              "so MTP drafting cannot run; rebuild llama-cpp-python 0.3.36 or newer") from exc
        self.set.argtypes = [llama.llama_context_p_ctypes, ctypes.c_bool, ctypes.c_bool]
        self.set.restype = None
        self.get.argtypes = [llama.llama_context_p_ctypes]
        self.get.restype = ctypes.POINTER(ctypes.c_float)
        self.get_ith.argtypes = [llama.llama_context_p_ctypes, ctypes.c_int32]
        self.get_ith.restype = ctypes.POINTER(ctypes.c_float)


_api: _NextnApi | None = None


def nextn_api() -> _NextnApi:
    global _api
    if _api is None:
        _api = _NextnApi()
    return _api


def mtp_layers(model: llama.llama_model_p) -> int:
    """The MTP (NextN) blocks the model file carries; 0 for most models."""
    return int(llama.llama_model_n_layer_nextn(model))


class MtpHead:
    """The MTP context of one target context: the head's KV cache, its batch, and the hidden rows
    of the target's decodes that it still needs.

    ``n_valid`` counts the positions whose entry (x_p, h_{p-1}) the head's cache holds for the
    accepted context; everything past it (the last draft's own steps) is dropped before the head
    next decodes. The target's rows are copied out after each of its decodes (:meth:`on_decode`,
    as a memory observer of the target) and kept only from ``n_valid - 1`` on, by (position,
    token): a tree's branches put other tokens at the same position, and the accepted path may be
    another sequence's until it is copied into sequence 0. Sequence 0's row is the one kept where
    two sequences decode the same token at one position (a re-decode in position order is).
    """

    def __init__(self, model: llama.llama_model_p, target_ctx: llama.llama_context_p, *, n_ctx: int,
                 n_batch: int, n_threads: int, n_threads_batch: int, arch: str) -> None:
        native.ensure_backend()
        self.api = nextn_api()
        self.target_ctx = target_ctx
        self.n_embd = int(llama.llama_model_n_embd_out(model))
        self.n_vocab = int(llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(model)))
        params = llama.llama_context_default_params()
        params.ctx_type = llama.LLAMA_CONTEXT_TYPE_MTP
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_rs_seq = 0
        params.n_threads = n_threads
        params.n_threads_batch = n_threads_batch
        params.no_perf = True
        params.ctx_other = target_ctx
        native.take_recent_problems()
        ctx = llama.llama_init_from_model(model, params)
        if not ctx:
            why = "; ".join(native.take_recent_problems()[-2:]) or "llama.cpp could not make the MTP context"
            raise ConfigError(f"the MTP layers of this {arch} model cannot be run by llama.cpp ({why})")
        self.ctx = ctx
        self.mem = llama.llama_get_memory(ctx)
        self.n_batch = n_batch
        self.batch = llama.llama_batch_ext_init(ctx)
        # The head's own hidden row of its last token feeds its next step. Unmasked (every token's
        # row, by batch index): llama.cpp's masked copy takes the first rows of the batch rather
        # than the output rows, which is wrong for a catch-up batch of several tokens (measured:
        # the row read back differed from the last token's by 0.8, and the next proposal changed).
        self.api.set(ctx, True, False)
        self._pos = (llama.llama_pos * 4)()  # M-RoPE models read 4 positions; a text token uses the first
        self.n_valid = 0
        self.rows: dict[tuple[int, int], np.ndarray] = {}  # (position, token) -> the target's hidden row
        self._zero = np.zeros(self.n_embd, dtype=np.float32)
        self.t_decode_s = 0.0
        self.attached = False

    # ------------------------------------------------------------------ the target's side
    def attach(self) -> None:
        """Have the target context extract every decoded token's hidden row from now on."""
        self.api.set(self.target_ctx, True, False)
        self.attached = True

    def detach(self) -> None:
        if self.attached:
            self.api.set(self.target_ctx, False, False)
            self.attached = False

    def on_decode(self, batch) -> None:
        """A target decode: copy the hidden rows the head may still need."""
        n = batch.n_tokens
        if n == 0:
            return
        base = self.api.get(self.target_ctx)
        if not base:
            return
        rows = np.ctypeslib.as_array(base, shape=(n, self.n_embd))
        keep_from = self.n_valid - 1
        for i in range(n):
            p = int(batch.pos[i])
            if p < keep_from:
                continue
            key = (p, int(batch.token[i]))
            if key not in self.rows or 0 in batch.seqs_of(i):
                self.rows[key] = rows[i].copy()

    # Cut cells need nothing here: rows are looked up by the accepted context's own tokens and
    # pruned by position as the head catches up.
    def on_seq_rm(self, seq_id: int, p0: int, p1: int) -> None: ...
    def on_seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None: ...
    def on_seq_keep(self, seq_id: int) -> None: ...
    def on_seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None: ...

    def on_clear(self) -> None:
        self.rows.clear()

    # ------------------------------------------------------------------ the head's side
    def restart(self, n_keep: int) -> None:
        """A new run whose first ``n_keep`` tokens the target kept from the previous one: the
        head keeps as much of its own cache (never more than it holds for sure)."""
        self.n_valid = min(self.n_valid, n_keep)
        llama.llama_memory_seq_rm(self.mem, 0, self.n_valid, -1)
        # rows of the kept prefix still hold (same tokens, same cells); the rest were another context's
        self.rows = {key: r for key, r in self.rows.items() if self.n_valid - 1 <= key[0] < n_keep}

    def _decode(self, entries: Sequence[tuple[int, int, np.ndarray]]) -> int:
        """Decode (token, position, hidden row) entries, logits for the last; return its index."""
        b = self.batch
        llama.llama_batch_ext_clear(b)
        idx = -1
        for token, pos, row in entries:
            idx = llama.llama_batch_ext_add_token(b, 0, token)
            self._pos[0] = pos
            llama.llama_batch_ext_set_pos(b, idx, self._pos)
            embd = llama.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, self.n_embd)
            llama.llama_batch_ext_set_embd_token(b, idx, embd)
        llama.llama_batch_ext_set_output_logits(b, idx, True)
        t0 = time.perf_counter()
        rc = llama.llama_process(self.ctx, llama.LLAMA_PROCESS_TYPE_DECODE, b)
        self.t_decode_s += time.perf_counter() - t0
        if rc != 0:
            raise DecodeError(f"the MTP head's decode of {len(entries)} tokens failed (llama_process returned {rc})")
        return idx

    def first_step(self, context: Sequence[int]) -> tuple[np.ndarray, int]:
        """Bring the head's cache up to the accepted ``context`` (the newest token last, not yet in
        the target's cache) and decode that newest token: the logits for the first proposal and
        the batch index whose hidden row continues the draft."""
        last = len(context) - 1
        llama.llama_memory_seq_rm(self.mem, 0, self.n_valid, -1)
        start = self.n_valid
        idx = 0
        while start <= last:
            end = min(last + 1, start + self.n_batch)
            entries = [(int(context[p]), p, self.target_row(p - 1, context)) for p in range(start, end)]
            idx = self._decode(entries)
            start = end
        self.n_valid = last + 1
        for key in [key for key in self.rows if key[0] < last - 1]:
            del self.rows[key]
        return self.logits(idx), idx

    def target_row(self, p: int, context: Sequence[int]) -> np.ndarray:
        """The target's hidden row at position ``p`` of ``context`` (zeros before the start, or
        where it was not seen: a prefix another context decoded; the drafts are then worse, never
        the output)."""
        if p < 0:
            return self._zero
        return self.rows.get((p, int(context[p])), self._zero)

    def next_step(self, token: int, pos: int, after: int) -> tuple[np.ndarray, int]:
        """Decode a proposal at ``pos`` paired with the head's own hidden row of batch index ``after``."""
        row = np.ctypeslib.as_array(self.api.get_ith(self.ctx, after), shape=(self.n_embd,)).copy()
        idx = self._decode([(token, pos, row)])
        return self.logits(idx), idx

    def logits(self, idx: int) -> np.ndarray:
        ptr = llama.llama_get_logits_ith(self.ctx, idx)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def close(self) -> None:
        self.detach()
        if getattr(self, "batch", None):
            llama.llama_batch_ext_free(self.batch)
            self.batch = None
        if getattr(self, "ctx", None):
            llama.llama_free(self.ctx)
            self.ctx = None


@contextlib.contextmanager
def following(head: MtpHead, memory) -> Iterator[MtpHead]:
    """While a run uses ``head``: the target extracts its hidden rows and the head sees every
    decode of the target (``memory``, an engine.memory.Memory), the prompt's included."""
    head.attach()
    memory.observers.append(head)
    try:
        yield head
    finally:
        if head in memory.observers:
            memory.observers.remove(head)
        head.detach()


def token_cost_estimate(n_params: int, n_layer: int, n_vocab: int, n_embd: int) -> float:
    """One decode of the MTP head in decodes of the target, before a run has timed its own: a
    decoder block (about one layer's share of the weights) and the LM head (vocabulary × width),
    read once each, as a CPU decode of one token reads every weight."""
    if n_params <= 0 or n_layer <= 0:
        return 1.0
    return min(1.0, (n_params / n_layer + n_vocab * n_embd) / n_params)
