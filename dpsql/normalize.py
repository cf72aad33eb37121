"""Normalisation: SQL that clients and other DP engines write, in dpsql's own spelling.

Runs between parsing and validation (:func:`normalize`). Each pass is a function
``Expr -> Expr`` that rewrites one spelling into an equivalent one the rest of the
pipeline already answers, and says in its docstring why the two mean the same on every
database. A pass never builds SQL from text and never widens what can be asked: its
output goes through the validator's allow-list like any query (nothing here is trusted),
then through analysis, which derives every bound and sensitivity from the result. What
a pass cannot rewrite exactly is refused with an :class:`~dpsql.errors.UnsupportedQueryError`
naming what the user wrote.

The passes, in order (:data:`PASSES`):

* :func:`~dpsql.client_sql.parenthesised_tables` -- ``FROM (t) AS c``, ``FROM (a JOIN b)``;
* :func:`qualified_names` -- ``PUMS.PUMS`` (SmartNoise's ``schema.table``) as ``PUMS``;
* :func:`join_using` -- ``JOIN t USING (c)`` as ``JOIN t ON a.c = t.c``;
* :func:`group_by_all` -- ``GROUP BY ALL`` as the positions it stands for;
* :func:`aggregate_filter` -- ``AGG(x) FILTER (WHERE p)`` as ``AGG(CASE WHEN p THEN x END)``;
* :func:`aggregate_spellings` -- ``VAR``, ``VARP``, ``STD``, ``STDEVP`` as VARIANCE/STDDEV;
* :func:`starts_with` -- ``starts_with(x, 'c')`` as ``x LIKE 'c%'``;
* then the passes of :mod:`dpsql.client_sql` (what BI tools and notebooks send).

(T-SQL's ``TOP n`` cannot be parsed in DuckDB's grammar; :mod:`dpsql.parse` reads it as
``LIMIT n``.)

>>> from dpsql.parse import parse
>>> from dpsql.datasets import pums_catalog
>>> normalize(parse("SELECT sex, COUNT(*) FILTER (WHERE age > 60) AS n FROM pums GROUP BY ALL"),
...           pums_catalog()).sql()
'SELECT sex, COUNT(CASE WHEN age > 60 THEN 1 END) AS n FROM pums GROUP BY 1'
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.client_sql import FIRST as CLIENT_FIRST
from dpsql.client_sql import PASSES as CLIENT_PASSES
from dpsql.client_sql import _keep_names
from dpsql.errors import UnknownColumnError, UnknownTableError, UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits


def normalize(expression: exp.Expression, catalog: Catalog,
              limits: Limits = DEFAULT) -> exp.Expression:
    """Applies every pass of :data:`PASSES` to a parsed statement.

    Anything but a SELECT is returned unchanged (the validator refuses it with its own
    message). The size limits are checked first, so no pass walks an oversized tree.

    Raises:
        UnsupportedQueryError: a spelling that cannot be rewritten exactly.
        UnknownTableError, UnknownColumnError: a name a pass must resolve is unknown.
    """
    if not isinstance(expression, exp.Select):
        return expression
    from dpsql.validate import check_size

    check_size(expression, limits)
    for rule in PASSES:
        expression = rule(expression, catalog)
    return expression


def _selects(expression: exp.Expression) -> list[exp.Select]:
    """Every SELECT of the statement: the outer one, derived tables, CTEs, IN lists."""
    return list(expression.find_all(exp.Select))


def _own(node: exp.Expression, select: exp.Select) -> bool:
    """Whether ``node`` belongs to ``select`` itself, not to a query nested in it."""
    return node.find_ancestor(exp.Select) is select


# -- schema-qualified table names --------------------------------------------------------

#: The schema the SQLAlchemy dialect reflects (its ``default_schema_name``).
SCHEMA = "main"


def qualified_names(expression: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``schema.table`` as ``table`` when ``schema`` is the catalog's data set.

    SmartNoise SQL's metadata names tables ``schema.table`` and its users write
    ``FROM PUMS.PUMS``; ``dpsql catalog import-smartnoise`` keeps the table name and
    records the collection (or, without one, its single schema) as the catalog's
    ``dataset``. A dpsql catalog has one namespace, so ``PUMS.PUMS`` and ``PUMS`` name
    the same table exactly when the qualifier is that data set; column references
    qualified the same way (``PUMS.PUMS.age``) lose the qualifier too. Anything else is
    refused rather than guessed: a qualifier that is not the data set, and three-part
    names (which part would be the data set?). The table name itself is checked
    against the catalog later, as for any query; the implicit alias of ``PUMS.PUMS`` is
    ``PUMS``, as in SQL.

    ``main`` is accepted as well: it is the one schema dpsql's SQLAlchemy dialect
    reflects (``Inspector.default_schema_name``, ``get_schema_names()``), so SQLAlchemy
    Core over a reflected table, jupysql's ``--schema main`` and DuckDB habits write
    ``main.pums``. It names the catalog's own namespace, never a table of the database
    outside the catalog: the name that remains is looked up in the catalog like any.
    """
    tables = [t for t in expression.find_all(exp.Table)
              if t.args.get("db") is not None or t.args.get("catalog") is not None]
    if not tables and not any(c.args.get("db") is not None
                              for c in expression.find_all(exp.Column)):
        return expression
    expression = expression.copy()
    dataset = catalog.dataset.lower()
    for table in expression.find_all(exp.Table):
        if table.args.get("catalog") is not None:
            raise UnsupportedQueryError(
                f"qualified table name {table.sql(dialect='duckdb')[:80]!r} has three "
                f"parts; name a "
                f"catalog table, or qualify it with the data set only ({dataset}.table)")
        db = table.args.get("db")
        if db is None:
            continue
        if not isinstance(db, exp.Identifier) or db.name.lower() not in (dataset, SCHEMA):
            raise UnsupportedQueryError(
                f"qualified table name {table.sql(dialect='duckdb')[:80]!r}: the catalog "
                f"holds the data set {dataset!r} only; name its tables unqualified, as "
                f"{dataset}.table or as {SCHEMA}.table")
        table.set("db", None)
    for col in expression.find_all(exp.Column):
        db = col.args.get("db")
        if db is None:
            continue
        if col.args.get("catalog") is not None or not isinstance(db, exp.Identifier) or (
                db.name.lower() not in (dataset, SCHEMA)):
            raise UnsupportedQueryError(
                f"column reference {col.sql(dialect='duckdb')[:80]!r}: qualify a column "
                f"with its table (or {dataset}.table), nothing else")
        col.set("db", None)
    return expression


