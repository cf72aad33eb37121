"""Noise mechanisms. Each exposes its privacy map, its accuracy and its sampler, as in
OpenDP (the protocol: :mod:`dpsql.mechanisms.base`).

:data:`MECHANISMS` is the registry of the families an analyst may name; the budget
split (:mod:`dpsql.analyze.analyze`), the engine's re-calibration, explain and the
CLI and shell's choices all read it. Adding a family is one module defining a
:class:`~dpsql.mechanisms.base.Mechanism` and one line below.
"""

from __future__ import annotations

from dpsql.errors import PrivacyParameterError
from dpsql.mechanisms.base import BudgetSplit, Mechanism, Noise
from dpsql.mechanisms.gaussian import GAUSSIAN
from dpsql.mechanisms.laplace import LAPLACE, Constant, DiscreteLaplace, GridLaplace, laplace
from dpsql.mechanisms.partition import LaplaceThreshold

#: The mechanism families by the name the analyst writes.
MECHANISMS: dict[str, Mechanism] = {
    LAPLACE.name: LAPLACE,
    GAUSSIAN.name: GAUSSIAN,
}

#: The family used when the analyst names none.
DEFAULT_MECHANISM = LAPLACE.name


def mechanism(name: object) -> Mechanism:
    """The family named ``name``.

    Raises:
        PrivacyParameterError: (before any charge) no family has that name.

    >>> mechanism("gaussian").budget
    'rho'
    """
    if not isinstance(name, str) or name not in MECHANISMS:
        raise PrivacyParameterError(
            f"mechanism must be {' or '.join(map(repr, MECHANISMS))}, got {name!r}")
    return MECHANISMS[name]


__all__ = ["DEFAULT_MECHANISM", "MECHANISMS", "BudgetSplit", "Constant", "DiscreteLaplace",
           "GridLaplace", "LaplaceThreshold", "Mechanism", "Noise", "laplace", "mechanism"]
