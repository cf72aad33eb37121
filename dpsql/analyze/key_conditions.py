"""WHERE over public-domain keys: which key combinations rows passing it can have.

The conditions :func:`dpsql.analyze.domains.released_groups` may evaluate on the keys'
domains (:func:`_key_condition`), their evaluation (:func:`_evaluate_part`), and the
released combinations (:class:`Combinations`). The DP argument is in
:func:`~dpsql.analyze.domains.released_groups`: the result depends on the catalog and
the query text only. A condition is *exactly evaluable* when:

* after each occurrence of a key expression is replaced by a variable ranging over
  that key's domain, it uses only comparisons (``= <> < <= > >=``, ``IS [NOT]
  DISTINCT FROM``, ``[NOT] IN (list)``, ``BETWEEN``, ``IS [NOT] NULL``), ``AND``,
  ``OR``, ``NOT``, literals, those variables, and columns that are inputs of a key
  whose every input column has a finite public domain
  (:func:`~dpsql.analyze.domains.column_values`; such a key is computed from its
  inputs, as its image was);
* every comparison is between operands of one kind (numbers, strings, booleans,
  dates, timestamps; NULL goes with all; a strict ISO date string goes with
  dates), with no string literal ending in a space (``CHAR(n)`` pads with spaces
  in PostgreSQL);
* text is matched (``LIKE``, ``ILIKE``, ``LOWER``, ``UPPER``) only over ASCII, and
  strings are ordered (``<``, ``BETWEEN``) only when all are lower-case or all
  upper-case letters, where every backend and collation agree
  (:func:`_key_condition` gives the reasons).

These mean the same on DuckDB and on every backend, so evaluating them on the
domains in a scratch DuckDB (:func:`dpsql.scratch.scratch`, with SQL's
three-valued logic: a NULL condition keeps no row) decides, for each combination,
whether any row with it could pass the filter. Anything else (another function, a
column of a key that is not computed, a column NULL-extended by a LEFT JOIN, work
over the owner's limits, any error) leaves the condition unused and the keys as
they were: a key wrongly kept is a noisy empty group, never a wrong one left out.

Conditions and keys are split into independent parts (keys sharing an input column
or a condition go together), each enumerated on its own within
``max_domain_inputs`` combinations and the shared ``max_domain_work``.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import math
import re
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analyze.evaluation import (
    OPEN_COST,
    SCALAR_TEXT,
    _evaluate,
    _text_length,
    _work_per_row,
    length_bounds,
)
from dpsql.limits import Limits
from dpsql.scratch import checked_sql


@dataclass(frozen=True)
class Combinations:
    """Released key combinations: independent parts, enumerated only when released.

    Each part is some keys and the value tuples they may take together; a combination
    takes one tuple of every part. Its size and each key's values are known at once,
    so the analysis (before the charge) never lists up to ``max_domain_cells``
    combinations; the noise stage iterates them, in the order of the product of the
    keys' domains.

    >>> c = Combinations(((1, 2, 3), (0, 1)), (((0,), ((1,), (3,))), ((1,), ((0,), (1,)))))
    >>> len(c), list(c), c.values(0)
    (4, [(1, 0), (1, 1), (3, 0), (3, 1)], (1, 3))
    """

    #: each key's full public domain, in GROUP BY order
    domains: tuple[tuple, ...]
    #: (keys, their allowed value tuples) per part; every key is in exactly one part
    parts: tuple[tuple[tuple[int, ...], tuple[tuple, ...]], ...]

    def __len__(self) -> int:
        return math.prod(len(tuples) for _, tuples in self.parts)

    def values(self, i: int) -> tuple:
        """The values key ``i`` takes in some combination, in its domain's order."""
        for members, tuples in self.parts:
            if i in members:
                seen = {t[members.index(i)] for t in tuples}
                return tuple(v for v in self.domains[i] if v in seen)
        raise IndexError(i)

    def __iter__(self):
        position = [{v: j for j, v in enumerate(d)} for d in self.domains]

        def rank(members, t):
            return tuple(position[i][v] for i, v in zip(members, t, strict=True))

        parts = sorted(((m, sorted(ts, key=lambda t, m=m: rank(m, t))) for m, ts in self.parts),
                       key=lambda p: min(p[0]))
        order = [i for members, _ in parts for i in members]
        n = len(self.domains)
        # parts of consecutive keys: their product is already in the domains' order
        in_order = order == list(range(n))
        out = []
        for combo in itertools.product(*(ts for _, ts in parts)):
            flat = [v for t in combo for v in t]
            if in_order:
                yield tuple(flat)
                continue
            group: list = [None] * n
            for i, v in zip(order, flat, strict=True):
                group[i] = v
            out.append(tuple(group))
        yield from sorted(out, key=lambda g: rank(range(n), g))


