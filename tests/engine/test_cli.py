"""The headless CLI on the default model."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import N_THREADS


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, check=True)


def test_run_json_has_every_field():
    done = _cli("run", "-m", "default", "--mode", "plain", "-p", "Once upon a time", "-n", "24",
                "-t", str(N_THREADS), "--json")
    out = json.loads(done.stdout)
    assert set(out) >= {"text", "token_ids", "finish_reason", "model", "config", "stats"}
    assert len(out["token_ids"]) == 24 and out["finish_reason"] == "length"
    assert out["model"]["arch"] == "llama" and out["model"]["n_vocab"] == 49152
    assert len(out["model"]["sha256"]) == 16
    assert out["config"]["mode"] == "plain" and out["config"]["max_tokens"] == 24
    stats = out["stats"]
    for key in ("n_prompt", "n_predict", "n_drafted", "n_accept", "steps", "t_encode_s", "t_decode_s",
                "tokens_per_second"):
        assert key in stats
    assert stats["n_predict"] == 24 and stats["steps"] == 24


def test_run_prints_llama_cpp_style_figures():
    done = _cli("run", "-m", "default", "-p", "Once upon a time", "-n", "16", "-t", str(N_THREADS))
    assert done.stdout.strip()
    assert "encoded" in done.stderr and "decoded   16 tokens" in done.stderr and "n_predict = 16" in done.stderr


def test_lookup_policies_both_run_and_say_what_they_drafted():
    prompt = "one two three four five. one two three four five. one two three"
    drafted = {}
    for policy in ("cache", "latest"):
        out = json.loads(_cli("run", "-m", "default", "--mode", "lookup", "--lookup", policy, "-k", "4", "-p", prompt,
                              "-n", "24", "-t", str(N_THREADS), "--json").stdout)
        assert out["config"]["lookup"] == policy
        drafted[policy] = out["stats"]["n_drafted"]
    assert drafted["cache"] > 0 and drafted["latest"] > 0


def test_models_list_shows_both_models():
    out = json.loads(_cli("models", "list", "--json").stdout)
    by_arch = {row["arch"]: row for row in out if "arch" in row}
    assert by_arch["llama"]["n_vocab"] == 49152 and by_arch["llama"]["chat_template"] is True
    assert by_arch["gemma3"]["n_vocab"] == 262144 and by_arch["gemma3"]["chat_template"] is False
