"""What the ledger accepts as numbers and names: budgets, grants, costs, analysts and
data sets, each checked before anything is written (refused with the value named)."""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any

from dpsql.accounting import ACCOUNTANTS, NOTHING, Cost
from dpsql.errors import LedgerError, PrivacyParameterError
from dpsql.ledger.settings import ALL, MAX_NAME
from dpsql.text import is_plain


def real_number(value: Any, what: str) -> float:
    """``value`` as a finite, normal float, or a PrivacyParameterError.

    Accepts int, float, Decimal, Fraction and numpy integer/floating scalars; refuses
    bool, text, NaN, infinities and subnormal magnitudes (below 2.2e-308, where a
    float has lost precision and 1/x overflows).
    """
    np = sys.modules.get("numpy")
    ok = (int, float, Decimal, Fraction)
    if np is not None:
        ok = (*ok, np.integer, np.floating)
        if isinstance(value, np.bool_):
            ok = ()
    if isinstance(value, bool) or not isinstance(value, ok):
        raise PrivacyParameterError(f"{what} must be a real number, got {value!r}")
    try:
        x = float(value)
    except (OverflowError, ValueError):
        raise PrivacyParameterError(f"{what} must be a finite number, got {value!r}") \
            from None
    if not math.isfinite(x):
        raise PrivacyParameterError(f"{what} must be a finite number, got {value!r}")
    if x != 0 and abs(x) < sys.float_info.min:
        raise PrivacyParameterError(f"{what} is too small to be a usable number: {value!r}")
    return x


def check_budget(total: Any, what: str = "budget") -> tuple[float, float]:
    """An (epsilon, delta) budget as two floats: ε > 0 finite, 0 ≤ δ < 1.

    Raises:
        PrivacyParameterError: it is not such a pair.
    """
    if isinstance(total, str | bytes) or not hasattr(total, "__len__") or len(total) != 2:
        raise PrivacyParameterError(f"a {what} is an (epsilon, delta) pair, got {total!r}")
    eps = real_number(total[0], f"{what} epsilon")
    delta = real_number(total[1], f"{what} delta")
    if not eps > 0 or not 0 <= delta < 1:
        raise PrivacyParameterError(
            f"a {what} needs epsilon > 0 and 0 <= delta < 1, got ({eps}, {delta})")
    return (eps, delta)


def _check_extra(extra: Any) -> tuple[float, float]:
    if isinstance(extra, str | bytes) or not hasattr(extra, "__len__") or len(extra) != 2:
        raise PrivacyParameterError(f"a grant is an (epsilon, delta) pair, got {extra!r}")
    e = real_number(extra[0], "grant epsilon")
    d = real_number(extra[1], "grant delta")
    if e < 0 or d < 0:
        raise PrivacyParameterError(f"a grant adds, it cannot be negative: ({e}, {d})")
    return (e, d)


def _check_cost(cost: Cost) -> tuple[float, float, float, float]:
    parts = cost.parts
    if not all(math.isfinite(x) and x >= 0 for x in parts):
        raise LedgerError(f"refusing to record a cost that is not finite and non-negative: "
                          f"{parts}")
    return parts


def check_analyst(name: Any, where: str = "analyst") -> None:
    """An analyst name: printable text, at most :data:`MAX_NAME` characters, not ``'*'``.

    Raises:
        LedgerError: it is not.
    """
    if (not isinstance(name, str) or not name.strip() or name == ALL or not is_plain(name)
            or len(name) > MAX_NAME):
        shown = name if not isinstance(name, str) or len(name) <= 60 else name[:60] + "..."
        raise LedgerError(
            f"{where} must be a name of at most {MAX_NAME} printable characters ('*' is "
            f"reserved for the data set's total), got {shown!r}")


def check_dataset(name: Any, where: str = "data set") -> None:
    """A data set name: the same rule as analysts' names."""
    if (not isinstance(name, str) or not name.strip() or name == ALL or not is_plain(name)
            or len(name) > MAX_NAME):
        raise LedgerError(f"{where} must be a name of at most {MAX_NAME} printable "
                          f"characters, got {name!r}")


class Running:
    """A connection's spend so far (its cap's part): the running total of its charges.

    The same additions in the same order as adding up its list of costs from the first,
    so the same floating-point total; but a charge adds one cost instead of adding up
    the connection's whole history again (which made a long-lived connection's charge time
    grow with the number of queries it had asked).

    >>> running = Running()
    >>> running.add(Cost(0.25)); running.add(Cost(0.5))
    >>> running.spent.basic
    (0.75, 0.0)
    """

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent = NOTHING

    def add(self, cost: Cost) -> None:
        self.spent = self.spent.plus(cost)


def _check_accountant(accountant: str, total: tuple[float, float]) -> None:
    if accountant not in ACCOUNTANTS:
        raise PrivacyParameterError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, "
                                    f"got {accountant!r}")
    if accountant == "zcdp" and not total[1] > 0:
        raise PrivacyParameterError("the zcdp accountant needs a total delta > 0 (it converts "
                                    "rho to (epsilon, delta) with some delta)")
