"""The OpenAI API's requests, checked, and its answers, shaped: plain functions over plain data, so the
HTTP layer (engine.server.app) only moves bytes. A request that is not one gets an ApiError: a
status and one sentence, in the API's error shape.

Extension fields live under ``"specdec"``: a request may choose its decoding (``{"mode": "lookup",
"k": 4}``); an answer (and each streamed chunk) says per token where it came from (``sampled``, or
accepted from a draft) and, at the end, the run's figures, so a client can colour tokens as the
window does."""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from dataclasses import dataclass

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.sampling import SamplingParams
from specdec_studio.engine.strategies import registry

MAX_STOP_STRINGS = 4  # as OpenAI's API allows
MAX_STOP_LENGTH = 200
ROLES = ("system", "user", "assistant")


class ApiError(Exception):
    """A request refused: its HTTP status and the sentence that says why."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "code": self.status}}


@dataclass(frozen=True)
class Request:
    """One request, checked: what to decode (chat messages or a completion prompt) and how."""

    chat: bool
    messages: tuple[tuple[str, str], ...]  # (role, content), for a chat
    prompt: str  # for a completion
    config: RunConfig
    stream: bool
    stop: tuple[str, ...]
    model: str
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage alone


def parse_request(body: object, *, chat: bool, base: RunConfig, model: str, max_tokens_cap: int) -> Request:
    """``body`` (the request's JSON) as a Request; ApiError for anything the API or this server
    refuses. ``base``: the server's run settings, which a request's fields and ``specdec`` replace."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    asked_model = body.get("model", model)
    if not isinstance(asked_model, str):
        raise ApiError(400, "model must be text")
    if asked_model not in (model, "", "default"):
        raise ApiError(404, f"the model {asked_model[:80]!r} is not served here; GET /v1/models names {model!r}",
                       "model_not_found")
    messages: tuple[tuple[str, str], ...] = ()
    prompt = ""
    if chat:
        messages = _messages(body.get("messages"))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ApiError(400, "prompt must be non-empty text")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", base.max_tokens))
    if not _is_int(max_tokens) or not 1 <= max_tokens <= max_tokens_cap:
        raise ApiError(400, f"max_tokens must be a whole number from 1 to {max_tokens_cap}, got {_shown(max_tokens)}")
    sampling = _sampling(body, base.sampling)
    config = dataclasses.replace(base, max_tokens=max_tokens, sampling=sampling)
    config = _specdec(body.get("specdec"), config)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false")
    return Request(chat, messages, prompt, config, stream, _stop(body.get("stop")), model,
                   _include_usage(body.get("stream_options"), stream))


def _messages(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ApiError(400, f"messages[{i}] must be an object with a role and a content")
        role, content = message.get("role"), message.get("content")
        if role == "developer":  # the API's newer name for a system message
            role = "system"
        if role not in ROLES:
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}, got {_shown(role)}")
        if isinstance(content, list):  # content parts: the text ones, joined (no images here)
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise ApiError(400, f"messages[{i}].content holds parts other than text; only text is served here")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be text")
        out.append((role, content))
    if out[-1][0] == "assistant":
        raise ApiError(400, "the last message must be the user's (or the system's), not an answer to continue")
    if not out[-1][1].strip():
        raise ApiError(400, "the last message is empty")
    return tuple(out)


def _sampling(body: dict, base: SamplingParams) -> SamplingParams:
    temperature = body.get("temperature", base.temperature)
    top_p = body.get("top_p", base.top_p)
    seed = body.get("seed", base.seed)
    if not _is_number(temperature) or not 0.0 <= temperature <= 2.0:
        raise ApiError(400, f"temperature must be a number from 0 to 2, got {_shown(temperature)}")
    if not _is_number(top_p) or not 0.0 < top_p <= 1.0:
        raise ApiError(400, f"top_p must be a number above 0 and at most 1, got {_shown(top_p)}")
    if seed is not None and (not _is_int(seed) or not 0 <= seed < 2**63):
        raise ApiError(400, f"seed must be a whole number of 0 or more, got {_shown(seed)}")
    return dataclasses.replace(base, temperature=float(temperature), top_p=float(top_p),
                               seed=base.seed if seed is None else seed)


def _specdec(value: object, config: RunConfig) -> RunConfig:
    """The request's own decoding: ``{"mode": ..., "k": ...}`` (k: the draft's length)."""
    if value is None:
        return config
    if not isinstance(value, dict):
        raise ApiError(400, "specdec must be an object such as {\"mode\": \"lookup\", \"k\": 4}")
    unknown = set(value) - {"mode", "k"}
    if unknown:
        raise ApiError(400, f"specdec has no field {sorted(unknown)[0]!r}; it takes mode and k")
    try:
        if "mode" in value:
            if not isinstance(value["mode"], str):
                raise ApiError(400, "specdec.mode must be text")
            config = dataclasses.replace(config, mode=registry.mode(value["mode"]).name)
        if "k" in value:
            if not _is_int(value["k"]):
                raise ApiError(400, f"specdec.k must be a whole number, got {_shown(value['k'])}")
            config = dataclasses.replace(config, speculative=dataclasses.replace(config.speculative, k=value["k"]))
        config.validate()
    except ConfigError as exc:
        raise ApiError(400, f"specdec: {exc}") from None
    return config


def _include_usage(value: object, stream: bool) -> bool:
    if value is None:
        return False
    if not stream:
        raise ApiError(400, "stream_options is only for a request with stream: true")
    if not isinstance(value, dict) or set(value) - {"include_usage"}:
        raise ApiError(400, "stream_options must be an object such as {\"include_usage\": true}")
    include = value.get("include_usage", False)
    if not isinstance(include, bool):
        raise ApiError(400, "stream_options.include_usage must be true or false")
    return include


def _stop(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_LENGTH for s in stops)):
        raise ApiError(400, f"stop must be text or a list of at most {MAX_STOP_STRINGS} non-empty texts "
                            f"of at most {MAX_STOP_LENGTH} characters")
    return tuple(stops)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: object) -> str:
    return repr(value)[:40]


