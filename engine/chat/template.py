"""A model's chat template, rendered in a sandbox with a time limit and an output-size limit.

The template is Jinja text from the GGUF's metadata: anyone who made the file wrote it. Jinja's
immutable sandbox keeps it from touching Python objects; this module also bounds what a sandbox
does not: a loop that runs for minutes (checked on every line the template executes, through a
trace function on the rendering thread), an output that grows without end (checked on every
chunk it yields), and one operation that no line check can stop: ``x ** n`` and ``'x' * n`` are
C-level calls that can take minutes or gigabytes, so both operators are intercepted and refused
past a bound on their result. Intercepting them also keeps Jinja from folding them while it
compiles (``{{ 7 ** 100000000 }}`` would otherwise hang ``from_string``, before any limit applies).
A template that breaks a limit, does not compile or fails on a sample conversation is refused
when the model is opened; the model then runs in completion mode.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from specdec_studio.engine.errors import PromptError

TIME_LIMIT_S = 1.0
MAX_OUTPUT_CHARS = 4 << 20  # 4 Mi characters: far more than any context holds
# the largest integer a template's ``*`` or ``**`` may make: computed in microseconds, and far more
# than a date, a count or an index needs
MAX_RESULT_BITS = 4096
# A conversation every chat template must render (no system turn: some templates refuse one).
SAMPLE = (("user", "Hello!"), ("assistant", "Hi! How can I help?"), ("user", "Name one colour."))


class TemplateRefused(PromptError):
    """The chat template does not compile, breaks a limit, or fails on a normal conversation."""


class _OverTime(Exception):
    pass


class ChatTemplate:
    """A compiled chat template. :meth:`render` raises :class:`TemplateRefused` on any failure."""

    def __init__(self, source: str, *, bos_token: str, eos_token: str, name: str = "the model") -> None:
        self.name = name
        self.bos_token, self.eos_token = bos_token, eos_token
        env = _BoundedSandbox(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_from_template
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(source)
        except Exception as exc:  # noqa: BLE001 - any compile failure is the file's fault
            raise TemplateRefused(f"{name}'s chat template does not compile ({_short(exc)})") from None
        self.render(SAMPLE)  # refuse now, not in the middle of a chat

    def render(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        context = {
            "messages": [{"role": role, "content": content} for role, content in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        deadline = time.monotonic() + TIME_LIMIT_S
        limit = MAX_OUTPUT_CHARS + sum(len(c) for _r, c in messages)

        def tracer(frame, event, arg):
            if time.monotonic() > deadline:
                raise _OverTime
            return tracer

        previous = sys.gettrace()
        pieces: list[str] = []
        size = 0
        sys.settrace(tracer)
        try:
            for piece in self._template.generate(**context):
                size += len(piece)
                if size > limit:
                    raise TemplateRefused(f"{self.name}'s chat template writes more than {limit} characters; "
                                          "it is refused")
                pieces.append(piece)
        except _OverTime:
            raise TemplateRefused(f"{self.name}'s chat template ran for more than {TIME_LIMIT_S:.0f} s; "
                                  "it is refused") from None
        except TemplateRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - the sandbox's SecurityError, a template's own error…
            raise TemplateRefused(f"{self.name}'s chat template failed ({_short(exc)})") from None
        finally:
            sys.settrace(previous)
        return "".join(pieces)


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with ``*`` and ``**`` refused where their result would be huge."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator: str, left, right):
        if operator == "**" and _is_int(left) and _is_int(right) and right > 0:
            if right * max(1, abs(left).bit_length()) > MAX_RESULT_BITS:
                raise SecurityError(f"a power of {MAX_RESULT_BITS} bits or more is refused")
        elif operator == "*":
            if _is_int(left) and _is_int(right):
                if abs(left).bit_length() + abs(right).bit_length() > MAX_RESULT_BITS:
                    raise SecurityError(f"a product of {MAX_RESULT_BITS} bits or more is refused")
            else:
                count, seq = (left, right) if _is_int(left) else (right, left)
                if _is_int(count) and isinstance(seq, (str, list, tuple)) and count * len(seq) > MAX_OUTPUT_CHARS:
                    raise SecurityError(f"a repetition longer than {MAX_OUTPUT_CHARS} is refused")
        return super().call_binop(context, operator, left, right)


def model_template(model) -> tuple[ChatTemplate | None, str | None]:
    """A loaded model's own chat template, or None and why it was refused (None, None: it has none)."""
    info = model.info
    if not info.chat_template:
        return None, None
    try:
        return ChatTemplate(info.chat_template, name=Path(info.path).name,
                            bos_token=model.token_text(info.bos).decode("utf-8", "replace"),
                            eos_token=model.token_text(info.eos).decode("utf-8", "replace")), None
    except TemplateRefused as exc:
        return None, f"{exc}; the model opens in completion mode"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _raise_from_template(message: str):
    raise ValueError(str(message))


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]
