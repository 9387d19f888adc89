"""Failures the engine recovers from: set-up errors, Stop in every phase, a broken KV mirror,
drafting past the end, a draft with extra vocabulary, the n-gram pool's size, the CLI's --chat."""

from __future__ import annotations

import json

import numpy as np
import pytest

import specdec_studio.engine.context  # noqa: F401 - engine.context, patched below
from specdec_studio import engine
from specdec_studio.engine.models import catalog
from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.errors import ContextAllocationError, ModelFileError
from specdec_studio.engine.events import RunFinished, RunWarning, StepDone
from specdec_studio.engine.kv.cells import KvMirror
from specdec_studio.engine.models.loading import LoadedModel
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies import speculative
from specdec_studio.engine.strategies.lookahead import NgramPool
from tests.conftest import CODE_PROMPT, N_THREADS


def _finish(events) -> tuple[RunFinished, list]:
    seen = list(events)
    assert isinstance(seen[-1], RunFinished)
    return seen[-1], seen


# ------------------------------------------------------------------ set-up failures
def test_a_failed_set_up_frees_the_model(smollm_path, tmp_path, monkeypatch):
    closed = []
    original = LoadedModel.close

    def close(self):
        closed.append(self.info.path if self.ptr else None)
        original(self)

    monkeypatch.setattr(LoadedModel, "close", close)
    broken = tmp_path / "draft.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelFileError):
        Session(smollm_path, n_ctx=512, n_threads=N_THREADS, draft_path=broken)
    assert str(smollm_path) in closed  # the target was freed, not leaked


def test_a_context_that_cannot_be_made_leaves_the_old_one_usable(smollm_path, monkeypatch):
    with Session(smollm_path, n_ctx=512, n_threads=N_THREADS) as session:
        def refuse(*_args, **_kwargs):
            raise ContextAllocationError("llama.cpp could not create a context of 512 tokens (test)")

        monkeypatch.setattr(engine.context.ModelContext, "create", refuse)
        with pytest.raises(ContextAllocationError):
            session.run(RunConfig(mode="lookahead", max_tokens=8, lookahead=LookaheadParams(4, 3, 4)),
                        session.tokenize_prompt("Hello"))
        final = session.complete(RunConfig(max_tokens=8), "Hello")
        assert final.finish_reason == "length" and len(final.token_ids) == 8


# ------------------------------------------------------------------ Stop in every phase
@pytest.fixture(scope="module")
def self_draft(smollm_path):
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS, draft_path=smollm_path) as session:
        yield session


def test_stop_during_the_draft_models_prompt(self_draft, monkeypatch):
    original = speculative.DraftModelDrafter.begin

    def begin(drafter, prompt):
        self_draft.cancel()  # the draft's prompt decode (>= 32 tokens) sees the abort callback
        original(drafter, prompt)

    monkeypatch.setattr(speculative.DraftModelDrafter, "begin", begin)
    final, _ = _finish(self_draft.run(RunConfig(mode="speculative", max_tokens=32),
                                      self_draft.tokenize_prompt(CODE_PROMPT)))
    assert final.finish_reason == "cancelled"


def test_stop_during_a_draft_proposal(self_draft, monkeypatch):
    original = speculative.DraftModelDrafter.propose
    calls = []

    def propose(drafter, context, k):
        calls.append(k)
        if len(calls) == 3:
            self_draft.cancel()
        return original(drafter, context, k)

    monkeypatch.setattr(speculative.DraftModelDrafter, "propose", propose)
    final, seen = _finish(self_draft.run(RunConfig(mode="speculative", max_tokens=200),
                                         self_draft.tokenize_prompt(CODE_PROMPT)))
    assert final.finish_reason == "cancelled"
    assert len(calls) == 3  # no proposal after the Stop
    steps = [e for e in seen if isinstance(e, StepDone)]
    assert len(steps) <= 4


def test_stop_during_a_long_lookahead_decode(smollm_session, monkeypatch):
    memory = smollm_session.memory
    original = type(memory).decode
    big = []

    def decode(self, batch):
        if batch.n_tokens >= 32 and not big:
            big.append(batch.n_tokens)
            smollm_session.cancel()  # llama.cpp's abort callback ends this decode
        return original(self, batch)

    monkeypatch.setattr(type(memory), "decode", decode)
    config = RunConfig(mode="lookahead", max_tokens=200, lookahead=LookaheadParams(8, 4, 8))
    final, _ = _finish(smollm_session.run(config, smollm_session.tokenize_prompt(CODE_PROMPT)))
    assert big and final.finish_reason == "cancelled"
    assert smollm_session.complete(RunConfig(max_tokens=4), "Hello").finish_reason == "length"


