"""Conversations on disk: one JSON file per conversation in the user data directory.

One file per conversation (rather than one SQLite database) because a save is a whole, small
document written often from one thread: a temporary file and ``os.replace`` make every save atomic,
a crash can only ever lose the save that was being written, a damaged file costs one conversation,
and the files can be read, copied and diffed by hand. The directory is ``SPECDEC_DATA`` if set,
else platformdirs' user data directory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec_studio.engine.chat.conversation import Conversation, new_id
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.jsonfile import write_json
from specdec_studio.engine.paths import data_root

STATE_FILE = "state.json"  # which conversation was open last


class DamagedConversation(SpecDecError):
    """A conversation file that cannot be read as a conversation (it costs only itself)."""


# everything reading a file of the wrong shape can raise: a damaged file is one sentence, never a traceback
_DAMAGE = (OSError, ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


class ListingStopped(SpecDecError):
    """Stop ended a listing part-way; the files it read stay known, so the next one reads the rest."""


@dataclass(frozen=True)
class ConversationSummary:
    id: str
    title: str
    updated: float
    n_messages: int


class ConversationStore:
    """The conversations in one folder, each known by its file's name (never by the id written
    inside, which a hand copy repeats).

    Two writers of one file (the app and ``specdec chat --load``) notice each other: the store
    remembers each file as it last read or wrote it (inode, size, mtime: every save replaces the
    file, so another writer's save always changes the inode), and a save that finds the file
    changed since writes the conversation as a new one instead, and says so."""

    def __init__(self, root: Path | None = None) -> None:
        data = root or data_root()
        self.root = data / "conversations"
        self._state = data / STATE_FILE
        self._seen: dict[str, tuple[int, int, int] | None] = {}  # id -> the file as this store left it
        # what a listing needs of each file, kept while the file stays as it was (its stamp): a chat
        # turn changes one file, so the sidebar's listing after it (and every search) reads only
        # that one, not every saved conversation again. path -> (stamp, summary or None if damaged,
        # the title and messages in lower case, for search)
        self._listed: dict[Path, tuple[tuple | None, ConversationSummary | None, str]] = {}

    def _path(self, conv_id: str) -> Path:
        if not conv_id or not all(c.isalnum() or c in "-_" for c in conv_id):
            raise ValueError(f"not a conversation id: {conv_id!r}")
        return self.root / f"{conv_id}.json"

    def save(self, conv: Conversation) -> str:
        """Write ``conv`` atomically; return "" or, when another writer changed its file since this
        store last read or wrote it, the sentence saying it was saved as a new conversation."""
        path = self._path(conv.id)
        note = ""
        if conv.id in self._seen and _stamp(path) not in (self._seen[conv.id], None):
            old_id = conv.id
            conv.id = new_id()
            path = self._path(conv.id)
            note = (f"the conversation {old_id} was changed elsewhere (another window or specdec chat); "
                    f"this one is now saved as a new conversation, {conv.id}")
        elif conv.id not in self._seen and path.exists():
            conv.id = new_id()  # a file this store never read has the id: it is someone else's
            path = self._path(conv.id)
        conv.updated = time.time()
        write_json(path, conv.to_dict(), durable=True)
        self._seen[conv.id] = _stamp(path)
        return note

    def load(self, conv_id: str) -> Conversation:
        """The conversation ``conv_id``; a :class:`DamagedConversation` (one sentence) if its file
        is missing or is not a conversation."""
        return self._read(self._path(conv_id))

    def _read(self, path: Path, *, remember: bool = True) -> Conversation:
        """The conversation in ``path``; with ``remember``, this store takes the file as it reads
        it now for its own (its next save overwrites it). A listing reads without taking: a turn
        another writer saved since this store's own read must still be noticed at its save."""
        try:
            self._path(path.stem)  # a file named as no conversation could be is not one
        except ValueError:
            raise DamagedConversation(f"{path.name} is not named as a conversation file "
                                      "(letters, digits, - and _ only)") from None
        try:
            stamp = _stamp(path)
            with open(path, encoding="utf-8") as f:
                conv = Conversation.from_dict(json.load(f))
            conv.id = path.stem  # the file's name is the conversation: a hand copy is its own
            if remember:
                self._seen[conv.id] = stamp
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

    def scan(self, query: str = "", stopped: Callable[[], bool] = lambda: False,
             ) -> tuple[list[ConversationSummary], list[str]]:
        """:meth:`list`, and the names of the files skipped because they are damaged (a damaged
        file costs only itself). Only files changed since the last listing are read; ``stopped()``
        is asked before each file read (ListingStopped: a Stop ends a long first listing at once)."""
        needle = query.strip().lower()
        found, damaged = [], []
        paths = sorted(self.root.glob("*.json"))
        for gone in self._listed.keys() - set(paths):
            del self._listed[gone]
        for path in paths:
            stamp = _stamp(path)
            entry = self._listed.get(path)
            if entry is None or entry[0] != stamp:
                if stopped():
                    raise ListingStopped("listing the saved conversations stopped; the next listing reads the rest")
                entry = self._listed[path] = (stamp, *self._summary(path))
            _, summary, text = entry
            if summary is None:
                damaged.append(path.name)
            elif not needle or needle in text:
                found.append(summary)
        return sorted(found, key=lambda s: s.updated, reverse=True), damaged

    def _summary(self, path: Path) -> tuple[ConversationSummary | None, str]:
        try:
            conv = self._read(path, remember=False)
        except DamagedConversation:
            return None, ""
        text = "\0".join([conv.title, *(m.content for m in conv.messages)]).lower()
        return ConversationSummary(conv.id, conv.title or "New conversation", conv.updated, len(conv.messages)), text

    def rename(self, conv_id: str, title: str) -> Conversation:
        conv = self.load(conv_id)
        conv.title = title.strip() or conv.title
        self.save(conv)
        return conv

    def delete(self, conv_id: str) -> None:
        self._path(conv_id).unlink(missing_ok=True)
        self._seen.pop(conv_id, None)
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
        """Remember which conversation was open (best effort: a folder that cannot be written
        costs only this memory, never the chat)."""
        try:
            write_json(self._state, {"last": conv_id}, durable=True)
        except OSError:
            pass


def not_saved(exc: OSError, where: Path) -> str:
    """The sentence for a save the disk refused: the chat is kept in memory, not lost."""
    return (f"the chat is not being saved ({exc.strerror or exc}: {exc.filename or where}); "
            "it stays in memory until you quit")


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """The file as it is now (inode, size, mtime), or None if it is not there."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
