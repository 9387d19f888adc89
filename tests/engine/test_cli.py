"""The headless CLI on the default model."""

from __future__ import annotations

import json
import subprocess
import sys

from specdec_studio.engine.config import DEFAULT_MODE
from tests.conftest import N_THREADS


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdec_studio.engine.cli", *args], capture_output=True, text=True, check=True
    )


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
    assert stats["predicted_speedup"] == 1.0  # plain is plain: no batch-cost profile measured for it
    # the host's share: the generation's time outside the 23 decodes after the prompt's, per step
    host = stats["t_generate_s"] - stats["t_decode_s"]
    assert stats["host_ms_per_step"] > 0 and abs(stats["host_ms_per_step"] - 1e3 * host / 23) < 1e-6


def test_run_prints_llama_cpp_style_figures():
    # the default mode (Auto); --no-predict: its profile's measurement (20 s) is tested elsewhere
    done = _cli("run", "-m", "default", "-p", "Once upon a time", "-n", "16", "-t", str(N_THREADS), "--no-predict")
    assert done.stdout.strip()
    assert "encoded" in done.stderr and "decoded   16 tokens" in done.stderr and "n_predict = 16" in done.stderr


def test_lookup_policies_both_run_and_say_what_they_drafted():
    prompt = "one two three four five. one two three four five. one two three"
    drafted = {}
    for policy in ("cache", "latest"):
        out = json.loads(_cli("run", "-m", "default", "--mode", "lookup", "--lookup", policy, "-k", "4", "-p", prompt,
                              "-n", "24", "-t", str(N_THREADS), "--json", "--no-predict").stdout)
        assert out["config"]["lookup"] == policy
        drafted[policy] = out["stats"]["n_drafted"]
    assert drafted["cache"] > 0 and drafted["latest"] > 0


def test_models_list_shows_both_models():
    out = json.loads(_cli("models", "list", "--json").stdout)
    by_arch = {row["arch"]: row for row in out if "arch" in row}
    assert by_arch["llama"]["n_vocab"] == 49152 and by_arch["llama"]["chat_template"] is True
    assert by_arch["gemma3"]["n_vocab"] == 262144 and by_arch["gemma3"]["chat_template"] is False


def test_chat_reads_one_turn_per_line_with_reuse_and_commands(tmp_path):
    import os

    env = {**os.environ, "SPECDEC_DATA": str(tmp_path)}
    script = "Name a colour.\nWhy that one?\n/regen\n/save Colours\n/list\n/bogus\n"
    done = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "chat", "-n", "16", "--mode", "lookup",
                           "-t", str(N_THREADS), "-c", "1024"], input=script, capture_output=True, text=True,
                          env=env, check=True)
    figures = [line for line in done.stderr.splitlines() if "reused" in line]
    assert len(figures) == 3  # two turns and a regeneration
    reused = [int(line.split("(")[1].split()[0]) for line in figures]
    assert reused[0] == 0 and reused[1] > 20 and reused[2] > reused[1]  # /regen keeps the whole prompt
    assert "saved as" in done.stderr and "Colours" in done.stderr
    assert "unknown command /bogus" in done.stderr
    conv_id = done.stderr.split("saved as ")[1].split(":")[0]
    again = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "chat", "-n", "8", "-t", str(N_THREADS),
                            "-c", "1024", "--load", conv_id], input="And another?\n", capture_output=True,
                           text=True, env=env, check=True)
    assert "loaded 'Colours': 4 messages" in again.stderr
    assert "reused" in again.stderr


def test_transcript_exports_markdown_and_html():
    from specdec_studio.engine.chat.conversation import Conversation, Message
    from specdec_studio.engine.chat.transcript import to_html, to_markdown

    conv = Conversation(title="Colours")
    conv.add(Message("user", "Name a colour <b>."))
    conv.add(
        Message(
            "assistant",
            "Blue sky",
            pieces=[["Blue", "sampled", 0, 5, 0.0], [" sky", "accepted_ngram", 1, 9, 1.0]],
            figures={
                "mode": "lookahead",
                "n_predict": 2,
                "tokens_per_second": 50.0,
                "tokens_per_step": 2.0,
                "n_drafted": 1,
                "n_accept": 1,
            },
        )
    )
    md = to_markdown(conv.view())
    assert md.startswith("# Colours") and "**You**" in md and "Blue sky" in md and "accepted 1/1" in md
    page = to_html(conv.view())
    assert "&lt;b&gt;" in page and "<b>." not in page  # message text is escaped
    assert 'color:#0a8fa8' in page and "accepted from an n-gram" in page  # coloured token and legend


