"""Opening GGUF models: validation, native lifetime, model facts, draft/target vocabulary check."""

from __future__ import annotations

import ctypes
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as llama

from specdec_studio.engine import native
from specdec_studio.engine.models import devices as ggml_devices
from specdec_studio.engine.models import rpc
from specdec_studio.engine.errors import ModelFileError, VocabMismatchError
from specdec_studio.engine.jsonfile import write_json
from specdec_studio.engine.models.identity import file_identity
from specdec_studio.engine.paths import cache_root
from specdec_studio.engine.strategies import registry

GGUF_MAGIC = b"GGUF"
# The vocabulary check of llama.cpp's speculative example: sizes may differ by this many tokens
# (padding), and token texts are compared from this id on (the first ids are often special).
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_ID = 5
# Architectures whose llama.cpp graph does not select the output rows (no ``inp_out_ids`` in
# vendor/llama.cpp/src/models/<arch>.cpp): a batch that asks for logits at rows 3 and 7 gets rows 0
# and 1. Plain decoding's prompt (logits for its last token only) then read the first token's
# logits, and lookahead's re-decoded tokens (no logits, ahead of the verified ones) shifted every
# verification row. tests/engine/test_archs.py checks the fact against the tiny models.
ARCHS_LOGITS_EVERY_ROW = frozenset({"cogvlm"})
F16_BYTES = 2


@dataclass(frozen=True)
class ModelInfo:
    """Facts about one GGUF model, read through llama.cpp once it is loaded."""

    path: str
    name: str
    arch: str
    n_params: int
    quant: str
    size_bytes: int
    n_vocab: int
    vocab_type: int
    n_ctx_train: int
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_swa: int
    head_dim_k: int  # per-head key and value sizes (GGUF's attention.key_length / value_length)
    head_dim_v: int
    chat_template: str | None
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool
    # how the model remembers its context: "attention" (a KV cache of cells), "recurrent" (one state
    # per sequence, Mamba, RWKV) or "hybrid" (both, Qwen3.5, LFM2, Granite-4, Nemotron-H)
    memory_kind: str = "attention"
    # a diffusion model (dream, llada, …) fills a whole block at once rather than left to right
    diffusion: bool = False
    # positions the model can encode at all (a learned position table's rows); 0: no such limit
    n_pos_max: int = 0
    # multi-token-prediction (NextN) blocks the file carries: the model's own draft head
    n_mtp_layers: int = 0
    # llama.cpp's graph for the architecture computes every row's logits and hands back the first
    # n_outputs of them, not the rows the batch asked for (ARCHS_LOGITS_EVERY_ROW): every row of its
    # batches must ask for logits, so that row i's logits are row i's
    logits_every_row: bool = False

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)

    def kv_bytes_per_cell(self) -> int:
        """Bytes one KV cell takes in llama.cpp's default f16 cache: K and V of every layer, with the
        model's real head sizes (Gemma-3's heads are 256 wide, not n_embd / n_head = 160)."""
        return self.n_layer * self.n_head_kv * (self.head_dim_k + self.head_dim_v) * F16_BYTES

    def summary(self) -> dict[str, object]:
        return {
            "path": self.path,
            "name": self.name,
            "arch": self.arch,
            "n_params": self.n_params,
            "quant": self.quant,
            "size_bytes": self.size_bytes,
            "n_vocab": self.n_vocab,
            "n_ctx_train": self.n_ctx_train,
            "n_swa": self.n_swa,
            "memory_kind": self.memory_kind,
            "diffusion": self.diffusion,
            "n_pos_max": self.n_pos_max,
            "n_mtp_layers": self.n_mtp_layers,
            "chat_template": self.has_chat_template,
        }


