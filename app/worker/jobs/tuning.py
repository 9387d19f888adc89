"""The tuning jobs: a sweep (a grid of settings measured against plain decoding), the weight-format
comparison and the best mode on each format."""

from __future__ import annotations

from pathlib import Path

from specdec_studio.app.worker.jobs import models
from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.engine.strategies import registry


def sweep_settings(state: WorkerState, spec) -> None:
    """Measure ``spec``'s settings against plain; the events go to the window as they come and
    the finished (or stopped) result is kept for this model."""
    from specdec_studio.engine.models.identity import model_sha256
    from specdec_studio.engine.tuning import sweep
    from specdec_studio.engine.tuning.profile import curve_of

    session = state.require_session()
    models.known_profiles(state, measure=True, remeasure=False)
    curve = curve_of(state.profiles["target"])
    draft_curve = curve_of(state.profiles["draft"]) if registry.mode(spec.mode).needs == "draft" else None
    for event in sweep.run_sweep(session, spec, curve=curve, draft_curve=draft_curve):
        if isinstance(event, sweep.SweepFinished) and event.result["cells"]:
            sweep.save(event.result, model_sha256(session.model.info.path))
        state.emit(event)


def compare_formats(state: WorkerState, wanted: tuple[str, ...]) -> None:
    """The loaded model against copies of it in ``wanted`` formats (made once into the model
    cache), measured alike; Stop ends it and says so. The loaded model stays loaded."""
    from specdec_studio.app.worker.messages import FormatsCompared, FormatsProgress
    from specdec_studio.engine.models.quantize import QuantizeStopped
    from specdec_studio.engine.tuning import formats
    from specdec_studio.engine.tuning.profile import ProfileCancelled
    from specdec_studio.engine.tuning.prompts import shipped
    from specdec_studio.engine.tuning.sweep import prompt_tokens

    session = state.require_session()
    prompts = [prompt_tokens(session, p, chat=True) for p in shipped(per_category=1)]
    try:
        figures = formats.compare(original_file(session), wanted, n_threads=session.n_threads,
                                  n_ctx=session.n_ctx, prompts=prompts, cancel=state.cancel,
                                  log=lambda message: state.emit(FormatsProgress(message)))
    except (ProfileCancelled, QuantizeStopped):
        state.emit(FormatsCompared((), None, "The format comparison was stopped.", stopped=True))
        return
    pick = formats.recommendation(figures)
    state.emit(FormatsCompared(tuple(f.to_dict() for f in figures), pick.path if pick else None,
                               formats.verdict(figures)))


# The format speed comparison in the window: one prompt of each shipped category, a short answer,
# the modes that can win on a CPU (about two minutes for two copies on 2 cores).
SPEED_TOKENS = 48
SPEED_CANDIDATES = ("auto", "lookup k=4", "lookup k=8")


def original_file(session) -> Path:
    """The file the comparisons measure copies against: the loaded file, or the original a loaded
    copy was made from."""
    from specdec_studio.engine.models import catalog

    loaded = Path(session.model.info.path)
    return catalog.original_of(loaded) or loaded


def format_speeds(state: WorkerState, wanted: tuple[str, ...]) -> None:
    """Plain, Auto and prompt lookup on the original file and on copies in ``wanted`` formats (made
    once where missing), against plain on the same file and on the original; Stop ends it."""
    from specdec_studio.app.worker.messages import FormatSpeedsMeasured, FormatsProgress
    from specdec_studio.engine.models.quantize import QuantizeStopped
    from specdec_studio.engine.tuning import format_speed, formats
    from specdec_studio.engine.tuning.prompts import shipped

    session = state.require_session()
    original = original_file(session)

    def log(message: str) -> None:
        state.emit(FormatsProgress(message))

    try:
        copies = [(fmt, formats.make_copy(original, fmt, n_threads=session.n_threads, log=log, cancel=state.cancel))
                  for fmt in wanted]
        files = format_speed.measure(
            original, copies, shipped(per_category=1), max_tokens=SPEED_TOKENS, n_threads=session.n_threads,
            n_ctx=session.n_ctx, candidates=SPEED_CANDIDATES, cancel=state.cancel,
            progress=lambda done, total, label: log(f"{done}/{total} {label}"))
    except (format_speed.FormatSpeedCancelled, QuantizeStopped):
        state.emit(FormatSpeedsMeasured((), "The format speed comparison was stopped.", stopped=True))
        return
    state.emit(FormatSpeedsMeasured(tuple(f.to_dict() for f in files), format_speed.sentence(files)))
