"""Models past one machine: llama.cpp's RPC backend (``GGML_RPC=ON``; an ``rpc-server`` per machine).

Nothing of ours runs remotely. The engine names the servers, llama.cpp's RPC client makes each
server's devices look like local GPUs, and the model load splits the layers across them as
llama.cpp does (by each device's free memory, RPC devices first).

llama.cpp's RPC client aborts the whole process when a server cannot be reached or stops
answering (``GGML_ABORT`` in ``ggml-rpc.cpp``). So:

- before a server is handed to llama.cpp, :func:`probe` connects to it from Python and speaks
  the protocol's HELLO itself: an unreachable, busy or foreign server is one sentence, not an
  abort;
- a server that dies mid-run cannot be survived in-process. :func:`on_lost_server` turns
  llama.cpp's abort message into one sentence and ends the process with :data:`EXIT_SERVER_LOST`;
  the CLI runs in a process of its own, and the window runs RPC models in a child process
  (``app/worker/engine_process.py``) so that only the run is lost.

An ``rpc-server`` serves one client at a time, and llama.cpp keeps its connection to a server for
as long as a model of this process has buffers there: a server that one of our models holds is
busy with us, so it is not probed again (:func:`hold` counts them).
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import llama_cpp

from specdec_studio.engine import native
from specdec_studio.engine.models import devices as ggml_devices
from specdec_studio.engine.errors import ConfigError, SpecDecError

# ggml-rpc.h / ggml-rpc.cpp of the pinned llama.cpp
RPC_PROTO_MAJOR = 7
RPC_PROTO_MINOR = 0
RPC_CMD_HELLO = 14
RPC_CONN_CAPS_SIZE = 24
DEFAULT_PORT = 50052  # rpc-server's
PROBE_TIMEOUT_S = 3.0
# how long a server may take to answer before :func:`silent` names it: a healthy rpc-server that
# has just lost its client answers the next one within milliseconds
SILENCE_PROBE_S = 1.5
EXIT_SERVER_LOST = 75  # EX_TEMPFAIL: the server may be back later; nothing of ours is broken
EXIT_LLAMA_ABORT = 70  # EX_SOFTWARE: llama.cpp stopped on one of its own checks


class RpcError(SpecDecError):
    """An RPC server that cannot serve: unreachable, busy, another protocol, or this build has no RPC."""


@dataclass(frozen=True)
class RpcServerInfo:
    endpoint: str
    version: str  # the server's protocol version, "7.0.0"


def parse_servers(text: str | None) -> tuple[str, ...]:
    """``"host:port,host:port"`` as endpoints; a bare host gets rpc-server's port. Raises
    ConfigError (one sentence) on a malformed entry."""
    if not text or not text.strip():
        return ()
    endpoints = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if item.startswith("[") or item.count(":") > 1:
            # llama.cpp's RPC client splits an endpoint at its first colon (ggml-rpc.cpp, parse_endpoint)
            raise ConfigError(f"RPC server {item!r} is an IPv6 address, which llama.cpp's RPC client cannot "
                              "reach; give the server's IPv4 address or host name")
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, str(DEFAULT_PORT)
        # ASCII digits only: "²" is a digit to str.isdigit, and int() refuses it
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise ConfigError(f"RPC server {item!r} is not host:port (for example 192.168.1.20:{DEFAULT_PORT})")
        endpoint = f"{host}:{int(port)}"
        if endpoint not in endpoints:
            endpoints.append(endpoint)
    return tuple(endpoints)


def _hello(endpoint: str, timeout_s: float) -> bytes | None:
    """The server's reply to HELLO (None if it closed the connection instead); raises
    ``socket.timeout`` or ``OSError`` where it cannot be reached or does not answer in time."""
    host, _, port = endpoint.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(struct.pack("<BQ", RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE) + bytes(RPC_CONN_CAPS_SIZE))
        return _recv_exactly(sock, 8 + 4 + RPC_CONN_CAPS_SIZE)


def probe(endpoint: str, timeout_s: float = PROBE_TIMEOUT_S) -> RpcServerInfo:
    """Speak HELLO to the server at ``endpoint`` and close; raises RpcError (one sentence) where
    llama.cpp's client would abort the process."""
    try:
        reply = _hello(endpoint, timeout_s)
    except TimeoutError:
        raise RpcError(f"the RPC server at {endpoint} accepted the connection but did not answer within "
                       f"{timeout_s:g} s; it serves one client at a time and may be busy with another") from None
    except OSError as exc:
        raise RpcError(f"cannot reach an RPC server at {endpoint} ({exc.strerror or exc}); "
                       f"is rpc-server running there?") from None
    if reply is None:
        raise RpcError(f"the server at {endpoint} closed the connection on llama.cpp's RPC greeting; "
                       f"it is not an rpc-server of protocol {RPC_PROTO_MAJOR}.x")
    (size,) = struct.unpack_from("<Q", reply)
    major, minor, patch = reply[8], reply[9], reply[10]
    if size != 4 + RPC_CONN_CAPS_SIZE or major != RPC_PROTO_MAJOR or minor > RPC_PROTO_MINOR:
        raise RpcError(f"the RPC server at {endpoint} speaks protocol {major}.{minor}.{patch}; this build "
                       f"speaks {RPC_PROTO_MAJOR}.{RPC_PROTO_MINOR}: run an rpc-server of the same llama.cpp")
    return RpcServerInfo(endpoint, f"{major}.{minor}.{patch}")


