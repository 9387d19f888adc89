"""The draft-training job: distil a draft for the loaded target, measure it, load it."""

from __future__ import annotations

from specdec_studio.app.worker.jobs import models
from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.app.worker.messages import DistillDone


def train_draft(state: WorkerState, spec: dict) -> None:
    from pathlib import Path

    from specdec_studio.engine.drafts import distill
    from specdec_studio.engine.drafts.measure import greedy_agreement, held_out_split
    from specdec_studio.engine.tuning import prompts
    from specdec_studio.engine.tuning.sweep import prompt_tokens

    session = state.require_session()
    chosen = prompts.shipped() if spec["prompts"] == "shipped" else prompts.load_file(spec["prompts"])
    chosen = chosen[: spec["count"]]
    train_prompts, held_prompts = held_out_split(chosen)
    train = [prompt_tokens(session, p, True) for p in train_prompts]
    held = [prompt_tokens(session, p, True) for p in held_prompts] or train[:1]
    result = distill.distill_draft(session, Path(spec["draft"]), train, spec["steps"], Path(spec["output"]),
                                   n_tokens=spec["n_tokens"], keep_layers=spec["keep_layers"],
                                   cancel=state.cancel, progress=state.emit)
    # A Stop that ended the training early does not skip the measurement: it gets a Stop flag of
    # its own, which a second Stop sets (the trained draft is then loaded unmeasured).
    measuring = state.tokens.issue()
    state.begin_job(measuring)
    try:
        n_check = min(48, spec["n_tokens"])
        before = greedy_agreement(session, Path(result.start_path), held, n_check, cancel=measuring)
        after = greedy_agreement(session, result.path, held, n_check, cancel=measuring)
        state.emit(DistillDone(str(result.path), result.steps, result.stopped,
                               result.losses[0] if result.losses else None,
                               result.losses[-1] if result.losses else None, tuple(result.eval_losses),
                               result.t_train_s, before, after))
        # its profile, too, stops at the second Stop
        models.load_draft(state, str(result.path), spec.get("draft_gpu_layers", 0))
    finally:
        state.tokens.retire(measuring)