# -- JOIN ... USING ---------------------------------------------------------------------


def join_using(expression: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``a JOIN b USING (c)`` as ``a JOIN b ON a.c = b.c``, with ``c`` read as ``a.c``.

    In SQL, ``USING (c)`` joins on equality of the two ``c`` columns and merges them
    into one output column ``c``; an unqualified ``c`` anywhere in that SELECT names the
    merged column. For an INNER join both sides are equal (and not NULL) on every joined
    row, for a LEFT join the merged column is the left side's value; in both cases the
    merged column is the left table's ``c``. So the rewrite puts the equality in ON and
    qualifies every unqualified ``c`` of that SELECT with the left table that holds
    ``c`` (the one that held it first, when earlier USING joins merged it already).
    RIGHT and FULL joins (merged value from the right, or COALESCE) are refused, as is a
    ``c`` that the left side holds in several tables or that a side does not hold, a
    side whose columns cannot be listed (a derived table must name its columns), and
    an unqualified ``c`` in ORDER BY or HAVING that is also an output name (SQL would
    read it as the output there).
    """
    if not any(j.args.get("using") for j in expression.find_all(exp.Join)):
        return expression
    expression = expression.copy()
    ctes = {cte.alias.lower(): cte.this for w in expression.find_all(exp.With)
            for cte in w.expressions if isinstance(cte.this, exp.Select)}
    for select in _selects(expression):
        joins = select.args.get("joins") or []
        if not any(j.args.get("using") for j in joins):
            continue
        from_ = select.args.get("from_")
        sources = [_columns_of(from_.this, catalog, ctes)]
        merged: dict[str, str] = {}
        for join in joins:
            right = _columns_of(join.this, catalog, ctes)
            using = join.args.get("using")
            if using:
                side = (join.args.get("side") or "").upper()
                kind = (join.args.get("kind") or "").upper()
                if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
                    raise UnsupportedQueryError(
                        f"{side or kind} JOIN ... USING is not supported: use INNER or LEFT "
                        "JOIN")
                conditions = []
                for ident in using:
                    name = ident.name.lower()
                    owner = merged.get(name)
                    if owner is None:
                        owners = [alias for alias, cols in sources if name in cols]
                        if len(owners) != 1:
                            raise UnknownColumnError(
                                f"JOIN ... USING ({name}): "
                                + ("no table before the join has column"
                                   if not owners else
                                   f"{' and '.join(owners)} both have column") + f" {name!r}"
                                + ("" if not owners else "; write JOIN ... ON"))
                        owner = owners[0]
                    if name not in right[1]:
                        raise UnknownColumnError(
                            f"JOIN ... USING ({name}): {right[0]!r} has no column {name!r}")
                    conditions.append(exp.EQ(this=exp.column(name, table=owner),
                                             expression=exp.column(name, table=right[0])))
                    merged[name] = owner
                join.set("using", None)
                join.set("on", exp.and_(*conditions) if len(conditions) > 1
                         else conditions[0])
            sources.append(right)
        outputs = {item.alias.lower() for item in select.expressions
                   if isinstance(item, exp.Alias)}
        for col in list(select.find_all(exp.Column)):
            name = col.name.lower()
            if col.table or name not in merged or not _own(col, select):
                continue
            if name in outputs and col.find_ancestor(exp.Order, exp.Having) is not None:
                raise UnsupportedQueryError(
                    f"{col.name!r} in ORDER BY or HAVING is both a JOIN ... USING column "
                    "and an output name: qualify it or rename the output")
            col.set("table", exp.to_identifier(merged[name]))
    return expression


def _columns_of(node: exp.Expression, catalog: Catalog,
                ctes: dict[str, exp.Select]) -> tuple[str, set[str]]:
    """The alias a FROM item is known by and the names of its columns."""
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        name = node.name.lower()
        alias = (node.alias or name).lower()
        if name in ctes:  # a WITH table shadows a catalog table of the same name
            return alias, _output_names(ctes[name], name)
        if not catalog.has_table(name):
            raise UnknownTableError(
                f"unknown table {name!r}; the catalog has: {', '.join(sorted(catalog.tables))}")
        return alias, set(catalog.table(name).columns)
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and node.alias:
        return node.alias.lower(), _output_names(node.this, node.alias)
    raise UnsupportedQueryError(
        "JOIN ... USING is supported between catalog tables and named derived tables")


def _output_names(select: exp.Select, name: str) -> set[str]:
    names = set()
    for item in select.expressions:
        if not isinstance(item, exp.Alias | exp.Column) or isinstance(
                item, exp.Column) and isinstance(item.this, exp.Star):
            raise UnsupportedQueryError(
                f"JOIN ... USING next to derived table {name!r}: name each of its output "
                "columns (col or expr AS name)")
        names.add((item.alias if isinstance(item, exp.Alias) else item.name).lower())
    return names


# -- GROUP BY ALL -----------------------------------------------------------------------


def group_by_all(expression: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``GROUP BY ALL`` as ``GROUP BY`` the positions of the non-aggregate outputs.

    DuckDB (and Snowflake, Databricks) define ``GROUP BY ALL`` as grouping by every
    SELECT item that contains no aggregate and reads a column; constants are not grouped
    by (``SELECT 3, COUNT(*) FROM empty GROUP BY ALL`` returns one row, as without a
    GROUP BY). A position stands for exactly its SELECT item, so ``GROUP BY 1, 3`` is
    the same grouping. With no such item the GROUP BY is dropped, which is again what
    ``GROUP BY ALL`` means then.
    """
    from dpsql.validate import AGGREGATES

    if not any(g.args.get("all") for g in expression.find_all(exp.Group)):
        return expression
    expression = expression.copy()
    for group in list(expression.find_all(exp.Group)):
        if not group.args.get("all"):
            continue
        select = group.parent
        if group.expressions or not isinstance(select, exp.Select):
            raise UnsupportedQueryError("GROUP BY ALL cannot be combined with other keys")
        if any(isinstance(item, exp.Star)
               or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))
               for item in select.expressions):
            # ``*`` is every column: GROUP BY ALL would group by all of them
            raise UnsupportedQueryError("GROUP BY ALL with SELECT * is not supported: "
                                        "name the columns to group by")
        positions = []
        for i, item in enumerate(select.expressions, start=1):
            body = item.this if isinstance(item, exp.Alias) else item
            if any(body.find_all(*AGGREGATES, exp.Filter)) or not any(
                    body.find_all(exp.Column)):
                continue
            positions.append(exp.Literal.number(i))
        select.set("group", exp.Group(expressions=positions) if positions else None)
    return expression


