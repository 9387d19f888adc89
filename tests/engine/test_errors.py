"""Every bad input gives one clear sentence: a documented exception (engine) or exit 2 (CLI)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specdec_studio.engine.config import LookaheadParams, RunConfig
from specdec_studio.engine.errors import ConfigError, ContextAllocationError, ModelFileError, PromptError
from specdec_studio.engine.models.loading import LoadedModel
from specdec_studio.engine.session import Session
from tests.conftest import N_THREADS


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="no such file"):
        LoadedModel(tmp_path / "nope.gguf")


def test_not_a_gguf(tmp_path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("this is a text file, not a model\n" * 10)
    with pytest.raises(ModelFileError, match="not a GGUF"):
        LoadedModel(bogus)


def test_truncated_gguf(tmp_path, smollm_path):
    cut = tmp_path / "cut.gguf"
    with smollm_path.open("rb") as src:
        cut.write_bytes(src.read(4 << 20))
    # the pre-flight check names the first problem; llama.cpp never opens the file
    with pytest.raises(ModelFileError, match="cut.gguf: not a usable GGUF model: tensor .* past the end of the file"):
        LoadedModel(cut)


def test_empty_prompt(smollm_session):
    with pytest.raises(PromptError, match="empty"):
        smollm_session.tokenize_prompt("   \n")
    with pytest.raises(PromptError, match="empty"):
        smollm_session.run(RunConfig(), [])


def test_prompt_longer_than_context(smollm_path):
    with Session(smollm_path, n_ctx=64, n_threads=N_THREADS) as session:
        tokens = session.tokenize_prompt("word " * 200)
        with pytest.raises(PromptError, match="context holds only 64"):
            session.run(RunConfig(), tokens)


def test_context_larger_than_memory(smollm_path):
    with pytest.raises(ContextAllocationError, match="lower the context size"):
        Session(smollm_path, n_ctx=50_000_000, n_threads=N_THREADS)


def test_unknown_mode_and_bad_lookahead():
    with pytest.raises(ConfigError, match="unknown mode"):
        RunConfig(mode="turbo").validate()
    with pytest.raises(ConfigError, match="W must be >= 1"):
        RunConfig(mode="lookahead", lookahead=LookaheadParams(W=0)).validate()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "-m", "/does/not/exist.gguf", "-p", "hi"], "no such file"),
        (["run", "-m", "default", "-p", ""], "prompt is empty"),
        (["run", "-m", "default", "-p", "hi " * 100, "-c", "32"], "context holds only 32"),
        (["run", "-m", "default", "-p", "hi", "-c", "50000000"], "lower the context size"),
        (["run", "-m", "default", "-p", "hi", "--mode", "turbo"], "invalid choice"),
    ],
)
def test_cli_errors_are_one_sentence(args, message):
    done = _cli(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_not_a_gguf(tmp_path):
    bogus = tmp_path / "x.gguf"
    bogus.write_bytes(b"\0" * 100)
    done = _cli("run", "-m", str(bogus), "-p", "hi")
    assert done.returncode == 2 and "not a GGUF" in done.stderr and "Traceback" not in done.stderr


def test_auto_runs_in_a_context_too_small_to_profile():
    """The default mode must not refuse a prompt that fits: without a profile Auto prices its
    steps with the run's own timings, and says so once."""
    done = _cli("run", "-m", "default", "-p", "Once upon a time", "-c", "64", "-n", "8")
    assert done.returncode == 0, done.stderr
    assert "too small to profile" in done.stderr and "this run's own timings" in done.stderr
    assert "decoded    8 tokens" in done.stderr and "Traceback" not in done.stderr
