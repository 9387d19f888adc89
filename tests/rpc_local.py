"""llama.cpp RPC servers on this machine for the tests and the RPC bench: ``specdec rpc-server``
processes (llama.cpp's own server loop) on free localhost ports, and a relay that puts a set
latency on every round trip between a client and one of them."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class RpcServerProcess:
    """One ``specdec rpc-server`` on 127.0.0.1 (or llama.cpp's own ``rpc-server`` binary, given
    its path); ``kill()`` ends it as a crash would."""

    def __init__(self, threads: int = 1, log_dir: Path | None = None, binary: Path | None = None) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        log = open(log_dir / f"rpc-{self.port}.log", "wb") if log_dir else subprocess.DEVNULL  # noqa: SIM115
        command = [str(binary)] if binary else [sys.executable, "-m", "specdec_studio.engine.cli", "rpc-server"]
        self.proc = subprocess.Popen([*command, "-p", str(self.port), "-t", str(threads)],
                                     stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        # A connect alone tells that it listens; a probe would take the server's one client slot for a moment.
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"rpc-server on port {self.port} did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@contextlib.contextmanager
def rpc_servers(n: int, threads: int = 1, log_dir: Path | None = None,
                binary: Path | None = None) -> Iterator[list[RpcServerProcess]]:
    servers: list[RpcServerProcess] = []
    try:
        for _ in range(n):
            servers.append(RpcServerProcess(threads, log_dir, binary))
        yield servers
    finally:
        for server in servers:
            server.kill()


class LatencyRelay:
    """Listens on a free localhost port and forwards each connection to ``target`` (host, port),
    holding every chunk for half of ``round_trip_s`` in each direction: a link whose round trips
    take that much longer, whatever the sizes (a delay line, not a rate limit)."""

    def __init__(self, target: str, round_trip_s: float) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.one_way_s = round_trip_s / 2
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            self._pipe(client, server)
            self._pipe(server, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        held: queue.Queue = queue.Queue()

        def read() -> None:
            while True:
                try:
                    chunk = src.recv(1 << 20)
                except OSError:
                    chunk = b""
                held.put((time.monotonic() + self.one_way_s, chunk))
                if not chunk:
                    return

        def write() -> None:
            while True:
                due, chunk = held.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not chunk:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                try:
                    dst.sendall(chunk)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        for s in (self._listener, *self._sockets):
            with contextlib.suppress(OSError):
                s.close()


class RelayProcess:
    """A :class:`LatencyRelay` in a process of its own. In the client's process its forwarding
    threads would take the interpreter lock from the client's own threads (a run's explanations
    made beside its decodes, for one), and a bench of those would time the relay as well."""

    def __init__(self, target: str, round_trip_s: float) -> None:
        code = ("import sys; from tests.rpc_local import LatencyRelay; "
                "relay = LatencyRelay(sys.argv[1], float(sys.argv[2])); print(relay.endpoint, flush=True); "
                "sys.stdin.read()")  # until the parent closes the pipe
        self.proc = subprocess.Popen([sys.executable, "-c", code, target, str(round_trip_s)], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.endpoint = self.proc.stdout.readline().strip()
        if not self.endpoint:
            self.close()
            raise RuntimeError(f"the relay to {target} did not start")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
