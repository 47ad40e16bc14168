"""A fusion applied inside the simulation (Cfg.fuse): the truth of `tracehouse whatif --fusion ROW`.

Cfg.fuse is a fusion pattern's steps, one name regex each (sql/rules/fusion_patterns.csv's split_1 ..
split_n). A chain is activities whose names match the steps in order, one directly after the other on one
stream (nothing else launched, recorded, waited for or synchronised on that stream between them), inside
one scope (one step, one graph launch or the eager work between): a fusion row's adjacent chain. The
simulation runs it as the what-if model states a fusion (docs/interpretation.md, "What-if"): the chain is
one kernel that starts where its first member starts and lasts as long as its longest member; the later
members do not run and their launches are not made (no host time, no launch call, no stream gap). Their
random draws are still made, so the rest of the run is the run without the fusion, draw for draw.

A chain is fused member by member as it is launched: a pattern of three steps whose third does not follow
is fused as far as it matched (the two-step patterns are always whole chains).
"""

from __future__ import annotations


class FusedChains:
    """Per stream, which step of the pattern the next launch on it would continue (0: none)."""

    def __init__(self, steps):
        self.steps = list(steps)
        self.at: dict[int, int] = {}

    def launch(self, stream: int, name: str, joinable: bool) -> bool:
        """A kernel `name` is launched on `stream`: True when it is a later member of a chain (fused into
        the stream's previous activity). joinable: it may join one (not a collective, no pending wait)."""
        if not self.steps:
            return False
        i = self.at.get(stream, 0)
        if i and joinable and self.steps[i].search(name):
            self.at[stream] = i + 1 if i + 1 < len(self.steps) else 0
            return True
        self.at[stream] = 1 if len(self.steps) > 1 and self.steps[0].search(name) else 0
        return False

    def interrupt(self, stream: int | None = None) -> None:
        """Other work on `stream` (None: a scope ends, every stream) ends the chain there."""
        if stream is None:
            self.at.clear()
        else:
            self.at.pop(stream, None)
