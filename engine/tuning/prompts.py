"""Prompt sets: the shipped ``resources/prompts/*.jsonl`` (one file per category) or a user's file.

A JSONL line is ``{"id": …, "category": …, "prompt": "…"}`` or, for a conversation,
``{"id": …, "category": …, "messages": [{"role": …, "content": …}, …]}`` ending with a user turn.
A plain text file is one prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specdec_studio.engine.errors import PromptError, not_utf8

CATEGORIES: dict[str, str] = {
    "chat": "multi-turn chat",
    "code_generation": "code generation",
    "code_editing": "code editing",
    "summarisation": "summarisation",
    "translation": "translation",
    "maths": "maths reasoning",
    "qa_passage": "question answering over a passage",
    "rag": "answering over several passages",
    "extraction": "extraction to JSON",
    "creative": "creative writing",
    # ordinary chat, where little of the answer repeats the prompt or itself
    "writing": "open writing",
    "roleplay": "roleplay",
    "reasoning": "multi-step reasoning",
    "stem": "STEM explanations",
    "humanities": "humanities essays",
}


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str = ""
    messages: tuple[tuple[str, str], ...] = ()  # (role, content); empty for a single prompt

    def as_messages(self) -> list[tuple[str, str]]:
        return list(self.messages) if self.messages else [("user", self.text)]

    def as_text(self) -> str:
        """The prompt as completion text, for a model without a chat template."""
        if not self.messages:
            return self.text
        return "\n\n".join(f"{role.capitalize()}: {content}" for role, content in self.messages) + "\n\nAssistant:"


def _parse_line(line: str, where: str, n: int) -> Prompt:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise PromptError(f"{where}, line {n}: not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise PromptError(f"{where}, line {n}: expected an object with a prompt or messages")
    pid = str(row.get("id", f"{Path(where).stem}-{n}"))
    category = str(row.get("category", "custom"))
    if isinstance(row.get("prompt"), str) and row["prompt"].strip():
        return Prompt(pid, category, row["prompt"])
    messages = row.get("messages")
    if isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        return Prompt(pid, category, messages=tuple((m["role"], m["content"]) for m in messages))
    raise PromptError(f"{where}, line {n}: needs a non-empty \"prompt\" or a \"messages\" list")


def parse_jsonl(text: str, where: str) -> list[Prompt]:
    prompts = [_parse_line(line, where, n) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not prompts:
        raise PromptError(f"{where} holds no prompts")
    return prompts


def load_file(path: str | Path) -> list[Prompt]:
    """A JSONL prompt set, or a text file holding one prompt."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptError(not_utf8(path.name, exc)) from None
    if path.suffix == ".jsonl":
        return parse_jsonl(text, path.name)
    if not text.strip():
        raise PromptError(f"{path.name} is empty")
    return [Prompt(path.stem, "custom", text)]


def shipped(categories: Sequence[str] | None = None, per_category: int | None = None) -> list[Prompt]:
    """The shipped prompt sets, in :data:`CATEGORIES` order; ``per_category`` takes the first n of each."""
    folder = resources.files("specdec_studio.resources") / "prompts"
    wanted = list(categories) if categories else list(CATEGORIES)
    out: list[Prompt] = []
    for category in wanted:
        if category not in CATEGORIES:
            raise PromptError(f"unknown prompt category {category!r}; choose from {', '.join(CATEGORIES)}")
        rows = parse_jsonl((folder / f"{category}.jsonl").read_text(encoding="utf-8"), f"{category}.jsonl")
        out.extend(rows[:per_category] if per_category else rows)
    return out