def check_gguf_file(path: Path) -> int:
    """Raise :class:`ModelFileError` unless ``path`` is a readable GGUF whose header, metadata and
    tensor table pass the pre-flight check (:mod:`engine.models.gguf_check`); llama.cpp never sees a file
    that fails. A file that passed is remembered by (path, size, mtime) for the process. Returns the
    rows of its learned position table (0: none)."""
    from specdec_studio.engine.models.gguf_check import check_file

    if not path.exists():
        raise ModelFileError(f"{path}: no such file; check the path or run `specdec models fetch`")
    if not path.is_file():
        raise ModelFileError(f"{path}: is not a file; pick a .gguf model file")
    try:
        st = path.stat()
    except OSError as exc:
        raise ModelFileError(f"{path.name}: cannot be read ({exc.strerror})") from exc
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _checked_files:
        return _checked_files[key]
    try:
        with path.open("rb") as f:
            header = f.read(8)
    except OSError as exc:
        raise ModelFileError(f"{path.name}: cannot be read ({exc.strerror})") from exc
    if len(header) < 8 or header[:4] != GGUF_MAGIC:
        raise ModelFileError(f"{path.name}: is not a GGUF model file (it does not start with 'GGUF')")
    (version,) = struct.unpack_from("<I", header, 4)
    if version not in (2, 3):
        raise ModelFileError(f"{path.name}: GGUF version {version} is not supported (expected 2 or 3)")
    rows = check_file(path).position_rows
    _checked_files[key] = rows
    return rows


_checked_files: dict[tuple[str, int, int], int] = {}


def _meta_int(model: llama.llama_model_p, key: str, default: int) -> int:
    text = _meta_str(model, key)
    return int(text) if text.isdigit() else default


def _meta_str(model: llama.llama_model_p, key: str) -> str:
    buf = ctypes.create_string_buffer(256)
    n = llama.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace") if n >= 0 else ""


class LoadedModel:
    """A llama.cpp model that this object owns; close it after every context made from it.

    Use as a context manager or call :meth:`close`; both are idempotent.
    """

    def __init__(self, path: str | Path, *, n_gpu_layers: int = 0, vocab_only: bool = False,
                 rpc_servers: tuple[str, ...] = ()) -> None:
        native.ensure_backend()
        self.path = Path(path).expanduser()
        self.rpc_servers = tuple(rpc_servers)
        # On RPC servers every layer goes to them unless the caller says how many (llama.cpp's -1: all)
        self.n_gpu_layers = n_gpu_layers if n_gpu_layers or not self.rpc_servers else -1
        position_rows = check_gguf_file(self.path)
        params = llama.llama_model_default_params()
        params.n_gpu_layers = self.n_gpu_layers
        device_list = None
        if self.rpc_servers and not vocab_only:
            # The servers first, as llama.cpp orders them (fewer transfers), then this machine's GPUs;
            # an explicit list, so that no other model of this process lands on these servers.
            device_list = rpc.DeviceList(rpc.connect(self.rpc_servers) + ggml_devices.local_gpus())
            params.devices = device_list.address
        params.vocab_only = vocab_only  # enough for facts and the draft check; no weights read
        # A file's MTP (NextN) blocks, where it has them, load with it so that they can draft
        # (engine.drafts.mtp); the target's own decodes never run them.
        params.load_mtp = True
        native.take_recent_problems()
        ptr = llama.llama_model_load_from_file(str(self.path).encode(), params)
        if not ptr:
            why = "; ".join(native.take_recent_problems()[-2:]) or "llama.cpp rejected it"
            raise ModelFileError(f"{self.path.name}: could not be loaded, the file is truncated or corrupt ({why})")
        self.ptr = ptr
        if device_list is not None:
            rpc.hold(self.rpc_servers, 1)
        self._holds_rpc = device_list is not None
        self.vocab = llama.llama_model_get_vocab(ptr)
        self.info = self._read_info(vocab_only, position_rows)

    def _read_info(self, vocab_only: bool, position_rows: int) -> ModelInfo:
        m, v = self.ptr, self.vocab
        # a vocab-only load has no hyper-parameters: llama.cpp aborts if they are asked for
        hp = (lambda f: 0) if vocab_only else (lambda f: f(m))
        template = llama.llama_model_chat_template(m, None)
        ftype_name = llama.llama_ftype_name(llama.llama_model_ftype(m))
        arch = _meta_str(m, "general.architecture")
        n_embd, n_head = hp(llama.llama_model_n_embd), hp(llama.llama_model_n_head)
        default_head = n_embd // n_head if n_head else 0
        return ModelInfo(
            path=str(self.path),
            name=_meta_str(m, "general.name") or self.path.stem,
            arch=arch,
            n_params=int(hp(llama.llama_model_n_params)),
            quant=(ftype_name or b"?").decode(),
            size_bytes=self.path.stat().st_size,
            n_vocab=llama.llama_vocab_n_tokens(v),
            vocab_type=llama.llama_vocab_type(v),
            n_ctx_train=hp(llama.llama_model_n_ctx_train),
            n_layer=hp(llama.llama_model_n_layer),
            n_embd=n_embd,
            n_head=n_head,
            n_head_kv=hp(llama.llama_model_n_head_kv),
            n_swa=hp(llama.llama_model_n_swa),
            head_dim_k=_meta_int(m, f"{arch}.attention.key_length", default_head),
            head_dim_v=_meta_int(m, f"{arch}.attention.value_length", default_head),
            chat_template=template.decode("utf-8", errors="replace") if template else None,
            bos=llama.llama_vocab_bos(v),
            eos=llama.llama_vocab_eos(v),
            add_bos=bool(llama.llama_vocab_get_add_bos(v)),
            add_eos=bool(llama.llama_vocab_get_add_eos(v)),
            memory_kind="attention" if vocab_only else _memory_kind(m),
            diffusion=bool(llama.llama_model_is_diffusion(m)),
            n_pos_max=position_rows,
            n_mtp_layers=hp(llama.llama_model_n_layer_nextn),
            logits_every_row=arch in ARCHS_LOGITS_EVERY_ROW,
        )

    def token_text(self, token: int) -> bytes:
        return llama.llama_vocab_get_text(self.vocab, token) or b""

    def close(self) -> None:
        if getattr(self, "ptr", None):
            llama.llama_model_free(self.ptr)
            self.ptr = None
            if self._holds_rpc:
                rpc.hold(self.rpc_servers, -1)

    def __enter__(self) -> LoadedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _memory_kind(model: llama.llama_model_p) -> str:
    if llama.llama_model_is_hybrid(model):
        return "hybrid"
    return "recurrent" if llama.llama_model_is_recurrent(model) else "attention"


