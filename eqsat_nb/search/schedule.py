"""Rule scheduling for saturation: which rule directions search in an iteration, and from when.

TENSAT applies every rule in every iteration (egg's SimpleScheduler). On the transformer models
one family, `ewadd_reorder_*`, then makes 89-99.5 % of all applications and fills the 50 000-node
budget in one iteration, so nothing else gets explored and the extraction drowns. egg's
BackoffScheduler fixes that: a rule whose matches in an iteration exceed its threshold is not
applied; it is banned for a few iterations, and each ban doubles its threshold and its ban
length, so a family that keeps flooding comes back rarely while the others run on. When nothing
but the banned rules could still change the e-graph, the bans are cut short (egg's `can_stop`)
instead of stopping as saturated.

That alone still lets a flood in: with nothing else left, the bans are cut again and again, the
threshold doubles each time, and ViT-Base's ewadd reassociations (7 000 matches, 28 000 nodes
possible) are applied in iteration 8; the 22 000-node e-graph holds nothing better than the
4 700-node one, but the ILP no longer closes its gap in 60 s. So, beyond egg, a rule family (rule
directions with the same source patterns) that has flooded before (one of its rules was banned) is
banned again while its matches could add more than `budget_share` of the nodes left under the
limit, and that ban is never cut short. BERT's matmul reassociations (7 100 matches, 14 000 nodes
possible, 41 000 left) still get in, and they are what its 35 % needs (measured: shares 0.35-0.6
give both). Families that never flooded are not held to it: at a small node limit (MCTS's 2 000)
every multi-pattern merge would fail it, and they are what the limit is for.

Searching is semi-naive: a rule looks only for matches that involve something added since it last
ran. A banned rule's matches are dropped, not applied, so each rule remembers the iteration it was
last applied in and searches from there when it comes back (a shared "since the previous
iteration" would lose every match it was banned over).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence


class Candidate(NamedTuple):
    """One rule direction's matches found in an iteration, as the scheduler sees them."""

    name: str
    family: object               # equal for rule directions with the same source patterns
    matches: int
    new_nodes: int               # at most this many nodes per match
    multi: bool = False          # a multi-pattern rule (a merge)


@dataclass
class RuleSchedule:
    """One rule direction's state (egg's RuleStats)."""

    since: int = 0               # search for matches new since this epoch (0: all)
    banned_until: int = 0        # iteration number from which it runs again
    times_banned: int = 0
    times_applied: int = 0
    firm: bool = False           # banned for the node budget: not cut short


class BackoffScheduler:
    """egg's BackoffScheduler over iteration numbers (1-based, as `run_iteration` stamps them).

    `match_limit`: matches one rule may have in an iteration before it is banned (egg's default
    1 000), doubled at each ban of that rule; `ban_length`: iterations of the first ban (egg's 5),
    also doubled at each ban. `match_limit=None` never bans (TENSAT's SimpleScheduler) but keeps
    the per-rule semi-naive epochs."""

    def __init__(self, match_limit: int | None = 1000, ban_length: int = 5,
                 incremental: bool = True, budget_share: float | None = None) -> None:
        self.match_limit = match_limit
        self.budget_share = budget_share
        self.ban_length = ban_length
        self.incremental = incremental
        self.rules: dict[str, RuleSchedule] = {}

    def _get(self, name: str) -> RuleSchedule:
        st = self.rules.get(name)
        if st is None:
            st = self.rules[name] = RuleSchedule()
        return st

    def may_search(self, name: str, iteration: int) -> bool:
        """False while the rule is banned in this iteration."""
        return iteration >= self._get(name).banned_until

    def since(self, name: str) -> int:
        """The epoch from which the rule's matches are new (0 for a full search)."""
        return self._get(name).since if self.incremental else 0

    def threshold(self, name: str) -> float:
        """Matches above which the rule is banned now."""
        if self.match_limit is None:
            return float("inf")
        return self.match_limit << self._get(name).times_banned

    def _ban(self, st: RuleSchedule, iteration: int, firm: bool) -> None:
        length = self.ban_length << st.times_banned
        st.times_banned += 1
        st.banned_until = iteration + length
        st.firm = firm

    def admit(self, found: Sequence[Candidate], iteration: int,
              room: float = float("inf")) -> set[str]:
        """The names among `found` (one iteration's searched rules) whose matches may be applied;
        the others are banned from `iteration` on.

        egg's test, per rule: more matches than its threshold. egg then lets a banned rule back
        with its threshold doubled, and cuts bans short when nothing else changes, so a rule that
        keeps flooding gets in after a few idle iterations all the same. Beyond egg, with
        `budget_share`: a family (rule directions with the same source patterns, e.g. the two
        directions of one associativity: they share their matches) one of whose rules was banned
        before is banned again when its admitted matches could add more than that share of the
        `room` left under the node limit (`new_nodes` per match, an upper bound), and that ban is
        `firm`: not cut short (`cut_bans`). Families never banned are not held to it, nor are
        multi-pattern rules: their matches are the merges the node budget is for (NasRNN's
        three-way matmul merges, 62 % on the a100 profile instead of 47 %, in a 34 000-node
        e-graph the ILP extracts from in seconds), and egg's backoff still bans them."""
        ok = {c.name for c in found if c.matches <= self.threshold(c.name)}
        for c in found:
            if c.name not in ok:
                self._ban(self._get(c.name), iteration, False)
        if self.budget_share is not None:
            adds: dict[object, int] = {}
            flooded: set[object] = set()
            for c in found:
                if self._get(c.name).times_banned:
                    flooded.add(c.family)
                if c.name in ok:
                    adds[c.family] = adds.get(c.family, 0) + c.matches * c.new_nodes
            for c in found:
                if (c.name in ok and not c.multi and c.family in flooded
                        and adds[c.family] > self.budget_share * room):
                    ok.discard(c.name)
                    self._ban(self._get(c.name), iteration, True)
        return ok

    def applications(self, name: str) -> int:
        """Iterations in which the rule was searched and its matches applied (not banned)."""
        return self._get(name).times_applied

    def has_turns(self, name: str, multi: bool, k_multi: int) -> bool:
        """Whether the rule may still run: a multi-pattern rule has `k_multi` iterations of
        applied matches (TENSAT's first k_multi, later where backoff banned it), others always."""
        return not multi or self.applications(name) < k_multi

    def applied(self, name: str, iteration: int) -> None:
        """The rule's matches of `iteration` were applied: its next search starts there (what
        this iteration adds carries its number as epoch)."""
        st = self._get(name)
        st.since = iteration
        st.times_applied += 1

    def cut_bans(self, iteration: int, eligible: Callable[[str], bool] = lambda name: True
                 ) -> bool:
        """Nothing changed in `iteration`: end the earliest-ending bans now, so those rules run in
        the next iteration (the others' bans are shortened by as much), as egg's `can_stop`.
        Only rules that `eligible` lets run next and whose ban is not `firm` count. False when
        there is no such rule, i.e. the e-graph is saturated as far as the schedule allows."""
        banned = [st for n, st in self.rules.items()
                  if st.banned_until > iteration and not st.firm and eligible(n)]
        if not banned:
            return False
        delta = min(st.banned_until for st in banned) - (iteration + 1)
        for st in banned:
            st.banned_until -= delta
        return True
