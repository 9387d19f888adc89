"""Training a draft to agree with its target: sequence-level distillation with hard labels, on
llama.cpp's own training API (``llama_opt_init`` / ``llama_opt_epoch``; its dataset is a
``ggml_opt`` dataset, reached through the same shared libraries).

1. **Corpus.** The target decodes each training prompt greedily; the prompt and the target's own
   output are the text the draft learns to predict (next-token labels are the target's tokens).
2. **Start.** Training needs F32 weights: the starting draft is dequantised to F32 with llama.cpp's
   quantize API. A cheaper start keeps only the first L transformer blocks of it (the ``gguf``
   package rewrites the file): fewer layers, proportionally cheaper drafting, and training makes
   up some of what was cut.
3. **Train** with AdamW, one optimizer step per 64 tokens, a context of 256 tokens a datapoint
   (the training set is the corpus in windows of 256 tokens, half overlapping), the last window
   held out for the evaluation loss.
4. **Use.** The trained F32 model is quantised (Q8_0 by default) for drafting.

llama.cpp sizes a context's graphs at max(1024, 8 × tensors) nodes, plus 6 per tensor pair of any
LoRA adapter loaded on the model. A training step's backward graph needs more than that
(llama.cpp issues #15090 and #18805: ``GGML_ASSERT(cgraph->n_nodes < cgraph->size)`` on
SmolLM2), so the trainer loads a rank-1, all-zero adapter on the model (three times) — never
applied to any context — whose only effect is a larger graph budget.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import llama_cpp as llama

from specdec_studio.engine import native
from specdec_studio.engine.errors import ModelFileError, SpecDecError

GGML_TYPE_I32 = 26
LLAMA_FTYPE_ALL_F32 = 0
OPTIMIZER_ADAMW = 0
TRAIN_CTX = 256  # tokens a datapoint (llama.cpp pads a context to a multiple of 256 anyway)
TRAIN_BATCH = 64  # tokens an optimizer step
STEPS_PER_WINDOW = TRAIN_CTX // TRAIN_BATCH  # the most steps a Stop waits for
DEFAULT_LR = 1e-5  # full-weight training of a small model: 1e-4 overfitted a few thousand tokens
# Copies of the zero adapter loaded on the model: each adds 6 graph nodes per block tensor. One was
# enough for SmolLM2's 30 blocks; a model cut to 16 blocks needed more (its fixed part — the
# embedding, the output, the loss — weighs more against fewer blocks), so three, with room.
GRAPH_BUDGET_ADAPTERS = 3


@dataclass(frozen=True)
class DistillProgress:
    phase: str  # "corpus", "train", "done"
    step: int
    n_steps: int
    loss: float | None = None
    eta_s: float | None = None


@dataclass
class DistillResult:
    path: Path  # the trained draft (F32 from train(); quantised from distill_draft())
    f32_path: Path | None
    steps: int
    losses: list[float] = field(default_factory=list)  # the training loss after each step (epoch mean so far)
    eval_losses: list[float] = field(default_factory=list)  # the held-out window's loss after each epoch
    t_train_s: float = 0.0
    stopped: bool = False
    n_corpus_tokens: int = 0
    start_path: Path | None = None  # the draft before training (after the layer cut, if any)


# ----------------------------------------------------------------------------- the corpus
def target_corpus(session, prompts: Sequence[Sequence[int]], n_tokens: int, cancel=None) -> list[int]:
    """The prompts followed by the target's greedy continuations, end to end: the text the draft
    learns to predict (each label is the target's own token). A Stop (``cancel``) ends it."""
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.events import RunFinished

    corpus: list[int] = []
    for tokens in prompts:
        if cancel is not None and cancel.is_set():
            raise SpecDecError("draft training was stopped while the target wrote the training text")
        final = next(e for e in session.run(RunConfig(max_tokens=n_tokens), list(tokens), fresh_cancel=False)
                     if isinstance(e, RunFinished))
        corpus += [*tokens, *final.token_ids]
        if final.end_token is not None:
            corpus.append(final.end_token)
    return corpus


# ----------------------------------------------------------------------------- the starting draft
def dequantised_copy(src: Path, dst: Path) -> Path:
    """``src`` with every tensor in F32, as training needs."""
    native.ensure_backend()
    dst.parent.mkdir(parents=True, exist_ok=True)
    params = llama.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    partial = dst.with_name(dst.name + ".partial")
    if llama.llama_model_quantize(str(src).encode(), str(partial).encode(), params) != 0:
        partial.unlink(missing_ok=True)
        raise ModelFileError(f"{src.name} could not be dequantised to F32 for training")
    partial.replace(dst)
    return dst


def keep_first_layers(src: Path, dst: Path, n_layers: int) -> Path:
    """A copy of the F32 model ``src`` with only its first ``n_layers`` transformer blocks."""
    import gguf

    from specdec_studio.engine.models.rewrite import rewrite_gguf

    reader = gguf.GGUFReader(str(src))
    arch = str(reader.fields["general.architecture"].contents())
    total = int(reader.fields[f"{arch}.block_count"].contents())
    if not 1 <= n_layers <= total:
        raise SpecDecError(f"--keep-layers must be between 1 and the model's {total} blocks, got {n_layers}")

    def first_blocks(name: str, data: np.ndarray) -> np.ndarray | None:
        return None if name.startswith("blk.") and int(name.split(".")[1]) >= n_layers else data

    return rewrite_gguf(src, dst, field_value=lambda key, value: n_layers if key == f"{arch}.block_count" else value,
                        tensor_data=first_blocks)


def graph_budget_adapter(model_f32: Path, dst: Path) -> Path:
    """A rank-1 LoRA adapter of zeros for every 2-D block tensor of ``model_f32``; loading it on
    the model raises the graph budget of the model's contexts (see the module docstring)."""
    import gguf

    reader = gguf.GGUFReader(str(model_f32))
    arch = str(reader.fields["general.architecture"].contents())
    partial = dst.with_name(dst.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", 1.0)
    for t in reader.tensors:
        if t.name.startswith("blk.") and t.name.endswith(".weight") and len(t.shape) == 2:
            n_in, n_out = int(t.shape[0]), int(t.shape[1])
            writer.add_tensor(t.name + ".lora_a", np.zeros((1, n_in), dtype=np.float32))
            writer.add_tensor(t.name + ".lora_b", np.zeros((n_out, 1), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(dst)
    return dst


# ----------------------------------------------------------------------------- ggml's training API
class _OptimizerParams(ctypes.Structure):  # struct ggml_opt_optimizer_params
    _fields_ = [("adamw_alpha", ctypes.c_float), ("adamw_beta1", ctypes.c_float), ("adamw_beta2", ctypes.c_float),
                ("adamw_eps", ctypes.c_float), ("adamw_wd", ctypes.c_float),
                ("sgd_alpha", ctypes.c_float), ("sgd_wd", ctypes.c_float)]


class _LlamaOptParams(ctypes.Structure):
    """struct llama_opt_params as the pinned llama.h has it (llama-cpp-python's binding lacks the
    trailing optimizer type, which the C side would then read from garbage)."""

    _fields_ = [
        ("n_ctx_train", ctypes.c_uint32),
        ("param_filter", ctypes.c_void_p),
        ("param_filter_ud", ctypes.c_void_p),
        ("get_opt_pars", ctypes.c_void_p),
        ("get_opt_pars_ud", ctypes.c_void_p),
        ("optimizer_type", ctypes.c_int),
    ]


_PARAM_FILTER = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p)
# Not trained: the token embedding (SmolLM2 ties it to the output projection). It is a third of the
# model's weights and a few thousand tokens of text move most of its rows not at all and the rest
# too far: training it cost held-out agreement (measured: 78 % → 27 % after 120 steps at 1e-4).
FROZEN_PREFIXES = (b"token_embd", b"output.weight")

_EPOCH_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


def _bind():
    """The few ggml_opt and llama_opt functions, with their C signatures."""
    from llama_cpp._ggml import libggml
    from llama_cpp.llama_cpp import _lib as libllama

    def sig(lib, name, restype, *argtypes):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, list(argtypes)
        return fn

    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    return {
        "dataset_init": sig(libggml, "ggml_opt_dataset_init", vp, ctypes.c_int, ctypes.c_int, i64, i64, i64, i64),
        "dataset_free": sig(libggml, "ggml_opt_dataset_free", None, vp),
        "dataset_data": sig(libggml, "ggml_opt_dataset_data", vp, vp),
        "dataset_labels": sig(libggml, "ggml_opt_dataset_labels", vp, vp),
        "get_data": sig(libggml, "ggml_get_data", vp, vp),
        "result_init": sig(libggml, "ggml_opt_result_init", vp),
        "result_free": sig(libggml, "ggml_opt_result_free", None, vp),
        "result_reset": sig(libggml, "ggml_opt_result_reset", None, vp),
        "result_loss": sig(libggml, "ggml_opt_result_loss", None, vp, ctypes.POINTER(ctypes.c_double),
                           ctypes.POINTER(ctypes.c_double)),
        "constant_params": ctypes.cast(libggml.ggml_opt_get_constant_optimizer_params, vp).value,
        "tensor_name": sig(libggml, "ggml_get_name", ctypes.c_char_p, vp),
        "opt_init": sig(libllama, "llama_opt_init", None, vp, vp, _LlamaOptParams),
        "opt_epoch": sig(libllama, "llama_opt_epoch", None, vp, vp, vp, vp, i64, vp, vp),
    }


def _one_window_dataset(api: dict, n_ctx: int) -> tuple[int, tuple[np.ndarray, np.ndarray]]:
    """A ggml_opt dataset of one ``n_ctx``-token window, and its tokens and labels as numpy views
    to fill before each llama_opt_epoch. Free it with ``api["dataset_free"]``."""
    dataset = api["dataset_init"](GGML_TYPE_I32, GGML_TYPE_I32, n_ctx, n_ctx, 1, 1)
    if not dataset:
        raise SpecDecError("llama.cpp could not make a training dataset")
    views = tuple(
        np.ctypeslib.as_array(
            ctypes.cast(api["get_data"](api[part](dataset)), ctypes.POINTER(ctypes.c_int32)), shape=(n_ctx,)
        )
        for part in ("dataset_data", "dataset_labels")
    )
    return dataset, views


def train(start_f32: Path, corpus: Sequence[int], n_steps: int, out_f32: Path, *, lr: float = DEFAULT_LR,
          n_threads: int = 2, cancel=None,
          progress: Callable[[DistillProgress], None] | None = None) -> DistillResult:
    """Train the F32 model ``start_f32`` for ``n_steps`` optimizer steps on ``corpus`` and write
    it to ``out_f32``. ``cancel`` (a threading.Event) ends training after the current window
    (STEPS_PER_WINDOW steps); what was trained so far is written all the same."""
    # two training windows at least; refused before the start model (hundreds of MB in F32) loads
    # (llama.cpp pads the context to 256 cells: TRAIN_CTX is what it makes, checked again below)
    needed = TRAIN_CTX + TRAIN_CTX // 2 + 1
    if len(corpus) < needed:
        raise SpecDecError(f"the training text has {len(corpus)} tokens; it needs at least {needed} "
                           "(more prompts, or more tokens each)")
    native.ensure_backend()
    api = _bind()
    adapter_path = graph_budget_adapter(start_f32, out_f32.with_name(out_f32.stem + ".graph-budget.gguf"))
    mparams = llama.llama_model_default_params()
    mparams.load_mode = 0  # LLAMA_LOAD_MODE_NONE: the weights in writable memory (not a read-only mmap)
    model = llama.llama_model_load_from_file(str(start_f32).encode(), mparams)
    if not model:
        raise ModelFileError(f"{start_f32.name} could not be loaded for training")
    adapters: list = []
    ctx = window_set = held_set = result_train = result_eval = None
    result = DistillResult(path=out_f32, f32_path=out_f32, steps=0, n_corpus_tokens=len(corpus))
    try:
        for _ in range(GRAPH_BUDGET_ADAPTERS):
            adapters.append(llama.llama_adapter_lora_init(model, str(adapter_path).encode()))
        cparams = llama.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = TRAIN_CTX, TRAIN_BATCH, TRAIN_BATCH
        cparams.type_k = cparams.type_v = 0  # F32: the backward pass has no F16 OUT_PROD
        cparams.flash_attn_type = 0  # disabled: flash attention has no backward pass
        cparams.n_threads = cparams.n_threads_batch = n_threads
        ctx = llama.llama_init_from_model(model, cparams)
        if not ctx:
            raise SpecDecError("llama.cpp could not make a training context")
        n_ctx = llama.llama_n_ctx(ctx)
        stride = n_ctx // 2
        n_data = (len(corpus) - n_ctx - 1) // stride + 1 if len(corpus) > n_ctx else 0
        if n_data < 2:
            raise SpecDecError(f"the training text has {len(corpus)} tokens; it needs at least {n_ctx + stride + 1} "
                               "(more prompts, or more tokens each)")
        optimizer = _OptimizerParams(lr, 0.9, 0.999, 1e-8, 0.0, lr, 0.0)
        trainable = _PARAM_FILTER(lambda tensor, _ud: not api["tensor_name"](tensor).startswith(FROZEN_PREFIXES))
        api["opt_init"](ctx, model, _LlamaOptParams(0, ctypes.cast(trainable, ctypes.c_void_p).value, None,
                                                    api["constant_params"], ctypes.addressof(optimizer),
                                                    OPTIMIZER_ADAMW))
        # Two one-window datasets: llama_opt_epoch runs in C to its end, so the training windows are
        # given one at a time (a Stop is then seen after one window's steps, not a whole epoch's),
        # and the held-out last window is evaluated on its own after each epoch.
        window_set, window_data = _one_window_dataset(api, n_ctx)
        held_set, held_data = _one_window_dataset(api, n_ctx)
        tokens = np.asarray(corpus, dtype=np.int32)

        def put_window(into: tuple[np.ndarray, np.ndarray], i: int) -> None:
            data, labels = into
            data[:] = tokens[i * stride: i * stride + n_ctx]
            labels[:] = tokens[i * stride + 1: i * stride + n_ctx + 1]

        put_window(held_data, n_data - 1)
        result_train, result_eval = api["result_init"](), api["result_init"]()
        steps_per_datapoint = n_ctx // TRAIN_BATCH
        n_train = n_data - 1  # the last window is held out
        t0 = time.perf_counter()
        loss, unc = ctypes.c_double(), ctypes.c_double()

        def on_batch(train, _opt, _data, res, ibatch, _ibatch_max, _t_start):
            api["result_loss"](res, ctypes.byref(loss), ctypes.byref(unc))
            if not train:
                return
            result.steps += 1
            result.losses.append(float(loss.value))
            elapsed = time.perf_counter() - t0
            if progress is not None:
                eta = elapsed / result.steps * max(0, n_steps - result.steps)
                progress(DistillProgress("train", result.steps, n_steps, float(loss.value), eta))

        callback = _EPOCH_CALLBACK(on_batch)

        def stopped() -> bool:
            return cancel is not None and cancel.is_set()

        while result.steps < n_steps and not stopped():
            # an epoch over just enough windows for the steps left; one stopped part-way is not evaluated
            windows = min(n_train, math.ceil((n_steps - result.steps) / steps_per_datapoint))
            for i in range(windows):
                if stopped():
                    break
                put_window(window_data, i)
                api["opt_epoch"](ctx, window_set, result_train, result_eval, 1, callback, None)
            else:
                api["opt_epoch"](ctx, held_set, result_train, result_eval, 0, None, None)
                api["result_loss"](result_eval, ctypes.byref(loss), ctypes.byref(unc))
                result.eval_losses.append(float(loss.value))
            api["result_reset"](result_train)
            api["result_reset"](result_eval)
        result.stopped = result.steps < n_steps
        result.t_train_s = time.perf_counter() - t0
        out_f32.parent.mkdir(parents=True, exist_ok=True)
        llama.llama_model_save_to_file(model, str(out_f32).encode())
        if progress is not None:
            progress(DistillProgress("done", result.steps, n_steps, result.losses[-1] if result.losses else None, 0.0))
        return result
    finally:
        for free, handle in ((api["result_free"], result_train), (api["result_free"], result_eval),
                             (api["dataset_free"], window_set), (api["dataset_free"], held_set)):
            if handle:
                free(handle)
        if ctx:
            llama.llama_free(ctx)
        for adapter in adapters:
            if adapter:
                llama.llama_adapter_lora_free(adapter)
        llama.llama_model_free(model)
        adapter_path.unlink(missing_ok=True)


def _refuse_writing_over_a_model(session, draft_path: Path, out: Path, keep_layers: int | None) -> None:
    """Training writes ``out`` (and, cutting layers, a file beside it): never over the loaded
    target, the loaded draft or the draft it starts from, which would be lost, or changed under a
    running llama.cpp that maps them."""
    written = [out] + ([out.with_name(out.stem + f".start-{keep_layers}-layers.gguf")] if keep_layers else [])
    models = [("the loaded target", Path(session.model.info.path)), ("the draft it starts from", draft_path)]
    if session.draft_model is not None:
        models.append(("the loaded draft", Path(session.draft_model.info.path)))
    for path in written:
        for what, model in models:
            if path.resolve() == model.resolve() or (path.exists() and model.exists() and path.samefile(model)):
                raise SpecDecError(f"the trained draft would be written over {model.name}, {what}; "
                                   "choose another file name")


def distill_draft(session, draft_path: Path, prompts: Sequence[Sequence[int]], n_steps: int, out: Path, *,
                  n_tokens: int = 96, keep_layers: int | None = None, quant: str = "Q8_0", lr: float = DEFAULT_LR,
                  cancel=None, progress: Callable[[DistillProgress], None] | None = None) -> DistillResult:
    """The whole recipe: the target (``session``) writes the corpus, the draft is dequantised
    (and cut to its first ``keep_layers`` blocks), trained, and written quantised to ``out``.
    The F32 files live in a temporary folder next to ``out``. Returns the training's record with
    ``start_path`` set to the draft as it was before training (cut, if it was cut)."""
    import tempfile

    from specdec_studio.engine.models.quantize import requantize

    _refuse_writing_over_a_model(session, draft_path, out, keep_layers)
    if progress is not None:
        progress(DistillProgress("corpus", 0, n_steps))
    corpus = target_corpus(session, prompts, n_tokens, cancel)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".specdec-distill-", dir=out.parent) as tmp:
        tmp = Path(tmp)
        start = dequantised_copy(draft_path, tmp / "start-f32.gguf")
        start_path = draft_path
        if keep_layers:
            start = keep_first_layers(start, tmp / "start-cut-f32.gguf", keep_layers)
            start_path = requantize(start, out.with_name(out.stem + f".start-{keep_layers}-layers.gguf"), quant)
        result = train(start, corpus, n_steps, tmp / "trained-f32.gguf", lr=lr, n_threads=session.n_threads,
                       cancel=cancel, progress=progress)
        requantize(result.f32_path, out, quant)
    result.path = out
    result.f32_path = None
    result.start_path = start_path
    return result