def memory_words(info: ModelInfo, n_snapshots: int = 0) -> str:
    """The model's memory as the sentence of a failure names it ("" for a plain KV cache);
    ``n_snapshots``: the recurrent-state snapshots llama.cpp keeps per sequence for rollback."""
    if info.memory_kind == "attention":
        return ""
    state = (f"{info.arch} keeps a recurrent state per sequence" if info.memory_kind == "recurrent" else
             f"{info.arch} is a hybrid model whose recurrent layers keep one state per sequence")
    if n_snapshots:
        return (f"{state}, which llama.cpp can take back at most {n_snapshots} tokens of its last decode, "
                "and no checkpoint was saved before these")
    return (f"{state}, which llama.cpp cannot roll back (it has no rollback for {info.arch}), "
            "and no checkpoint was saved before these tokens")


def mode_refusal(mode: str, arch: str, memory_kind: str, diffusion: bool = False, n_mtp_layers: int = 0) -> str | None:
    """Why a model with this memory cannot run ``mode``, in one sentence (None: it can). Lookahead
    keeps its window and n-grams in several sequences that share the prompt's cells; a recurrent
    state is one per sequence and cannot be shared or cut the way KV cells are. Every mode but
    plain verifies a guess for the next token against the model's prediction there, which a
    diffusion model does not make: it fills a block of positions at once. MTP drafting needs the
    file's own multi-token-prediction blocks."""
    entry = registry.mode(mode)
    if diffusion and entry.verifies:
        return (f"{arch} is a diffusion model, which fills a block of tokens at once instead of predicting each "
                f"next token; {mode} verifies next-token guesses, so only plain decoding runs it")
    if entry.shared_cells and memory_kind != "attention":
        kind = "a recurrent" if memory_kind == "recurrent" else "a hybrid"
        return (f"{mode} needs KV cells that several sequences share, and {arch} is {kind} model whose "
                "state is one per sequence; use prompt lookup, a draft model or Auto")
    if entry.needs == "mtp" and n_mtp_layers <= 0:
        return ("MTP drafting needs a model whose file has MTP layers (NextN blocks, as Qwen3.5 and GLM-4.5 "
                "ship), and this one has none; use a draft model, prompt lookup or Auto")
    return None


