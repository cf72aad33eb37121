"""Keys of public tables already inside their domain: no filter needed.

A group key with a public domain gets a filter that keeps the rows whose key lies in the
domain (:mod:`dpsql.rewrite.restrict_domains`). Where the key is a plain column of a
*public* table joined without being null-supplied (the FROM table, or an inner join),
every row the query groups carries a value of that column from one of the table's own
rows. If every row of the table passes the filter, so does every joined row, and the
filter keeps them all: leaving it out changes nothing the query computes. The filter is
not free on small queries, although the table is small: DuckDB reads it as a filter of
unknown selectivity and plans the joins around an underestimated side (TPC-H q10 at sf
0.1: 1.29x its floor with the filter on ``nation.n_name``, 1.05x without it).

Before the charge, dpsql counts the public table's rows the filter would drop (its own
SQL, the same condition: :func:`~dpsql.rewrite.restrict_domains.domain_condition`); a
count of 0 marks the key ``in_domain`` and the rewrite writes no filter for it. Sound
because:

* the table is public: reading it reveals nothing the owner did not publish, and the
  decision depends on nothing else;
* the count is exact only as long as the table does not change, so only a backend whose
  data cannot change while dpsql holds it counts (a DuckDB file dpsql attached
  read-only, whose file lock keeps writers out; dpsql's own ``:memory:``:
  :func:`dpsql.frozen_facts.every_row`), and only a base table: a view is
  computed afresh by each statement (``random()``, the clock, another table). The plan
  that holds the decision lives with that connection (its plan cache);
* the engine's own ``IN``/``BETWEEN``/``IS NULL`` decides, as the filter would, so no
  Python equality enters;
* a null-supplied table (the right side of a LEFT JOIN) adds NULL keys of no row of
  its own, and a derived table computes its values: both keep the filter.

Anything that fails here only keeps the filter.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.frozen_facts import every_row
from dpsql.rewrite.restrict_domains import domain_condition


def prove_in_domain(plan: Plan, backend) -> None:
    """Marks ``in_domain`` each key of a public table all of whose rows lie in the
    key's domain (see the module docstring).

    The count is :func:`dpsql.frozen_facts.every_row`'s, remembered per backend by the
    condition's text, so a domain is counted once per connection; a count above 0 is
    not the owner's news (the analyst's query may narrow a public key's domain), so it
    is not logged."""
    for key in plan.keys:
        source = _public_source(plan, key)
        if source is None:
            continue
        table = source.table.name
        condition = domain_condition(key, plan, exp.column(key.expr.name))
        if every_row(backend, table, [condition], [f"{table}.{key.expr.name} in its domain"],
                     "the domain filter", report=False)[0]:
            key.in_domain = True


def _public_source(plan: Plan, key):
    """The source of a key that is a plain column of a public catalog table, joined as
    the FROM table or by an inner join; None otherwise."""
    if key.domain is None or not isinstance(key.expr, exp.Column) or not key.expr.table:
        return None
    source = next((s for s in plan.scope.sources if s.alias == key.expr.table), None)
    if source is None or source.derived is not None or source.kind not in ("from", "inner") \
            or not source.table.public or key.expr.name not in source.table.columns:
        return None
    return source
