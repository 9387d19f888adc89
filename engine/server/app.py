"""The HTTP side of ``specdec serve`` (Starlette): ``GET /v1/models``, ``POST /v1/chat/completions``
and ``POST /v1/completions``, streamed as server-sent events or not. A request is checked
(engine.server.openai_api), tokenised, and queued for the engine thread (engine.server.decoder); its
events come back through an asyncio queue. A client that goes away stops its request and frees its
slot; a full queue is a 429 at once; every refusal is one sentence in the API's error shape."""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from specdec_studio.engine import parallel
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.errors import ConfigError, SpecDecError
from specdec_studio.engine.server import openai_api as api
from specdec_studio.engine.server.decoder import Router
from specdec_studio.engine.server.mailbox import Mailbox
from specdec_studio.engine.server.stops import StopText

DISCONNECT_POLL_S = 0.25  # how often a request that does not stream asks whether its client is still there


class Served:
    """One request on its way: its events from the engine thread, its text past its stop strings."""

    def __init__(self, request: api.Request, n_prompt: int) -> None:
        self.request, self.n_prompt = request, n_prompt
        self.id = api.new_id(request.chat)
        self.created = int(time.time())
        self.events: asyncio.Queue = asyncio.Queue()
        self.stopped = threading.Event()  # the client went away, or a stop string ended the answer
        self.text = StopText(request.stop)
        self.finished: parallel.JobFinished | None = None

    def sink(self, mailbox: Mailbox):
        return lambda event: mailbox.post(self.events, event)

    async def next_event(self):
        event = await self.events.get()
        if isinstance(event, Exception):  # the engine thread failed
            raise event
        return event

    def released(self, event: parallel.JobStep) -> tuple[str, list[dict]]:
        """The text and tokens of ``event`` a client may have now (held back where a stop string may
        begin; cut where one is found, which ends the request)."""
        text, tokens = self.text.feed([(t.text, {"text": t.text, "id": t.id, "source": t.source})
                                       for t in event.tokens])
        if self.text.stopped:
            self.stopped.set()
        return text, tokens

    def ending(self) -> tuple[str, list[dict], str, dict]:
        """What is left to send at the end, the API's finish reason, and the usage."""
        text, tokens = self.text.flush()
        stats = dict(self.finished.stats) if self.finished is not None else {}
        reason = api.finish_reason(self.finished.finish_reason if self.finished else "cancelled", self.text.stopped)
        stats["n_predict"] = self.text.n_tokens  # the tokens the answer holds (a stop string may cut some)
        return text, tokens, reason, stats


