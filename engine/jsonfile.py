"""JSON files written atomically: a crash, or a second process, never leaves half a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json(path: Path, data: object, *, indent: int | None = None, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    With ``durable`` the data reaches the disk before the rename (fsync), for what the user would
    lose (a conversation); caches skip it, since they can be made again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=indent, separators=None if indent else (",", ":"))
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