def check_draft_vocab(target: LoadedModel, draft: LoadedModel) -> None:
    """Raise :class:`VocabMismatchError` unless ``draft`` can propose tokens for ``target``.

    The rule of llama.cpp's speculative example: same vocabulary type, same BOS/EOS handling,
    sizes within 128 tokens, and identical text for every shared token id from 5 on.
    """
    t, d = target.info, draft.info
    names = f"{Path(d.path).name} (draft) and {Path(t.path).name} (target)"
    if t.vocab_type != d.vocab_type:
        raise VocabMismatchError(f"{names} use different tokenizer types; pick a draft from the same model family")
    if (t.add_bos, t.bos if t.add_bos else -1) != (d.add_bos, d.bos if d.add_bos else -1) or (
        t.add_eos,
        t.eos,
    ) != (d.add_eos, d.eos):
        raise VocabMismatchError(f"{names} use different BOS/EOS tokens; pick a draft from the same model family")
    if abs(t.n_vocab - d.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise VocabMismatchError(
            f"{names} have different vocabularies ({d.n_vocab} vs {t.n_vocab} tokens); "
            "pick a draft from the same model family"
        )
    for token in range(VOCAB_CHECK_START_ID, min(t.n_vocab, d.n_vocab)):
        if target.token_text(token) != draft.token_text(token):
            raise VocabMismatchError(
                f"{names} disagree on token {token} "
                f"({draft.token_text(token)!r} vs {target.token_text(token)!r}); "
                "pick a draft from the same model family"
            )


# Every model load lists the cached models that can draft for it, and checking one opens its
# vocabulary (~0.35 s for Gemma's 262,144 tokens; ~4 s for the ten files a full set-up caches). The
# verdicts are kept in the cache by file pair (each file's identity.file_identity), so a pair is
# checked again only when either file changed.
DRAFT_VERDICTS_FILE = "draft-verdicts.json"


def _still_current(identity: str) -> bool:
    try:
        return file_identity(identity.rsplit("|", 2)[0]) == identity
    except OSError:
        return False


def _read_verdicts(path: Path) -> dict[str, dict[str, str | None]]:
    """The kept verdicts by target and candidate; what a damaged file holds is left out."""
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(index, dict):
        return {}
    return {target: {candidate: why for candidate, why in row.items() if why is None or isinstance(why, str)}
            for target, row in index.items() if isinstance(row, dict)}


def draft_candidates(target: LoadedModel, paths: list[Path]) -> list[tuple[Path, str | None]]:
    """For each path, None if it can draft for ``target``, else the sentence saying why not."""
    index_path = cache_root() / DRAFT_VERDICTS_FILE
    index = _read_verdicts(index_path)
    known = index.setdefault(file_identity(target.info.path), {})
    out: list[tuple[Path, str | None]] = []
    changed = False
    for path in paths:
        try:
            candidate_id = file_identity(path)
        except OSError as exc:  # gone since it was listed
            out.append((path, f"{Path(path).name} cannot be read: {exc.strerror or exc}"))
            continue
        if candidate_id not in known:
            try:
                with LoadedModel(path, vocab_only=True) as candidate:
                    check_draft_vocab(target, candidate)
                known[candidate_id] = None
            except (VocabMismatchError, ModelFileError) as exc:
                known[candidate_id] = str(exc)
            changed = True
        out.append((path, known[candidate_id]))
    if changed:  # what is written keeps only the pairs whose files are still as they were checked
        kept = {t: {c: why for c, why in row.items() if _still_current(c)}
                for t, row in index.items() if _still_current(t)}
        try:
            write_json(index_path, kept, indent=1)
        except OSError:
            pass  # a cache that cannot be written costs the next load the check, nothing else
    return out
