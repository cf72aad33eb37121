"""A domain reducer: the smallest catalog, data and query that still break a property.

Hypothesis shrinks the random choices behind an example; on this fuzzer each replay
costs a world and several queries (about a second), so its shrinker stops at its
five-minute limit with most of the query still there. This reducer works on the
example itself instead — SELECT items, WHERE conjuncts, joins, clauses, tables,
columns, rows, catalog details — and keeps a change when the same check still fails
(delta debugging, one world build and one query per try). A typical finding reduces
in under a minute to a query with one aggregate and a handful of rows.

Statements must be in the fuzzer's regular form: ``CREATE TABLE t (col TYPE ..., ...)``
and one ``INSERT INTO t VALUES (...)`` per row.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable

import sqlglot
from sqlglot import exp

from tests.privacy.oracle import Outcome, World, check_world

Check = Callable[[World, str], bool]


def reduce(world: World, sql: str, still_fails: Check, seconds: float = 120.0
           ) -> tuple[World, str]:
    """Greedily simplifies ``world`` and ``sql`` while ``still_fails(world, sql)`` holds."""
    deadline = time.time() + seconds
    best = (world, sql)
    progress = True
    while progress and time.time() < deadline:
        progress = False
        for candidate in _candidates(*best):
            if time.time() >= deadline:
                break
            if _size(candidate) >= _size(best):
                continue
            if still_fails(*candidate):
                best = candidate
                progress = True
                break  # restart from the smaller example
    return best


def same_kind(kind: str, params: dict, classify: Callable[[World, str, Outcome], bool] | None
              = None) -> Check:
    """A check that the query still breaks the property ``kind`` (and ``classify``, if given)."""

    def check(world: World, sql: str) -> bool:
        try:
            outcome = check_world(world, sql, **params)
        except Exception:  # noqa: BLE001 - a candidate world that cannot be built
            return False
        if not any(v.kind == kind for v in outcome.violations):
            return False
        return classify is None or classify(world, sql, outcome)

    return check


def _size(candidate: tuple[World, str]) -> int:
    world, sql = candidate
    return (len(sql) + sum(len(s) for s in world.schema + world.data + world.attacker)
            + len(repr(world.catalog)) + (1 if world.attacker_first else 0))


# -- candidates, biggest cuts first -----------------------------------------------------


def _candidates(world: World, sql: str):
    yield from ((world, s) for s in _query_candidates(sql))
    yield from ((w, sql) for w in _drop_tables(world, sql))
    yield from ((w, sql) for w in _drop_rows(world, "data"))
    yield from ((w, sql) for w in _drop_rows(world, "attacker"))
    if world.attacker_first:
        yield (_replace(world, attacker_first=False), sql)
    yield from ((w, sql) for w in _drop_columns(world, sql))
    yield from ((w, sql) for w in _simplify_catalog(world))
    yield from ((w, sql) for w in _simplify_values(world))


def _replace(world: World, **changes) -> World:
    fields = dict(catalog=world.catalog, schema=world.schema, data=world.data,
                  attacker=world.attacker, attacker_first=world.attacker_first,
                  backend=world.backend)
    fields.update(changes)
    return World(**fields)


def _query_candidates(sql: str):
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return
    if not isinstance(tree, exp.Select):
        return

    def variant(change) -> str | None:
        t = tree.copy()
        try:
            change(t)
            return t.sql(dialect="duckdb")
        except Exception:  # noqa: BLE001 - a change that does not apply
            return None

    out: list[str | None] = []
    for key in ("order", "limit", "having", "where"):
        if tree.args.get(key):
            out.append(variant(lambda t, key=key: t.set(key, None)))
    group = tree.args.get("group")
    if group:
        out.append(variant(lambda t: (t.set("group", None), t.set("order", None),
                                      t.set("having", None), _drop_keys(t))))
        for i in range(len(group.expressions)):
            out.append(variant(lambda t, i=i: _drop_group_key(t, i)))
    for i in range(len(tree.expressions)):
        if len(tree.expressions) > 1:
            out.append(variant(lambda t, i=i: t.expressions.pop(i) and t.set(
                "expressions", t.expressions)))
    where = tree.args.get("where")
    if where is not None and isinstance(where.this, exp.And):
        conjuncts = list(where.this.flatten())
        for i in range(len(conjuncts)):
            out.append(variant(lambda t, i=i: t.set("where", exp.Where(this=exp.and_(
                *[c.copy() for j, c in enumerate(t.args["where"].this.flatten()) if j != i])))))
    inner = [n for n in tree.find_all(exp.Select) if n is not tree]
    for k, node in enumerate(inner):  # derived tables, CTEs and IN subqueries
        for i in range(len(node.expressions) if len(node.expressions) > 1 else 0):
            out.append(variant(lambda t, k=k, i=i: _inner(t, k).set("expressions", [
                e for j, e in enumerate(_inner(t, k).expressions) if j != i])))
        for key in ("where", "having"):
            if node.args.get(key):
                out.append(variant(lambda t, k=k, key=key: _inner(t, k).set(key, None)))
    for i in range(len(tree.args.get("joins") or [])):
        out.append(variant(lambda t, i=i: t.set("joins", [j for k, j in enumerate(t.args["joins"])
                                                          if k != i] or None)))
    for i, item in enumerate(tree.expressions):  # an aggregate becomes COUNT(*)
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(body, exp.AggFunc) and body.sql() != "COUNT(*)":
            out.append(variant(lambda t, i=i: t.expressions[i].set(
                "this", exp.Count(this=exp.Star()))))
    yield from (s for s in dict.fromkeys(out) if s and s != sql)


def _inner(t: exp.Select, k: int) -> exp.Select:
    return [n for n in t.find_all(exp.Select) if n is not t][k]


def _drop_keys(t: exp.Select) -> None:
    t.set("expressions", [e for e in t.expressions if not _is_key_item(e)])


def _is_key_item(e: exp.Expression) -> bool:
    return isinstance(e, exp.Alias) and re.fullmatch(r"k\d+", e.alias or "") is not None


def _drop_group_key(t: exp.Select, i: int) -> None:
    group = t.args["group"]
    key = group.expressions[i]
    group.set("expressions", [g for j, g in enumerate(group.expressions) if j != i])
    t.set("expressions", [e for e in t.expressions
                          if not (_is_key_item(e) and e.this == key)])
    if not group.expressions:
        t.set("group", None)
        t.set("order", None)
        t.set("having", None)


CREATE_RE = re.compile(r"CREATE TABLE (\w+) \((.*)\)$", re.S)
INSERT_RE = re.compile(r"INSERT INTO (\w+) VALUES \((.*)\)$", re.S)


def _table_of(statement: str) -> str | None:
    m = CREATE_RE.match(statement) or INSERT_RE.match(statement)
    return m.group(1) if m else None


def _drop_tables(world: World, sql: str):
    for name in list(world.catalog["tables"]):
        if re.search(rf"\b{name}\b", sql, re.I):
            continue  # (a table reached only along a foreign-key path fails to drop: kept)
        catalog = copy.deepcopy(world.catalog)
        del catalog["tables"][name]
        if not catalog["tables"]:
            continue
        keep = [s for s in world.schema if _table_of(s) != name]
        yield _replace(world, catalog=catalog, schema=keep,
                       data=[s for s in world.data if _table_of(s) != name],
                       attacker=[s for s in world.attacker if _table_of(s) != name])


def _drop_rows(world: World, field: str):
    rows = getattr(world, field)
    n = len(rows)
    size = n // 2
    while size >= 1:
        for start in range(0, n, size):
            kept = rows[:start] + rows[start + size:]
            yield _replace(world, **{field: kept})
        size //= 2


def split_top(text: str) -> list[str]:
    """Splits at commas outside quotes and parentheses."""
    parts, depth, quote, current = [], 0, False, []
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            current.append(ch)
            if ch == "'":
                if i + 1 < len(text) and text[i + 1] == "'":
                    current.append("'")
                    i += 1
                else:
                    quote = False
        elif ch == "'":
            quote = True
            current.append(ch)
        elif ch == "(":
            depth += 1
            current.append(ch)
        elif ch == ")":
            depth -= 1
            current.append(ch)
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current).strip())
    return parts


def _drop_columns(world: World, sql: str):
    for statement in world.schema:
        m = CREATE_RE.match(statement)
        if not m:
            continue
        table, body = m.group(1), split_top(m.group(2))
        if len(body) <= 1:
            continue
        for i, coldef in enumerate(body):
            column = coldef.split()[0]
            entry = world.catalog["tables"].get(table, {})
            if entry.get("user_key") == column or re.search(rf"\b{column}\b", sql, re.I):
                continue
            if column in str(entry.get("user_key", "")):
                continue
            catalog = copy.deepcopy(world.catalog)
            catalog["tables"][table]["columns"].pop(column, None)
            if not catalog["tables"][table]["columns"]:
                continue

            def cut(s: str, table=table, i=i) -> str:
                mi = INSERT_RE.match(s)
                if not mi or mi.group(1) != table:
                    return s
                values = split_top(mi.group(2))
                del values[i]
                return f"INSERT INTO {table} VALUES ({', '.join(values)})"

            schema = [s if s is not statement else
                      f"CREATE TABLE {table} ({', '.join(c for j, c in enumerate(body) if j != i)})"
                      for s in world.schema]
            yield _replace(world, catalog=catalog, schema=schema,
                           data=[cut(s) for s in world.data],
                           attacker=[cut(s) for s in world.attacker])


def _simplify_catalog(world: World):
    for name, table in world.catalog["tables"].items():
        for key in ("max_groups", "max_rows"):
            if table.get(key, 1) != 1:
                catalog = copy.deepcopy(world.catalog)
                catalog["tables"][name][key] = 1
                yield _replace(world, catalog=catalog)
        for column, spec in table["columns"].items():
            if not isinstance(spec, dict):
                continue
            for key in ("values", "nullable"):
                if key in spec:
                    catalog = copy.deepcopy(world.catalog)
                    del catalog["tables"][name]["columns"][column][key]
                    yield _replace(world, catalog=catalog)
            if list(spec) == ["type"]:
                catalog = copy.deepcopy(world.catalog)
                catalog["tables"][name]["columns"][column] = spec["type"]
                yield _replace(world, catalog=catalog)


def _simplify_values(world: World):
    """Long literals become short ones (e.g. a 120-character string)."""
    for field in ("data", "attacker"):
        rows = getattr(world, field)
        for i, s in enumerate(rows):
            shorter = re.sub(r"'([^']{8,})'", "'z'", s)
            if shorter != s:
                yield _replace(world, **{field: rows[:i] + [shorter] + rows[i + 1:]})


def merged(statements: list[str]) -> list[str]:
    """Consecutive one-row INSERTs into one table as one multi-row INSERT (for reading)."""
    out: list[str] = []
    last_table = None
    for s in statements:
        m = INSERT_RE.match(s)
        if m and last_table == m.group(1) and out:
            out[-1] = out[-1] + f", ({m.group(2)})"
        else:
            out.append(s)
        last_table = m.group(1) if m else None
    return out
