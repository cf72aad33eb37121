"""Answers derived from a cached one: another HAVING, ORDER BY, LIMIT or OFFSET, free.

A query whose only difference from an answered one is what it does to the released
rows — which of them it keeps (HAVING on released columns, LIMIT, OFFSET) and in what
order (ORDER BY) — is answered from the cached answer alone, without the data and
without a charge.

**Why it releases nothing new.** The derived answer is computed from one Result that
was released to this same analyst of this same data set (the answer cache's entry,
:mod:`dpsql.answer_cache`) and from the query's text; nothing else is read, so it is
post-processing of what the analyst already holds. Its rows are a subset of the cached
rows, each with its values, error bars and intervals unchanged.

**Which cached answer.** An answered query is stored a second time under its *core*:
its text as sqlglot writes it back with HAVING, ORDER BY, LIMIT and OFFSET removed —
only when it had no HAVING, LIMIT nor OFFSET, so that its rows are every released
group. The core key carries everything else the exact key does (ε, δ, options,
bounds, mechanism, confidence, catalog and schema versions, analyst). A query is
derived from the entry of its own core.

**Which post-processing.** Each HAVING and ORDER BY expression must be written over the
answer's columns: a subtree equal to a select item, an output name, or (ORDER BY) a
position. An aggregate or a column left over, a window or a subquery: not derived, the
query is answered afresh (and charged). LIMIT and OFFSET are plain whole numbers
(``FETCH``, ``PERCENT`` and ``WITH TIES`` are not derived: dropping them would answer
another query). Evaluation mirrors the fresh path's
(:func:`dpsql.postprocess.postprocess_query`): DuckDB over the released rows in a scratch
database, each expression inside ``TRY``. Any failure there is a miss, never an error
(it could only depend on values the analyst holds, but answering afresh is simpler).

**The fresh path's checks still hold.** A derived query skips analysis, so what it runs
is held to the same rules first: every node of HAVING and ORDER BY is one
:func:`dpsql.validate.validate` allows (with its payload checks: types, literal
lengths), and no value it computes can be longer than ``max_value_length``
(:func:`dpsql.analyze.evaluation.check_value_lengths`, each column bounded by the
longest text among its released values). Otherwise a free query could run what a
charged one may not, e.g. ``repeat()`` or a ``REPLACE`` chain building gigabytes in the
server's memory. Anything refused here is a miss: the fresh path refuses it, uncharged.

>>> d = split("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex HAVING n > 10 LIMIT 1")
>>> d.core
'SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex'
>>> d.whole, split("SELECT sex FROM pums GROUP BY sex ORDER BY sex").whole
(False, True)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from dpsql.analyze.evaluation import SCALAR_TEXT, check_value_lengths, length_bounds
from dpsql.answer_avg import frame
from dpsql.answer_cache import CACHED_NOTE
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits
from dpsql.parse import parse
from dpsql.released_table import arrow_array
from dpsql.result import Result
from dpsql.scratch import run, scratch
from dpsql.validate import _ALLOWED, _check_payload

#: The note a derived Result carries.
DERIVED_NOTE = ("derived from the answer cache: the same query was answered before "
                "without this HAVING, ORDER BY, LIMIT or OFFSET; its released rows, "
                "filtered and ordered here, nothing was spent")

_ROW = "__row"


@dataclass(frozen=True)
class Derivation:
    """A query split into its core and what it does to the core's released rows.

    Attributes:
        core: the core's text (sqlglot's DuckDB spelling, no HAVING/ORDER BY/LIMIT/
            OFFSET).
        having: the HAVING condition, or None.
        order: the ORDER BY clause, or None.
        limit: the LIMIT expression, or None.
        offset: the OFFSET expression, or None.
        items: the core's select items.
        frame: the core's text with its select list replaced by ``*``
            (:func:`dpsql.answer_avg.frame`), or None.
    """

    core: str
    having: exp.Expression | None
    order: exp.Order | None
    limit: exp.Expression | None
    offset: exp.Expression | None
    items: tuple[exp.Expression, ...] = ()
    frame: str | None = None

    @property
    def whole(self) -> bool:
        """Whether the query releases every group of its core (ORDER BY aside): then
        its answer may be stored as the core's."""
        return self.having is None and self.limit is None and self.offset is None

    @property
    def post(self) -> bool:
        """Whether the query does anything to the core's rows."""
        return not self.whole or self.order is not None


def split(sql: str) -> Derivation | None:
    """The query's core and post-processing; None where it has no such split (not one
    SELECT, or sqlglot cannot read it back)."""
    try:
        tree = parse(sql)
    except Exception:  # noqa: BLE001 - not derivable; the fresh path says why
        return None
    if not isinstance(tree, exp.Select):
        return None
    parts = {k: tree.args.get(k) for k in ("having", "order", "limit", "offset")}
    core = tree.copy()
    for k in parts:
        core.set(k, None)
    for k in ("limit", "offset"):  # a plain LIMIT n / OFFSET n, nothing more
        node = parts[k]
        if node is not None and (type(node) is not {"limit": exp.Limit,
                                                    "offset": exp.Offset}[k] or any(
                v for a, v in node.args.items() if a != "expression")):
            return None
    having = parts["having"].this if parts["having"] is not None else None
    limit = parts["limit"].expression if parts["limit"] is not None else None
    offset = parts["offset"].expression if parts["offset"] is not None else None
    for bound in (limit, offset):
        if bound is not None and not (isinstance(bound, exp.Literal) and bound.is_int):
            return None
    try:
        text = core.sql(dialect="duckdb")
    except Exception:  # noqa: BLE001 - not derivable
        return None
    return Derivation(text, having, parts["order"], limit, offset,
                      tuple(e.copy() for e in core.expressions), frame(core))