def _part_query(members: list[int], conds: list[exp.Expression], exprs, domains,
                key_inputs, inputs, limits: Limits, spent: list[int]
                ) -> tuple[exp.Select, list[tuple], int] | None:
    """The query of a part over its input tables, those tables, and its work; None when
    it is over the owner's limits (or a construct the length bound does not model)."""
    columns: dict[str, str] = {}  # input column SQL -> __cJ
    tables: list[tuple] = []
    for i in members:
        for sql in sorted(key_inputs[i] or ()):
            if sql not in columns:
                columns[sql] = f"__c{len(tables)}"
                tables.append(inputs[sql][1])
    variables: dict[int, str] = {}
    for i in members:
        if key_inputs[i] is None:
            variables[i] = f"__c{len(tables)}"
            tables.append(domains[i])
    combinations = math.prod(len(t) for t in tables)
    if combinations > limits.max_domain_inputs:
        return None

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table == _VARIABLE:
            return exp.column(f"__{node.name}")
        if isinstance(node, exp.Column) and node.sql() in columns:
            return exp.column(columns[node.sql()])
        return node

    texts = {f"__c{j}": max((_text_length(v) for v in t), default=0)
             for j, t in enumerate(tables)}
    texts.update({f"__v{i}": max((_text_length(v) for v in domains[i]), default=0)
                  for i in members})
    select = []
    for i in members:
        if i in variables:
            select.append(exp.alias_(exp.column(variables[i]), f"__v{i}"))
        else:
            select.append(exp.alias_(exp.Try(this=exprs[i].copy().transform(rename)),
                                     f"__v{i}"))
    select += [exp.column(name) for name in columns.values()]
    renamed = [c.copy().transform(rename) for c in conds]
    per_row = 0
    for node in [*select, *renamed]:
        found = length_bounds(node, lambda c: texts.get(c.name, SCALAR_TEXT))
        if found.get(id(node)) is None or any(
                b is not None and b > limits.max_value_length for b in found.values()):
            return None
        per_row += _work_per_row(node, found)
        for like in node.find_all(exp.Like, exp.ILike):
            # matching with % and _ may try every position of the text for every
            # character of the pattern: charged as their product, not their sum
            per_row += (found.get(id(like.this)) or SCALAR_TEXT) * max(
                len(like.expression.this), 1)
    work = OPEN_COST + combinations * per_row
    if any(c.find(exp.Like) for c in renamed):
        work *= 2  # evaluated twice, case-sensitive and not (below)
    if spent[0] + work > limits.max_domain_work:
        return None
    inner = exp.select(*select).from_("__in0")
    for j in range(1, len(tables)):
        inner = inner.join(f"__in{j}", join_type="CROSS")
    query = exp.select(*(exp.column(f"__v{i}") for i in members)).distinct() \
        .from_(inner.subquery("__t")).where(exp.and_(*renamed))
    return query, tables, work


def _evaluate_part(members: list[int], conds: list[exp.Expression], exprs, domains,
                   key_inputs, inputs, limits: Limits, spent: list[int]) -> set[tuple] | None:
    """The combinations of the keys ``members`` that satisfy ``conds``, or None."""
    built = _part_query(members, conds, exprs, domains, key_inputs, inputs, limits, spent)
    if built is None:
        return None
    query, tables, work = built
    rows = _evaluate(checked_sql(query), tuple(tables), spent, work, whole=True)
    if rows is None:
        return None
    if query.args["where"].find(exp.Like) is not None:  # the conditions hold a LIKE
        # SQLite's LIKE ignores ASCII case, the other backends' does not: keep the
        # combinations either reading keeps (NOT LIKE makes neither a superset)
        folded = query.copy().transform(
            lambda n: exp.ILike(**n.args) if isinstance(n, exp.Like) else n)
        other = _evaluate(checked_sql(folded), tuple(tables), spent, 0, whole=True)
        if other is None:
            return None
        rows = [*rows, *other]
    # each value as the domain holds it (1 and 1.0 are one key)
    canonical = {i: {v: v for v in domains[i]} for i in members}
    found_rows = set()
    for row in rows:
        values = []
        for i, v in zip(members, row, strict=True):
            v = float(v) if isinstance(v, decimal.Decimal) else v
            if v not in canonical[i]:
                # a value the key's domain does not hold (a type the evaluation does not
                # reproduce): do not guess, release the domain as before
                return None
            values.append(canonical[i][v])
        found_rows.add(tuple(values))
    return found_rows


