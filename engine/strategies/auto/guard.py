"""Auto's check on itself: whether the trees it sends pay for themselves, judged by the run's own
clock, and how much to believe the next prediction."""

from __future__ import annotations

from specdec_studio.engine.strategies.auto.calibration import StepCost
from specdec_studio.engine.strategies.auto.priors import (
    GUARD_DECAY,
    GUARD_REST_DECAY,
    GUARD_START_TREES,
    GUARD_START_TRUST,
    IDLE_STRETCH,
    MIN_GAIN,
    PLAN_INTERVAL_MAX,
    WAKE_MATCH,
)


class Guard:
    """How far Auto trusts its predictions, learnt from what its trees realised.

    A tree step predicts it emits ``g`` times the tokens a plain step would in the same time. What
    it realised is its emitted tokens ÷ (its decode time ÷ a typical plain decode's, plus the graph
    rebuild it makes the next plain step pay). The guard keeps decayed sums of both; their ratio,
    at most 1, is the run's ``trust``. While trust is low the planner believes every extra row
    costs 1/trust times what the curve says, so it sends shallower trees (the gain peaks at a
    smaller size), and once trust is below where a run starts it demands a higher gain
    (:meth:`min_gain`), so it sends fewer; trees that pay raise it again.
    A run starts as if GUARD_START_TREES trees had realised GUARD_START_TRUST of their prediction:
    its first trees must win clearly, before any of its own trees has been judged.
    """

    def __init__(self) -> None:
        self.realised = GUARD_START_TRUST * GUARD_START_TREES
        self.predicted = float(GUARD_START_TREES)
        self.idle = 0  # plans in a row that were not hopeful
        self.next_plan = 0  # the step at which the sources are asked next

    def plans(self, step: int, match_length: int = 0) -> bool:
        """Whether the sources are asked for proposals this step: when their turn has come, or at
        once when the text's end repeats WAKE_MATCH tokens or more of earlier text (``match_length``,
        the suffix match's: the answer has started to copy). The run asks the turn alone first,
        and the match only when it is not (auto.sources.Sources.repeats)."""
        return step >= self.next_plan or match_length >= WAKE_MATCH

    def planned(self, step: int, hopeful: bool) -> None:
        """The step's proposals passed the planner's first two tests, the first tokens' bound and
        the first four's (``hopeful``), or did not. While they keep failing, the sources are asked
        less often: every step for the first IDLE_STRETCH failures, then every 2nd step, and so on
        up to every PLAN_INTERVAL_MAX-th (they catch up with the skipped tokens when next asked).
        One hopeful plan and they are asked every step again."""
        if hopeful:
            self.idle = 0
            self.next_plan = step + 1
        else:
            self.idle += 1
            self.next_plan = step + min(PLAN_INTERVAL_MAX, 1 + self.idle // IDLE_STRETCH)

    @property
    def trust(self) -> float:
        return min(1.0, self.realised / self.predicted)

    def min_gain(self) -> float:
        """The predicted gain a tree must beat: MIN_GAIN, raised in proportion as the run's trees
        have realised less than a run starts out assuming (so after trees that lost, only a tree
        predicted to win by far more is sent)."""
        return MIN_GAIN * max(1.0, GUARD_START_TRUST / self.trust)

    def rest(self) -> None:
        """A plain step: while trust is below where a run starts, the old trees' outcomes fade toward
        that start at GUARD_REST_DECAY a step. Trust only learns from trees sent, and a run that lost
        its first tree or two would otherwise stay wary for good: it sends no tree, so nothing tells
        it the text has since turned into a long copy (measured: one perturbed profile's run lost
        its first 3-token tree and then turned away the code prompt's copy for the rest of the run)."""
        if self.realised < GUARD_START_TRUST * self.predicted:
            self.realised = (
                GUARD_REST_DECAY * self.realised + (1.0 - GUARD_REST_DECAY) * GUARD_START_TRUST * GUARD_START_TREES
            )
            self.predicted = GUARD_REST_DECAY * self.predicted + (1.0 - GUARD_REST_DECAY) * GUARD_START_TREES

    def judge(self, predicted: float, emitted: int, t_decode: float, cost: StepCost) -> None:
        """A tree step that predicted ``predicted`` and emitted ``emitted`` tokens in ``t_decode``."""
        t_plain = cost.typical_plain_time()
        if t_plain is None:  # no plain decode timed yet: nothing to compare with
            return
        realised = emitted / (t_decode / t_plain + cost.return_penalty())
        self.realised = GUARD_DECAY * self.realised + realised
        self.predicted = GUARD_DECAY * self.predicted + predicted


class Wary:
    """A step cost as the guard believes it: every row beyond the first costs 1/trust times what
    ``cost`` says (and so does the graph rebuild). With trust 1 it is ``cost`` itself.

    It remembers what it worked out: the run keeps one while it is :meth:`current` (the same
    trust and penalty, over a fixed cost curve), so a plain step asks its questions once."""

    def __init__(self, cost: StepCost, trust: float) -> None:
        self.cost, self.trust, self.scale = cost, trust, 1.0 / trust
        self.penalty = cost.return_penalty()
        self.cost_scale = cost.scale  # the run's correction of the curve when this was worked out
        self._relative: dict[int, float] = {}
        self._needed: dict[tuple[int, float], float] = {}

    def current(self, trust: float) -> bool:
        """Whether this is still how the guard sees ``cost`` (a run without a cost curve learns
        its costs as it goes: then never; one with a curve while the run's correction of it holds)."""
        return (self.cost.curve is not None and trust == self.trust and self.cost.scale == self.cost_scale
                and self.cost.return_penalty() == self.penalty)

    def relative(self, n_tokens: int) -> float:
        found = self._relative.get(n_tokens)
        if found is None:
            found = self._relative[n_tokens] = 1.0 + (self.cost.relative(n_tokens) - 1.0) * self.scale
        return found

    def return_penalty(self) -> float:
        return self.penalty * self.scale

    def typical_plain_time(self) -> float | None:
        """What a plain step takes on the run's clock (trust scales rows, not time)."""
        return self.cost.typical_plain_time()

    def first_chance_needed(self, room: int, min_gain: float) -> float:
        found = self._needed.get((room, min_gain))
        if found is None:
            found = self._needed[room, min_gain] = StepCost.first_chance_needed(self, room, min_gain)
        return found