def test_a_stop_before_the_run_starts_is_kept(smollm_session):
    smollm_session.cancel()
    events = smollm_session.run(RunConfig(mode="lookahead", max_tokens=64, lookahead=LookaheadParams(3, 3, 3)),
                                smollm_session.tokenize_prompt("Hello there"), fresh_cancel=False)
    final, seen = _finish(events)
    assert final.finish_reason == "cancelled"
    assert sum(len(e.tokens) for e in seen if isinstance(e, StepDone)) <= 1


# ------------------------------------------------------------------ the KV mirror is a visual aid
def test_a_broken_mirror_is_switched_off_and_decoding_goes_on(smollm_session, monkeypatch):
    config = RunConfig(mode="lookahead", max_tokens=48, lookahead=LookaheadParams(3, 3, 3))
    tokens = smollm_session.tokenize_prompt(CODE_PROMPT)
    expected = smollm_session.complete(config, CODE_PROMPT).token_ids
    original = KvMirror.on_decode
    calls = []

    def on_decode(self, batch):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("KV mirror found no slot for a batch llama.cpp accepted")
        original(self, batch)

    monkeypatch.setattr(KvMirror, "on_decode", on_decode)
    final, seen = _finish(smollm_session.run(config, tokens))
    assert final.token_ids == expected and final.finish_reason == "length"
    warnings = [e for e in seen if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "KV map" in warnings[0].message
    assert not smollm_session.memory.mirror_ok
    # the next run starts from an empty cache, which the mirror knows exactly: it follows again
    monkeypatch.setattr(KvMirror, "on_decode", original)
    _finish(smollm_session.run(RunConfig(max_tokens=4), tokens))
    assert smollm_session.memory.mirror_ok


def test_a_one_sequence_snapshot_never_shares_memory_with_the_mirror(smollm_path):
    """A one-sequence snapshot is a column of the mirror's arrays: it must be a copy, both of the
    cache as it stands and of the step's picture (the cells before a rejected draft was removed)."""
    config = RunConfig(mode="lookup", max_tokens=48, speculative=SpeculativeParams(k=4))
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS) as session:  # one sequence only
        mirror = session.memory.mirror
        pictures = 0
        for event in session.run(config, session.tokenize_prompt(CODE_PROMPT)):
            if not isinstance(event, StepDone):
                continue
            snapshot = session.kv_snapshot(event.step, 1)
            for cells in (mirror.base, mirror.after_last_decode):
                if cells is None:  # a step that removed nothing keeps no picture
                    continue
                assert not np.shares_memory(snapshot.seq_of_cell, cells.seqs)
                assert not np.shares_memory(snapshot.pos_of_cell, cells.pos)
            pictures += mirror.after_last_decode is not None
    assert pictures > 0  # some step rejected a draft, so the picture's half was checked too


# ------------------------------------------------------------------ drafting
def test_no_drafting_past_the_end_of_generation(self_draft):
    """A self-draft agrees with the target on every token, the end of the turn included."""
    tokens = self_draft.chat_tokens([("user", "Name one colour.")])
    final, _ = _finish(self_draft.run(RunConfig(mode="speculative", max_tokens=64,
                                                speculative=SpeculativeParams(k=4)), tokens))
    assert final.finish_reason == "stop"
    assert final.stats["n_drafted"] > 0 and final.stats["accept_rate"] == 1.0


def test_a_draft_with_extra_tokens_proposes_only_ids_the_target_has(monkeypatch):
    n_target, n_draft = 100, 110

    class Memory:
        def decode(self, batch):
            return 0.0

        def prepare_rollback(self, seq_id, n_past, span, decodes=1):
            pass  # a KV cache: nothing to save

    class Batch:
        def clear(self):
            pass

        def add(self, *args):
            return 0

    class Draft:
        ctx, n_vocab, memory, batch = None, n_draft, Memory(), Batch()
        cached: list[int] = []

    def logits(_ctx, _row, n):
        out = np.zeros(n, dtype=np.float32)
        out[105] = 9.0  # the draft's favourite is an id the target does not have
        out[7] = 5.0
        return out

    monkeypatch.setattr(speculative, "logits_row", logits)
    from specdec_studio.engine.sampling import Sampler, SamplingParams

    for params in (SamplingParams(), SamplingParams(temperature=1.0, seed=3)):
        drafter = speculative.DraftModelDrafter(Draft(), Sampler(params), 0.0, n_target)
        monkeypatch.setattr(drafter, "_sync", lambda context: 0)
        draft = drafter.propose([1, 2, 3], 4)
        assert draft.tokens and max(draft.tokens) < n_target
        if draft.dists is not None:
            assert all(q.shape == (n_target,) for q in draft.dists)


