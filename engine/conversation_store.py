"""Conversations on disk: one JSON file per conversation in the user data directory.

One file per conversation (rather than one SQLite database) because a save is a whole, small
document written often from one thread: a temporary file and ``os.replace`` make every save atomic,
a crash can only ever lose the save that was being written, a damaged file costs one conversation,
and the files can be read, copied and diffed by hand. The directory is ``SPECDEC_DATA`` if set,
else platformdirs' user data directory.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from engine.conversation import Conversation
from engine.jsonfile import write_json

STATE_FILE = "state.json"  # which conversation was open last


def data_root() -> Path:
    root = os.environ.get("SPECDEC_DATA")
    if root:
        return Path(root).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("specdec-studio", appauthor=False))


@dataclass(frozen=True)
class ConversationSummary:
    id: str
    title: str
    updated: float
    n_messages: int


class ConversationStore:
    def __init__(self, root: Path | None = None) -> None:
        data = root or data_root()
        self.root = data / "conversations"
        self._state = data / STATE_FILE

    def _path(self, conv_id: str) -> Path:
        if not conv_id or not all(c.isalnum() or c in "-_" for c in conv_id):
            raise ValueError(f"not a conversation id: {conv_id!r}")
        return self.root / f"{conv_id}.json"

    def save(self, conv: Conversation) -> None:
        conv.updated = time.time()
        write_json(self._path(conv.id), conv.to_dict(), durable=True)

    def load(self, conv_id: str) -> Conversation:
        with open(self._path(conv_id), encoding="utf-8") as f:
            return Conversation.from_dict(json.load(f))

    def list(self, query: str = "") -> list[ConversationSummary]:
        """Every readable conversation, the most recently updated first; with ``query``, those
        whose title or any message contains it (case-insensitive)."""
        needle = query.strip().lower()
        found = []
        for path in self.root.glob("*.json"):
            try:
                with open(path, encoding="utf-8") as f:
                    d = json.load(f)
            except (OSError, ValueError):
                continue  # a damaged file costs only itself
            if needle and needle not in str(d.get("title", "")).lower() and not any(
                    needle in str(m.get("content", "")).lower() for m in d.get("messages", [])):
                continue
            found.append(ConversationSummary(str(d.get("id", path.stem)), str(d.get("title") or "New conversation"),
                                             float(d.get("updated", 0.0)), len(d.get("messages", []))))
        return sorted(found, key=lambda s: s.updated, reverse=True)

    def rename(self, conv_id: str, title: str) -> Conversation:
        conv = self.load(conv_id)
        conv.title = title.strip() or conv.title
        self.save(conv)
        return conv

    def delete(self, conv_id: str) -> None:
        self._path(conv_id).unlink(missing_ok=True)
        if self.last_opened() == conv_id:
            self.set_last_opened(None)

    def last_opened(self) -> str | None:
        try:
            with open(self._state, encoding="utf-8") as f:
                conv_id = json.load(f).get("last")
        except (OSError, ValueError, AttributeError):
            return None
        try:
            return conv_id if conv_id and self._path(conv_id).exists() else None
        except ValueError:
            return None

    def set_last_opened(self, conv_id: str | None) -> None:
        write_json(self._state, {"last": conv_id}, durable=True)