#: The table name of key variables in a condition (no analyst's alias starts with ``__``).
_VARIABLE = "__keyvar"
#: The kind of each catalog type's values, for comparisons.
_CATALOG_KINDS = {"int": "num", "float": "num", "string": "str", "bool": "bool",
                  "date": "date", "timestamp": "ts"}


def _value_kind(value) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | decimal.Decimal):
        return "num"
    if isinstance(value, str):
        return "str"
    if isinstance(value, datetime.datetime):
        # a zoned timestamp compares through the session's time zone: not evaluated
        return "ts" if value.tzinfo is None else None
    if isinstance(value, datetime.date):
        return "date"
    return None


def _values_kind(values: tuple) -> str | None:
    """The one kind of a domain's values (None: mixed, or none known)."""
    kinds = {_value_kind(v) for v in values if v is not None}
    return kinds.pop() if len(kinds) == 1 else None


def _literal_kind(node: exp.Expression) -> str | None:
    """The kind of a literal operand, or None if the node is not one dpsql evaluates."""
    if isinstance(node, exp.Literal):
        if not node.is_string:
            return "num"
        # CHAR(n) compares ignoring trailing spaces in PostgreSQL, not in DuckDB
        return None if node.this.endswith(" ") else "str"
    if isinstance(node, exp.Boolean):
        return "bool"
    if isinstance(node, exp.Null):
        return "null"
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) \
            and not node.this.is_string:
        return "num"
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) \
            and node.this.is_string:
        if node.to.is_type(exp.DataType.Type.DATE):
            return "date"
        if node.to.is_type(exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ):
            return "ts"
    return None


#: Comparisons that mean the same on every backend for operands of one kind.
_ORDERINGS = (exp.LT, exp.LTE, exp.GT, exp.GTE)
_EQUALITIES = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)


def _key_condition(condition: exp.Expression, exprs, domains, inputs, readers
                   ) -> tuple[exp.Expression, set[int]] | None:
    """``condition`` over key variables, and the keys it restricts; or None.

    Besides the comparisons of :func:`released_groups`, text is evaluated where every
    backend gives it one meaning on the strings involved (the domains of the variables
    and input columns the condition reads, and its literals):

    * ``LIKE``/``ILIKE`` (and ``NOT LIKE``) with a constant pattern without backslash
      (PostgreSQL's and Spark's default escape), ``LOWER``, ``UPPER``: only when every
      string involved is ASCII. Case mapping of ASCII is the same everywhere (SQLite's
      ``lower`` maps ASCII only). SQLite's ``LIKE`` ignores ASCII case, the others do
      not: :func:`_evaluate_part` evaluates the condition both ways and keeps the
      combinations that either reading keeps.
    * ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN`` over strings: only when every string
      involved is lower-case ASCII letters, or every one upper-case ASCII letters (the
      byte order, every ICU and glibc locale's order and ``NOCASE`` agree on those;
      digits, spaces and punctuation are where collations differ).
    * a string literal compared with a date is read as the date it writes when it is
      a strict ISO date (``'2024-03-30'``), which every backend reads the same way.

    Whatever is not evaluated leaves the condition unused, which releases more keys
    (noisy empty groups), never fewer. Nothing here reads data: the decision and the
    evaluation depend on the catalog's domains and the query text only.
    """

    def substitute(node: exp.Expression) -> exp.Expression:
        for i, e in enumerate(exprs):
            if node == e:
                return exp.column(f"v{i}", table=_VARIABLE)
        return node

    condition = condition.copy().transform(substitute)
    reader = _Kinds(domains, inputs, readers)
    if reader.kind_of(condition) != "bool" or not reader.used:
        return None
    texts = [v for v in reader.strings if isinstance(v, str)]
    if reader.needs and not all(v.isascii() for v in texts):
        return None
    if "order" in reader.needs and not (all(_LOWER.fullmatch(v) for v in texts)
                                        or all(_UPPER.fullmatch(v) for v in texts)):
        return None
    return condition, reader.used


