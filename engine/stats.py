"""Run counters: the figures llama.cpp's examples print plus per-step shape of the run."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunCounters:
    """Mutable on the engine thread; :meth:`as_dict` makes the plain data an event carries."""

    n_prompt: int = 0
    n_prompt_reused: int = 0  # prompt tokens whose cells were kept from the previous run
    n_predict: int = 0
    n_drafted: int = 0
    n_accept: int = 0
    steps: int = 0
    t_encode_s: float = 0.0
    t_decode_s: float = 0.0  # time spent inside llama_decode while generating
    t_generate_s: float = 0.0  # wall time of the whole generation loop
    t_draft_s: float = 0.0  # time the drafter took (draft model decodes, lookup search)
    tokens_per_step: list[int] = field(default_factory=list)
    accepted_at_position: list[int] = field(default_factory=list)
    drafted_at_position: list[int] = field(default_factory=list)
    # (tokens, logit rows) of every target decode after the prompt: what a step really cost, for
    # the cost model (engine.tuning.cost_model) to price against the batch-cost profile
    decode_shapes: dict[tuple[int, int], int] = field(default_factory=dict)
    draft_decode_shapes: dict[tuple[int, int], int] = field(default_factory=dict)  # the draft model's, alike
    extra: dict = field(default_factory=dict)  # a strategy's own figures (Auto's decisions), as plain data

    def record_decode(self, n_tokens: int, n_logits: int) -> None:
        shape = (n_tokens, n_logits)
        self.decode_shapes[shape] = self.decode_shapes.get(shape, 0) + 1

    def record_draft_decode(self, n_tokens: int, n_logits: int) -> None:
        shape = (n_tokens, n_logits)
        self.draft_decode_shapes[shape] = self.draft_decode_shapes.get(shape, 0) + 1

    def record_step(self, n_tokens: int, n_drafted: int, n_accepted: int, t_decode_s: float) -> None:
        self.steps += 1
        self.n_predict += n_tokens
        self.n_drafted += n_drafted
        self.n_accept += n_accepted
        self.t_decode_s += t_decode_s
        self.tokens_per_step.append(n_tokens)

    def record_positions(self, n_offered: int, n_accepted: int) -> None:
        """Acceptance per draft position: position i was offered, and accepted if i < n_accepted."""
        while len(self.drafted_at_position) < n_offered:
            self.drafted_at_position.append(0)
            self.accepted_at_position.append(0)
        for i in range(n_offered):
            self.drafted_at_position[i] += 1
            if i < n_accepted:
                self.accepted_at_position[i] += 1

    def as_dict(self) -> dict:
        t_gen = self.t_generate_s or self.t_decode_s
        return {
            "n_prompt": self.n_prompt,
            "n_prompt_reused": self.n_prompt_reused,
            "n_prompt_decoded": self.n_prompt - self.n_prompt_reused,
            "n_predict": self.n_predict,
            "n_drafted": self.n_drafted,
            "n_accept": self.n_accept,
            "accept_rate": self.n_accept / self.n_drafted if self.n_drafted else 0.0,
            "steps": self.steps,
            "tokens_per_step": self.n_predict / self.steps if self.steps else 0.0,
            "mean_accepted_per_step": self.n_accept / self.steps if self.steps else 0.0,
            "t_draft_s": self.t_draft_s,
            "t_encode_s": self.t_encode_s,
            "t_decode_s": self.t_decode_s,
            "t_generate_s": t_gen,
            "decode_time_share": self.t_decode_s / t_gen if t_gen else 0.0,
            # the generation's wall time outside the target's decodes, per step after the first
            # (which came from the prompt's decode): what the host spends around each decode, and
            # in speculative and MTP runs the draft's decodes too
            "host_ms_per_step": 1e3 * max(0.0, t_gen - self.t_decode_s) / (self.steps - 1) if self.steps > 1 else 0.0,
            "encode_tokens_per_second": (self.n_prompt - self.n_prompt_reused) / self.t_encode_s
            if self.t_encode_s
            else 0.0,
            "tokens_per_second": self.n_predict / t_gen if t_gen else 0.0,
            "tokens_per_step_hist": _histogram(self.tokens_per_step),
            "decode_shapes": [[b, r, n] for (b, r), n in sorted(self.decode_shapes.items())],
            "draft_decode_shapes": [[b, r, n] for (b, r), n in sorted(self.draft_decode_shapes.items())],
            "accept_per_position": [
                a / d if d else 0.0 for a, d in zip(self.accepted_at_position, self.drafted_at_position)
            ],
            **self.extra,
        }


def _histogram(values: list[int]) -> dict[int, int]:
    hist: dict[int, int] = {}
    for v in values:
        hist[v] = hist.get(v, 0) + 1
    return dict(sorted(hist.items()))