def make_app(decoder: Router, *, model_name: str, base: RunConfig, api_key: str | None = None,
             max_body_bytes: int = 1 << 20, max_tokens_cap: int = 4096) -> Starlette:
    """The ASGI app for the model ``decoder`` (a Router) decodes, named ``model_name`` in the API."""
    mailboxes: dict[asyncio.AbstractEventLoop, Mailbox] = {}  # one per loop the app is served on

    def mailbox() -> Mailbox:
        loop = asyncio.get_running_loop()
        found = mailboxes.get(loop)
        if found is None:
            found = mailboxes[loop] = Mailbox(loop)
        return found

    def refuse(error: api.ApiError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status)

    def authorised(request: HttpRequest) -> bool:
        if api_key is None:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode())

    async def models(request: HttpRequest) -> Response:
        if not authorised(request):
            return refuse(api.ApiError(401, "a valid API key is needed (Authorization: Bearer KEY)",
                                       "authentication_error"))
        return JSONResponse({"object": "list", "data": [
            {"id": model_name, "object": "model", "created": 0, "owned_by": "specdec"}]})

    async def completions(request: HttpRequest, chat: bool) -> Response:
        try:
            if not authorised(request):
                raise api.ApiError(401, "a valid API key is needed (Authorization: Bearer KEY)",
                                   "authentication_error")
            body = await read_json(request, max_body_bytes)
            asked = api.parse_request(body, chat=chat, base=base, model=model_name, max_tokens_cap=max_tokens_cap)
            tokens = prompt_tokens(decoder, asked)
            served = Served(asked, len(tokens))
            job = parallel.BatchJob(served.id, tuple(tokens), asked.config.max_tokens, asked.config,
                                    served.stopped.is_set)
            if not decoder.submit(job, served.sink(mailbox())):
                raise api.ApiError(429, f"the server is busy: {decoder.queue.bound} requests are waiting or "
                                        "being answered; try again in a moment", "rate_limit_exceeded")
        except api.ApiError as error:
            return refuse(error)
        if asked.stream:
            return StreamingResponse(stream(served), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await whole(served, request)

    async def stream(served: Served) -> AsyncIterator[str]:
        """The answer as server-sent events; the client's going away (the response cancelled)
        stops the request, which frees its slot at the engine's next step."""
        try:
            while True:
                event = await served.next_event()
                if isinstance(event, parallel.JobStep):
                    text, tokens = served.released(event)
                    if text or tokens:
                        yield _sse(api.chunk(served.request, served.id, served.created, text, tokens))
                elif isinstance(event, parallel.JobFinished):
                    served.finished = event
                    break
            text, tokens, reason, stats = served.ending()
            usage = api.usage(served.n_prompt, stats)
            yield _sse(api.chunk(served.request, served.id, served.created, text, tokens, reason,
                                 {"figures": api.figures(stats), "usage": usage}))
            if served.request.include_usage:
                yield _sse(api.usage_chunk(served.request, served.id, served.created, usage))
            yield "data: [DONE]\n\n"
        finally:
            served.stopped.set()  # nothing more is wanted (a no-op for a request that finished)

    async def whole(served: Served, request: HttpRequest) -> Response:
        texts, all_tokens = [], []
        while True:
            try:
                event = await asyncio.wait_for(served.next_event(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    served.stopped.set()
                    return Response(status_code=499)
                continue
            if isinstance(event, parallel.JobStep):
                text, tokens = served.released(event)
                texts.append(text)
                all_tokens += tokens
            elif isinstance(event, parallel.JobFinished):
                served.finished = event
                break
        text, tokens, reason, stats = served.ending()
        texts.append(text)
        all_tokens += tokens
        return JSONResponse(api.answer(served.request, served.id, "".join(texts), all_tokens, reason,
                                       api.usage(served.n_prompt, stats), api.figures(stats)))

    async def chat_completions(request: HttpRequest) -> Response:
        return await completions(request, chat=True)

    async def text_completions(request: HttpRequest) -> Response:
        return await completions(request, chat=False)

    return Starlette(routes=[
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", text_completions, methods=["POST"]),
    ])


async def read_json(request: HttpRequest, limit: int) -> object:
    """The request's JSON body, refused past ``limit`` bytes before it is all read."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise api.ApiError(413, f"the request body is larger than this server takes ({limit} bytes)")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise api.ApiError(413, f"the request body is larger than this server takes ({limit} bytes)")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise api.ApiError(400, "the request body is not valid JSON") from None


def prompt_tokens(decoder: Router, request: api.Request) -> list[int]:
    """The request's prompt as tokens (a chat in the model's template), and a check that it and its
    answer fit in a slot and its decoding runs beside the others."""
    session = decoder.session
    try:
        parallel.check_job_config(decoder.config, request.config, session)
        if request.chat:
            tokens = session.chat_tokens(list(request.messages))
        else:
            tokens = session.tokenize_prompt(request.prompt)
    except (ConfigError, SpecDecError) as exc:
        raise api.ApiError(400, str(exc)[0].upper() + str(exc)[1:]) from None
    need = len(tokens) + request.config.max_tokens + parallel.slot_k_max(decoder.config) + 1
    if need > decoder.slot_cells:
        raise api.ApiError(400, f"the prompt ({len(tokens)} tokens) and max_tokens ({request.config.max_tokens}) "
                                f"need {need} cells, and each of this server's {decoder.parallel} slots has "
                                f"{decoder.slot_cells}")
    return tokens


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
