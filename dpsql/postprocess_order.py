"""ORDER BY, LIMIT and OFFSET over released columns, in Python, as DuckDB would do them.

Most outer queries only pick released columns and order them (TPC-H's ``ORDER BY
revenue DESC``). Running that in a fresh scratch DuckDB (:mod:`dpsql.scratch`) costs a
millisecond or two; sorting a few released rows in Python costs microseconds. This
module does it only where its meaning is provably DuckDB's, and says None otherwise, so
the caller falls back to the scratch database, whose semantics are the reference:

* every ORDER BY item is an output's position (``ORDER BY 2``) or its name, or a
  released column that an output selects as it is; anything else (an expression, a
  name that could mean two things) is left to DuckDB;
* NULLs go last unless ``NULLS FIRST`` is written, for ``DESC`` too: DuckDB's default
  ``default_null_order = 'NULLS_LAST'``, which the scratch databases keep, and sqlglot
  reads DuckDB's text with that default (``nulls_first`` is set only when written);
* values compare as DuckDB compares them: numbers by value, strings by code point
  (which is UTF-8's byte order, DuckDB's binary collation), dates and times by time.
  A column with a NaN (which DuckDB orders above every number, and Python not at all)
  or values Python cannot compare (``TypeError``) is left to DuckDB;
* ``LIMIT`` and ``OFFSET`` are literal non-negative integers.

Rows that tie on every ORDER BY item may come out in another order than DuckDB's,
which does not keep one either (SQL leaves it unspecified). All of this is
post-processing of released values: free under DP, and nothing here can fail (any
exception means "not here", and DuckDB answers).

>>> from sqlglot import parse_one
>>> ordered = parse_one("SELECT 1 ORDER BY 1 DESC", read="duckdb").args["order"]
>>> sort_rows([(1, 0), (None, 1), (3, 2)], ["n"], [None], ordered, None, None)
[(3, 2), (1, 0), (None, 1)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlglot import exp


def sort_rows(rows: list[tuple], names: Sequence[str], released: Sequence[str | None],
              order: exp.Order | None, limit: exp.Expression | None,
              offset: exp.Expression | None) -> list[tuple] | None:
    """``rows`` (one value per output, then the row id) ordered and cut as the outer
    query says; None where DuckDB must do it (see the module docstring).

    ``names`` are the outputs' names, ``released`` the released column each output
    selects as it is (None for none).
    """
    try:
        keys = [] if order is None else [_key(o, names, released) for o in order.expressions]
        if any(k is None for k in keys):
            return None
        first, count = _count(offset, 0), _count(limit, None)
        if first is None or (limit is not None and count is None):
            return None
        out = list(rows)
        for index, desc, nulls_first in reversed(keys):  # stable: last key first
            values = [r[index] for r in out]
            if any(isinstance(v, float) and math.isnan(v) for v in values):
                return None
            known = [r for r in out if r[index] is not None]
            known.sort(key=lambda r, i=index: r[i], reverse=desc)
            nulls = [r for r in out if r[index] is None]
            out = nulls + known if nulls_first else known + nulls
        return out[first:] if count is None else out[first:first + count]
    except Exception:  # noqa: BLE001 - not provably DuckDB's order: DuckDB does it
        return None


def _key(ordered: exp.Expression, names: Sequence[str],
         released: Sequence[str | None]) -> tuple[int, bool, bool] | None:
    if not isinstance(ordered, exp.Ordered):
        return None
    index = _output(ordered.this, names, released)
    if index is None:
        return None
    return index, bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first"))


def _output(target: exp.Expression, names: Sequence[str],
            released: Sequence[str | None]) -> int | None:
    """The output an ORDER BY item means, where that is beyond doubt."""
    if isinstance(target, exp.Literal) and not target.is_string:
        position = _integer(target.this)
        return position - 1 if position is not None and 1 <= position <= len(names) else None
    if not isinstance(target, exp.Column) or target.table or not target.name:
        return None
    name = target.name.lower()
    if name.startswith("__"):
        # a released column's name: the outputs that select it, unless an output is
        # also called so (DuckDB would then take the alias)
        if any(n.lower() == name for n in names):
            return None
        hits = [i for i, r in enumerate(released) if r is not None and r.lower() == name]
        return hits[0] if hits else None
    hits = [i for i, n in enumerate(names) if n.lower() == name]
    return hits[0] if len(hits) == 1 else None


def _count(node: exp.Expression | None, default: int | None) -> int | None:
    if node is None:
        return default
    if isinstance(node, exp.Limit | exp.Offset):
        node = node.expression
    if isinstance(node, exp.Literal) and not node.is_string:
        return _integer(node.this)
    return None


def _integer(text: str) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() and len(text) < 19 else None
