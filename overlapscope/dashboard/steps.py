"""The page's one step selector: which step each shown run draws.

It sits above the tabs, so the timeline and the micro-batch Gantt follow the same choice and it
survives a tab switch. With one run its values are that run's step numbers; with two runs side by
side they are positions (the k-th step of each run, in order), since two runs rarely number their
steps alike, plus "all steps". A run with fewer steps has none at the extra positions.
"""
from __future__ import annotations

from dataclasses import dataclass

from .data import ALL_STEPS, RunData


def step_label(step: int) -> str:
    return "all steps" if step == ALL_STEPS else ("whole trace" if step < 0 else f"step {step}")


@dataclass(frozen=True)
class StepChoice:
    shown: tuple[int, ...]
    """Indices (0 = A, 1 = B) of the runs that loaded, in page order."""
    positions: tuple[tuple[int | None, ...], ...]
    """Per selector entry, the step of each shown run (None: that run has no step there)."""

    @property
    def paired(self) -> bool:
        return len(self.shown) == 2

    @property
    def selector_id(self) -> str:
        return "step-ab" if self.paired else f"step-{self.shown[0]}"

    def _value(self, k: int) -> int:
        return k if self.paired else int(self.positions[k][0])

    def options(self) -> list[dict]:
        out = []
        for k, steps in enumerate(self.positions):
            if len(set(steps)) == 1:
                label = step_label(int(steps[0]))
            else:
                label = " · ".join(f"{'AB'[i]} {'-' if s is None else step_label(s)}"
                                   for i, s in zip(self.shown, steps))
            out.append({"label": label, "value": self._value(k)})
        if max(len([s for s in col if s is not None]) for col in zip(*self.positions)) > 1:
            out.append({"label": "all steps", "value": ALL_STEPS})
        return out

    @property
    def default(self) -> int:
        return self._value(0)

    def steps(self, value: int | None) -> dict[int, int | None]:
        """Run index -> the step it draws for selector `value` (None: nothing to draw)."""
        if value == ALL_STEPS:
            return {i: ALL_STEPS for i in self.shown}
        if self.paired:
            if not isinstance(value, int) or not 0 <= value < len(self.positions):
                return {i: None for i in self.shown}
            return dict(zip(self.shown, self.positions[value]))
        return {self.shown[0]: value if value in {p[0] for p in self.positions} else None}


def step_choice(runs: list[RunData]) -> StepChoice | None:
    """The selector for the runs that loaded; None when none did."""
    shown = tuple(i for i, r in enumerate(runs) if r.ok)
    if not shown:
        return None
    lists = [runs[i].steps for i in shown]
    n = max(len(s) for s in lists)
    positions = tuple(tuple(s[k] if k < len(s) else None for s in lists) for k in range(n))
    return StepChoice(shown=shown, positions=positions)
