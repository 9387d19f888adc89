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

from specdec_studio.engine.chat.conversation import Conversation
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.jsonfile import write_json

STATE_FILE = "state.json"  # which conversation was open last


def data_root() -> Path:
    root = os.environ.get("SPECDEC_DATA")
    if root:
        return Path(root).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("specdec-studio", appauthor=False))


class DamagedConversation(SpecDecError):
    """A conversation file that cannot be read as a conversation (it costs only itself)."""


# everything reading a file of the wrong shape can raise: a damaged file is one sentence, never a traceback
_DAMAGE = (OSError, ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


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
        """The conversation ``conv_id``; a :class:`DamagedConversation` (one sentence) if its file
        is missing or is not a conversation."""
        return self._read(self._path(conv_id))

    def _read(self, path: Path) -> Conversation:
        try:
            with open(path, encoding="utf-8") as f:
                conv = Conversation.from_dict(json.load(f))
            self._path(conv.id)  # an id that could not be saved again (a crafted file) is damage too
            return conv
        except FileNotFoundError:
            raise DamagedConversation(f"the conversation {path.stem} no longer exists") from None
        except _DAMAGE as exc:
            raise DamagedConversation(f"the conversation file {path.name} is damaged "
                                      f"({type(exc).__name__}: {str(exc)[:80]})") from None

    def list(self, query: str = "") -> list[ConversationSummary]:
        """Every readable conversation, the most recently updated first; with ``query``, those
        whose title or any message contains it (case-insensitive)."""
        return self.scan(query)[0]

    def scan(self, query: str = "") -> tuple[list[ConversationSummary], list[str]]:
        """:meth:`list`, and the names of the files skipped because they are damaged (a damaged
        file costs only itself)."""
        needle = query.strip().lower()
        found, damaged = [], []
        for path in sorted(self.root.glob("*.json")):
            try:
                conv = self._read(path)
            except DamagedConversation:
                damaged.append(path.name)
                continue
            if needle and needle not in conv.title.lower() and not any(
                    needle in m.content.lower() for m in conv.messages):
                continue
            found.append(ConversationSummary(conv.id, conv.title or "New conversation", conv.updated,
                                             len(conv.messages)))
        return sorted(found, key=lambda s: s.updated, reverse=True), damaged

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
