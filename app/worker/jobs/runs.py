"""Jobs that decode: a run (completion or chat turn), a race of plain against a strategy, the plain
baseline of the last prompt."""

from __future__ import annotations

from specdec_studio.app.worker.jobs import conversations
from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.app.worker.messages import (
    BaselineDone,
    BaselineRequest,
    Paused,
    RaceProgress,
    RaceReady,
    RaceRequest,
    RunRequest,
    RunRequested,
    TraceReady,
)


def run(state: WorkerState, command: RunRequest) -> None:
    from specdec_studio.engine.events import KvSnapshot, RunFinished, StepDone
    from specdec_studio.engine.records.trace import TraceRecorder

    session = state.require_session()
    if command.chat:
        chat = conversations.require_chat(state)
        if command.regenerate:
            events = chat.regenerate(command.config, fresh_cancel=False)
        elif command.edit_index is not None:
            events = chat.edit(command.edit_index, command.text, command.config, fresh_cancel=False)
        else:
            events = chat.send(command.config, command.text, fresh_cancel=False)
        user_text = chat.conversation.messages[-1].content
    else:
        user_text = command.text
        tokens = session.tokenize_prompt(user_text)
        events = session.run(command.config, tokens, prompt_text=user_text, fresh_cancel=False,
                             reuse_prefix=True)
    state.last_prompt_tokens = list(session.last_prompt_tokens)
    state.emit(RunRequested(command.config, user_text, command.chat))
    finished = False
    recorder = TraceRecorder()

    def hold(step: int) -> None:  # between two steps, at the demo's gate
        with session.off_the_clock():  # a demo's pause is no generation time
            state.gate.wait(on_pause=lambda: state.emit(Paused(step, True)))

    held_after = None  # a step whose KV picture comes next: the gate waits after it, not before
    try:
        for event in events:
            if held_after is not None and not (isinstance(event, KvSnapshot) and event.step == held_after):
                hold(held_after)  # the picture did not come (the mirror failed meanwhile)
                held_after = None
            finished = finished or isinstance(event, RunFinished)
            state.emit(event)
            recorder.add(event)
            # each step's KV picture comes as the event after its StepDone (the session's
            # step_snapshots, set at load: app.jobs.models); a held run shows both
            if isinstance(event, StepDone):
                if session.step_snapshots and session.memory.mirror_ok:
                    held_after = event.step
                else:
                    hold(event.step)
            elif held_after is not None:  # the step's KV picture, just shown
                hold(held_after)
                held_after = None
        recorded = recorder.trace()
        if recorded is not None and finished:
            state.emit(TraceReady(recorded))
    finally:
        # Whatever ended the loop (an exception here included), the run's generator is closed
        # now, so a chat turn marks its answer interrupted before the window is shown it.
        events.close()
        if command.chat:  # a failed turn keeps what it wrote (marked interrupted): show it
            conversations.store_of(state).set_last_opened(state.conversation.id)
            if finished:
                conversations.emit_list(state)
            else:
                conversations.show(state)


def race(state: WorkerState, command: RaceRequest) -> None:
    """Record plain and the strategy one after the other on the same prompt; the window
    replays both on a common clock. Neither run reuses the other's cache, so both decode
    the whole prompt."""
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.events import RunFailed, RunFinished, StepDone
    from specdec_studio.engine.records.trace import TraceRecorder

    session = state.require_session()
    if command.chat and session.has_chat_template:
        tokens = session.chat_tokens([("user", command.text)])
    else:
        tokens = session.tokenize_prompt(command.text)
    plain = RunConfig(mode="plain", max_tokens=command.config.max_tokens, sampling=command.config.sampling)
    traces = []
    for which, config in (("plain", plain), (command.config.mode, command.config)):
        recorder = TraceRecorder()
        n_tokens = 0
        for event in session.run(config, tokens, prompt_text=command.text, fresh_cancel=False):
            recorder.add(event)
            if isinstance(event, StepDone):  # its KV picture is the next event (the session's step_snapshots)
                n_tokens += len(event.tokens)
                state.emit(RaceProgress(which, n_tokens))
            elif isinstance(event, RunFailed):
                state.emit(event)
                return
            elif isinstance(event, RunFinished) and event.finish_reason == "cancelled":
                state.emit(RunFailed("the race was stopped"))
                return
        traces.append(recorder.trace())
    state.emit(RaceReady(traces[0], traces[1]))


def baseline(state: WorkerState, command: BaselineRequest) -> None:
    """A plain run of the last run's prompt: the speed-up's denominator, measured on demand."""
    from specdec_studio.engine.errors import SpecDecError
    from specdec_studio.engine.events import RunFinished

    session = state.require_session()
    if not state.last_prompt_tokens:
        raise SpecDecError("run something first; the baseline repeats the last prompt with plain decoding")
    final = None
    for event in session.run(command.config, state.last_prompt_tokens, fresh_cancel=False):
        if isinstance(event, RunFinished):
            final = event
    if final is None or final.finish_reason == "cancelled":
        raise SpecDecError("stopped: the plain baseline was not measured")
    state.emit(BaselineDone(command.key, final.stats["tokens_per_second"]))