# ------------------------------------------------------------------ lookahead's n-gram pool
def test_the_ngram_pool_is_sparse():
    pool = NgramPool(N=5, G=15)
    assert pool.nbytes == 0
    rng = np.random.default_rng(0)
    text = rng.integers(0, 262_144, size=600)
    pool.seed(text.tolist(), 5)
    # a few hundred first tokens, not the vocabulary: 600 × 15 × 4 × 4 bytes at most
    assert pool.nbytes <= 600 * 15 * 4 * 4
    assert pool.count(int(text[0])) >= 1 and pool.count(-5) == 0
    assert pool.continuations(-5).shape == (0, 4)


def test_the_ngram_pool_keeps_g_distinct_continuations_in_a_ring():
    pool = NgramPool(N=3, G=2)
    assert pool.add(1, np.array([2, 3]))
    assert not pool.add(1, np.array([2, 3]))  # already there
    assert pool.add(1, np.array([4, 5]))
    assert pool.add(1, np.array([6, 7]))  # replaces the oldest
    assert sorted(map(tuple, pool.continuations(1).tolist())) == [(4, 5), (6, 7)]
    copy = pool.continuations(1)
    copy[:] = 0
    assert pool.continuations(1).any()  # callers get a copy


# ------------------------------------------------------------------ the CLI
def test_chat_on_a_model_without_a_template_runs_as_completion(capsys):
    from specdec_studio.engine.cli import main

    rc = main(["run", "-m", "gemma", "--chat", "-p", "Once upon a time", "-n", "4", "-t", str(N_THREADS),
               "-c", "256", "--no-predict", "--json"])
    assert rc == 0
    captured = capsys.readouterr()
    assert "no chat template" in captured.err and '"chat": false' in captured.out


def test_json_does_not_hash_the_model_on_every_run(capsys, monkeypatch, tmp_path):
    from specdec_studio.engine.cli import main
    from specdec_studio.engine.models import identity

    monkeypatch.setenv("SPECDEC_MODELS", str(catalog.cache_dir()))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    hashed = []
    original = identity.file_sha256
    monkeypatch.setattr(identity, "file_sha256", lambda path: hashed.append(path) or original(path))
    for _ in range(2):
        assert main(["run", "-p", "Hi", "-n", "2", "-t", str(N_THREADS), "-c", "256", "--no-predict", "--json"]) == 0
    assert len(hashed) == 1


# ------------------------------------------------------------------ chat templates
@pytest.mark.parametrize("source, why", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "ran for more than"),
    ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "writes more than"),
    ("{{ messages.__class__.__mro__[1].__subclasses__() }}", "failed"),
    ("{% for m in messages %}", "does not compile"),
    ("{{ raise_exception('no') }}", "failed"),
    # one C-level operation no line check can stop (issue 79): Jinja folded the first while compiling
    ("{{ (7 ** 100000000) % 10 }}", "a power of 4096 bits or more is refused"),
    ("{{ 'x' * 8000000000 }}", "a repetition longer than"),
    ("{% set n = 10 ** 600 %}{{ n * n * n }}", "a product of 4096 bits or more is refused"),
])
def test_a_hostile_chat_template_is_refused(source, why):
    from specdec_studio.engine.chat.template import ChatTemplate, TemplateRefused

    with pytest.raises(TemplateRefused, match=why):
        ChatTemplate(source, bos_token="<s>", eos_token="</s>", name="evil.gguf")


def test_a_model_with_a_refused_template_opens_in_completion_mode(smollm_path, monkeypatch):
    import dataclasses

    from specdec_studio.engine.errors import PromptError

    original = LoadedModel._read_info

    def evil_info(self, vocab_only, position_rows):
        info = original(self, vocab_only, position_rows)
        return dataclasses.replace(info, chat_template="{% for i in range(10**5) %}{% for j in range(10**5) %}"
                                                       "{% endfor %}{% endfor %}")

    monkeypatch.setattr(LoadedModel, "_read_info", evil_info)
    with Session(smollm_path, n_ctx=256, n_threads=N_THREADS) as session:
        assert not session.has_chat_template and "ran for more than" in session.template_problem
        with pytest.raises(PromptError, match="completion mode"):
            session.chat_tokens([("user", "hi")])
        assert session.complete(RunConfig(max_tokens=4), "Once upon a time").finish_reason == "length"


