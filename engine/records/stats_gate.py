"""A recorded run's figures (``RunFinished.stats``) checked to the shapes their readers use: the
CLI's printing, the window's figures and Auto's account, the video's title card. A trace may be
damaged or crafted; a figure of the wrong type is refused in one sentence (a ValueError the trace
reader turns into its TraceError), and a key no reader knows is dropped."""

from __future__ import annotations

import math

MAX_COUNT = 1 << 40  # tokens, steps and cells of one run are far fewer
MAX_LISTED = 4096  # rows of a table (tokens per step, shapes, positions, calibration, sources)

# what every finished run's figures hold, and the CLI and the window print
COUNTS = ("n_prompt", "n_prompt_reused", "n_prompt_decoded", "n_predict", "n_drafted", "n_accept", "steps")
NUMBERS = ("accept_rate", "tokens_per_step", "mean_accepted_per_step", "t_draft_s", "t_encode_s", "t_decode_s",
           "t_generate_s", "decode_time_share", "host_ms_per_step", "encode_tokens_per_second",
           "tokens_per_second", "predicted_speedup", "measured_speedup", "plain_tokens_per_second")
REQUIRED = ("n_prompt", "n_predict", "n_drafted", "n_accept", "steps", "t_encode_s", "t_generate_s",
            "encode_tokens_per_second", "tokens_per_second")


def checked_stats(raw: dict) -> dict:
    """``raw`` (a RunFinished's stats as JSON gave them, integer keys restored) as its readers may
    use it; a ValueError saying which figure is wrong otherwise."""
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise ValueError(f"the run's figures lack {', '.join(missing[:3])}")
    out: dict = {}
    for key in COUNTS:
        if key in raw:
            out[key] = _count(raw[key], key)
    for key in NUMBERS:
        if key in raw:
            out[key] = _number(raw[key], key)
    if out["n_drafted"] and "accept_rate" not in out:
        raise ValueError("the run's figures lack accept_rate")
    if "tokens_per_step_hist" in raw:
        hist = _mapping(raw["tokens_per_step_hist"], "tokens_per_step_hist")
        out["tokens_per_step_hist"] = {_count(k, "tokens_per_step_hist"): _count(v, "tokens_per_step_hist")
                                       for k, v in hist.items()}
    for key in ("decode_shapes", "draft_decode_shapes"):
        if key in raw:
            out[key] = [_shape(row, key) for row in _rows(raw[key], key)]
    if "accept_per_position" in raw:
        out["accept_per_position"] = [_number(v, "accept_per_position") for v in _rows(raw["accept_per_position"],
                                                                                        "accept_per_position")]
    if "auto" in raw:
        out["auto"] = checked_auto(raw["auto"])
    return out


def checked_auto(raw: object) -> dict:
    """Auto's account of a run (strategies.auto.report.AutoReport.as_dict, and its planner's)."""
    auto = _mapping(raw, "auto")
    out: dict = {
        "decisions": {_text(k, "auto decisions"): _count(v, "auto decisions")
                      for k, v in _mapping(auto.get("decisions", {}), "auto decisions").items()},
        "sources": {_text(name, "auto sources"): _source(entry)
                    for name, entry in _mapping(auto.get("sources", {}), "auto sources").items()},
        "calibration": [_calibration_row(row) for row in _rows(auto.get("calibration", []), "auto calibration")],
    }
    agreed = _mapping(auto.get("agreed", {}), "auto agreed")
    out["agreed"] = {k: _count(agreed.get(k, 0), "auto agreed") for k in ("offered", "accepted")}
    for key in ("step_tokens_max", "loop_steps"):
        if key in auto:
            out[key] = _count(auto[key], f"auto {key}")
    if "trust" in auto:
        out["trust"] = _number(auto["trust"], "auto trust")
    if "draft" in auto:
        draft = _mapping(auto["draft"], "auto draft")
        out["draft"] = {
            "source": _text(draft.get("source", "draft model"), "auto draft"),
            **{k: _count(draft.get(k, 0), "auto draft") for k in ("steps_asked", "tokens_judged", "tokens_right")},
            "token_cost": _number(draft.get("token_cost", 0.0), "auto draft"),
            "verdict": _text(draft.get("verdict", ""), "auto draft"),
        }
    return out


def _source(raw: object) -> dict:
    entry = _mapping(raw, "auto sources")
    out = {k: _count(entry.get(k, 0), "auto sources") for k in ("proposed", "offered", "accepted")}
    if "ruled_out" in entry:
        out["ruled_out"] = _text(entry["ruled_out"], "auto sources")
    return out


def _calibration_row(raw: object) -> dict:
    row = _mapping(raw, "auto calibration")
    return {"bin": _text(row.get("bin", ""), "auto calibration"), "n": _count(row.get("n", 0), "auto calibration"),
            **{k: _number(row.get(k, 0.0), "auto calibration") for k in ("predicted", "observed")}}


def _shape(raw: object, key: str) -> list[int]:
    row = _rows(raw, key)
    if len(row) != 3:
        raise ValueError(f"the run's figure {key} holds a row of {len(row)} values, not 3")
    return [_count(v, key) for v in row]


def _count(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"the run's figure {key} is {_shown(value)}, not a count")
    return value


def _number(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"the run's figure {key} is {_shown(value)}, not a number of 0 or more")
    return float(value)


def _text(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"the run's figure {key} holds {_shown(value)}, not text")
    return value[:400]


def _mapping(value: object, key: str) -> dict:
    if not isinstance(value, dict) or len(value) > MAX_LISTED:
        raise ValueError(f"the run's figure {key} is {_shown(value)}, not a table")
    return value


def _rows(value: object, key: str) -> list:
    if not isinstance(value, list) or len(value) > MAX_LISTED:
        raise ValueError(f"the run's figure {key} is {_shown(value)}, not a list")
    return value


def _shown(value: object) -> str:
    """A damaged value as one short phrase (a crafted file's may be long)."""
    return type(value).__name__ if isinstance(value, (dict, list)) else repr(value)[:40]