def silent(endpoints: tuple[str, ...], timeout_s: float = SILENCE_PROBE_S) -> tuple[str, ...]:
    """The servers of ``endpoints`` that do not answer a HELLO within ``timeout_s`` (unreachable,
    or accepting the connection and saying nothing: a stopped process, a suspended machine, a
    network gone), all asked at once. Ask only servers no client of this process holds: a server
    busy with its one client says nothing to another either. A server that answers in another
    protocol, or closes the connection, is not silent."""
    if not endpoints:
        return ()

    def says_nothing(endpoint: str) -> bool:
        try:
            _hello(endpoint, timeout_s)
        except OSError:  # socket.timeout included
            return True
        return False

    with ThreadPoolExecutor(max_workers=len(endpoints), thread_name_prefix="rpc-probe") as pool:
        answers = list(pool.map(says_nothing, endpoints))
    return tuple(e for e, quiet in zip(endpoints, answers) if quiet)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


_lock = threading.Lock()
_devices: dict[str, tuple[int, ...]] = {}  # endpoint -> its ggml devices (llama.cpp keeps them for the process)
_held: collections.Counter[str] = collections.Counter()  # endpoint -> models of this process loaded on it


def supported() -> bool:
    """Whether this llama.cpp build has the RPC backend (``GGML_RPC=ON``)."""
    native.ensure_backend()
    return bool(llama_cpp.llama_supports_rpc())


@dataclass(frozen=True)
class RpcDevice:
    endpoint: str
    free_bytes: int
    total_bytes: int


