"""Files written atomically: a crash, a full disk or a second process never leaves half a file,
nor loses the file that was there (JSON, text and bytes here, the large files others write through
:func:`made_beside`); a file two processes update is read, changed and written under a lock
(:func:`update_json`). Every file the app writes goes through here."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def write_json(path: Path, data: object, *, indent: int | None = None, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    With ``durable`` the data reaches the disk before the rename (fsync), for what the user would
    lose (a conversation); caches skip it, since they can be made again."""
    write_text(path, json.dumps(data, ensure_ascii=False, indent=indent, separators=None if indent else (",", ":")),
               durable=durable)


def write_text(path: Path, text: str, *, durable: bool = False, shared: bool = False) -> None:
    """Write ``text`` to ``path`` atomically, as :func:`write_json` does. The file is private to
    the user (as the temporary file is made) unless ``shared``: then others may read it (0644)."""
    write_bytes(path, text.encode("utf-8"), durable=durable, shared=shared)


def write_bytes(path: Path, data: bytes, *, durable: bool = False, shared: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it and ``os.replace``: the file
    at ``path`` is the old one or the new one, never a part (a full disk fails before the rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if shared:
            os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock for updating ``path`` (an advisory lock file beside it, released when the
    block ends or the process does, however it ends). Without POSIX locks, a no-op."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as handle:
        try:
            import fcntl  # POSIX only
        except ImportError:  # pragma: no cover - the atomic write still keeps every file whole
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def update_json(path: Path, change: Callable[[dict], None], *, indent: int | None = None) -> dict:
    """Read the JSON object at ``path`` (an empty one if it is missing or damaged), let ``change``
    change it in place, and write it back atomically, all under :func:`locked`: two processes that
    update one file each keep the other's changes. Returns the object written."""
    path = Path(path)
    with locked(path):
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = {}
        data = found if isinstance(found, dict) else {}
        change(data)
        write_json(path, data, indent=indent)
    return data


@contextlib.contextmanager
def made_beside(dest: Path) -> Iterator[Path]:
    """A temporary path beside ``dest``, of this caller's own, for a large file someone writes there
    (llama.cpp's quantiser, a download). When the block ends without an error the file reaches the
    disk (fsync), is made readable by others and renamed into place; on any error, Ctrl+C included,
    it is removed. Temporary files an interrupted maker left behind are removed first (callers that
    may run at once hold a lock on ``dest``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{dest.name}.*.partial"):
        stale.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
    os.close(fd)
    partial = Path(name)
    try:
        yield partial
        with open(partial, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(partial, 0o644)  # mkstemp made it private; a model file is not
        partial.replace(dest)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
