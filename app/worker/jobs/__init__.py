"""The engine thread's jobs, one function each, taking the worker's state and the request; JOBS
says which function answers which request."""

from __future__ import annotations

from specdec_studio.app.worker import messages as m
from specdec_studio.app.worker.jobs import batch, conversations, distill, models, runs, serve, tuning
from specdec_studio.app.worker.jobs.state import WorkerState


def _load(state: WorkerState, command: m.LoadRequest) -> None:
    state.auto_profile = command.profile  # a Stop during this load's profile turns it off again
    models.load_model(state, command.path, command.n_ctx, command.n_threads, command.n_gpu_layers,
                      command.rpc_servers)


def _fetch(state: WorkerState, command: m.FetchRequest) -> None:
    """Download a known model (Stop ends it between two parts, keeping nothing), then load it as
    the target or as the draft."""
    from specdec_studio.engine.errors import SpecDecError
    from specdec_studio.engine.models import catalog

    state.emit(m.LoadStarted(command.key, what="download"))
    try:
        path = catalog.fetch(command.key, log=lambda _msg: None, cancel=state.cancel,
                             progress=lambda done, total: state.emit(m.DownloadProgress(command.key, done, total)))
    except SpecDecError as exc:
        state.emit(m.LoadFailed(str(exc), previous_model_kept=state.session is not None, what="download"))
        return
    if command.as_draft:
        models.load_draft(state, str(path), command.n_gpu_layers)
    else:
        models.load_model(state, str(path), command.n_ctx, command.n_threads, command.n_gpu_layers)


JOBS = {
    m.LoadRequest: _load,
    m.FetchRequest: _fetch,
    m.DraftRequest: lambda state, command: models.load_draft(state, command.path, command.n_gpu_layers),
    m.RunRequest: runs.run,
    m.RaceRequest: runs.race,
    m.BaselineRequest: runs.baseline,
    m.BatchRequest: batch.decode_batch,
    m.ServeRequest: serve.serve,
    m.DistillRequest: lambda state, command: distill.train_draft(state, command.spec),
    m.ProfileRequest: lambda state, command: models.known_profiles(state, measure=True, remeasure=command.remeasure),
    m.SweepRequest: lambda state, command: tuning.sweep_settings(state, command.spec),
    m.ProbeRequest: lambda state, command: models.exactness(state, measure=True),
    m.FormatsRequest: lambda state, command: tuning.compare_formats(state, command.formats),
    m.FormatSpeedRequest: lambda state, command: tuning.format_speeds(state, command.formats),
    m.ConversationRequest: conversations.conversation,
}