def connect(endpoints: tuple[str, ...]) -> list[int]:
    """The ggml devices of ``endpoints`` (probed first, then handed to llama.cpp's RPC client),
    for a model's ``devices`` list; raises RpcError in one sentence."""
    if not endpoints:
        return []
    if not supported():
        raise RpcError("this build of llama.cpp has no RPC backend; set up again with the default build flags "
                       "(scripts/setup.sh builds with -DGGML_RPC=ON)")
    lib = ggml_devices.lib()
    add_server_addr = lib.rpc_proc("ggml_backend_rpc_add_server")
    if not add_server_addr:
        raise RpcError("llama.cpp's RPC backend does not offer ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(add_server_addr)
    devices: list[int] = []
    with _lock:
        for endpoint in endpoints:
            if not _held[endpoint]:  # no model of ours holds it: llama.cpp will connect afresh
                probe(endpoint)
            if endpoint not in _devices:
                reg = add_server(endpoint.encode())
                n = lib.ggml.ggml_backend_reg_dev_count(reg) if reg else 0
                if not n:
                    raise RpcError(f"the RPC server at {endpoint} offers no device")
                _devices[endpoint] = tuple(lib.ggml.ggml_backend_reg_dev_get(reg, i) for i in range(n))
            devices.extend(_devices[endpoint])
    return devices


def hold(endpoints: tuple[str, ...], n: int) -> None:
    """A model of this process was loaded on ``endpoints`` (``n`` = 1) or freed (-1)."""
    with _lock:
        for endpoint in endpoints:
            _held[endpoint] = max(0, _held[endpoint] + n)


def describe(endpoints: tuple[str, ...]) -> list[RpcDevice]:
    """Each connected server's devices and their memory, for the window."""
    lib = ggml_devices.lib()
    out = []
    for endpoint in endpoints:
        for dev in _devices.get(endpoint, ()):
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            lib.ggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            out.append(RpcDevice(endpoint, free.value, total.value))
    return out


class DeviceList:
    """A NULL-terminated ``ggml_backend_dev_t`` array for ``llama_model_params.devices``; keep it
    alive while the model loads."""

    def __init__(self, devices: list[int]) -> None:
        self.array = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


# --------------------------------------------------------------------------- a server lost mid-run
_ABORT_CALLBACK_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_abort_callback = None  # kept: ggml holds the pointer


def refusing(endpoints, tries: int = 5) -> list[str]:
    """Those of ``endpoints`` that refuse a connection now: the servers that are gone (one still
    serving this process accepts the connection into its backlog). A killed server's connection to
    us can break a moment before its listening socket closes: ask again a few times."""
    for attempt in range(tries):
        gone = []
        for endpoint in endpoints:
            host, _, port = endpoint.rpartition(":")
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((host, int(port))) != 0:
                    gone.append(endpoint)
        if gone or attempt == tries - 1:
            return gone
        time.sleep(0.1)
    return []


def lost_server_sentence(message: str, gone: list[str] | None = None) -> str:
    """One sentence for llama.cpp's RPC abort ``message``, naming the servers ``gone`` if known."""
    who = f"the RPC server at {', '.join(gone)}" if gone else "an RPC server"
    why = message.split(": ", 1)[-1].strip().rstrip(".")
    return f"{who} stopped answering mid-run ({why}), and this run is lost"


def on_lost_server(report=None) -> None:
    """Make llama.cpp's abort one sentence on stderr (or to ``report``) and an exit instead of a
    core dump: :data:`EXIT_SERVER_LOST` for an RPC server lost mid-run, :data:`EXIT_LLAMA_ABORT`
    for any other.

    ggml calls the callback on whichever thread failed, just before it would ``abort()``; the
    process cannot go on, so the callback ends it."""
    global _abort_callback

    def _on_abort(message: bytes) -> None:
        text = (message or b"").decode("utf-8", errors="replace")
        lost = "RPC" in text
        try:
            if lost:
                sentence = lost_server_sentence(text, refusing(tuple(e for e, n in _held.items() if n)))
            else:
                sentence = f"llama.cpp stopped: {text}"
            if report is not None:
                report(sentence)
            else:
                sys.stderr.write(f"error: {sentence}\n")
                sys.stderr.flush()
        finally:
            os._exit(EXIT_SERVER_LOST if lost else EXIT_LLAMA_ABORT)

    with _lock:
        _abort_callback = _ABORT_CALLBACK_TYPE(_on_abort)
        ggml_devices.lib().base.ggml_set_abort_callback(ctypes.cast(_abort_callback, ctypes.c_void_p))


# --------------------------------------------------------------------------- serving
def serve(host: str, port: int, n_threads: int, cache_dir: str | None = None) -> None:
    """Serve this machine's CPU to RPC clients: llama.cpp's own server loop
    (``ggml_backend_rpc_start_server``), as ``rpc-server`` runs it. Never returns."""
    if not supported():
        raise RpcError("this build of llama.cpp has no RPC backend (build it with -DGGML_RPC=ON)")
    lib = ggml_devices.lib()
    start_addr = lib.rpc_proc("ggml_backend_rpc_start_server")
    if not start_addr:
        raise RpcError("llama.cpp's RPC backend does not offer ggml_backend_rpc_start_server")
    start = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_void_p))(start_addr)
    cpu = lib.ggml.ggml_backend_dev_by_type(ggml_devices.DEVICE_TYPE_CPU)
    devices = (ctypes.c_void_p * 1)(cpu)
    # The loop is C and never returns to Python: Ctrl-C and SIGTERM must end the process themselves.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, n_threads, 1, devices)
    raise RpcError(f"the RPC server could not listen on {host}:{port} (is the port in use?)")