# ------------------------------------------------------------------------------------ answers
def new_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]


def token_sources(tokens) -> list[dict]:
    """Each token's text and where it came from (engine.events.TokenInfo), for the extension."""
    return [{"text": t.text, "id": t.id, "source": t.source} for t in tokens]


def chunk(request: Request, answer_id: str, created: int, text: str, tokens: list[dict],
          finish_reason: str | None = None, specdec: dict | None = None) -> dict:
    """One streamed chunk: the new text, and (extension) its tokens' sources."""
    extension = {"tokens": tokens, **(specdec or {})}
    if request.chat:
        delta = {"content": text} if text or finish_reason is None else {}
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        kind = "text_completion"
    return {"id": answer_id, "object": kind, "created": created, "model": request.model, "choices": [choice],
            "specdec": extension}


def usage_chunk(request: Request, answer_id: str, created: int, usage: dict) -> dict:
    """The last chunk a stream sends when ``stream_options.include_usage`` asked: no choices, the usage."""
    kind = "chat.completion.chunk" if request.chat else "text_completion"
    return {"id": answer_id, "object": kind, "created": created, "model": request.model, "choices": [],
            "usage": usage}


def answer(request: Request, answer_id: str, text: str, tokens: list[dict], finish_reason: str, usage: dict,
           figures: dict) -> dict:
    """The whole answer of a request that did not stream."""
    if request.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        kind = "text_completion"
    return {"id": answer_id, "object": kind, "created": int(time.time()), "model": request.model,
            "choices": [choice], "usage": usage, "specdec": {"tokens": tokens, "figures": figures}}


def usage(n_prompt: int, stats: dict) -> dict:
    """The API's token counts, and (extension) what drafting proposed and verification accepted."""
    completion = int(stats.get("n_predict", 0))
    return {"prompt_tokens": n_prompt, "completion_tokens": completion, "total_tokens": n_prompt + completion,
            # the prompt's start its slot still held from the request before (not decoded again)
            "prompt_tokens_details": {"cached_tokens": int(stats.get("n_prompt_cached", 0))},
            "specdec": {"drafted": int(stats.get("n_drafted", 0)), "accepted": int(stats.get("n_accept", 0))}}


def finish_reason(engine_reason: str, stopped_by_string: bool) -> str:
    """The API's finish reason for the engine's (engine.strategies.common's FINISH_*)."""
    if stopped_by_string:
        return "stop"
    return {"length": "length", "context_full": "length"}.get(engine_reason, "stop")


def figures(stats: dict) -> dict:
    """The run's figures a client may show, from its stats."""
    keys = ("n_predict", "n_drafted", "n_accept", "steps", "tokens_per_step", "tokens_per_second", "t_generate_s")
    return {k: stats[k] for k in keys if k in stats}
