"""Every file the app writes is written whole or not at all, and a file two processes update keeps
both processes' changes (engine/jsonfile.py; issue 79, item 8)."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from specdec_studio.engine import jsonfile


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "export.html"
    path.write_text("what the user had")

    def full_disk(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)  # the rename is the last step: anything before it fails alike
    with pytest.raises(OSError, match="No space"):
        jsonfile.write_bytes(path, b"a new report")
    assert path.read_text() == "what the user had"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.html"]


def _add_entries(path: str, start: int, n: int) -> None:
    for i in range(start, start + n):
        jsonfile.update_json(jsonfile.Path(path), lambda data, i=i: data.__setitem__(str(i), i))


def test_two_processes_updating_one_index_keep_every_entry(tmp_path):
    """The file-hash index's shape: read, add an entry, write. Without the lock, entries vanish."""
    path = tmp_path / "file-hashes.json"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_add_entries, args=(str(path), start, 40)) for start in (0, 1000)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert all(w.exitcode == 0 for w in workers)
    assert len(json.loads(path.read_text())) == 80


def test_a_damaged_index_is_started_again(tmp_path):
    path = tmp_path / "index.json"
    path.write_text("[not an object")
    assert jsonfile.update_json(path, lambda data: data.update(a=1)) == {"a": 1}
    assert json.loads(path.read_text()) == {"a": 1}
