"""Privacy accounting: what a sequence of queries has spent, and the one admission rule.

Every charge records the query's (ε, δ) and, for the zCDP view, its ρ and the part of
its δ that ρ does not cover. Two accountants bound what a sequence has spent:

* **basic composition** (``"basic"``, the default): ``(Σ εᵢ, Σ δᵢ)``.
* **zCDP composition** (``"zcdp"``): ρ adds up (Bun and Steinke, TCC 2016). A Gaussian
  query is ρᵢ-zCDP; a Laplace query that is ε-DP is ε²/2-zCDP; a query with partition
  selection is δᵢ-approximately ρᵢ-zCDP, and approximate zCDP composes by adding both
  ρ and δ. The total ``ρ = Σ ρᵢ`` with ``δ_fixed = Σ δᵢ`` converts, for any ``δ' > 0``,
  to ``(ε(ρ, δ'), δ_fixed + δ')``-DP (:func:`zcdp_to_dp`, the conversion of Canonne,
  Kamath and Steinke 2020, Prop. 12, tighter than ``ρ + 2√(ρ log 1/δ')``).

**The admission rule and its theorem.** Each data set in a ledger has exactly one
accountant, fixed by the owner with its total budget (the catalog's
``budget: {accountant: zcdp}`` or ``dpsql budget set --accountant zcdp``) and never
changed once the data set has a charge. A query is admitted iff that one accountant's
bound, over every charge so far *plus the query*, stays within the total (ε, δ). The
analyst chooses each query, its ε and δ, after seeing earlier answers, and may stop at
any time: the sequence is *fully adaptive*, so what is needed is a *privacy filter*, a
stopping rule under which the whole interaction is (ε, δ)-DP even though the costs are
chosen adaptively (Rogers, Roth, Ullman and Vadhan, "Privacy Odometers and Filters",
NeurIPS 2016).

* With ``"basic"`` the rule is exactly the basic-composition filter: continue while
  ``Σ εᵢ ≤ ε`` and ``Σ δᵢ ≤ δ``. Rogers et al. 2016 (Theorem 3.6, "basic composition
  filter") prove that the interaction it allows is (ε, δ)-DP.
* With ``"zcdp"`` the rule is the approximate-zCDP filter: continue while
  ``Σ δᵢ ≤ δ`` and ``ε(Σ ρᵢ, δ − Σ δᵢ) ≤ ε``, i.e. while ``Σ ρᵢ ≤ ρ*`` for the one ρ*
  that converts to ε at the δ left. Rényi filters are valid under full adaptivity for
  every order α (Feldman and Zrnic, "Individual Privacy Accounting via a Rényi
  Filter", NeurIPS 2021), so ``Σ ρᵢ ≤ ρ*`` gives ρ*-zCDP for the interaction; the
  approximate parts add as in the basic filter (Whitehouse, Ramdas, Rogers and Wu,
  "Fully-Adaptive Composition in Differential Privacy", ICML 2023, which treats
  approximate zCDP filters). The conversion then gives (ε, δ).

Stopping early never hurts a filter (it is the analyst choosing mechanisms that reveal
nothing), so the per-analyst totals and a connection's cap, which stop a prefix of the
data set's sequence, keep the guarantee; a refusal depends only on the costs asked
for, never on the data. What the rule must *not* do, and earlier versions did, is admit
a query when *either* bound fits: then the stopping time mixes two filters, neither
filter's theorem covers the sequence, and in the worst case their δ add up. Choosing
one accountant per data set removes that.

>>> round(zcdp_to_dp(0.5, 1e-5), 3)   # classic bound: 5.298
4.728
>>> acc = Accounting(total=(1.0, 0.0))
>>> acc.admits([Cost(0.5)] * 2), acc.admits([Cost(0.5)] * 3)
(True, False)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

#: Relative slack for float round-off when comparing a spend with a total.
SLACK = 1e-9

#: The accountants a data set can use (see the module's docstring for the rule).
ACCOUNTANTS = ("basic", "zcdp")


@dataclass(frozen=True)
class Cost:
    """The privacy cost of one query.

    Attributes:
        epsilon, delta: the query is (epsilon, delta)-DP.
        rho: the query is ``rho_delta``-approximately ``rho``-zCDP; by default
            ``epsilon² / 2`` (what an ε-DP mechanism satisfies).
        rho_delta: the δ that ``rho`` does not cover (partition selection); by default
            ``delta``.
    """

    epsilon: float
    delta: float = 0.0
    rho: float | None = None
    rho_delta: float | None = None

    @property
    def zcdp(self) -> tuple[float, float]:
        # ε·ε, not ε**2: a float power raises OverflowError where a product is inf
        rho = self.epsilon * self.epsilon / 2 if self.rho is None else self.rho
        return rho, self.delta if self.rho_delta is None else self.rho_delta

    @property
    def pair(self) -> tuple[float, float]:
        return (self.epsilon, self.delta)

    @property
    def parts(self) -> tuple[float, float, float, float]:
        """(ε, δ, ρ, ρ's δ): the four numbers the ledger stores and sums."""
        return (float(self.epsilon), float(self.delta), *map(float, self.zcdp))


def zcdp_to_dp(rho: float, delta: float) -> float:
    """The ε such that ρ-zCDP implies (ε, δ)-DP (Canonne, Kamath, Steinke 2020).

    ``ε = min over α > 1 of  αρ + (log(1/δ) + (α−1)·log(1 − 1/α) − log α) / (α − 1)``,
    minimised numerically over a fine grid of α (any α gives a valid bound, so an
    approximate minimum is still sound), and never above the classic
    ``ρ + 2√(ρ log(1/δ))``.

    >>> zcdp_to_dp(0.0, 1e-6)
    0.0
    >>> zcdp_to_dp(0.1, 0.0)
    inf
    """
    if math.isnan(rho) or math.isnan(delta):
        return math.inf  # never admits anything
    if rho <= 0:
        return 0.0
    if delta <= 0 or math.isinf(rho):
        return math.inf
    if delta >= 1:
        return 0.0
    log_inv = -math.log(delta)  # not log(1/δ): 1/δ overflows for a subnormal δ
    classic = rho + 2 * math.sqrt(rho * log_inv)
    best = classic
    # α from just above 1 to far beyond the optimum (≈ 1 + sqrt(log(1/δ)/ρ))
    top = 2 + 4 * math.sqrt(log_inv / rho)
    alpha = 1 + (top - 1) * (np.arange(1, _STEPS + 1) / _STEPS) ** 2
    eps = alpha * rho + (log_inv + (alpha - 1) * np.log1p(-1 / alpha)
                         - np.log(alpha)) / (alpha - 1)
    best = min(best, float(np.min(eps)))
    return max(best, 0.0)


#: Grid of α in :func:`zcdp_to_dp` (vectorised: ~50 µs a conversion).
_STEPS = 4000


@dataclass(frozen=True)
class Spent:
    """What a sequence of charges has spent, under both bounds."""

    basic: tuple[float, float]
    rho: float
    rho_delta: float

    def zcdp_epsilon(self, delta_total: float) -> float:
        """ε of the zCDP bound when all of ``delta_total`` may be used."""
        spare = delta_total - self.rho_delta
        if spare <= 0:
            return math.inf
        return zcdp_to_dp(self.rho, spare)

    def plus(self, cost: Cost) -> Spent:
        """This spend with one more charge (the ledger's running totals use it)."""
        e, d, r, rd = cost.parts
        return Spent((self.basic[0] + e, self.basic[1] + d), self.rho + r, self.rho_delta + rd)


#: Nothing spent.
NOTHING = Spent((0.0, 0.0), 0.0, 0.0)


def spent(costs: Iterable[Cost]) -> Spent:
    costs = list(costs)
    basic = (math.fsum(c.epsilon for c in costs), math.fsum(c.delta for c in costs))
    return Spent(basic, math.fsum(c.zcdp[0] for c in costs),
                 math.fsum(c.zcdp[1] for c in costs))


@dataclass(frozen=True)
class Accounting:
    """Admission against a total (ε, δ) by one accountant (``"basic"`` or ``"zcdp"``)."""

    total: tuple[float, float]
    accountant: str = "basic"

    def __post_init__(self):
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"unknown accountant {self.accountant!r}")

    def fits(self, s: Spent) -> bool:
        eps, delta = self.total
        tol = eps * SLACK
        if self.accountant == "basic":
            return s.basic[0] <= eps + tol and s.basic[1] <= delta * (1 + SLACK) + 1e-300
        return delta > 0 and s.rho_delta <= delta and s.zcdp_epsilon(delta) <= eps + tol

    def admits(self, costs: Iterable[Cost]) -> bool:
        return self.fits(spent(costs))

    def remaining(self, s: Spent) -> tuple[float, float]:
        """What the accountant leaves: ε and δ not yet used by its bound."""
        eps, delta = self.total
        if self.accountant == "basic":
            return (max(eps - s.basic[0], 0.0), max(delta - s.basic[1], 0.0))
        used = s.zcdp_epsilon(delta) if s.rho > 0 else 0.0
        return (max(eps - used, 0.0), max(delta - s.rho_delta, 0.0))
