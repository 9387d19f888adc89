"""What crosses between the window and the engine thread: the requests the window queues (one per
job) and the reports the engine thread sends back. All frozen: they cross a thread boundary."""

from __future__ import annotations

from dataclasses import dataclass

# the requests that load a model (their names, as JobTaken and JobEnded carry them): the model bar
# reports their failure itself (LoadFailed comes first), and a Stop that must end an engine process
# says a load, not a step, did not finish
LOAD_REQUESTS = ("LoadRequest", "FetchRequest", "DraftRequest")


@dataclass(frozen=True)
class LoadStarted:
    path: str
    what: str = "model"


@dataclass(frozen=True)
class ModelLoaded:
    path: str
    info: dict
    has_chat_template: bool
    n_ctx: int
    n_threads: int
    gpu_offload: bool
    # (path, None if it can draft for this target, else why not)
    draft_candidates: tuple[tuple[str, str | None], ...] = ()
    template_problem: str | None = None  # why the model's chat template was refused
    # llama.cpp RPC servers holding its layers, each as "host:port · device · memory"
    rpc_devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class DownloadProgress:
    key: str
    done_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class DraftLoaded:
    path: str | None
    info: dict | None


@dataclass(frozen=True)
class LoadFailed:
    message: str
    previous_model_kept: bool = False
    what: str = "model"


@dataclass(frozen=True)
class BaselineDone:
    key: tuple
    tokens_per_second: float


@dataclass(frozen=True)
class ProfileStarted:
    what: str  # "target" or "draft"
    measuring: bool  # False: read from the cache


@dataclass(frozen=True)
class ProfileProgress:
    what: str
    fraction: float


@dataclass(frozen=True)
class ProfileReady:
    """The batch-cost profiles of the loaded target and draft, as plain dicts (``to_dict``)."""

    target: dict | None
    draft: dict | None
    message: str = ""  # why a profile is missing (stopped), shown in the status bar


@dataclass(frozen=True)
class ExactnessReady:
    """The exactness probe of the loaded model and what it means for the user."""

    result: dict
    note: str


@dataclass(frozen=True)
class FormatsProgress:
    """The weight-format comparison is on its way: what it is doing now."""

    message: str


@dataclass(frozen=True)
class FormatsCompared:
    """The loaded model and its copies in other weight formats, measured alike (plain dicts, see
    ``engine.tuning.formats.FormatFigures``); ``recommended`` is the copy's path, or None."""

    figures: tuple[dict, ...]
    recommended: str | None
    sentence: str
    stopped: bool = False


@dataclass(frozen=True)
class FormatSpeedsMeasured:
    """Plain, Auto and prompt lookup on the original file and its copies, each against plain on
    the same file and on the original (plain dicts, see ``engine.tuning.format_speed.FileSpeed``)."""

    files: tuple[dict, ...]
    sentence: str
    stopped: bool = False


@dataclass(frozen=True)
class SavedSweeps:
    """The latest sweep of each mode kept for the loaded model (reopened with it)."""

    results: tuple[dict, ...]


@dataclass(frozen=True)
class RunRequested:
    """Echoed when a run really starts on the engine thread (the window clears pending marks)."""

    config: object
    user_text: str
    chat: bool


@dataclass(frozen=True)
class LoadRequest:
    path: str
    n_ctx: int
    n_threads: int | None
    n_gpu_layers: int
    profile: bool = True  # measure the batch-cost profile after loading if none is cached
    rpc_servers: tuple[str, ...] = ()  # "host:port" of llama.cpp rpc-servers that hold its layers


@dataclass(frozen=True)
class DraftRequest:
    path: str | None
    n_gpu_layers: int = 0  # the draft's own GPU layers (the model bar's "Draft GPU layers")


@dataclass(frozen=True)
class FetchRequest:
    key: str
    n_ctx: int
    n_threads: int | None
    as_draft: bool = False  # load it as the draft once downloaded (else as the target)
    # a downloaded model loads with the model bar's GPU layers, as an opened one does (a draft's own)
    n_gpu_layers: int = 0


@dataclass(frozen=True)
class RunRequest:
    config: object
    text: str
    chat: bool
    regenerate: bool = False
    edit_index: int | None = None  # chat: replace this user message with ``text`` and answer it


