"""Keys the owner says hold only their declared values, checked on the data: the domain
filter is left out where it would keep every row.

A group key with a public domain gets a filter, ``key IN (values)``, that keeps the rows
whose key lies in the domain (:mod:`dpsql.rewrite.restrict_domains`, which says why it
stays even without an L0 step). On a table whose rows all hold one of the declared
values, the filter keeps every row and only costs time: ``segment_balance`` (TPC-H
``customer`` alone, grouped by ``c_mktsegment``) spent 0.13 of its 0.91 ms there at sf
0.1. The owner says so in the catalog (``values_only: true`` beside ``values``); dpsql
does not take the owner's word for it:

* **The check.** Before the charge, one query over the table counts the rows the
  filter would drop: ``NOT COALESCE(cond, FALSE)`` with ``cond`` the filter's own
  condition (:func:`~dpsql.rewrite.restrict_domains.domain_condition`) over the column,
  so the engine's own ``IN``/``IS NULL`` decides, as the filter would, and no Python
  equality enters. The key is *proven* when the count is 0: every row of the table
  passes the filter's condition.
* **Where it holds.** The count is exact only while the table cannot change: a DuckDB
  file dpsql opened read-only or its own ``:memory:``, and a base table, not a view
  (:meth:`~dpsql.backends.base.Backend.frozen_row`). The result is remembered per
  backend for that reason. Anything that fails, on any backend, keeps the filter.
* **Which keys.** A bare column of a private catalog table (public tables are
  :mod:`dpsql.public_keys`' without any declaration) read as the FROM table or an
  INNER join, never a derived table, a hidden path join or a null-supplied side: every
  row the query groups then carries that column's value from one of the table's own
  rows, on which the condition was true, and it is a test of the value alone. And only
  where the key's domain is the column's whole declared domain (not narrowed by the
  query's WHERE): the condition the check counted is then the filter's condition, and
  one check per column serves every query.

So the filter is true on every row the query reads (WHERE form) and on every group
(HAVING form: a test of the group's key, constant on the group,
:mod:`dpsql.rewrite.restrict_domains`), and removing it changes no row: what the L0 step
picks (``__over`` by its cover too, which reads the filtered rows), the statistics and
the answer's size are those of the query with it. The reasons the filter stays without
an L0 step (the answer's size after the charge growing with the values outside the
domain; Python's looser equality) do not arise: there are no rows outside.

**Nothing the analyst sees depends on the check.** As with :mod:`dpsql.one_per_user`:
the plan keeps its keys as they were (``in_domain`` only on the plan that runs), so the
noise, notes, ``Result.sql`` and ``explain()`` are those of the query with the filter;
the backend runs the same SQL without it, which returns the same rows. A false
declaration keeps the filter and is the owner's to find, in the owner's log
(``dpsql.owner``) and ``dpsql catalog validate -d``. What is left is time: a query with
the filter is slower, and the check reads the table once per backend. dpsql's model
does not cover time (a backend's time depends on the data everywhere); with the
declaration, the columns whose check could show in it are the ones the owner named.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.domains import column_values
from dpsql.analyze.plan import GroupKey, Plan
from dpsql.frozen_facts import bare_column, every_row, frozen
from dpsql.rewrite.restrict_domains import domain_condition


def keys_in_domain(plan: Plan, backend) -> frozenset[int]:
    """The positions of ``plan.keys`` whose domain filter the data proves needless
    (module docstring); checks what the backend has not checked yet."""
    out = set()
    for i, key in enumerate(plan.keys):
        found = _declared(plan, key)
        if found is not None and _prove(backend, *found, _condition(key, plan, found[1])):
            out.add(i)
    return frozenset(out)


def check_declared(backend, table) -> dict[str, bool] | None:
    """Each ``values_only`` column of a catalog ``table`` and whether the data proves it
    (the owner's view: ``dpsql catalog validate -d``); None when the backend's data can
    change, so nothing is checked and every query keeps its filters.

    >>> import tempfile, pathlib
    >>> from dpsql.backends.duckdb import DuckDBBackend
    >>> from dpsql.catalog import load_catalog
    >>> from dpsql.datasets import catalog_path, load_pums
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pums.duckdb"
    >>> load_pums(path)
    >>> backend = DuckDBBackend(path)
    >>> check_declared(backend, load_catalog(catalog_path("pums_dup")).table("pums_dup"))
    {'sex': True, 'educ': True, 'race': True, 'married': True}
    >>> backend.close()
    """
    columns = [c for c in table.columns.values() if c.values_only]
    if not columns or not frozen(backend, table.name):
        return None
    out = {}
    for column in columns:
        key = GroupKey(column.name, exp.column(column.name), column_values(column))
        whole = column.type not in ("float", "timestamp")  # as the filter's (_whole)
        out[column.name] = _prove(backend, table.name, column.name,
                                  domain_condition(key, None, _column(column.name), whole))
    return out


def _declared(plan: Plan, key: GroupKey) -> tuple[str, str] | None:
    """(table, column) of a key that is a bare ``values_only`` column of a private catalog
    table read as the FROM table or an inner join, over its whole declared domain."""
    if key.domain is None or key.in_domain:
        return None
    found = bare_column(plan, key.expr, first_source=True)
    if found is None or found[0].public:
        return None
    table, column = found
    if not column.values_only:
        return None
    whole = column_values(column)
    if whole is None or _as_set(key.domain) != _as_set(whole):
        return None
    return table.name, column.name


def _as_set(values) -> set:
    # by type too: True == 1 in Python, not in SQL
    return {(type(v), v) for v in values}


def _condition(key: GroupKey, plan: Plan, column: str) -> exp.Expression:
    """The filter's condition over the table's own column (quoted: never a function
    such as ``current_date``)."""
    return domain_condition(key, plan, _column(column))


def _column(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def _prove(backend, table: str, column: str, condition: exp.Expression) -> bool:
    """Whether no row of ``table`` fails ``condition`` (:mod:`dpsql.frozen_facts`)."""
    return every_row(backend, table, [condition],
                     [f"values_only: {table}.{column} in its declared values"],
                     "the domain filter of queries grouped by it")[0]
