"""Budget accounting: what a connection may still spend.

Composition: a query's (ε, δ) is added to the spent total (basic composition), which
is valid for any sequence of (ε, δ)-DP releases, adaptively chosen or not. A query is
admitted only if its cost fits into what remains; the charge is recorded before the
backend reads any data, under a lock, so concurrent queries cannot overspend.

>>> b = Budget(1.0, 1e-6)
>>> b.charge((0.4, 0.0)); b.charge((0.6, 1e-6))
>>> b.spent, b.remaining
((1.0, 1e-06), (0.0, 0.0))
>>> b.charge((0.1, 0.0))
Traceback (most recent call last):
...
dpsql.errors.BudgetExhaustedError: query needs epsilon=0.1, delta=0 but only epsilon=0, ...
"""

from __future__ import annotations

import math
import threading

from dpsql.errors import BudgetExhaustedError, PrivacyParameterError

#: Relative slack for float round-off when comparing a charge with what remains.
_SLACK = 1e-9


class Budget:
    """An (ε, δ) budget held in memory for the life of one connection."""

    def __init__(self, epsilon: float, delta: float = 0.0):
        if not (math.isfinite(epsilon) and epsilon > 0) or not (0 <= delta < 1):
            raise PrivacyParameterError(
                f"budget needs epsilon > 0 and 0 <= delta < 1, got ({epsilon}, {delta})"
            )
        self.total = (float(epsilon), float(delta))
        self._charges: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    @property
    def spent(self) -> tuple[float, float]:
        with self._lock:
            return self._spent()

    @property
    def remaining(self) -> tuple[float, float]:
        with self._lock:
            eps, delta = self._spent()
            return (max(self.total[0] - eps, 0.0), max(self.total[1] - delta, 0.0))

    def _spent(self) -> tuple[float, float]:
        return (math.fsum(c[0] for c in self._charges), math.fsum(c[1] for c in self._charges))

    def check(self, cost: tuple[float, float]) -> None:
        """Raises BudgetExhaustedError if ``cost`` does not fit; charges nothing."""
        with self._lock:
            self._check(cost)

    def _check(self, cost: tuple[float, float]) -> None:
        eps, delta = self._spent()
        fits_eps = eps + cost[0] <= self.total[0] * (1 + _SLACK)
        fits_delta = delta + cost[1] <= self.total[1] * (1 + _SLACK) + 1e-300
        if not (fits_eps and fits_delta):
            rem = (max(self.total[0] - eps, 0.0), max(self.total[1] - delta, 0.0))
            raise BudgetExhaustedError(
                f"query needs epsilon={cost[0]:g}, delta={cost[1]:g} but only "
                f"epsilon={rem[0]:g}, delta={rem[1]:g} remain "
                f"(total epsilon={self.total[0]:g}, delta={self.total[1]:g})"
            )

    def charge(self, cost: tuple[float, float]) -> None:
        """Records ``cost`` if it fits; raises BudgetExhaustedError (charging nothing) if not."""
        with self._lock:
            self._check(cost)
            self._charges.append((float(cost[0]), float(cost[1])))

    def __repr__(self) -> str:
        (se, sd), (re_, rd) = self.spent, self.remaining
        return f"Budget(spent=({se:g}, {sd:g}), remaining=({re_:g}, {rd:g}))"
