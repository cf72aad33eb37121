"""The released groups as the table DuckDB would scan, in Python.

Post-processing reads the noisy groups off an Arrow table (the one the scratch DuckDB
scans when it must run the analyst's outer query, :mod:`dpsql.postprocess`), so that
values have the Python types DuckDB's scan gives them. Everything here runs after the
charge, on released values only, and never raises.
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal

import pyarrow as pa


def arrow_array(values: list) -> pa.Array:
    """Released values as one Arrow column; never raises (it runs after the charge).

    Arrow infers the type; where it cannot hold the values (an integer beyond int64, a
    column mixing floats with integers past 2**53), numbers become float64 (clamped to
    the finite range) and anything else text.

    >>> arrow_array([1, 2**64]).type, arrow_array([0.5, 10**18]).type
    (DataType(double), DataType(double))
    """
    try:
        return pa.array(values)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        pass
    if all(v is None or (isinstance(v, int | float | Decimal) and not isinstance(v, bool))
           for v in values):
        return pa.array([None if v is None else _finite_float(v) for v in values],
                        pa.float64())
    return pa.array([None if v is None else str(v) for v in values], pa.string())


def _finite_float(value) -> float:
    try:
        number = float(value)
    except (OverflowError, ValueError, ArithmeticError):
        number = math.inf if value > 0 else -math.inf
    return max(-sys.float_info.max, min(sys.float_info.max, number)) \
        if number == number else number


#: Python types whose values come back from an Arrow column of their own inferred type
#: as they went in (``bool``, ``float``, ``str``; ``int`` within int64, see scanned_rows).
_SAME_THROUGH_ARROW = (bool, float, str)


def scanned_rows(data: dict[str, list], n: int) -> list[dict] | None:
    """``table.to_pylist()`` of the Arrow table of ``data``, without building it, where
    that is provably the identity; None where it may not be (the table answers).

    Arrow infers one type per column: ``double`` for Python floats, ``int64`` for ints
    within its range, ``bool``, ``string``; a column of only None is ``null``. Each of
    these gives back, value for value, the very Python value it was built from (NaN and
    -0.0 included). A column mixing types (ints and floats become doubles), or holding
    any other type (a DECIMAL's scale is the column's, a date's class may change), is
    left to Arrow. Building the table and reading it back costs little while the
    caches are warm, but about 0.2 ms right after the backend's query has evicted them
    (TPC-H at sf 0.1), which is when the noise stage runs.

    >>> scanned_rows({"a": [1, None], "b": [0.5, float("nan")], "c": ["x", None]}, 2)
    [{'a': 1, 'b': 0.5, 'c': 'x'}, {'a': None, 'b': nan, 'c': None}]
    >>> scanned_rows({"a": [1, 0.5]}, 2) is None, scanned_rows({"a": [2**63]}, 1) is None
    (True, True)
    """
    for values in data.values():
        kind = None
        for v in values:
            if v is None:
                continue
            t = type(v)
            if kind is None:
                kind = t
            elif t is not kind:
                return None
        if kind is int:
            if not all(v is None or -2**63 <= v < 2**63 for v in values):
                return None
        elif kind is not None and kind not in _SAME_THROUGH_ARROW:
            return None
    names = list(data)
    columns = [data[name] for name in names]
    return [dict(zip(names, (c[i] for c in columns), strict=True)) for i in range(n)]
