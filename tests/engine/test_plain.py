"""Plain decoding on real models: equal to llama-cpp-python's own greedy output, stops, cancel."""

from __future__ import annotations

import ctypes

import llama_cpp as llama
import pytest
from llama_cpp import Llama

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.events import RunFinished, RunStarted, StepDone
from specdec_studio.engine.sampling import SamplingParams
from specdec_studio.engine.session import Session
from tests.conftest import CODE_PROMPT, N_THREADS, PROSE_PROMPT

N_TOKENS = 128


def llama_cpp_python_greedy(path, prompt_tokens: list[int], n: int) -> list[int]:
    llm = Llama(str(path), n_ctx=1024, n_batch=512, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                flash_attn=True, verbose=False)
    try:
        out: list[int] = []
        for token in llm.generate(prompt_tokens, temp=0.0, repeat_penalty=1.0, top_k=1):
            if llm.token_eos() == token or token in (llm._model.token_eot(),):
                break
            out.append(token)
            if len(out) == n:
                break
        return out
    finally:
        llm.close()


# Gemma on the prose prompt under -m slow (its 262,144-row output layer makes each run 7 s here)
@pytest.mark.parametrize("model_fixture, prompt", [
    pytest.param("smollm_path", PROSE_PROMPT, id="default-prose"),
    pytest.param("smollm_path", CODE_PROMPT, id="default-code"),
    pytest.param("gemma_path", PROSE_PROMPT, id="gemma-prose", marks=pytest.mark.slow),
    pytest.param("gemma_path", CODE_PROMPT, id="gemma-code"),
])
def test_plain_greedy_equals_llama_cpp_python(request, model_fixture, prompt):
    path = request.getfixturevalue(model_fixture)
    with Session(path, n_ctx=1024, n_threads=N_THREADS) as session:
        tokens = session.tokenize_prompt(prompt)
        result = session.complete(RunConfig(max_tokens=N_TOKENS), prompt)
    reference = llama_cpp_python_greedy(path, tokens, N_TOKENS)
    assert len(result.token_ids) == N_TOKENS, result.finish_reason
    assert list(result.token_ids) == reference


def test_events_stream_one_token_per_step(smollm_session):
    events = list(smollm_session.run(RunConfig(max_tokens=16), smollm_session.tokenize_prompt(PROSE_PROMPT)))
    assert isinstance(events[0], RunStarted)
    assert isinstance(events[-1], RunFinished)
    steps = [e for e in events if isinstance(e, StepDone)]
    assert len(steps) == 16
    assert all(len(s.tokens) == 1 and s.tokens[0].source == "sampled" for s in steps)
    # the streamed text is llama.cpp's own detokenisation of the ids (not only the final text,
    # which comes from the same piece cache as the stream: a wrong cached piece would be in both)
    assert "".join(t.text for s in steps for t in s.tokens) == events[-1].text
    assert events[-1].text == llama_cpp_text(smollm_session, events[-1].token_ids)
    stats = events[-1].stats
    assert stats["n_predict"] == 16 and stats["steps"] == 16
    assert stats["n_drafted"] == 0 and stats["n_accept"] == 0
    assert stats["tokens_per_second"] > 0 and stats["t_encode_s"] > 0


def test_max_tokens_and_context_full(smollm_path):
    with Session(smollm_path, n_ctx=32, n_threads=N_THREADS) as session:
        prompt = session.tokenize_prompt(PROSE_PROMPT)
        result = session.complete(RunConfig(max_tokens=500), PROSE_PROMPT)
    assert result.finish_reason == "context_full"
    # every cell holds a token; the last sampled token needs no cell of its own
    assert len(prompt) + len(result.token_ids) == 32 + 1


def test_chat_stops_at_end_of_turn(smollm_session):
    from specdec_studio.engine.chat.turns import Chat

    chat = Chat(smollm_session)
    events = list(chat.send(RunConfig(max_tokens=200), "Say hello in one word."))
    final = [e for e in events if isinstance(e, RunFinished)][-1]
    assert final.finish_reason == "stop"
    messages = chat.conversation.messages
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[-1].content == final.text
    assert "<|im_end|>" not in final.text
    # the answer keeps the model's own ids, its end-of-turn token included
    assert messages[-1].produced == [*final.token_ids, final.end_token]
    assert smollm_session.vocab.is_eog(final.end_token)


def test_chat_template_rendering(smollm_session):
    text = smollm_session.require_template().render([("user", "hi")])
    assert "<|im_start|>user\nhi<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")


def test_sampling_with_seed_is_reproducible(smollm_session):
    config = RunConfig(max_tokens=40, sampling=SamplingParams(temperature=0.9, top_k=40, top_p=0.95, seed=1234))
    a = smollm_session.complete(config, PROSE_PROMPT)
    b = smollm_session.complete(config, PROSE_PROMPT)
    other = smollm_session.complete(
        RunConfig(max_tokens=40, sampling=SamplingParams(temperature=0.9, top_k=40, top_p=0.95, seed=99)), PROSE_PROMPT
    )
    greedy = smollm_session.complete(RunConfig(max_tokens=40), PROSE_PROMPT)
    assert a.token_ids == b.token_ids
    assert a.token_ids != other.token_ids
    assert a.token_ids != greedy.token_ids


def test_temperature_zero_is_greedy(smollm_session):
    greedy = smollm_session.complete(RunConfig(max_tokens=40), PROSE_PROMPT)
    zero = smollm_session.complete(
        RunConfig(max_tokens=40, sampling=SamplingParams(temperature=0.0, top_k=5, top_p=0.5, seed=7)), PROSE_PROMPT
    )
    assert zero.token_ids == greedy.token_ids


def test_cancel_ends_within_one_step(smollm_session):
    events = smollm_session.run(RunConfig(max_tokens=100), smollm_session.tokenize_prompt(PROSE_PROMPT))
    steps_after_cancel = 0
    cancelled = False
    final = None
    for event in events:
        if isinstance(event, StepDone):
            if cancelled:
                steps_after_cancel += 1
            elif event.step == 5:
                smollm_session.cancel()
                cancelled = True
        if isinstance(event, RunFinished):
            final = event
    assert final is not None and final.finish_reason == "cancelled"
    assert steps_after_cancel == 0
    assert len(final.token_ids) == 6
    # the session is usable again after a cancel
    assert smollm_session.complete(RunConfig(max_tokens=4), PROSE_PROMPT).finish_reason == "length"


def llama_cpp_text(session, ids) -> str:
    """``ids`` as llama.cpp's llama_detokenize writes them (no cache of ours in between)."""
    tokens = (llama.llama_token * len(ids))(*ids)
    buffer = ctypes.create_string_buffer(64 * len(ids) + 16)
    n = llama.llama_detokenize(session.vocab.ptr, tokens, len(ids), buffer, len(buffer), False, False)
    assert n >= 0
    return buffer.raw[:n].decode("utf-8", errors="replace")
