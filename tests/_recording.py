"""A policy wrapper for engine tests: delegates to a policy and keeps every decision."""


class Recording:
    """Delegates to ``inner`` and keeps every (view, decisions) pair in ``steps``."""

    def __init__(self, inner):
        self.inner, self.name, self.steps = inner, inner.name, []

    def decide(self, view):
        decisions = list(self.inner.decide(view))
        self.steps.append((view, decisions))
        return decisions
