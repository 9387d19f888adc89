"""Files written atomically: a crash, or a second process, never leaves half a file (JSON and text
here, and the model files others write through :func:`made_beside`)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if shared:
            os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
