"""Models on llama.cpp RPC servers: two ``specdec rpc-server`` processes on this machine hold the
layers; every mode decodes what plain decodes over them; a server that cannot serve is one
sentence before llama.cpp sees it; a server killed mid-run costs that run only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.models import rpc
from tests.rpc_local import REPO, LatencyRelay, free_port, rpc_servers

PROMPT = "a b c a b c a b"
N = 40
CONFIGS = {
    "plain": RunConfig(mode="plain", max_tokens=N),
    "lookup": RunConfig(mode="lookup", max_tokens=N, speculative=SpeculativeParams(k=3)),
    "auto": RunConfig(mode="auto", max_tokens=N),
    "lookahead": RunConfig(mode="lookahead", max_tokens=N, lookahead=LookaheadParams(4, 3, 4)),
    "speculative": RunConfig(mode="speculative", max_tokens=N, speculative=SpeculativeParams(k=4)),
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("rpc-logs")
    with rpc_servers(2, threads=1, log_dir=log_dir) as procs:
        yield procs, log_dir


def test_servers_are_read_or_refused_in_one_sentence():
    assert rpc.parse_servers(" 10.0.0.2:50060, gpu-box ,10.0.0.2:50060") == (
        "10.0.0.2:50060",
        f"gpu-box:{rpc.DEFAULT_PORT}",
    )
    assert rpc.parse_servers("") == ()
    for bad in ("host:http", "host:70000", ":50052", "host:²", "host:٥٠٠٥٢"):  # digits to str.isdigit, not int()
        with pytest.raises(ConfigError, match="is not host:port"):
            rpc.parse_servers(bad)
    # llama.cpp's RPC client cuts an endpoint at its first colon: an IPv6 address is refused for that
    for bad in ("[::1]:50052", "::1", "fe80::1:50052"):
        with pytest.raises(ConfigError, match="IPv6 address, which llama.cpp's RPC client cannot reach"):
            rpc.parse_servers(bad)


def test_a_server_that_cannot_serve_is_one_sentence_not_an_abort(tiny_archs):
    from specdec_studio.engine.session import Session

    closed = f"127.0.0.1:{free_port()}"
    with pytest.raises(rpc.RpcError, match=f"cannot reach an RPC server at {closed}"):
        Session(tiny_archs / "llama-dense.gguf", n_ctx=256, n_threads=1, rpc_servers=(closed,))

    # something that listens but is not an rpc-server: it hangs up on the greeting, or never answers
    for behaviour, expected in (("hang up", "not an rpc-server"), ("silent", "did not answer")):
        listener = socket.create_server(("127.0.0.1", 0))
        held = []

        def serve_once(listener=listener, behaviour=behaviour, held=held):
            conn, _ = listener.accept()
            conn.recv(64)
            if behaviour == "hang up":
                conn.close()
            else:
                held.append(conn)

        threading.Thread(target=serve_once, daemon=True).start()
        try:
            with pytest.raises(rpc.RpcError, match=expected):
                rpc.probe(f"127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.5)
        finally:
            listener.close()
            for conn in held:
                conn.close()


def test_silent_names_the_servers_that_do_not_answer(servers):
    """After a stall the window asks its servers who still says nothing: a stopped server accepts
    the connection and never answers, a closed port cannot be reached, a healthy one answers; all
    are asked at once, so the window waits for one timeout, not one per server."""
    import signal

    procs, _ = servers
    closed = f"127.0.0.1:{free_port()}"
    os.kill(procs[1].proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        quiet = rpc.silent((procs[0].endpoint, procs[1].endpoint, closed), timeout_s=1.0)
        took = time.monotonic() - started
    finally:
        os.kill(procs[1].proc.pid, signal.SIGCONT)
    assert quiet == (procs[1].endpoint, closed)
    assert took < 1.8, took  # one timeout, not two
    assert rpc.silent((procs[1].endpoint,), timeout_s=10.0) == ()  # going on again, it answers
    assert rpc.silent(()) == ()


@pytest.mark.parametrize("model", ["llama-dense", "qwen35-dense"])
def test_every_mode_over_two_rpc_servers_equals_plain(tiny_archs, servers, model):
    from specdec_studio.engine.session import Session

    procs, log_dir = servers
    path = tiny_archs / f"{model}.gguf"
    endpoints = tuple(p.endpoint for p in procs)
    with Session(path, n_ctx=512, n_threads=1) as local:
        local_ids = list(local.run(CONFIGS["plain"], local.tokenize_prompt(PROMPT)))[-1].token_ids
    with Session(path, n_ctx=512, n_threads=1, rpc_servers=endpoints, draft_path=path) as remote:
        assert remote.model.n_gpu_layers == -1  # every layer on the servers
        devices = rpc.describe(endpoints)
        assert [d.endpoint for d in devices] == list(endpoints) and all(d.total_bytes > 0 for d in devices)
        assert remote.draft_model.rpc_servers == ()  # the draft stays next to the loop
        prompt = remote.tokenize_prompt(PROMPT)
        plain = list(remote.run(CONFIGS["plain"], prompt))[-1].token_ids
        assert len(plain) == N
        for name, config in CONFIGS.items():
            if name == "lookahead" and model == "qwen35-dense":
                continue  # refused on a recurrent model (tests/engine/test_archs.py)
            assert list(remote.run(config, prompt))[-1].token_ids == plain, name
    # one llama.cpp kernel on both sides: the servers compute what this machine does
    assert plain == local_ids
    for proc in procs:
        assert b"Accepted client connection" in (log_dir / f"rpc-{proc.port}.log").read_bytes()


def test_the_mtp_head_drafts_over_rpc(tiny_archs, servers):
    from specdec_studio.engine.session import Session

    procs, _ = servers
    path = tiny_archs / "qwen35-mtp.gguf"
    with Session(path, n_ctx=512, n_threads=1, rpc_servers=tuple(p.endpoint for p in procs)) as remote:
        prompt = remote.tokenize_prompt(PROMPT)
        plain = list(remote.run(CONFIGS["plain"], prompt))[-1].token_ids
        mtp = list(remote.run(RunConfig(mode="mtp", max_tokens=N, speculative=SpeculativeParams(k=3)), prompt))
        assert mtp[-1].token_ids == plain
        assert mtp[-1].stats["n_drafted"] > 0


def test_a_latency_relay_delays_every_round_trip(servers):
    procs, _ = servers
    spare = rpc_servers(1)
    with spare as (server,):
        relay = LatencyRelay(server.endpoint, round_trip_s=0.05)
        try:
            t0 = time.perf_counter()
            assert rpc.probe(relay.endpoint).version.startswith(f"{rpc.RPC_PROTO_MAJOR}.")
            assert time.perf_counter() - t0 >= 0.05
        finally:
            relay.close()


def _cli(*args: str, data_dir, **kw) -> subprocess.Popen:
    env = {**os.environ, "SPECDEC_DATA": str(data_dir), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "specdec_studio.engine.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_a_server_killed_mid_chat_costs_that_turn_only(smollm_path, tmp_path):
    """The CLI chat over two servers: a server killed before the second turn ends the process with
    one sentence and exit code 75; the first turn is saved."""
    with rpc_servers(2) as procs:
        chat = _cli("chat", "-m", str(smollm_path), "--rpc", ",".join(p.endpoint for p in procs),
                    "-n", "16", "-c", "512", "-t", "1", "--mode", "lookup", "--json",
                    data_dir=tmp_path, stdin=subprocess.PIPE)
        chat.stdin.write(b"Name three colours.\n")
        chat.stdin.flush()
        first = json.loads(chat.stdout.readline())
        assert first["text"] and "error" not in first
        procs[1].kill()
        chat.stdin.write(b"And three more.\n")
        chat.stdin.flush()
        out, err = chat.communicate(timeout=60)
    assert chat.returncode == rpc.EXIT_SERVER_LOST
    lines = [line for line in err.decode().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err.decode()
    assert f"the RPC server at {procs[1].endpoint} stopped answering mid-run" in lines[0]
    assert "Traceback" not in err.decode() and "backtrace" not in err.decode().lower()
    saved = list((tmp_path / "conversations").glob("*.json"))
    assert len(saved) == 1
    messages = json.loads(saved[0].read_text())["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"][0] == "Name three colours."


def test_a_second_ctrl_c_ends_a_cli_run_whose_server_stalled(smollm_path, tmp_path):
    """A server stopped with SIGSTOP never answers the step in flight: the first Ctrl+C cannot be
    honoured (the main thread waits in llama.cpp), the second ends the process in one sentence."""
    import signal

    from specdec_studio.engine.cli.common import SECOND_CTRL_C

    with rpc_servers(2) as procs:
        run = _cli("run", "-m", str(smollm_path), "--rpc", ",".join(p.endpoint for p in procs), "-n", "4000",
                   "-c", "4096", "-t", "1", "--mode", "plain", "--no-predict", "-p", "Write a long story.",
                   data_dir=tmp_path)
        try:
            assert run.stdout.read(40)  # it is generating
            os.kill(procs[1].proc.pid, signal.SIGSTOP)
            time.sleep(0.5)  # the step that went out before the stall has returned, the next one waits
            run.send_signal(signal.SIGINT)
            time.sleep(2.0)
            assert run.poll() is None  # Stop set, but the step in flight never ends
            run.send_signal(signal.SIGINT)
            out, err = run.communicate(timeout=30)
        finally:
            os.kill(procs[1].proc.pid, signal.SIGCONT)
            if run.poll() is None:
                run.kill()
    assert run.returncode == 130
    assert err.decode().strip().splitlines()[-1] == f"specdec: {SECOND_CTRL_C}"
    assert "Traceback" not in err.decode()


@pytest.mark.slow
def test_llama_cpps_own_rpc_server_holds_the_layers_too(tiny_archs, tmp_path):
    """The rpc-server binary that scripts/build_llama_tools.sh builds from the same sources (a few
    minutes the first time) serves our client as ``specdec rpc-server`` does."""
    from tests.conftest import USER_CACHE

    script = [str(REPO / "scripts" / "build_llama_tools.sh")]
    user = {k: v for k, v in os.environ.items() if k != "SPECDEC_CACHE"}
    if USER_CACHE:
        user["SPECDEC_CACHE"] = USER_CACHE
    # the set-up's build where there is one (read only), else a build of the test's own
    built = subprocess.run(
        script, cwd=REPO, env={**user, "SPECDEC_TOOLS_NO_BUILD": "1"}, capture_output=True, text=True
    )
    if built.returncode != 0:
        built = subprocess.run(script, cwd=REPO, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    binary = Path(built.stdout.strip()) / "ggml-rpc-server"
    from specdec_studio.engine.session import Session

    path = tiny_archs / "llama-dense.gguf"
    with rpc_servers(2, log_dir=tmp_path, binary=binary) as procs:
        with Session(path, n_ctx=512, n_threads=1, rpc_servers=tuple(p.endpoint for p in procs)) as remote:
            prompt = remote.tokenize_prompt(PROMPT)
            plain = list(remote.run(CONFIGS["plain"], prompt))[-1].token_ids
            assert list(remote.run(CONFIGS["lookup"], prompt))[-1].token_ids == plain
        logs = [(tmp_path / f"rpc-{p.port}.log").read_bytes() for p in procs]
    assert all(b"Accepted client connection" in log for log in logs)
    with Session(path, n_ctx=512, n_threads=1) as local:
        assert list(local.run(CONFIGS["plain"], local.tokenize_prompt(PROMPT)))[-1].token_ids == plain
