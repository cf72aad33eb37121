"""Partition selection: which group keys found in the data may be released.

A key that comes from the data (not from a public domain) is released only if a noisy
count of its distinct users clears a threshold τ (Laplace thresholding; Wilson et al.,
PETS 2020; Desfontaines et al., PETS 2022).

Derivation. After contribution bounding a user touches at most ``G`` keys, so the
vector of user counts has L1 sensitivity ``G``; discrete Laplace noise of scale
``b = G / ε`` makes the noisy counts of keys present in both neighbours ε-DP. A key
present in only one neighbour has exactly one user there (the differing user), and
is released iff ``1 + Z >= τ``; for discrete Laplace with ``q = exp(−1/b)``,
``P(Z >= m) = q^m / (1 + q)`` for ``m >= 1``. The user has at most ``G`` such keys, so
the probability that any is released is at most ``G · q^(τ−1) / (1 + q)``; choosing
the smallest integer τ that makes this ``<= δ`` gives (ε, δ)-DP.

>>> sel = LaplaceThreshold(epsilon=1.0, delta=1e-6, max_groups=1)
>>> sel.threshold
15
>>> sel.privacy_map()
(1.0, 1e-06)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpsql.errors import PrivacyParameterError
from dpsql.mechanisms.laplace import MAX_UNITS, DiscreteLaplace, check_inputs


class LaplaceThreshold:
    """Noisy user counts with a release threshold; costs (ε, δ)."""

    def __init__(self, epsilon: float, delta: float, max_groups: int):
        _, epsilon = check_inputs(1.0, max_groups, epsilon, "epsilon")
        if not (isinstance(delta, int | float) and 0 < delta < 1):
            raise PrivacyParameterError(
                f"partition selection needs 0 < delta < 1, got delta = {delta!r}")
        if max_groups / epsilon > MAX_UNITS:
            raise PrivacyParameterError(
                f"partition selection needs noise of scale max_groups / epsilon = "
                f"{max_groups / epsilon:.3g}, above the exact sampler's limit 2^48 (no key "
                "could clear its threshold anyway): raise epsilon or lower max_groups")
        self.epsilon, self.delta, self.max_groups = epsilon, float(delta), max_groups
        self.noise = DiscreteLaplace(max_groups / epsilon)
        # log q = −s/t exactly: log(exp(−s/t)) loses 1 − q's precision for large scales
        log_q = -self.noise.s / self.noise.t
        q = math.exp(log_q)
        # smallest integer m = τ − 1 >= 1 with G · q^m / (1 + q) <= δ (q underflows to 0
        # for tiny scales: then no noise is ever drawn and m = 1 suffices)
        m = 1 if q == 0.0 else math.ceil(math.log(self.delta * (1 + q) / max_groups) / log_q)
        self.threshold = max(m, 1) + 1

    def privacy_map(self) -> tuple[float, float]:
        return (self.noise.privacy_map(self.max_groups), self.delta)

    def leak_probability(self) -> float:
        """Chance that some key held only by the differing user is released (<= δ)."""
        log_q = -self.noise.s / self.noise.t  # exact: q ** m amplifies q's rounding m-fold
        return self.max_groups * math.exp((self.threshold - 1) * log_q) / (1 + math.exp(log_q))

    def release(self, user_counts: Sequence[int]) -> tuple[list[int], list[bool]]:
        """Noisy user counts and, for each key, whether it is released."""
        noisy = self.noise.release(user_counts)
        return noisy, [n >= self.threshold for n in noisy]
