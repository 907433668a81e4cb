"""Learning from failures during a search: values blamed for failures are banned, and a dimension whose
changes keep failing is narrowed to the values that worked.

A launch contract (`mneme.core.tuning.contracts`) removes the block shapes the kernel's code cannot run
before the search; what it cannot see (an index computed from a constant in a way the inference does not
read, a fault that depends on the data) shows up as failed or unverified trials. A sampler that keeps
this memory proposes fewer of them (docs/design/default-sampler.md, "Failures"):

- a value is *proven* once a successful point has it;
- a failed point with exactly one unproven value blames that value, which is banned; a value that two
  failures share while never proven is banned too;
- a dimension with at least `FREEZE_AFTER` banned values and no more proven values than banned ones is
  frozen: only its proven values are proposed again;
- while failures are more than `CAUTIOUS_SHARE` of the told points, a proposal may carry at most one
  unproven value, so every further failure is blamed on one value.

The sampler sees failures only through their objective: the loop tells a failed, unverified or
infeasible point a penalty of `PENALTY_FACTOR` times the baseline, and says which value that is
(`Sampler.penalty`), so a value equal to it is a failure. A slow point that ran and verified is never one,
however slow: a block of one thread, or a first launch under load, can take more than `FAILURE_RATIO` times
the best, and counting it as failed banned values that work (on the host, with a busy CPU, a guided search
narrowed to fewer valid points than one without narrowing). Where the penalty is not known (a loop of
another tool's), a value at least `FAILURE_RATIO` times the best value told is taken for one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mneme.core.tuning.outcome import PENALTY_FACTOR
from mneme.core.types import canonical_json

log = logging.getLogger(__name__)

FAILURE_RATIO = PENALTY_FACTOR / 5  # well above any measured spread, well below the penalty
FREEZE_AFTER = 2
CAUTIOUS_SHARE = 0.2  # the share of failures above which proposals change one unproven value at a time


def _v(value: Any) -> str:
    return canonical_json(value)


class FailureMemory:
    """What the failures told so far rule out (see the module's doc)."""

    def __init__(self) -> None:
        self._dims: list[str] = []
        self._history: list[tuple[dict[str, Any], float]] = []
        self._best: float | None = None
        self.banned: dict[str, set[str]] = {}
        self.proven: dict[str, set[str]] = {}
        self.frozen: set[str] = set()
        self._cautious = False
        self.penalty: float | None = None  # the loop's value for failures (`Sampler.penalty`), where known

    def bind(self, values: Mapping[str, Sequence[Any] | None]) -> None:
        self._dims = list(values)
        self.banned = {d: set() for d in self._dims}
        self.proven = {d: set() for d in self._dims}

    def is_failure(self, value: float) -> bool:
        if self.penalty is not None:
            return math.isclose(value, self.penalty, rel_tol=1e-9)
        return self._best is not None and value >= FAILURE_RATIO * self._best

    def infeasible(self, encoded: Mapping[str, Any]) -> None:
        """Nothing to learn: the space's constraints already rule the point out."""

    def told(self, encoded: Mapping[str, Any], value: float) -> None:
        self._history.append((dict(encoded), value))
        if self._best is None or value < self._best:
            self._best = value
        self._update()

    def _update(self) -> None:
        ok = [e for e, v in self._history if not self.is_failure(v)]
        failed = [e for e, v in self._history if self.is_failure(v)]
        before = {d: set(b) for d, b in self.banned.items()}, set(self.frozen)
        self.proven = {d: {_v(e.get(d)) for e in ok if d in e} for d in self._dims}
        self.banned = {d: set() for d in self._dims}
        suspects: dict[tuple[str, str], int] = {}
        for point in failed:
            unproven = [(d, _v(point[d])) for d in self._dims if d in point and _v(point[d]) not in self.proven[d]]
            if len(unproven) == 1:
                self.banned[unproven[0][0]].add(unproven[0][1])
            for item in unproven:
                suspects[item] = suspects.get(item, 0) + 1
        for (d, value), count in suspects.items():
            if count >= 2:
                self.banned[d].add(value)
        self.frozen = {
            d for d in self._dims if len(self.banned[d]) >= FREEZE_AFTER and len(self.banned[d]) >= len(self.proven[d])
        }
        self._cautious = bool(self._history) and len(failed) > CAUTIOUS_SHARE * len(self._history)
        if (self.banned, self.frozen) != before:
            for d in self._dims:
                if self.banned[d] and self.banned[d] != before[0].get(d):
                    log.info(
                        "guided: %s = %s failed; not proposed again%s",
                        d,
                        ", ".join(sorted(self.banned[d])),
                        f" ({d} narrowed to {', '.join(sorted(self.proven[d]))})" if d in self.frozen else "",
                    )

    def allows(self, encoded: Mapping[str, Any]) -> bool:
        """False for a point with a banned value, an unproven value of a frozen dimension, or (while failures
        are frequent) more than one unproven value."""
        unproven = 0
        for d in self._dims:
            if d not in encoded:
                continue
            value = _v(encoded[d])
            if value in self.banned[d]:
                return False
            if value not in self.proven[d]:
                if d in self.frozen:
                    return False
                unproven += 1
        return not (self._cautious and unproven > 1)