def derive(cached: Result, d: Derivation, limits: Limits = DEFAULT) -> Result | None:
    """``cached`` (the core's released answer) filtered and ordered as ``d`` says, free;
    None when ``d`` cannot be evaluated over the released columns alone, or the fresh
    path's checks would refuse it (see the module docstring)."""
    items = list(d.items)
    if len(items) != len(cached.columns):
        return None
    rewrite = _Columns(items, _text_lengths(cached), limits)
    having = rewrite(d.having)
    order = None
    if d.order is not None:
        order = d.order.copy()
        for ordered in order.expressions:
            ordered.set("this", rewrite(ordered.this, position=True))
            if ordered.this is None:
                return None
    if rewrite.failed or (d.having is not None and having is None):
        return None
    keep = _select(cached, having, order, d.limit, d.offset)
    if keep is None:
        return None
    return dataclasses.replace(
        cached,
        rows=[cached.rows[i] for i in keep],
        accuracy=[cached.accuracy[i] for i in keep] if cached.accuracy else [],
        intervals=[cached.intervals[i] for i in keep] if cached.intervals else [],
        cost=(0.0, 0.0),
        notes=(*(n for n in cached.notes if n != CACHED_NOTE), DERIVED_NOTE))


def _text_lengths(cached: Result) -> list[int]:
    """The longest text of each released column (at least a scalar's)."""
    return [max((len(v) for row in cached.rows
                 if isinstance(v := row[i], str)), default=0) or SCALAR_TEXT
            for i in range(len(cached.columns))]


class _Columns:
    """Rewrites an expression over select items into one over columns ``c0, c1, ...``."""

    def __init__(self, items: list[exp.Expression], lengths: list[int],
                 limits: Limits = DEFAULT):
        self.exprs = [i.unalias() for i in items]
        self.lengths, self.limits = lengths, limits
        self.made: dict[int, int] = {}  # id() of each column written here -> its index
        self.names = {}
        for i, item in enumerate(items):
            self.names.setdefault(item.alias_or_name.lower(), set()).add(i)
        self.failed = False

    def __call__(self, e: exp.Expression | None, position: bool = False):
        if e is None:
            return None
        if position and isinstance(e, exp.Literal) and e.is_int:
            k = int(e.this)
            if not 1 <= k <= len(self.exprs):
                self.failed = True
                return None
            return self._column(k - 1)
        out = e.copy().transform(self._node)
        for node in out.walk():
            # only columns written here (a name the analyst spelled c0 is no column of
            # the answer); only what the fresh path's validation allows
            if isinstance(node, exp.AggFunc | exp.Window | exp.Subquery | exp.Query) or (
                    isinstance(node, exp.Column) and id(node) not in self.made) or (
                    not isinstance(node, _ALLOWED)):
                self.failed = True
                return None
        try:
            for node in out.walk():
                _check_payload(node, None, self.limits)
            check_value_lengths(out, None, self.limits, length_bounds(
                out, lambda c: self.lengths[self.made[id(c)]]))
        except UnsupportedQueryError:
            self.failed = True
            return None
        return exp.Try(this=out) if not isinstance(out, exp.Column | exp.Literal) else out

    def _column(self, i: int) -> exp.Column:
        col = exp.column(f"c{i}")
        self.made[id(col)] = i
        return col

    def _node(self, node: exp.Expression) -> exp.Expression:
        matches = {i for i, item in enumerate(self.exprs) if node == item}
        if isinstance(node, exp.Column) and not node.table:
            matches |= self.names.get(node.name.lower(), set())
        if len(matches) > 1:  # an output name that is also another item: ambiguous
            self.failed = True
            return node
        if matches:
            return self._column(matches.pop())
        return node


def _select(cached: Result, having, order, limit, offset) -> list[int] | None:
    """Indices of the cached rows the post-processing keeps, in its order."""
    n = len(cached.columns)
    data = {f"c{i}": arrow_array([row[i] for row in cached.rows]) for i in range(n)}
    data[_ROW] = pa.array(range(len(cached.rows)), pa.int64())
    query = exp.select(exp.column(_ROW)).from_("__released")
    if having is not None:
        query = query.where(having)
    if order is not None:
        query.set("order", order)
    if limit is not None:
        query = query.limit(limit.copy())
    if offset is not None:
        query = query.offset(offset.copy())
    try:
        with scratch() as con:
            con.register("__released", pa.table(data))
            return [row[0] for row in run(con, query)]
    except Exception:  # noqa: BLE001 - answered afresh instead
        return None
