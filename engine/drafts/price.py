"""What a drafting source's decode costs, in decodes of the target, before a run has timed any: a
draft model's from the two batch-cost profiles or the files' sizes, an MTP head's from its shape.
Auto prices its first steps with it; then it times the decodes it makes."""

from __future__ import annotations

from specdec_studio.engine.drafts import mtp as mtp_head


def draft_token_cost(session, target_curve) -> float:
    """One decode of ``session``'s draft model against one of its target: the two batch-cost
    profiles' one-token times where both were measured (each profile is of its model on its own
    device: the key holds its GPU layers), else the ratio of the files' sizes (on one device,
    decoding one token reads every weight once)."""
    from specdec_studio.engine.tuning import profile  # tuning sits above the session: read at call time

    draft = profile.cached(profile.profile_key(session, draft=True))
    if target_curve is not None and draft is not None:
        return draft.curve.t_plain_s / target_curve.t_plain_s
    return session.draft_model.info.size_bytes / session.model.info.size_bytes


def first_source_cost(session, target_curve, mtp) -> float:
    """What Auto's decoding source (the draft model, else the MTP head) costs per token at first;
    1.0 where it has neither."""
    if session.draft is not None:
        return draft_token_cost(session, target_curve)
    if mtp is not None:
        info = session.model.info
        return mtp_head.token_cost_estimate(info.n_params, info.n_layer, info.n_vocab, info.n_embd)
    return 1.0
