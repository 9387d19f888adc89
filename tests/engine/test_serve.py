"""``specdec serve`` with the real ``openai`` client against a real server on 127.0.0.1 (issue 80):
models, chat (streamed and not) and completions, each token's source, lossless against a single
run; malformed requests refused in one sentence while the server goes on; a client that goes away
frees its slot; four clients at once; a full queue refused at once; the API key."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx
import openai
import pytest
import uvicorn

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.server.app import make_app
from specdec_studio.engine.server.decoder import Decoder
from specdec_studio.engine.session import Session, last_event
from specdec_studio.engine.tuning import probe
from tests.conftest import N_THREADS
from tests.engine.lossless import assert_lossless
from tests.rpc_local import free_port

MODEL = "smollm"
QUESTION = "Write a Python function that adds two numbers, and show how to call it."
QUESTIONS = ["Name a colour.", "Count to five.", QUESTION, "What is a prime number?"]


@contextlib.contextmanager
def serving(path, *, parallel: int = 2, queue: int = 8, api_key: str | None = None, mode: str = "auto",
            cache_mib: int = 0):
    """A server on a free port of 127.0.0.1 for the block: its base URL and its decoder."""
    config = RunConfig(mode=mode, max_tokens=48)
    decoder = Decoder(lambda: Session(path, n_ctx=2048, n_threads=N_THREADS, observe=False,
                                      prompt_cache_mib=cache_mib), config, parallel, queue)
    router = decoder.start()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(router, model_name=MODEL, base=config, api_key=api_key,
                                                    max_tokens_cap=512),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1", router
    finally:
        server.should_exit = True
        thread.join(30)
        decoder.close()


@pytest.fixture(scope="module")
def served(smollm_path):
    with serving(smollm_path) as found:
        yield found


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0], api_key="unused", max_retries=0, timeout=120)


def single_run(session, mode: str, messages, max_tokens: int) -> list[int]:
    return list(last_event(session.run(RunConfig(mode=mode, max_tokens=max_tokens),
                                       session.chat_tokens(messages))).token_ids)


@pytest.fixture(scope="module")
def deviation(smollm_session) -> float:
    """How far a request's logits move when its cells share the cache with another's (engine.parallel:
    a near-tie may flip there, and only there), measured at the end of each question's single run."""
    prompts = [smollm_session.chat_tokens([("user", q)]) for q in QUESTIONS]
    worst = 0.0
    for tokens, question in zip(prompts, QUESTIONS):
        out = single_run(smollm_session, "plain", [("user", question)], 48)
        others = [p for p in prompts if p is not tokens][:2]
        worst = max(worst, probe.shared_cache_deviation(smollm_session, [*tokens, *out[:-1]], others))
    return worst


def assert_as_alone(session, question: str, got: list[int], max_tokens: int, deviation: float) -> None:
    """``got`` is the single run's answer, or parts from it only at a near-tie sharing can flip."""
    alone = single_run(session, "plain", [("user", question)], max_tokens)
    assert_lossless(session, session.chat_tokens([("user", question)]), alone, got, deviation, question)


def test_chat_and_streamed_chat_equal_a_single_run_and_name_each_tokens_source(client, smollm_session, deviation):
    assert [m.id for m in client.models.list().data] == [MODEL]
    messages = [{"role": "user", "content": QUESTION}]
    answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=48, temperature=0)
    tokens = answer.model_extra["specdec"]["tokens"]
    plain = [t["id"] for t in tokens]
    assert_as_alone(smollm_session, QUESTION, plain, 48, deviation)  # lossless, through the slots and HTTP
    assert answer.choices[0].message.content == "".join(t["text"] for t in tokens)
    assert {t["source"] for t in tokens} <= {"sampled", "accepted_ngram", "accepted_draft"}
    assert answer.usage.completion_tokens == 48 and answer.usage.prompt_tokens > 10
    assert answer.choices[0].finish_reason == "length"
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=48, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    # as OpenAI's API: with include_usage the stream ends with a chunk of no choices and the usage
    usage_chunk = chunks.pop()
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == 48
    assert usage_chunk.usage.prompt_tokens == answer.usage.prompt_tokens
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == answer.choices[0].message.content
    assert [t["id"] for c in chunks for t in c.model_extra["specdec"]["tokens"]] == plain
    last = chunks[-1].model_extra["specdec"]
    assert last["figures"]["n_predict"] == 48 and last["usage"]["completion_tokens"] == 48


