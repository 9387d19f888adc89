"""A trace's events read back from JSON, every field checked for its type and range: a trace may be
damaged or crafted, and nothing in it may reach the window, the CLI or a video unchecked."""

from __future__ import annotations

import math

import numpy as np

from specdec_studio.engine.config import MAX_SEQUENCES, RunConfig
from specdec_studio.engine.events import (
    AutoStep,
    BatchRow,
    Event,
    Explanation,
    KvSnapshot,
    RecurrentState,
    RejectedDraft,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWarning,
    StepBatch,
    StepDone,
    TokenInfo,
)
from specdec_studio.engine.records.stats_gate import checked_stats
from specdec_studio.engine.strategies.explain import TOP_N

MAX_TOKEN_TEXT = 64  # characters of a listed token's text kept from a trace (a crafted file may hold more)
MAX_MATCHED_TEXT = 400
MAX_KV_CELLS = 1 << 20  # a trace's KV map is at most this many cells wide (llama.cpp contexts here are far smaller)


# Typed reads of a JSON value: a wrong type is a corrupted trace, never a crash further on.
def as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def as_number(value: object) -> float:
    """A finite number: a NaN or infinite time would stall a replay's clock for ever."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value}")
    return number


def as_string(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def as_object(value: object) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def as_list(value: object) -> list:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _in_range(value: object, low: int, high: int, what: str) -> int:
    """An integer ``low <= value < high``."""
    value = as_int(value)
    if not low <= value < high:
        raise ValueError(f"{what} {value} is outside [{low}, {high})")
    return value


def _step_figures(extra: dict) -> dict:
    """A step's figures as the window and the CLI read them: the draft length ``k`` an integer in
    range; anything else a strategy wrote (a drafting time, lookahead's pool) is kept only if it is
    a finite number, as the type it was written with."""
    figures = {}
    for key, value in extra.items():
        if key == "k":
            figures[key] = _in_range(value, 0, MAX_SEQUENCES * 64, "a draft length")
        elif isinstance(value, int) and not isinstance(value, bool):
            figures[as_string(key)] = value
        elif isinstance(value, float):
            figures[as_string(key)] = as_number(value)
    return figures


def _auto_step(value: object, n_tokens: int) -> AutoStep:
    record = as_object(value)
    proposers = tuple(as_string(p)[:40] for p in as_list(record.get("proposers", [])))
    if len(proposers) != n_tokens:
        raise ValueError(f"an Auto step names {len(proposers)} proposers for {n_tokens} tokens")
    gain = as_number(record.get("predicted_gain", 1.0))
    return AutoStep(as_string(record.get("decision", "plain"))[:80], _in_range(record.get("k", 0), 0, 1 << 16, "k"),
                    _in_range(record.get("branches", 0), 0, MAX_SEQUENCES + 1, "branches"),
                    _in_range(record.get("depth", 0), 0, 1 << 16, "a depth"), gain, proposers)


def _tokens(rows: object) -> tuple[TokenInfo, ...]:
    out = []
    for row in as_list(rows):
        row = as_list(row)
        if len(row) not in (3, 4):
            raise ValueError(f"a token has {len(row)} fields, not 3 or 4")
        text = as_string(row[1])
        why = _why(as_object(row[3]), text) if len(row) == 4 else None
        out.append(TokenInfo(as_int(row[0]), text, as_string(row[2]), why))
    return tuple(out)


def _ranked(value: object) -> tuple[tuple[int, str, float], ...]:
    out = []
    for entry in as_list(value)[:TOP_N]:
        token, text, p = as_list(entry)
        out.append((as_int(token), as_string(text)[:MAX_TOKEN_TEXT], _probability(p)))
    return tuple(out)


def _probability(value: object) -> float:
    p = as_number(value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a probability of {p}")
    return p


def _why(record: dict, chosen_text: str) -> Explanation:
    """An explanation as :func:`why_record` wrote it; the chosen token's text is the token's own."""
    proposed, proposed_text = as_list(record["proposed"]) if "proposed" in record else (-1, "")
    rule = as_list(record["rule"]) if "rule" in record else []
    if rule and len(rule) != 3:
        raise ValueError("a sampling rule needs p, q and the draw")
    p, q, draw = (None if x is None else as_number(x) for x in rule) if rule else (None,) * 3
    return Explanation(_ranked(record["top"]), _probability(record["p"]), chosen_text, as_int(proposed),
                       as_string(proposed_text)[:MAX_TOKEN_TEXT], as_string(record.get("by", ""))[:40],
                       bool(record.get("ok", False)), _ranked(record.get("qtop", [])),
                       as_string(record.get("matched", ""))[:MAX_MATCHED_TEXT], bool(rule), p, q, draw)


def event_from_json(kind: str, data: dict, kv: KvDecoder) -> Event:
    """The event a trace line of type ``kind`` holds, every field checked; a TypeError, KeyError or
    ValueError names what is wrong."""
    if kind == "StepDone":
        tokens = _tokens(data["tokens"])
        extra = dict(as_object(data.get("extra") or {}))
        # Auto's decision: its own field, or (traces written before it had one) extra's "auto"
        auto = data.get("auto", extra.pop("auto", None))
        return StepDone(as_int(data["step"]), tokens, as_int(data["n_drafted"]), as_int(data["n_accepted"]),
                        as_number(data["t_decode_s"]), as_number(data["t_step_s"]), _step_figures(extra),
                        None if auto is None else _auto_step(auto, len(tokens)))
    if kind == "StepBatch":
        rows = []
        for row in as_list(data["rows"]):
            tok, text, pos, seqs, logits, role, verdict = as_list(row)
            rows.append(BatchRow(as_int(tok), as_string(text), as_int(pos),
                                 tuple(_in_range(s, 0, MAX_SEQUENCES, "sequence") for s in as_list(seqs)),
                                 bool(logits), as_string(role), as_string(verdict)))
        return StepBatch(as_int(data["step"]), tuple(rows))
    if kind == "KvSnapshot":
        return kv.decode(data)
    if kind == "RunStarted":
        config = as_object(data["config"])
        RunConfig.from_dict(config)
        return RunStarted(dict(config), dict(as_object(data["model"])), as_int(data["n_prompt"]),
                          as_string(data["prompt_text"]))
    if kind == "RunFinished":
        end_token = data.get("end_token")
        return RunFinished(as_string(data["text"]), tuple(as_int(i) for i in as_list(data["token_ids"])),
                           as_string(data["finish_reason"]), checked_stats(_int_keys(as_object(data["stats"]))),
                           None if end_token is None else as_int(end_token))
    if kind == "RejectedDraft":
        return RejectedDraft(as_int(data["step"]), tuple(as_int(i) for i in as_list(data["ids"])),
                             tuple(as_string(t) for t in as_list(data["texts"])))
    if kind == "RunFailed":
        return RunFailed(as_string(data["message"]))
    if kind == "RunWarning":
        return RunWarning(as_string(data["message"]))
    raise ValueError(f"unknown event type {kind[:40]!r}")


def _int_keys(value):
    """JSON turned the integer keys of the stats' tables (tokens per step -> steps) into strings:
    turn them back, so a replayed run's figures equal the recorded ones."""
    if isinstance(value, dict):
        keys_are_ints = bool(value) and all(isinstance(k, str) and k.lstrip("-").isdigit() for k in value)
        return {(int(k) if keys_are_ints else k): _int_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_int_keys(v) for v in value]
    return value


class KvDecoder:
    """KV pictures written as changes to the last one, made whole again."""

    def __init__(self) -> None:
        self.state: tuple[np.ndarray, ...] | None = None

    def decode(self, data: dict) -> KvSnapshot:
        n_cells = _in_range(data["n_cells"], 1, MAX_KV_CELLS + 1, "n_cells")
        n_seq = _in_range(data["n_seq"], 1, MAX_SEQUENCES + 1, "n_seq")
        n_bytes = (n_seq + 7) // 8
        if not data["delta"] or self.state is None or self.state[0].shape[0] != n_cells \
                or self.state[1].shape[1] != n_bytes:
            self.state = (np.full(n_cells, -1, dtype=np.int32), np.zeros((n_cells, n_bytes), dtype=np.uint8),
                          np.zeros((n_cells, n_bytes), dtype=np.uint8), np.full(n_cells, -1, dtype=np.int32))
        pos, during, kept, written = (a.copy() for a in self.state)
        for cell_record in as_list(data["cells"]):
            cell, p, seqs, kept_seqs, step = as_list(cell_record)
            cell = _in_range(cell, 0, n_cells, "cell")
            pos[cell] = _in_range(p, -1, 2**31 - 1, "position")
            during[cell] = _seq_bits(seqs, n_bytes)
            kept[cell] = _seq_bits(kept_seqs, n_bytes)
            written[cell] = _in_range(step, -1, 2**31 - 1, "step")
        self.state = (pos, during, kept, written)
        # held as the engine gives it: arrays up to the last used cell (KvSnapshot)
        top = int(np.flatnonzero(pos >= 0).max(initial=-1)) + 1
        seq_of_cell = np.unpackbits(during[:top], axis=1, count=n_seq, bitorder="little").astype(bool).T.copy()
        kept_of_cell = np.unpackbits(kept[:top], axis=1, count=n_seq, bitorder="little").astype(bool).T.copy()
        same = np.array_equal(seq_of_cell, kept_of_cell)
        return KvSnapshot(as_int(data["step"]), seq_of_cell, pos[:top].copy(), as_int(data["used"]),
                          as_int(data["holes"]), as_int(data["largest_free_run"]),
                          tuple(as_int(p) for p in as_list(data["seq_pos_min"])),
                          tuple(as_int(p) for p in as_list(data["seq_pos_max"])),
                          None if same else kept_of_cell, written[:top].copy(),
                          tuple(_recurrent_state(s) for s in as_list(data.get("states", []))[:MAX_SEQUENCES]),
                          n_cells)


def _recurrent_state(record: object) -> RecurrentState:
    seq, n_tokens, snapshots, snapshots_max, checkpoint_at, how, back, redone = as_list(record)
    if how not in ("", "snapshot", "checkpoint"):
        raise ValueError(f"a recurrent state's rollback is {str(how)[:20]!r}, not snapshot or checkpoint")
    count = lambda v, what: _in_range(v, 0, 2**31 - 1, what)  # noqa: E731
    return RecurrentState(_in_range(seq, 0, MAX_SEQUENCES, "sequence"), count(n_tokens, "state tokens"),
                          count(snapshots, "snapshots"), count(snapshots_max, "snapshots"),
                          _in_range(checkpoint_at, -1, 2**31 - 1, "checkpoint"), how, count(back, "rollback"),
                          count(redone, "re-decoded tokens"))


def _seq_bits(hex_text: object, n_bytes: int) -> np.ndarray:
    """A cell's sequences: ``n_bytes`` bytes of bitmask written as hex."""
    raw = bytes.fromhex(as_string(hex_text))
    if len(raw) != n_bytes:
        raise ValueError(f"a cell's sequence mask has {len(raw)} bytes, expected {n_bytes}")
    return np.frombuffer(raw, dtype=np.uint8)