def test_auto_never_runs_a_draft_model_that_cannot_pay(capsys):
    """``-md`` is kept for Auto, which prices the draft: SmolLM2's Q8_0 copy decodes a token in
    about the target's own time, so no acceptance could make drafting with it pay here, and Auto
    never asks it (not even to probe) and decodes as it would without it."""
    from specdec_studio.engine.cli import main

    # counting: the draft would be sure of the next numbers
    argv = ["run", "-m", "default", "--mode", "auto", "-n", "24", "-t", str(N_THREADS),
            "-p", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", "--json", "--no-predict"]
    assert main(argv + ["-md", "default-q8_0"]) == 0
    with_draft = json.loads(capsys.readouterr().out)
    assert with_draft["config"]["mode"] == "auto" and "k_max" in with_draft["config"]
    assert with_draft["stats"]["auto"]["sources"].get("draft", {}).get("offered", 0) == 0
    assert with_draft["stats"]["n_predict"] == 24
    # the JSON names the draft and says why it never ran: its price
    assert with_draft["config"]["draft"].endswith(".draft-Q8_0.gguf")
    draft = with_draft["stats"]["auto"]["draft"]
    assert draft["source"] == "draft model" and draft["steps_asked"] == 0
    assert draft["verdict"].startswith(f"never run: a draft token costs {draft['token_cost']:.2f} target steps")
    # every source considered is listed, the draft with the price that ruled it out
    sources = with_draft["stats"]["auto"]["sources"]
    assert set(sources) == {"ngram", "ngram_alt", "suffix", "draft"}
    assert sources["draft"] == {"proposed": 0, "offered": 0, "accepted": 0, "ruled_out": draft["verdict"]}
    assert sources["suffix"]["proposed"] > 0  # the counting repeats: the suffix match proposed
    assert main(argv) == 0
    alone = json.loads(capsys.readouterr().out)
    assert with_draft["text"] == alone["text"]
    assert alone["config"]["draft"] is None and "draft" not in alone["stats"]["auto"]


def test_auto_settings_survive_the_config_round_trip():
    from specdec_studio.engine.config import RunConfig, SpeculativeParams

    config = RunConfig(mode="auto", max_tokens=33, speculative=SpeculativeParams(k_max=7, p_min=0.25))
    data = config.as_dict()
    assert data["k_max"] == 7 and data["p_min"] == 0.25
    assert RunConfig.from_dict(json.loads(json.dumps(data))) == config


def test_a_config_of_the_wrong_shape_is_refused_in_one_sentence():
    import pytest

    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.errors import ConfigError

    for bad in ([], {"mode": "warp"}, {"mode": "lookahead", "W": "many"}, {"max_tokens": None},
                {"mode": "auto", "k_max": True}, {"temperature": float("nan")}, {"mode": "lookahead", "W": 10**9}):
        with pytest.raises(ConfigError) as err:
            RunConfig.from_dict(bad)
        assert "\n" not in str(err.value)


TURNS = "Say hello in French.\nWhat is 2+2?\nName a colour.\n"


def _chat(tmp_path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "SPECDEC_DATA": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "chat", "-n", "12", "-t", str(N_THREADS),
                           "-c", "1024", *args], input=TURNS, capture_output=True, text=True, env=env, check=True)


def _saved(tmp_path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "conversations").glob("*.json"))]


def test_chat_in_a_pipe_ends_each_answer_with_a_newline_and_saves_every_turn(tmp_path):
    done = _chat(tmp_path)
    conv_id = done.stderr.split("[conversation ")[1].split(":")[0]
    saved = _saved(tmp_path)
    assert [c["id"] for c in saved] == [conv_id]
    messages = saved[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert all(m["state"] == "done" for m in messages)
    answers = [m["content"] for m in messages[1::2]]
    assert all(a.strip() for a in answers)
    assert done.stdout == "".join(a + "\n" for a in answers)  # each answer ends with a newline


def test_chat_json_prints_one_object_per_turn(tmp_path):
    done = _chat(tmp_path, "--json")
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    turns = [json.loads(line) for line in lines]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert len({t["conversation"] for t in turns}) == 1
    for t in turns:
        assert t["text"] and len(t["token_ids"]) <= 12 and t["finish_reason"] in ("stop", "length")
        assert t["stats"]["n_predict"] == len(t["token_ids"])
        assert ("auto" in t["stats"]) == (DEFAULT_MODE == "auto")  # a chat runs the default mode unless told otherwise
    assert [m["content"] for m in _saved(tmp_path)[0]["messages"][1::2]] == [t["text"] for t in turns]


def test_chat_no_save_writes_nothing(tmp_path):
    done = _chat(tmp_path, "--no-save")
    assert done.stdout.endswith("\n") and "not saved" in done.stderr
    assert done.stderr.count("tokens/step") == 3  # three turns answered
    assert not (tmp_path / "conversations").exists() or not list((tmp_path / "conversations").iterdir())