def test_a_gguf_whose_template_would_hang_runs_plain_and_refuses_chat(smollm_path, tmp_path):
    """Issue 79's reproduction: a GGUF whose chat template computes 7 ** 100000000 hung even
    ``specdec run -p hi -n 2`` (no chat) past 60 s, in Jinja's constant folding at compile time."""
    import subprocess
    import sys

    from specdec_studio.engine.models.rewrite import rewrite_gguf

    evil = rewrite_gguf(smollm_path, tmp_path / "evil.gguf", field_value=lambda key, value: (
        "{{ (7 ** 100000000) % 10 }}" if key == "tokenizer.chat_template" else value))
    # asked to chat, it runs the prompt plain (the model opened in completion mode) and says why
    chat = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "run", "-m", str(evil), "-t",
                           str(N_THREADS), "-c", "256", "-n", "2", "--no-predict", "--chat", "-p", "hi", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert chat.returncode == 0 and '"chat": false' in chat.stdout and "Traceback" not in chat.stderr, chat.stderr
    assert "a power of 4096 bits or more is refused" in chat.stderr


def test_the_real_template_renders_as_before(smollm_session):
    text = smollm_session.require_template().render([("user", "Hello")])
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")


# ------------------------------------------------------------------ memory budget
@pytest.mark.parametrize("key", ["default", "gemma"])
def test_the_budget_counts_what_llama_cpp_allocates(key):
    """The KV estimate equals llama.cpp's own KV buffers (Gemma-3's 256-wide heads included) and
    the compute buffers are the ones llama.cpp reported."""
    from specdec_studio.engine import native

    lines: list[str] = []
    sink = lambda _level, line: lines.append(line)  # noqa: E731
    native.add_log_sink(sink)
    try:
        session = Session(catalog.known_path(key), n_ctx=1024, n_threads=N_THREADS)
    finally:
        native.remove_log_sink(sink)
    with session:
        kv_reported = sum(float(line.split("=")[1].split()[0]) for line in lines if "KV buffer size =" in line)
        compute_reported = sum(float(line.split("=")[1].split()[0]) for line in lines
                               if "compute buffer size =" in line)
        budget = session.context_budget(1024, session.model.info)
        assert budget["kv"] / 2**20 == pytest.approx(kv_reported, rel=0.01)
        assert budget["compute"] / 2**20 == pytest.approx(compute_reported, rel=0.01)


def test_a_context_that_does_not_fit_names_what_to_lower(smollm_path, monkeypatch):
    from specdec_studio import engine

    monkeypatch.setattr(engine.context, "_available_memory_bytes", lambda: 150 << 20)
    with pytest.raises(ContextAllocationError, match="KV cache .* compute buffers .* lower the context size"):
        Session(smollm_path, n_ctx=8192, n_threads=N_THREADS)


@pytest.mark.parametrize("mode_args", [["--mode", "speculative", "-md", "default"], ["--mode", "lookahead"]],
                         ids=["draft-model", "lookahead"])
def test_ctrl_c_ends_a_cli_run_cleanly(mode_args):
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec_studio.engine.cli",
            "run",
            "-p",
            CODE_PROMPT,
            "-n",
            "4000",
            "-c",
            "8192",
            "-t",
            str(N_THREADS),
            "--no-predict",
            *mode_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.read(40)  # it is generating
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "finish    = cancelled" in err


# Ctrl+C arrives while llama.cpp loads the model: the load is not interrupted (native code), the
# run that follows ends at once, cleanly.
CTRL_C_DURING_LOAD = """
import os, signal, sys
from specdec_studio import engine
import specdec_studio.engine.session  # noqa: F401 - loads the module named below
from specdec_studio.engine.cli import main

class LoadedWhileCtrlC(engine.session.LoadedModel):
    def __init__(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        super().__init__(*args, **kwargs)

engine.session.LoadedModel = LoadedWhileCtrlC
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["run", "chat"])
def test_ctrl_c_during_the_model_load_ends_the_cli_cleanly(command, tmp_path):
    import os
    import subprocess
    import sys

    args = ["-p", "Hello there", "-n", "64", "-t", str(N_THREADS), "-c", "512"]
    if command == "run":
        args += ["--no-predict", "--json"]
    done = subprocess.run([sys.executable, "-c", CTRL_C_DURING_LOAD, command, *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, env={**os.environ, "SPECDEC_DATA": str(tmp_path)})
    assert "Traceback" not in done.stderr
    if command == "run":  # the run that follows the load ends at once, with its figures
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["finish_reason"] == "cancelled"
    else:  # a chat is left at once, and -p saves no empty "interrupted" answer
        assert done.returncode == 130 and done.stderr.strip().splitlines()[-1] == "specdec: interrupted"
        assert not list(tmp_path.rglob("*.json"))
