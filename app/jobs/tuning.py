"""The sweep job: a grid of settings measured against plain decoding."""

from __future__ import annotations

from specdec_studio.app.jobs import models
from specdec_studio.app.jobs.state import WorkerState


def sweep_settings(state: WorkerState, spec) -> None:
    """Measure ``spec``'s settings against plain; the events go to the window as they come and
    the finished (or stopped) result is kept for this model."""
    from specdec_studio.engine.identity import model_sha256
    from specdec_studio.engine.tuning import sweep
    from specdec_studio.engine.tuning.profile import curve_of

    session = state.require_session()
    models.known_profiles(state, measure=True, remeasure=False)
    curve = curve_of(state.profiles["target"])
    draft_curve = curve_of(state.profiles["draft"]) if spec.mode == "speculative" else None
    for event in sweep.run_sweep(session, spec, curve=curve, draft_curve=draft_curve):
        if isinstance(event, sweep.SweepFinished) and event.result["cells"]:
            sweep.save(event.result, model_sha256(session.model.info.path))
        state.emit(event)
