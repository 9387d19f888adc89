"""A draft measured against its target on held-out prompts: greedy agreement (teacher-forced on
the target's own text), speculative decoding's acceptance per draft position and speed-up here,
and the speed-up the cost model predicts for this machine and for one where a batch costs what one
token does. ``specdec distill`` and the app's draft training both measure with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def held_out_split(prompts: Sequence) -> tuple[list, list]:
    """(training prompts, held-out prompts): every 4th prompt is held out to measure on."""
    return [p for i, p in enumerate(prompts) if i % 4 != 3], [p for i, p in enumerate(prompts) if i % 4 == 3]


def greedy_agreement(target_session, draft_path: Path, prompts: Sequence[Sequence[int]], n_tokens: int,
                     cancel=None) -> float | None:
    """The share of the target's greedy tokens that the draft's argmax predicts, teacher-forced on
    the target's own text (the acceptance a draft would get proposing one token at a time).

    Prompt and text are decoded in batches of the draft context's size, so any prompt that fits
    the context can be measured. ``cancel`` (a threading.Event) stops it: None is returned."""
    from specdec_studio.engine.session import Session

    texts = greedy_texts(target_session, prompts, n_tokens, cancel)
    if texts is None:
        return None
    with Session(draft_path, n_ctx=target_session.n_ctx, n_threads=target_session.n_threads, cancel=cancel) as draft:
        agreement, _ = agreement_on_texts(draft, texts, cancel)
    return agreement


def greedy_texts(session, prompts: Sequence[Sequence[int]], n_tokens: int,
                 cancel=None) -> list[tuple[list[int], list[int]]] | None:
    """Each prompt with ``session``'s greedy answer to it (up to ``n_tokens``); None if stopped."""
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.session import last_event

    texts = []
    for tokens in prompts:
        final = last_event(session.run(RunConfig(max_tokens=n_tokens), list(tokens), fresh_cancel=False))
        if (cancel is not None and cancel.is_set()) or final.finish_reason == "cancelled":
            return None
        texts.append((list(tokens), list(final.token_ids)))
    return texts


def agreement_on_texts(session, texts: Sequence[tuple[list[int], list[int]]],
                       cancel=None) -> tuple[float | None, int]:
    """The share of the answers' tokens ``session``'s model predicts as its argmax, teacher-forced
    on each prompt and answer, and how many tokens that is; (None, 0) if stopped."""
    from specdec_studio.engine.memory import DecodeAborted
    from specdec_studio.engine.sampling import logits_row

    agree = total = 0
    ctx, batch, n_vocab = session.ctx, session.batch, session.vocab.n_tokens
    for prompt, output in texts:
        session.target.forget()
        text = prompt + output
        # the rows whose logits predict an output token: the prompt's last position onwards
        predicts = range(len(prompt) - 1, len(text) - 1)
        for start in range(0, len(text), batch.capacity):
            chunk = range(start, min(start + batch.capacity, len(text)))
            batch.clear()
            rows = [batch.add(text[pos], pos, (0,), pos in predicts) for pos in chunk]
            try:
                session.memory.decode(batch)
            except DecodeAborted:
                return None, 0
            for pos, row in zip(chunk, rows):
                if pos in predicts:
                    agree += int(np.argmax(logits_row(ctx, row, n_vocab))) == text[pos + 1]
                    total += 1
            if cancel is not None and cancel.is_set():
                return None, 0
    session.target.forget()
    return (agree / total if total else 0.0), total


def measure_draft(session, draft_path: Path, prompts: list[list[int]], n_tokens: int, draft_k: int,
                  stop) -> dict | None:
    """A draft on held-out prompts: greedy agreement, speculative decoding's acceptance per
    position and its speed-up over plain measured here, and predicted for this machine's
    batch-cost profile and for hardware where a batch costs what one token does. None if
    ``stop`` was set before it finished."""
    from specdec_studio.engine.config import RunConfig, SpeculativeParams
    from specdec_studio.engine.session import last_event
    from specdec_studio.engine.tuning import cost_model, profile

    agreement = greedy_agreement(session, draft_path, prompts, n_tokens, cancel=stop)
    if agreement is None:
        return None
    session.load_draft(draft_path)
    try:
        plain_cfg = RunConfig(max_tokens=n_tokens)
        spec_cfg = RunConfig(mode="speculative", max_tokens=n_tokens, speculative=SpeculativeParams(k=draft_k))
        t_plain = t_spec = 0.0
        n_plain = n_spec = 0
        rates: list[list[float]] = [[] for _ in range(draft_k)]  # acceptance at each draft position
        stats_all = []
        for tokens in prompts:
            for config in (plain_cfg, spec_cfg):
                final = last_event(session.run(config, tokens, fresh_cancel=False))
                if final.finish_reason == "cancelled":
                    return None
                s = final.stats
                if config is plain_cfg:
                    t_plain += s["t_generate_s"]
                    n_plain += s["n_predict"]
                else:
                    t_spec += s["t_generate_s"]
                    n_spec += s["n_predict"]
                    stats_all.append(s)
                    for i, rate in enumerate(s.get("accept_per_position", [])[: draft_k]):
                        rates[i].append(rate)
        draft_tps = _tokens_per_second_alone(session, prompts[0], n_tokens, stop)
        if draft_tps is None:
            return None
    finally:
        session.unload_draft()
    measured = (n_spec / t_spec) / (n_plain / t_plain) if t_spec and t_plain else 0.0
    merged = stats_all[-1]
    known = profile.cached(profile.profile_key(session))
    predicted = cost_model.predict_from_stats(merged, known.curve, mode="speculative",
                                              draft_curve=flat_curve(1.0 / draft_tps)) if known else None
    flat = cost_model.predict_from_stats(merged, flat_curve(t_plain / max(n_plain, 1)), mode="speculative",
                                         draft_curve=flat_curve(1.0 / draft_tps))
    return {"agreement": agreement, "accept_per_position": [sum(r) / len(r) if r else 0.0 for r in rates],
            "speedup_measured": measured, "speedup_predicted": predicted, "speedup_flat": flat or 0.0,
            "tokens_per_step": merged.get("tokens_per_step")}


def flat_curve(seconds: float):
    """A batch-cost curve where a decode of any size costs one token's time (a GPU, roughly)."""
    from specdec_studio.engine.tuning.cost_model import CostCurve

    return CostCurve((1, 512), (seconds, seconds), (seconds, seconds))


def _tokens_per_second_alone(session, tokens: list[int], n: int, stop) -> float | None:
    """The draft model's own plain decoding speed (for the cost model's price of a draft token);
    None if ``stop`` ended it."""
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.session import Session, last_event

    with Session(session.draft_model.info.path, n_ctx=session.n_ctx, n_threads=session.n_threads,
                 cancel=stop) as alone:
        final = last_event(alone.run(RunConfig(max_tokens=n), tokens, fresh_cancel=False))
    return None if final.finish_reason == "cancelled" else final.stats["tokens_per_second"]
