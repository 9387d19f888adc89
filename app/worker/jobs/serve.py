"""The window's server: the loaded model behind the OpenAI API on 127.0.0.1 (engine.server), its
requests decoded on this engine thread in the batch slots, drawn by the Batch tab as they come.
While it serves, the engine thread is the server's: the window's own runs wait for its Stop."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.app.worker.messages import BatchKv, ServeRequest, ServeStarted

HOST = "127.0.0.1"  # the window serves this machine only (specdec serve --host, with a key, for more)
START_WAIT_S = 10.0


def serve(state: WorkerState, command: ServeRequest) -> None:
    import uvicorn  # the server stack: only this job needs it

    from specdec_studio.engine import parallel
    from specdec_studio.engine.errors import SpecDecError
    from specdec_studio.engine.server.app import make_app
    from specdec_studio.engine.server.decoder import Router

    session = state.require_session()
    session.ensure_sequences(command.parallel, streams=True)
    router = Router(session, command.config, command.parallel, command.queue)
    state.router = router
    events = router.decode()  # the slots' settings checked before anything listens
    name = Path(session.model.info.path).stem
    server = uvicorn.Server(uvicorn.Config(make_app(router, model_name=name, base=command.config),
                                           host=HOST, port=command.port, log_level="warning"))
    listening = threading.Thread(target=server.run, name="specdec-http", daemon=True)
    listening.start()
    deadline = time.monotonic() + START_WAIT_S
    while not server.started and listening.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise SpecDecError(f"could not listen on {HOST}:{command.port} (another program may use the port)")
    shown_at = 0.0
    try:
        state.emit(next(events))  # the loop's BatchStarted: the Batch tab sets out its slots, then says it serves
        state.emit(ServeStarted(f"http://{HOST}:{command.port}/v1", name, command.parallel, router.slot_cells))
        for event in events:  # until Stop: the loop then ends every request in flight
            state.emit(event)
            if isinstance(event, parallel.JobStep) and time.perf_counter() - shown_at >= 0.05 \
                    and session.memory.mirror_ok:
                state.emit(BatchKv(parallel.kv_snapshot(session, command.parallel)))
                shown_at = time.perf_counter()
    finally:
        state.router = None
        router.close()
        server.should_exit = True
        listening.join(10)
