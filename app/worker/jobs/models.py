"""Jobs that open a model or a draft, and what the window learns with one: the batch-cost profiles,
the exactness probe, the sweeps kept for it."""

from __future__ import annotations

from specdec_studio.app.worker.jobs import conversations
from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.app.worker.messages import (
    DraftLoaded,
    ExactnessReady,
    LoadStarted,
    ModelLoaded,
    ProfileProgress,
    ProfileReady,
    ProfileStarted,
    SavedSweeps,
)


def load_model(state: WorkerState, path: str, n_ctx: int, n_threads: int | None, n_gpu_layers: int,
               rpc_servers: tuple[str, ...] = ()) -> None:
    from specdec_studio.engine.models import catalog, rpc
    from specdec_studio.engine.models.loading import draft_candidates
    from specdec_studio.engine.models.devices import decode_leaves_a_core, supports_gpu_offload
    from specdec_studio.engine.session import Session

    state.emit(LoadStarted(path))
    resolved = catalog.resolve(path)
    # Load the new model before closing the old one: a bad file leaves the old one usable.
    session = Session(resolved, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers, cancel=state.cancel,
                      rpc_servers=rpc_servers)
    state.close_session()
    state.session = session
    # What the window asks of every run: each step's KV picture among its events; explanations
    # made on their own thread while the next step decodes where a decode leaves a core free (a
    # GPU's host, or more cores than llama.cpp's threads), in line where it does not; and no step
    # decoded ahead of the one shown while the demo holds the run
    session.step_snapshots = True
    session.explain_in_background = decode_leaves_a_core(session.model,
                                                         max(session.n_threads, session.n_threads_batch))
    session.run_ahead = lambda: not state.gate.paused
    others = [p for p in catalog.cached_models() if p != resolved]
    candidates = [(str(resolved), None)] + [(str(p), why) for p, why in draft_candidates(session.model, others)]
    state.emit(ModelLoaded(str(resolved), session.model.info.summary(), session.has_chat_template,
                           session.n_ctx, session.n_threads, supports_gpu_offload(), tuple(candidates),
                           session.template_problem,
                           tuple(f"{d.endpoint} · {d.total_bytes / 2**30:.1f} GiB" for d in rpc.describe(rpc_servers))))
    conversations.rebind(state, session)
    state.profiles = {"target": None, "draft": None}
    emit_saved_sweeps(state, session)
    exactness(state, measure=False)
    profile_after_load(state)


def load_draft(state: WorkerState, path: str | None, n_gpu_layers: int = 0) -> None:
    session = state.require_session()
    if path is None:
        session.unload_draft()
        state.emit(DraftLoaded(None, None))
        state.profiles["draft"] = None
        state.emit(ProfileReady(state.profiles["target"], None))
        return
    state.emit(LoadStarted(path, what="draft"))
    info = session.load_draft(path, n_gpu_layers=n_gpu_layers)  # priced from its own profile, on its device
    state.emit(DraftLoaded(path, info.summary()))
    state.profiles["draft"] = None
    profile_after_load(state)


def known_profiles(state: WorkerState, *, measure: bool, remeasure: bool) -> None:
    """Make the target's (and the draft's) batch-cost profile known to the window: from the
    cache, or measured now when ``measure`` (Stop ends a measurement; nothing is stored)."""
    from specdec_studio.engine.tuning import profile

    session = state.require_session()
    roles = ["target"] + (["draft"] if session.draft is not None else [])
    for role in roles:
        draft = role == "draft"
        if not remeasure and state.profiles[role] is not None:
            continue
        known = None if remeasure else profile.cached(profile.profile_key(session, draft=draft))
        if known is None and not measure:
            continue
        state.emit(ProfileStarted(role, measuring=known is None))
        if known is None:
            known = profile.load_or_measure(
                session, draft=draft, remeasure=remeasure,
                progress=lambda f, role=role: state.emit(ProfileProgress(role, f)))
        state.profiles[role] = known.to_dict()
    state.emit(ProfileReady(state.profiles["target"], state.profiles["draft"]))


def profile_after_load(state: WorkerState) -> None:
    """The profile a new model or draft needs; Stop skips it without failing the load."""
    from specdec_studio.engine.tuning.profile import ProfileCancelled, ProfileUnavailable

    try:
        known_profiles(state, measure=state.auto_profile, remeasure=False)
    except (ProfileCancelled, ProfileUnavailable) as exc:
        # the model is loaded either way: Auto prices its steps with its runs' own timings
        state.auto_profile = False  # skipped for this model: a draft loaded next does not measure it
        state.emit(ProfileReady(state.profiles["target"], state.profiles["draft"], str(exc)))


def exactness(state: WorkerState, *, measure: bool) -> None:
    from specdec_studio.engine.tuning.probe import cached_probe, exactness_note, load_or_probe

    session = state.require_session()
    result = load_or_probe(session) if measure else cached_probe(session)
    if result is not None:
        state.emit(ExactnessReady(result, exactness_note(result)))


def emit_saved_sweeps(state: WorkerState, session) -> None:
    from specdec_studio.engine.tuning import sweep
    from specdec_studio.engine.models.identity import model_sha256

    sha = model_sha256(session.model.info.path)
    found = (sweep.load_saved(sha, mode) for mode in sweep.SWEEP_MODES)
    state.emit(SavedSweeps(tuple(r for r in found if r is not None)))