# -- FILTER (WHERE ...) -----------------------------------------------------------------


def aggregate_filter(expression: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``AGG(x) FILTER (WHERE p)`` as ``AGG(CASE WHEN p THEN x END)``.

    ``FILTER`` feeds the aggregate only the rows where ``p`` is TRUE. ``CASE WHEN p
    THEN x END`` is ``x`` on those rows and NULL on every other (``p`` FALSE or NULL),
    and every aggregate dpsql answers ignores NULL inputs (COUNT(x), COUNT(DISTINCT x),
    SUM, AVG, VARIANCE, STDDEV, the quantiles, MIN, MAX): the aggregate sees the same
    values either way, so its result is the same, on empty groups too (SUM of no
    rows and SUM of only NULLs are both NULL). ``COUNT(*)`` counts rows, so it becomes
    ``COUNT(CASE WHEN p THEN 1 END)``. For ``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY
    x)`` the CASE goes around ``x``. The rewritten argument is an ordinary expression:
    analysis bounds it (a CASE's bounds are those of its branches, NULL adds none) and
    the rewrite guards it like any other.
    """
    from dpsql.validate import AGGREGATES

    if not any(expression.find_all(exp.Filter)):
        return expression

    def rewrite(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Filter):
            return node
        agg, where = node.this, node.expression
        condition = where.this if isinstance(where, exp.Where) else None
        if condition is None:
            raise UnsupportedQueryError("FILTER needs (WHERE condition)")
        if any(condition.find_all(*AGGREGATES, exp.Filter)):
            raise UnsupportedQueryError("aggregates are not allowed in FILTER (WHERE ...)")
        agg = agg.copy()

        def only_when(value: exp.Expression) -> exp.Expression:
            return exp.Case(ifs=[exp.If(this=condition.copy(), true=value)])

        if isinstance(agg, exp.WithinGroup):
            order = agg.expression
            if not isinstance(order, exp.Order) or len(order.expressions) != 1:
                raise UnsupportedQueryError("WITHIN GROUP needs exactly one ORDER BY expression")
            ordered = order.expressions[0]
            ordered.set("this", only_when(ordered.this))
            return agg
        if not isinstance(agg, AGGREGATES):
            raise UnsupportedQueryError(
                "FILTER (WHERE ...) applies to aggregates only (COUNT, SUM, AVG, ...)")
        arg = agg.this
        if isinstance(arg, exp.Star):
            if not isinstance(agg, exp.Count):
                raise UnsupportedQueryError(f"{agg.sql_name()}(*) is not supported")
            agg.set("this", only_when(exp.Literal.number(1)))
        elif isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise UnsupportedQueryError("COUNT(DISTINCT ...) takes one expression")
            arg.set("expressions", [only_when(arg.expressions[0])])
        elif arg is None or (isinstance(agg, exp.Min | exp.Max) and agg.expressions):
            raise UnsupportedQueryError(f"{agg.sql_name()} with FILTER needs one argument")
        else:
            agg.set("this", only_when(arg))
        return agg

    expression = expression.copy()
    _keep_names(expression, lambda n: isinstance(n, exp.Filter))
    return expression.transform(rewrite)


# -- VAR / STD spellings ----------------------------------------------------------------


#: Other engines' names of the variance and standard deviation aggregates, and dpsql's.
#: VAR/VARP and STDEVP are T-SQL's (sample, population, population; STDEV is parsed as
#: STDDEV already); STD is MySQL's, where it is STDDEV_POP; VARIANCE_SAMP/VARIANCE_POP
#: are spelled out in several engines.
SPELLINGS: dict[str, type[exp.Expression]] = {
    "VAR": exp.Variance,
    "VARP": exp.VariancePop,
    "VARIANCE_SAMP": exp.Variance,
    "VARIANCE_POP": exp.VariancePop,
    "STD": exp.StddevPop,
    "STDEVP": exp.StddevPop,
}


def aggregate_spellings(expression: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``VAR(x)``, ``VARP(x)``, ``STD(x)``, ``STDEVP(x)`` as dpsql's VARIANCE and STDDEV.

    DuckDB has none of these names, so in the read dialect they mean nothing yet; each
    is mapped to the aggregate it names where it comes from (:data:`SPELLINGS`): T-SQL's
    VAR is the sample variance (VAR_SAMP, DuckDB's VARIANCE), VARP and STDEVP the
    population ones, MySQL's STD the population standard deviation (STDDEV_POP). Only a
    call with exactly one argument is mapped; anything else stays as it is and the
    validator refuses it.
    """

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and isinstance(node.this, str):
            target = SPELLINGS.get(node.this.upper())
            if target is not None and len(node.expressions) == 1:
                return target(this=node.expressions[0].copy())
        return node

    if not any(isinstance(n.this, str) and n.this.upper() in SPELLINGS
               for n in expression.find_all(exp.Anonymous)):
        return expression
    expression = expression.copy()
    _keep_names(expression, lambda n: isinstance(n, exp.Anonymous) and isinstance(
        n.this, str) and n.this.upper() in SPELLINGS)
    return expression.transform(rewrite)


def starts_with(expression: exp.Expression, catalog: Catalog) -> exp.Expression:
    """``starts_with(x, 'c')`` (and DuckDB's ``x ^@ 'c'``) as ``x LIKE 'c%'``.

    Both are true exactly when ``x`` begins with the prefix, false when it does not,
    and NULL when ``x`` is NULL, as long as the prefix has no character LIKE treats
    specially: ``%`` and ``_`` (wildcards) and the backslash (PostgreSQL's and Spark's
    default escape). Such a prefix, or one that is no constant text, is refused naming
    what the analyst wrote: dpsql evaluates LIKE, which every backend has and whose
    totality is established, and can restrict public-domain keys with it
    (:func:`dpsql.analyze.domains.released_groups`).
    """

    def rewrite(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.StartsWith):
            return node
        prefix = node.expression
        if not (isinstance(prefix, exp.Literal) and prefix.is_string):
            raise UnsupportedQueryError(
                f"{_shown(node)}: starts_with needs a constant text as its prefix; "
                "nothing was charged")
        if any(ch in prefix.this for ch in "%_\\"):
            raise UnsupportedQueryError(
                f"{_shown(node)}: a prefix with %, _ or a backslash is not supported (LIKE "
                "would read them as wildcards); nothing was charged")
        return exp.Like(this=node.this.copy(),
                        expression=exp.Literal.string(prefix.this + "%"))

    if not any(expression.find_all(exp.StartsWith)):
        return expression
    expression = expression.copy()
    _keep_names(expression, lambda n: isinstance(n, exp.StartsWith))
    return expression.transform(rewrite)


def _shown(node: exp.Expression, limit: int = 60) -> str:
    shown = node.sql(dialect="duckdb")
    return shown if len(shown) <= limit else shown[:limit] + "..."


#: The passes in the order they run.
PASSES: tuple[Callable[[exp.Expression, Catalog], exp.Expression], ...] = (
    *CLIENT_FIRST, qualified_names, join_using, group_by_all, aggregate_filter,
    aggregate_spellings, starts_with, *CLIENT_PASSES,
)
