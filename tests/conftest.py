"""Shared fixtures: the two real models from the model cache (`specdec models fetch all`)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from specdec_studio.engine.models import catalog


def _scratch(prefix: str) -> str:
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# Conversations the tests write never land in the user's data directory, and the tests keep a cache
# of their own (profiles, exactness probes, file hashes, sweeps): what this machine measured before
# never steers a test, and no test writes the user's cache. Only the models are the set-up's.
# the user's cache, where built tools (llama.cpp's tiny models of every architecture) are kept
USER_CACHE = os.environ.get("SPECDEC_CACHE")
os.environ["SPECDEC_DATA"] = _scratch("specdec-test-data-")
os.environ.setdefault("SPECDEC_MODELS", str(catalog.cache_dir()))
os.environ["SPECDEC_CACHE"] = _scratch("specdec-test-cache-")

N_THREADS = int(os.environ.get("SPECDEC_TEST_THREADS", "2"))
SMOLLM_N_CTX = 2048  # smollm_session's context, and the windows' that reuse its profile

CODE_PROMPT = (
    "def fibonacci(n):\n"
    "    if n < 2:\n"
    "        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "def factorial(n):\n"
    "    if n < 2:\n"
    "        return 1\n"
    "    return n * factorial(n - 1)\n\n"
    "def "
)
PROSE_PROMPT = "The history of the printing press begins in the fifteenth century, when"


def _model(key: str) -> Path:
    path = catalog.known_path(key)
    if not path.exists():
        pytest.fail(f"model {key} missing: run `specdec models fetch all` (the README's test command does)")
    return path


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    return _model("default")


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return _model("gemma")


@pytest.fixture(scope="session", params=["default", "gemma"])
def any_model_path(request) -> Path:
    return _model(request.param)


@pytest.fixture(scope="module")
def smollm_session(smollm_path):
    from specdec_studio.engine.session import Session

    with Session(smollm_path, n_ctx=SMOLLM_N_CTX, n_threads=N_THREADS) as session:
        yield session


@pytest.fixture(scope="session")
def smollm_profile(smollm_path, tmp_path_factory) -> Path:
    """The default model's batch-cost profile at ``smollm_session``'s setting (2,048 cells), measured
    once per test session (~17 s) into a folder of its own; a module that wants it in its own cache
    copies the file (see :func:`seed_profile`)."""
    from specdec_studio.engine.session import Session
    from specdec_studio.engine.tuning import profile

    cache = tmp_path_factory.mktemp("session-profile")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECDEC_CACHE", str(cache))
        with Session(smollm_path, n_ctx=SMOLLM_N_CTX, n_threads=N_THREADS) as session:
            measured = profile.load_or_measure(session)
    return cache / "profiles" / measured.key.filename()


def seed_profile(stored: Path, cache: Path) -> Path:
    """Copies a stored profile into ``cache`` (a folder SPECDEC_CACHE points at); returns the copy."""
    dest = cache / "profiles" / stored.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(stored, dest)
    return dest


@pytest.fixture(scope="session")
def smollm_drafts(smollm_path) -> dict[str, Path]:
    """Requantised SmolLM2 drafts (made once into the model cache by `specdec models fetch all`)."""
    return {key: catalog.make_derived(key, log=lambda _m: None) for key in ("default-q3_k_m", "default-q2_k")}


@pytest.fixture(scope="session")
def exactness_probe():
    """The exactness probe of a model, measured once per test session (it decodes ~1,400 tokens):
    read from this session's test cache where a test already measured it there (the Profile tab's
    exactness test passes its result on, see ``tests/app/test_tune_panel.py``), else measured now."""
    from specdec_studio.engine.tuning.probe import cached_probe_for, probe_exactness

    results: dict = {}

    def probe(path: Path) -> dict:
        if path not in results:
            results[path] = cached_probe_for(path, N_THREADS) or probe_exactness(path, n_threads=N_THREADS)
        return results[path]

    return probe


def tiny_archs_folder() -> Path | None:
    """The folder of llama.cpp's tiny random model of every architecture, in the user's cache
    where scripts/tiny_archs.sh (run by `scripts/setup.sh --all`) wrote them; None if it has not.
    Read only: the tests never build into the user's cache."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "SPECDEC_CACHE"}
    if USER_CACHE:
        env["SPECDEC_CACHE"] = USER_CACHE
    env["SPECDEC_TOOLS_NO_BUILD"] = "1"
    done = subprocess.run([str(root / "scripts" / "tiny_archs.sh")], cwd=root, env=env, capture_output=True, text=True)
    return Path(done.stdout.strip()) if done.returncode == 0 else None


@pytest.fixture(scope="session")
def tiny_archs() -> Path:
    folder = tiny_archs_folder()
    assert folder is not None, "the tiny models are missing: run scripts/tiny_archs.sh (scripts/setup.sh --all does)"
    return folder