def test_a_completion_stops_at_its_stop_string(client):
    plain = client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=40, temperature=0)
    text = plain.choices[0].text
    assert "\n" in text.strip("\n")
    stop = text.strip("\n").split("\n")[1][:6]  # a piece of its second line
    cut = client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=40, temperature=0, stop=[stop])
    assert cut.choices[0].text == text[:text.index(stop)] and cut.choices[0].finish_reason == "stop"
    tokens = cut.model_extra["specdec"]["tokens"]
    assert "".join(t["text"] for t in tokens) == cut.choices[0].text


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    ({"messages": "hi"}, 400, "messages must be"),
    ({"messages": []}, 400, "messages must be"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, 400, "temperature"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**9}, 400, "max_tokens"),
    ({"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}, 404, "not served here"),
    ({"messages": [{"role": "user", "content": "hi"}], "specdec": {"mode": "lookahead"}}, 400, "cannot run beside"),
    ({"messages": [{"role": "user", "content": "hi"}], "specdec": {"mode": "lookup", "k": 99}}, 400, "k of at most"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": True}}, 400,
     "only for a request with stream"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": {"include_usage": 1}}, 400,
     "include_usage must be"),
])
def test_a_malformed_request_is_one_sentence_and_the_server_goes_on(served, client, body, status, words):
    url = served[0] + "/chat/completions"
    sent = httpx.post(url, content=body) if isinstance(body, bytes) else httpx.post(url, json=body)
    assert sent.status_code == status
    message = sent.json()["error"]["message"]
    assert words in message and "\n" not in message and "Traceback" not in message
    ok = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert ok.usage.completion_tokens == 4


def test_a_client_that_goes_away_frees_its_slot(served, client):
    url, decoder = served
    with httpx.stream("POST", url + "/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": "Tell me a very long story."}],
                            "max_tokens": 400, "stream": True}) as response:
        for n, _line in enumerate(response.iter_lines()):
            if n >= 6:  # a few chunks streamed
                break
    deadline = time.monotonic() + 10
    while decoder.queue.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert decoder.queue.in_flight == 0  # stopped at the engine's next step, long before 400 tokens
    ok = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert ok.usage.completion_tokens == 4


def test_four_clients_at_once_each_get_their_single_runs_answer(client, smollm_session, deviation):
    questions = QUESTIONS
    answers: dict[str, list[int]] = {}

    def ask(question: str) -> None:
        found = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}],
                                               max_tokens=24, temperature=0)
        answers[question] = [t["id"] for t in found.model_extra["specdec"]["tokens"]]

    threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for question in questions:  # decoded side by side, each as it would be alone
        assert_as_alone(smollm_session, question, answers[question], 24, deviation)


def test_a_full_queue_is_refused_at_once_and_the_key_is_checked(smollm_path):
    with serving(smollm_path, parallel=1, queue=1, api_key="sesame") as (url, decoder):
        keyless = httpx.post(url + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert keyless.status_code == 401 and "API key" in keyless.json()["error"]["message"]
        headers = {"Authorization": "Bearer sesame"}
        with httpx.stream("POST", url + "/chat/completions", headers=headers, timeout=60,
                          json={"messages": [{"role": "user", "content": "Tell me a long story."}],
                                "max_tokens": 200, "stream": True}) as response:
            lines = response.iter_lines()  # kept: a dropped iterator closes the response (a client gone)
            next(lines)  # the first request holds the one place
            refused = httpx.post(url + "/chat/completions", headers=headers,
                                 json={"messages": [{"role": "user", "content": "hi"}]})
            assert decoder.queue.in_flight == 1
        assert refused.status_code == 429 and "busy" in refused.json()["error"]["message"]


def test_a_chats_next_turn_decodes_only_what_is_new(client):
    """A chat client resends the whole conversation each turn: the slot that answered the turn
    before still holds it, so the next request's prompt starts from those cells (usage says how
    many), while a new conversation has nothing cached beyond what it shares."""
    turn = [{"role": "user", "content": "Name a colour."}]
    first = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=12, temperature=0)
    turn += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "Why that one?"}]
    second = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=12, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    # the first turn's prompt at least; its answer too, where the template renders it as it was decoded
    assert first.usage.prompt_tokens <= cached < second.usage.prompt_tokens
    other = client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                           messages=[{"role": "user", "content": "Count to three."}])
    assert other.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens


def test_a_conversation_another_took_the_slot_from_comes_back_from_ram(smollm_path, smollm_session):
    """One slot: a second conversation takes it between two turns of the first, whose cells were
    copied to RAM first; the first's next turn gets them back (usage counts them as cached) and
    answers as its single run does."""
    with serving(smollm_path, parallel=1, cache_mib=64) as (url, router):
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
        turn = [{"role": "user", "content": "Name a colour."}]
        first = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=12, temperature=0)
        client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                       messages=[{"role": "user", "content": "Count to three."}])
        turn += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Why that one?"}]
        second = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=12, temperature=0)
        assert router.session.target.prompt_cache.n_restored == 1
        assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    # one slot: the single run's very cells and kernels
    alone = single_run(smollm_session, "plain", [(m["role"], m["content"]) for m in turn], 12)
    assert [t["id"] for t in second.model_extra["specdec"]["tokens"]] == list(alone)


@pytest.mark.parametrize("flags, words", [
    (["--cache-ram", "-1"], "--cache-ram is MiB of RAM for prompts"),
    (["--parallel", "4", "--queue", "2"], "--queue (2) must be at least --parallel (4)"),
    (["--host", "0.0.0.0"], "pass --api-key KEY"),
])
def test_serve_refuses_bad_flags_in_one_sentence_before_it_opens_the_model(smollm_path, capsys, monkeypatch,
                                                                          flags, words):
    from specdec_studio.engine.cli import main

    def started(*args, **kwargs):
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn, "run", started)  # a flag let through fails here instead of serving
    assert main(["serve", "-m", str(smollm_path), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