@dataclass(frozen=True)
class BaselineRequest:
    config: object
    key: tuple


@dataclass(frozen=True)
class ProfileRequest:
    remeasure: bool


@dataclass(frozen=True)
class ProbeRequest:
    pass


@dataclass(frozen=True)
class FormatsRequest:
    formats: tuple[str, ...]


@dataclass(frozen=True)
class FormatSpeedRequest:
    formats: tuple[str, ...]


@dataclass(frozen=True)
class SweepRequest:
    spec: object  # engine.tuning.sweep.SweepSpec


@dataclass(frozen=True)
class ConversationRequest:
    action: str  # "new", "open", "rename", "delete", "list", "system", "start", "interrupted"
    conv_id: str = ""
    text: str = ""  # a title, a system message or a search query
    # "interrupted": the pieces of an answer whose engine process died before it saved them
    pieces: tuple = ()


@dataclass(frozen=True)
class ConversationList:
    """The saved conversations (a search's matches when ``query``), newest first."""

    items: tuple  # engine.chat.store.ConversationSummary
    current: str
    query: str = ""
    damaged: tuple[str, ...] = ()  # files skipped because they are not conversations


@dataclass(frozen=True)
class TraceReady:
    """A run ended: its recording, ready to save, replay or inspect."""

    trace: object  # engine.records.trace.Trace


@dataclass(frozen=True)
class Paused:
    """The run waits after ``step`` (``paused`` False: it runs freely again)."""

    step: int
    paused: bool


@dataclass(frozen=True)
class RaceRequest:
    config: object
    text: str
    chat: bool


@dataclass(frozen=True)
class BatchRequest:
    config: object
    source: str  # "shipped" or a JSON-lines file of {"id", "prompt"} (or the prompt-set format)
    count: int
    parallel: int
    chat: bool


@dataclass(frozen=True)
class ServeRequest:
    """Serve the loaded model over the OpenAI API on 127.0.0.1:``port`` (engine.server) until Stop:
    ``parallel`` requests decode at once in the batch slots, ``queue`` wait or decode at most."""

    config: object
    port: int
    parallel: int
    queue: int


@dataclass(frozen=True)
class ServeStarted:
    url: str  # the API's base, http://127.0.0.1:PORT/v1
    model: str  # the model's name in it
    parallel: int
    slot_cells: int


@dataclass(frozen=True)
class BatchKv:
    """The KV map of a batch: the P sequences sharing the cache."""

    snapshot: object


@dataclass(frozen=True)
class DistillRequest:
    spec: dict  # app.widgets.distill_dialog.DistillDialog.spec()


@dataclass(frozen=True)
class DistillDone:
    """A draft was trained (and is now loaded as the draft); its figures before and after."""

    path: str
    steps: int
    stopped: bool
    loss_first: float | None
    loss_last: float | None
    eval_losses: tuple[float, ...]
    t_train_s: float
    agreement_before: float | None  # None: a Stop ended the measurement
    agreement_after: float | None


@dataclass(frozen=True)
class RaceProgress:
    """A race's run is decoding: ``which`` is "plain" or the strategy's mode."""

    which: str
    n_tokens: int


@dataclass(frozen=True)
class RaceReady:
    """Both runs of a race, recorded one after the other, to be replayed on a common clock."""

    plain: object  # engine.records.trace.Trace
    strategy: object  # engine.records.trace.Trace


@dataclass(frozen=True)
class JobTaken:
    """The engine thread took up job ``job`` (the id its request got): the reports that follow,
    up to its JobEnded, are that job's."""

    job: int
    request: str  # the request's type name ("RunRequest", …)


@dataclass(frozen=True)
class EngineQuiet:
    """The engine process has said nothing for ``seconds`` while a job runs (app.worker.engine_process):
    its RPC servers are still on the step, or one has stopped answering. ``stopping``: a Stop is
    waiting, and the process is ended once the silence since the Stop passes ``grace_s``."""

    seconds: int
    stopping: bool
    grace_s: float


@dataclass(frozen=True)
class JobEnded:
    """Job ``job`` ended: "done", "stopped" (its Stop flag was set) or "failed" (``message`` says why)."""

    job: int
    request: str
    outcome: str
    message: str = ""