class _Kinds:
    """Reads the kind of each node of a condition over key variables (None: not
    evaluable), noting what the condition reads and needs (see :func:`_key_condition`)."""

    def __init__(self, domains, inputs, readers):
        self.domains, self.inputs, self.readers = domains, inputs, readers
        self.used: set[int] = set()  # the keys the condition restricts
        self.kinds: dict[int, str | None] = {}
        #: every string the condition can compare (domains, literals)
        self.strings: list = []
        #: "ascii": LIKE or case mapping; "order": string ordering
        self.needs: set[str] = set()

    def kind_of(self, node: exp.Expression) -> str | None:
        """``num``, ``str``, ``bool``, ``date``, ``ts`` or ``null``; None: not evaluable."""
        if isinstance(node, exp.Paren):
            return self.kind_of(node.this)
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Lower | exp.Upper):
            if self.kind_of(node.this) != "str":
                return None
            self.needs.add("ascii")
            return "str"
        if isinstance(node, exp.Predicate | exp.Connector | exp.Not):
            return self.predicate(node)
        found = _literal_kind(node)
        if found == "str":
            self.strings.append(node.this)
        return found

    def _column(self, node: exp.Column) -> str | None:
        """A key variable's kind, or an input column's (of a key computed from it)."""
        if node.table == _VARIABLE:
            i = int(node.name[1:])
            self.used.add(i)
            if i not in self.kinds:
                self.kinds[i] = _values_kind(self.domains[i])
                if self.kinds[i] == "str":
                    self.strings.extend(self.domains[i])
            return self.kinds[i]
        sql = node.sql()
        if sql not in self.readers:
            return None  # not an input of a key computed from its inputs
        self.used.update(self.readers[sql])
        if self.inputs[sql][2] == "str":
            self.strings.extend(self.inputs[sql][1])
        return self.inputs[sql][2]

    def same(self, *operands: exp.Expression) -> str | None:
        """The one kind of ``operands`` (NULL goes with all), or None."""
        found = [self.kind_of(o) for o in operands]
        if any(k is None for k in found):
            return None
        real = {k for k in found if k != "null"}
        if real == {"date", "str"} and all(
                k != "str" or _iso_date(o) for o, k in zip(operands, found, strict=True)):
            return "date"  # '2024-03-30' against a date: that date on every backend
        if len(real) > 1:
            return None
        return real.pop() if real else "null"

    def ordered(self, *operands: exp.Expression) -> bool:
        """Whether ``operands`` can be ordered alike everywhere (strings: see needs)."""
        k = self.same(*operands)
        if k == "str":
            self.needs.add("order")
        return k is not None

    def predicate(self, node: exp.Expression) -> str | None:
        """``bool`` for an evaluable comparison or connective, else None."""
        if isinstance(node, exp.And | exp.Or):
            ok = self.kind_of(node.this) == "bool" and self.kind_of(node.expression) == "bool"
            return "bool" if ok else None
        if isinstance(node, exp.Not):
            return "bool" if self.kind_of(node.this) == "bool" else None
        if isinstance(node, _EQUALITIES):
            return "bool" if self.same(node.this, node.expression) else None
        if isinstance(node, _ORDERINGS):
            return "bool" if self.ordered(node.this, node.expression) else None
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                return None
            ok = self.ordered(node.this, node.args.get("low"), node.args.get("high"))
            return "bool" if ok else None
        if isinstance(node, exp.In):
            if any(node.args.get(a) is not None for a in ("query", "unnest", "field")) \
                    or not node.expressions:
                return None
            return "bool" if self.same(node.this, *node.expressions) else None
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                return None
            return "bool" if self.kind_of(node.this) is not None else None
        if isinstance(node, exp.Like | exp.ILike):
            pattern = node.expression
            if not (isinstance(pattern, exp.Literal) and _literal_kind(pattern) == "str"
                    and "\\" not in pattern.this) or self.kind_of(node.this) != "str":
                return None
            self.strings.append(pattern.this)
            self.needs.add("ascii")
            return "bool"
        return None


#: Strings whose order every collation agrees on (see :func:`_key_condition`).
_LOWER = re.compile("[a-z]*")
_UPPER = re.compile("[A-Z]*")
#: A date literal every backend reads as the same date.
_ISO = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _iso_date(node: exp.Expression) -> bool:
    """Whether ``node`` is a string literal that is a strict, valid ISO date."""
    if not (isinstance(node, exp.Literal) and node.is_string and _ISO.fullmatch(node.this)):
        return False
    try:
        datetime.date.fromisoformat(node.this)
    except ValueError:
        return False
    return True
