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

What the threshold means in users (public: it depends on ε, δ and ``G`` only). With
``n`` users a key's noisy count is ``n + Z``, so it is released with probability
``P(Z >= τ − n)``: at ``n = τ`` at least one half, and rising to 1 as ``n`` grows.

>>> round(sel.release_probability(15), 3), sel.users_needed(0.95)
(0.731, 17)
>>> sel.release_probability(1) <= 1e-6
True
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

    def release_probability(self, users: int) -> float:
        """Chance that a key with ``users`` distinct users (after bounding) is released.

        ``P(users + Z >= τ) = P(Z >= m)``, ``m = τ − users``, with the discrete Laplace
        tail ``P(Z >= m) = q^m / (1 + q)`` for ``m >= 1`` and ``1 − q^(1−m) / (1 + q)``
        for ``m <= 0`` (symmetry). Reads no data: ``users`` is the caller's assumption.
        """
        log_q = -self.noise.s / self.noise.t
        m = self.threshold - users
        if log_q == -math.inf or math.exp(log_q) == 0.0:  # no noise is ever drawn
            return 1.0 if m <= 0 else 0.0
        q = math.exp(log_q)
        if m >= 1:
            return math.exp(m * log_q) / (1 + q)
        return 1.0 - math.exp((1 - m) * log_q) / (1 + q)

    def users_needed(self, probability: float) -> int:
        """Fewest distinct users whose key is released with at least ``probability``.

        ``probability`` in (0, 1); the answer is at least 1. Found from the closed form
        of :meth:`release_probability` and corrected by one step either way against
        float rounding, so it is exact for the probabilities this module computes.
        """
        if not 0 < probability < 1:
            raise ValueError(f"probability must be in (0, 1), got {probability!r}")
        log_q = -self.noise.s / self.noise.t
        if math.exp(log_q) == 0.0:
            return self.threshold
        q = math.exp(log_q)
        if probability > 1 / (1 + q):
            # 1 − q^(1−m)/(1+q) >= p  ⟺  (1 − m) >= log((1 − p)(1 + q)) / log q
            m = 1 - math.ceil(math.log((1 - probability) * (1 + q)) / log_q)
        else:
            # q^m / (1 + q) >= p  ⟺  m <= log(p (1 + q)) / log q
            m = max(math.floor(math.log(probability * (1 + q)) / log_q), 0)
        users = max(self.threshold - m, 1)
        while users > 1 and self.release_probability(users - 1) >= probability:
            users -= 1
        while self.release_probability(users) < probability:
            users += 1
        return users

    def release(self, user_counts: Sequence[int]) -> tuple[list[int], list[bool]]:
        """Noisy user counts and, for each key, whether it is released."""
        noisy = self.noise.release(user_counts)
        return noisy, [n >= self.threshold for n in noisy]
