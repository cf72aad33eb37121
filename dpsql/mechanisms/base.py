"""The protocol every noise mechanism follows, as in OpenDP: a privacy map, an accuracy,
a sampler.

Two levels. A **family** (:class:`Mechanism`: ``laplace``, ``gaussian``), which the
analyst names, splits a query's budget into shares (:meth:`Mechanism.split`) and
calibrates, from one statistic's sensitivity and its share, a **noise**
(:class:`Noise`: discrete Laplace of scale 6, a grid Gaussian, ...). A noise answers
three questions with the same signatures whatever its family:

* ``privacy_map(linf, max_groups)``: the budget (in the family's unit, ε or ρ) spent by
  releasing a statistic vector in which one user changes at most ``max_groups``
  groups, each by at most ``linf`` (a group's L1 change; for a histogram, over all its
  bins);
* ``accuracy(alpha)``: the half-width ``t`` with ``P(|noise| > t) <= alpha``;
* ``sample(n)``: ``n`` independent noise draws (what ``release`` adds).

Calibration and privacy map are two views of one argument: for every family,
``calibrate(linf, G, share, ...).privacy_map(linf, G) <= share``
(``tests/test_mechanisms.py`` checks it for every registered family).

The registry of families is :data:`dpsql.mechanisms.MECHANISMS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Noise(Protocol):
    """Noise calibrated for one statistic (a scalar per group, or a histogram's bins)."""

    #: whether it adds integers to integers (else values are rounded to a grid first)
    integer: bool
    #: the noise's scale in value units (Laplace's b, Gaussian's σ; 0 for no noise)
    scale: float
    #: how explain names it ("discrete Laplace", "grid Gaussian", ...)
    label: str

    def privacy_map(self, linf: float, max_groups: int = 1) -> float:
        """The budget spent (ε or ρ) for ``max_groups`` groups changing by ``linf`` each."""
        ...

    def accuracy(self, alpha: float) -> float:
        """Smallest ``t`` with ``P(|noise| > t) <= alpha`` (rounding to a grid included)."""
        ...

    def sample(self, n: int) -> np.ndarray:
        """``n`` independent draws of the noise, in value units."""
        ...

    def release(self, values: Sequence) -> list:
        """The values with noise added (rounded to the grid first for real values)."""
        ...


class UnitNoise(Noise, Protocol):
    """Integer noise (the unit a grid mechanism counts in); quantiles also ask it for a
    bound on a weighted sum of its draws (:func:`dpsql.mechanisms.quantile.edge_errors`).
    """

    def draws(self, n: int) -> list[int]:
        """``n`` independent draws as Python integers (what a release adds)."""
        ...

    def edge_chernoff(self, q: float, high: np.ndarray, low: np.ndarray,
                      log_2_over_alpha: float) -> np.ndarray:
        """Bounds ``t_k`` on ``|Σ_{j<high_k} (1−q) e_j − Σ_{low_k draws} q e_j|``, each
        exceeded with probability at most ``2 exp(−log_2_over_alpha)`` = α, in noise units.
        """
        ...


@dataclass(frozen=True)
class BudgetSplit:
    """How a query's (ε, δ) is shared by its noisy parts and its partition selection.

    Attributes:
        share: each noisy part's share, in the family's unit (``Mechanism.budget``).
        selection_epsilon: the ε of partition selection (Laplace thresholding), if any.
        selection_delta: the δ of partition selection.
        rho: the query's total ρ when the family accounts in zCDP; None for pure ε-DP.
    """

    share: float
    selection_epsilon: float
    selection_delta: float
    rho: float | None = None


class Mechanism(Protocol):
    """A noise family the analyst can name: how it splits a budget and calibrates noise."""

    #: the name the analyst writes (``mechanism="laplace"``, ``--mechanism laplace``)
    name: str
    #: the unit of a share, ``"epsilon"`` or ``"rho"``: also the attribute of a
    #: statistic (and of the bias check) that holds its share, and explain's column
    budget: str
    #: whether the family spends δ (then a query must give δ > 0)
    needs_delta: bool
    #: how the CLI's help describes it ("discrete Laplace")
    description: str

    def split(self, epsilon: float, delta: float, parts: int,
              selecting: bool) -> BudgetSplit:
        """Shares a query's (ε, δ) among ``parts`` noisy parts (and partition selection,
        when ``selecting``) so that the whole release is (ε, δ)-DP."""
        ...

    def calibrate(self, linf: float, max_groups: int, share: float, integer: bool,
                  width: int = 1) -> Noise:
        """The noise that spends ``share`` on a statistic of per-group sensitivity
        ``linf`` over ``max_groups`` groups (``width`` coordinates per group)."""
        ...
