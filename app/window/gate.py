"""The door every job goes through: it asks the activity table (app/model/activity.py) whether a
job may start, starts it on the engine worker, takes the engine's reports of the job in hand, and
stops it. The only writer of the activity machine."""

from __future__ import annotations

from collections.abc import Callable

from specdec_studio.app.model.activity import Activity, Trigger, refusal
from specdec_studio.app.window.controller import Controller
from specdec_studio.app.worker.messages import LOAD_REQUESTS, EngineQuiet, JobEnded, JobTaken


class ActivityGate(Controller):
    _stream_job: int | None = None  # the job whose reports the engine thread sends now

    def handlers(self) -> dict[type, Callable]:
        return {JobTaken: self._on_job_taken, JobEnded: self._on_job_ended, EngineQuiet: self._on_engine_quiet}

    def ready_for(self, trigger: Trigger) -> bool:
        """Whether the activity table allows ``trigger`` now; else the status bar says why (asked
        before a dialog opens or the prompt is read; start_job asks again)."""
        loaded = self.model.models.loaded
        if self.model.machine.allows(trigger, model_loaded=loaded):
            return True
        self.say(self._refusal(trigger))
        return False

    def _refusal(self, trigger: Trigger) -> str:
        """Why ``trigger`` waits, in one sentence: a server holding the engine says so itself."""
        machine = self.model.machine
        if machine.kind == "serve" and machine.activity is Activity.RUNNING:
            return ("The engine is serving requests (the Batch tab shows them): press Stop to end the server, "
                    "then this runs here.")
        return refusal(machine.activity, trigger, self.model.models.loaded)

    def start_job(self, trigger: Trigger, submit: Callable[[], int | None], *, kind: str = "") -> bool:
        """Start a job if the activity table allows ``trigger`` now: ``submit`` queues it on the
        engine worker and returns its id (None for a replay, which needs no engine). A request the
        table refuses changes nothing and says why in one sentence."""
        machine = self.model.machine
        if not machine.allows(trigger, model_loaded=self.model.models.loaded):
            self.say(self._refusal(trigger))
            return False
        skipped_profile = machine.activity is Activity.PROFILING
        if skipped_profile:  # the user's request comes first: the profile is stopped, not waited for
            self.window.worker.stop()
        if machine.activity is Activity.REPLAYING and trigger is not Trigger.REPLAY:
            self.window.demo.close_replay()
        machine.apply(trigger, job=submit(), kind=kind)
        if skipped_profile:
            self.say("The batch-cost profile was skipped for this "
                     + ("run" if trigger is Trigger.RUN else "request") + " (Profile → Re-measure measures it)")
        return True

    def apply(self, trigger: Trigger) -> bool:
        """A transition the window itself decides (a resume, a replay's end or close)."""
        return self.model.machine.apply(trigger)

    def engine_trigger(self, trigger: Trigger) -> None:
        """A step of the job in hand that the engine thread reports (downloaded, measuring, held):
        taken only if the reports come from the job the activity belongs to."""
        if self.model.machine.owns(self._stream_job):
            self.model.machine.apply(trigger)

    def stop(self) -> None:
        """Stop what runs: the engine's job (a run held at the step gate wakes too; the demo's hold
        stays for the next run), or the replay."""
        machine = self.model.machine
        activity = machine.activity
        if not machine.allows(Trigger.STOP) or machine.stopping:
            self.say("Nothing to stop." if not machine.stopping else "Stopping already…")
            return
        if activity is Activity.REPLAYING:
            self.window.demo.stop_replay()
            return
        self.window.worker.stop()
        machine.apply(Trigger.STOP)
        if activity is Activity.DOWNLOADING:  # ends within a second, keeping nothing
            self.say(f"Stopping the download of {self.model.models.download_key}…")
        elif activity is Activity.LOADING:  # llama.cpp's load cannot be interrupted: what follows it is skipped
            self.say("Stopping: the model finishes loading, its profile is skipped…")
        else:
            self.say("Stopping…")

    def _on_job_taken(self, event: JobTaken) -> None:
        self._stream_job = event.job

    def _on_engine_quiet(self, event: EngineQuiet) -> None:
        """A job on RPC servers has gone silent: say so, and what Stop will do, on the status bar."""
        if event.stopping:
            self.say(f"Stopping… no word from the RPC servers for {event.seconds} s: the engine process is ended "
                     f"{event.grace_s:.0f} s after Stop if they stay silent (the chat is kept).")
        else:
            self.say(f"No word from the RPC servers for {event.seconds} s: they are still on this step, or one "
                     f"stopped answering. Stop ends the engine process if they stay silent; the chat is kept.")

    def _on_job_ended(self, event: JobEnded) -> None:
        """The end of a job: the activity ends if it was the job it belongs to. A failure is said
        once: by the model bar for a load, else here; a stopped job that was already left behind
        (a profile skipped by Run) says nothing."""
        machine = self.model.machine
        current = machine.owns(event.job)
        kind = machine.kind
        if current:
            machine.apply(Trigger.ENDED)
            if kind == "run":
                self.window.runs.show_engine_record()  # the conversation as the engine kept it
        if event.outcome == "stopped" and not current:
            return
        if event.message and event.request not in LOAD_REQUESTS:
            if not current:
                self.say(event.message[0].upper() + event.message[1:])
                return
            if kind == "train":
                self.window.jobs.training_ended()
            elif kind == "sweep":
                self.window.tune.on_failed()
            self.window.runs.failed(event.message)
