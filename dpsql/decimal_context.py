"""dpsql's own decimal context, for every step of a query that computes with DECIMALs.

Python's :mod:`decimal` reads the *current* context, which the application owns: a
small precision rounds, a trapped signal (``Inexact``, ``Rounded``, ``FloatOperation``,
which ``Decimal(float)`` signals) raises. After the charge that made the noise stage
raise on an exact DECIMAL sum only when a row matched, an oracle of one person; before
it, folded literals, quantile fractions and the bounds of DECIMAL sums were rounded
(attack reviews). So the pipeline runs in this fixed context instead (Python's own
default precision, the widest exponents, nothing trapped): :func:`own_context` around
planning and checking (:meth:`dpsql.engine.Connection._prepare`, ``_check``) and
around everything after the charge
(:meth:`dpsql.answer_flow.Answering._answer`). Steps that must be exact run in
stricter contexts of their own (:mod:`dpsql.decimal_sums`,
:mod:`dpsql.mechanisms.laplace`).

>>> import decimal
>>> with decimal.localcontext() as ctx:
...     ctx.prec = 2
...     own_context(lambda: decimal.Decimal("1.2345") + 0)()
Decimal('1.2345')
"""

from __future__ import annotations

import decimal
import functools
from collections.abc import Callable
from typing import TypeVar

#: The context: Python's default precision (28 digits), the widest exponent range, no traps.
DECIMAL_CONTEXT = decimal.Context(prec=28, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                                  traps=[])

F = TypeVar("F", bound=Callable)


def own_context(fn: F) -> F:
    """``fn`` run in :data:`DECIMAL_CONTEXT`, whatever the caller's context."""
    @functools.wraps(fn)
    def in_context(*args, **kwargs):
        with decimal.localcontext(DECIMAL_CONTEXT):
            return fn(*args, **kwargs)
    return in_context  # type: ignore[return-value]
