"""The totality check's type probes (dpsql.backends.probe_types) written fast, unchanged.

The probes' text is assembled from texts sqlglot wrote (each probed expression, each
relation of typed NULLs) instead of building a SELECT tree and writing it again. These
tests pin that the text is exactly the one sqlglot writes for that SELECT, in every
dialect dpsql probes, so the engine binds the same probes as before.
"""

from __future__ import annotations

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from dpsql.backends import probe_types

DIALECTS = ("duckdb", "postgres", "spark", "sqlite")
EXPRESSIONS = (
    "x", "1", "NULL", "-1", "'it''s'", "GREATEST(\"__p0\", 0)", "\"__p0\" BETWEEN 1 AND 6",
    "\"__p0\" IN (SELECT CAST(NULL AS BIGINT))", "NOT \"__p0\"", "\"__p0\" IS NULL",
    "ROW_NUMBER() OVER (PARTITION BY \"__p0\" ORDER BY \"__p1\")", "COUNT(*)",
    "CASE WHEN \"__p0\" THEN 1 ELSE 2.5 END", "(SELECT CAST(NULL AS DOUBLE))",
    "CAST(\"__p0\" AS DECIMAL(18, 3))", "\"__p0\" - (\"__p1\" - 1)",
)
COLUMNS = ((("age", "BIGINT"), ("income", "DOUBLE")), (("__p0", "DECIMAL(18,3)"),),
           (("Odd Name", "VARCHAR"), ("b", "BOOLEAN")))


def _tree_probe(items: list[exp.Expression], relations: list[tuple], dialect: str) -> str:
    """The probe as it was written before: a SELECT tree, written by sqlglot."""
    query = exp.Select(expressions=[exp.alias_(i.copy(), f"__t{n}") for n, i in
                                    enumerate(items)])
    rels = [exp.Subquery(this=exp.Select(expressions=[
        exp.alias_(exp.Cast(this=exp.Null(), to=exp.DataType.build(t, dialect=dialect,
                                                                    udt=True)),
                   exp.to_identifier(c, quoted=True)) for c, t in cols]),
        alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
        for alias, cols in relations]
    if rels:
        query.set("from_", exp.From(this=rels[0]))
        if len(rels) > 1:
            query.set("joins", [exp.Join(this=r, kind="CROSS") for r in rels[1:]])
    return query.sql(dialect=dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("n_relations", [0, 1, 3])
def test_probe_text_is_the_select_sqlglot_writes(dialect, n_relations):
    items = [sqlglot.parse_one(e, read="duckdb") for e in EXPRESSIONS]
    relations = [(f"r{i}", COLUMNS[i]) for i in range(n_relations)]
    fast = probe_types.probe_sql(
        [i.copy().sql(dialect=dialect) for i in items],
        [probe_types._placeholders(cols, alias, dialect) for alias, cols in relations])
    assert fast == _tree_probe(items, relations, dialect)


def test_the_placeholder_relation_is_not_shared_between_probes():
    """The relation's text is remembered; the typed NULL trees behind it are copies."""
    first = probe_types._typed_null("DECIMAL(18,3)", "duckdb")
    first.to.set("expressions", [])
    assert probe_types._typed_null("DECIMAL(18,3)", "duckdb").sql() == \
        "CAST(NULL AS DECIMAL(18, 3))"


def test_probes_type_nodes_as_the_engine_does():
    con = duckdb.connect()
    tree = sqlglot.parse_one("SELECT SUM(GREATEST(LEAST(income, 10), 0)) AS s, age + 1 AS a "
                             "FROM pums GROUP BY age", read="duckdb")
    types = probe_types.expression_types(
        tree, lambda t: {"age": "INTEGER", "income": "DECIMAL(18,3)"} if t == "pums" else None,
        lambda sql: [str(t) for t in con.sql(sql).types], "duckdb")
    by_text = {n.sql(dialect="duckdb"): types(n) for n in tree.walk() if types(n)}
    assert by_text["SUM(GREATEST(LEAST(income, 10), 0))"] == "DECIMAL(38,3)"
    assert by_text["age + 1"] == "INTEGER"
    assert by_text["LEAST(income, 10)"] == "DECIMAL(18,3)"
