"""dpsql.parse remembers the tree of a text that parsed (dpsql.parse._PARSED): a hit
must be exactly what parsing that text again gives, a fresh tree each time, and never
in place of the length limit or of a refusal."""

from __future__ import annotations

import pytest
from sqlglot import exp

from dpsql import parse as parse_module
from dpsql.errors import ParseError, UnsupportedQueryError
from dpsql.parse import parse

#: Texts of one length each pair, that parse into different trees: a key that kept
#: less than the whole text (its length, a prefix, its words' set) would mix them up.
PAIRS = [
    ("SELECT COUNT(*) FROM pums WHERE age > 30", "SELECT COUNT(*) FROM pums WHERE age > 40"),
    ("SELECT SUM(age) FROM pums", "SELECT AVG(age) FROM pums"),
    ("SELECT age FROM pums", "SELECT sex FROM pums"),
]


def _fresh(sql: str) -> exp.Expression:
    """What parsing gives without the memo."""
    with parse_module._PARSED_LOCK:
        saved = dict(parse_module._PARSED)
        parse_module._PARSED.clear()
    try:
        return parse(sql)
    finally:
        with parse_module._PARSED_LOCK:
            parse_module._PARSED.clear()
            parse_module._PARSED.update(saved)


def _shape(tree: exp.Expression) -> list:
    """Everything a tree carries: each node's class, plain arguments, comments, type
    and meta (the spelled names messages read)."""
    return [(type(n).__name__, n.arg_key, n.index,
             {k: v for k, v in n.args.items() if not isinstance(v, exp.Expression | list)},
             n.comments, None if n.type is None else n.type.sql(), dict(n._meta or {}))
            for n in tree.walk()]


@pytest.mark.parametrize("sql", [
    "SELECT educ, COUNT(*) FROM pums GROUP BY educ",
    "SELECT TOP 5 educ, COUNT(*) FROM pums GROUP BY educ  -- a comment",
    "SELECT strftime(d, '%Y'), LISTAGG(x) FROM t /* c */ WHERE a LIKE 'x%'",
])
def test_a_hit_is_what_parsing_again_gives(sql):
    fresh = _fresh(sql)
    parse(sql)  # remembered
    hit = parse(sql)
    assert hit.sql() == fresh.sql()
    assert _shape(hit) == _shape(fresh)


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_the_key_is_the_whole_text(a, b):
    assert len(a) == len(b) and a != b
    parse(a)
    assert parse(b).sql() == _fresh(b).sql() != _fresh(a).sql()
    assert parse(a).sql() == _fresh(a).sql()


def test_each_hit_is_a_tree_of_its_own():
    sql = "SELECT COUNT(*) FROM pums WHERE age > 30"
    first = parse(sql)
    first.find(exp.Literal).replace(exp.Literal.number(99))  # callers change trees
    first.set("where", None)
    assert parse(sql).sql() == _fresh(sql).sql()
    assert parse(sql) is not parse(sql)


def test_the_length_limit_and_refusals_still_apply():
    sql = "SELECT COUNT(*) FROM pums"
    parse(sql)
    with pytest.raises(UnsupportedQueryError, match="max_sql_length"):
        parse(sql, max_length=10)
    for bad in ("SELECT 1; SELECT 2", "SELECT FROM WHERE ("):
        for _ in range(2):
            with pytest.raises((UnsupportedQueryError, ParseError)):
                parse(bad)


def test_the_memo_is_bounded():
    for i in range(parse_module._PARSED_MAX + 20):
        parse(f"SELECT {i} FROM t")
    assert len(parse_module._PARSED) <= parse_module._PARSED_MAX
