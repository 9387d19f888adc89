"""JSON (and other text) files written atomically: a crash, or a second process, never leaves half a file."""

from __future__ import annotations

import json
import os
import tempfile
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
