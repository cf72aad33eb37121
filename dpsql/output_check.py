"""The last check before SQL leaves dpsql: one SELECT, exactly the tree dpsql built.

Every SQL text that dpsql sends to a backend or runs in its post-processing DuckDB is
written by sqlglot from a tree dpsql built. sqlglot writes some payloads back as raw
text (a type name it does not know, a bare keyword, an anonymous function's name), so
a payload that slipped through could close the query and start another. The input
side refuses such payloads (:mod:`dpsql.validate`); this module proves it on the way
out, whatever the passes did in between:

1. **Closed payloads.** Walking the tree that produced the text: every type is a known
   scalar type (never sqlglot's raw ``USERDEFINED`` text), every bare keyword and every
   anonymous function name comes from a fixed list, every name is a plain name (or one
   the catalog declares), every table is a catalog table or a name dpsql generated, and
   no statement-level node (DDL, DML, PRAGMA, SET, a command) is anywhere inside.
2. **One statement, the same tree.** The text must be the tree's, and parsed again in
   the backend's dialect it must be exactly one SELECT that writes back to the text
   itself and passes the walk of (1) too: the query the backend reads from the text is
   then as closed as the one dpsql built. Text that a payload had broken open parses
   into something else, whose text differs.

A mismatch is dpsql's own bug, not the analyst's: it is raised as an
:class:`~dpsql.errors.UnsupportedQueryError` before any charge (the query is refused for
free and the owner's log says why).

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT COUNT(*) AS __s0 FROM pums")
>>> check_sql(tree.sql(dialect="duckdb"), tree, "duckdb", tables={"pums"})
>>> bad = sqlglot.parse_one("SELECT CAST(age AS INT) AS __s0 FROM pums")
>>> _ = bad.find(exp.DataType).replace(exp.DataType(
...     this=exp.DataType.Type.USERDEFINED, kind="INT) AS __s0 FROM pums; SELECT (1"))
>>> bad.sql(dialect="duckdb")
'SELECT CAST(age AS INT) AS __s0 FROM pums; SELECT (1) AS __s0 FROM pums'

>>> check_sql(bad.sql(dialect="duckdb"), bad, "duckdb", tables={"pums"})
Traceback (most recent call last):
...
dpsql.errors.UnsupportedQueryError: dpsql refused its own rewritten query ...
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import NoReturn

import sqlglot
from sqlglot import exp

from dpsql.errors import UnsupportedQueryError
from dpsql.tree_walk import nodes

_log = logging.getLogger("dpsql.owner")

_T = exp.DataType.Type
#: Types dpsql itself writes, in any backend's dialect (the analyst's are a subset).
TYPES = frozenset({
    _T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT, _T.INT128, _T.UTINYINT, _T.USMALLINT,
    _T.UINT, _T.UBIGINT, _T.UINT128, _T.FLOAT, _T.DOUBLE, _T.DECIMAL, _T.BIGDECIMAL,
    _T.TEXT, _T.VARCHAR, _T.CHAR, _T.NCHAR, _T.NVARCHAR, _T.BOOLEAN, _T.DATE,
    _T.DATETIME, _T.TIMESTAMP, _T.TIMESTAMPNTZ, _T.TIMESTAMPTZ, _T.TIMESTAMPLTZ,
    _T.INTERVAL, _T.VARBINARY, _T.BLOB, _T.BIGSERIAL, _T.SERIAL, _T.SMALLSERIAL,
})
#: Bare keywords dpsql writes: date parts (also in the backends' spellings) and the
#: few keywords of the dialect transforms.
KEYWORDS = frozenset({
    "YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DOW", "ISODOW", "DOY", "DAYOFWEEK",
    "DAYOFYEAR", "HOUR", "MINUTE", "SECOND", "EPOCH", "ISOYEAR", "WEEKDAY",
    "DAY_OF_WEEK", "DAY_OF_YEAR", "DAYOFMONTH", "MILLISECOND", "MICROSECOND",
    "YEARS", "QUARTERS", "MONTHS", "WEEKS", "DAYS", "HOURS", "MINUTES", "SECONDS",
})
#: Nodes whose date part sqlglot may write back as raw text, and the argument holding it.
_PART_SLOTS = {exp.Extract: "this", exp.TimestampTrunc: "unit", exp.DateTrunc: "unit",
               exp.Interval: "unit"}
#: Functions sqlglot does not model (kept as anonymous calls) that dpsql writes: the
#: rewrite's ``hash`` and what every engine's dialect transforms write (each engine's
#: :attr:`~dpsql.backends.base.Backend.functions`; ``tests/test_engine_registry.py``
#: keeps the two equal). Any engine's SQL may use any of them.
FUNCTIONS = frozenset({
    "hash", "dpsql_hash", "dpsql_fmod", "dpsql_utf8", "dpsql_isum", "dpsql_isum_out", "datediff",
    "is_valid_utf8",
    "xxhash64",
    "pg_input_is_valid", "hash_record_extended",
    "try_add", "try_subtract", "try_multiply", "try_divide", "try_sum", "total", "div",
    "bround", "strftime", "date", "datetime",
})
#: Statement-level nodes: none may appear anywhere in a query dpsql sends.
_STATEMENTS = (exp.Command, exp.Create, exp.Insert, exp.Update, exp.Delete, exp.Drop,
               exp.Pragma, exp.Set, exp.Copy, exp.Attach, exp.Detach, exp.Merge,
               exp.Transaction, exp.Commit, exp.Rollback, exp.Describe, exp.Use,
               exp.Cache, exp.Uncache, exp.Refresh, exp.Install, exp.Into,
               exp.LoadData, exp.Alter, exp.TruncateTable, exp.Grant, exp.Analyze)
SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_sql(sql: str, tree: exp.Expression, dialect: str, *,
              tables: Collection[str] | None = (), names: Collection[str] = ()) -> None:
    """Proves that ``sql`` (written by sqlglot from ``tree``) is one SELECT and nothing else.

    Args:
        sql: the text about to be run.
        tree: the tree it was written from.
        dialect: the sqlglot dialect it was written in.
        tables: names of the tables it may read (the catalog's); other table names must
            be ones dpsql generated (``__...``) or CTE names of the tree. None: table
            names are not checked (a backend used without a catalog, in tests).
        names: further names it may use besides plain ones (catalog names that need
            quoting).

    Raises:
        UnsupportedQueryError: before any charge, when any check fails.
    """
    _check(sql, tree, dialect, tables, names)


def checked_sql(tree: exp.Expression, dialect: str, *,
                tables: Collection[str] | None = (), names: Collection[str] = (),
                consume: bool = False) -> str:
    """``tree``'s text in ``dialect``, after :func:`check_sql` passed on it.

    The text is written here, once, from the tree itself, so it is the tree's by
    construction (check_sql's comparison of the two would write it a second time).

    ``consume``: the caller never reads ``tree`` again, so a root tree is written
    without a copy (sqlglot's generator may change the tree it writes; with a copy, it
    changes the copy). The text is the same either way: a copy is structurally the
    tree and, like a root, has no parent (how sqlglot writes a node may depend on its
    parent, so a tree with a parent is still copied); sqlglot writes a tree as a
    function of its structure,
    and the generator applies the same preprocessing to whichever of the two it is
    handed before writing it. The walk of check (1) runs *before* the write, on the tree
    as it was built, as it does on the untouched tree without ``consume``. Only the
    deep copy is saved (about half of the writing's time on dpsql's final trees).

    Raises:
        UnsupportedQueryError: before any charge, when any check fails.
    """
    allowed, names = _arguments(tables, names)
    problem = _closed(tree, allowed, names)
    if problem is not None:
        _refuse(dialect, problem, _written(tree, dialect))
    sql = tree.sql(dialect=dialect, copy=not (consume and tree.parent is None))
    _check_text(sql, dialect, allowed, names)
    return sql


#: Texts that passed the checks of the text alone (it parses again into one closed
#: SELECT that writes back to it), with the tables and names they were checked
#: against. Those checks read nothing but the text and these arguments, and sqlglot
#: parses and writes deterministically, so a text that passed once passes again; the
#: walk of the tree that produced it is not remembered (another tree may write the
#: same text) and runs every time.
_PASSED: OrderedDict[tuple, None] = OrderedDict()
_PASSED_MAX = 1024
_PASSED_LOCK = threading.Lock()


def _arguments(tables: Collection[str] | None, names: Collection[str]
               ) -> tuple[set[str] | None, set[str]]:
    return (None if tables is None else {t.lower() for t in tables}), set(names)


def _check(sql: str, tree: exp.Expression, dialect: str, tables: Collection[str] | None,
           names: Collection[str]) -> None:
    allowed, names = _arguments(tables, names)
    problem = _closed(tree, allowed, names)
    if problem is None and tree.sql(dialect=dialect) != sql:
        problem = "the text is not the tree's"
    if problem is not None:
        _refuse(dialect, problem, sql)
    _check_text(sql, dialect, allowed, names)


def _check_text(sql: str, dialect: str, allowed: set[str] | None, names: set[str]) -> None:
    """The checks of the text alone (:func:`_same`), remembered in :data:`_PASSED`."""
    key = (sql, dialect, None if allowed is None else frozenset(allowed), frozenset(names))
    with _PASSED_LOCK:
        known = _PASSED.pop(key, False) is None
        if known:
            _PASSED[key] = None  # the most recently used last
    if known:
        return
    problem = _same(sql, dialect, allowed, names)
    if problem is not None:
        _refuse(dialect, problem, sql)
    with _PASSED_LOCK:
        _PASSED[key] = None
        while len(_PASSED) > _PASSED_MAX:
            _PASSED.popitem(last=False)


def _written(tree: exp.Expression, dialect: str) -> str:
    """A refused tree's text for the owner's log; a tree sqlglot cannot write (a value
    of the wrong type, a node class it has no writer for: its compiled build raises
    TypeError, the pure one ValueError) is refused all the same."""
    try:
        return tree.sql(dialect=dialect)
    except Exception as exc:  # noqa: BLE001 - the refusal is the point, not the log line
        return f"<a tree sqlglot cannot write: {type(exc).__name__}>"


def _refuse(dialect: str, problem: str, sql: str) -> NoReturn:
    _log.error("output check refused the %s query: %s; SQL: %r", dialect, problem,
               sql[:2000])
    raise UnsupportedQueryError(
        "dpsql refused its own rewritten query (it failed the output check: "
        f"{problem}); nothing was charged")


# what :func:`_closed` tests of a node beyond its parent, by the node's class
_OTHER, _DATATYPE, _VAR, _ANONYMOUS, _IDENTIFIER, _TABLE, _LITERAL = range(7)
_BRANCHES = ((exp.DataType, _DATATYPE), (exp.Var, _VAR), (exp.Anonymous, _ANONYMOUS),
             (exp.Identifier, _IDENTIFIER), (exp.Table, _TABLE), (exp.Literal, _LITERAL))
_KINDS: dict[type, tuple[bool, bool, bool, str | None, int]] = {}


def _kind(cls: type) -> tuple[bool, bool, bool, str | None, int]:
    """(statement, subquery, select, date part slot, branch) of a node class: the
    ``isinstance`` tests of :func:`_closed`, answered once per class (a class's
    ancestors do not change, and no sqlglot class overrides ``isinstance``)."""
    kind = _KINDS.get(cls)
    if kind is None:
        branch = next((b for base, b in _BRANCHES if issubclass(cls, base)), _OTHER)
        kind = _KINDS[cls] = (issubclass(cls, _STATEMENTS), issubclass(cls, exp.Subquery),
                              issubclass(cls, exp.Select), _PART_SLOTS.get(cls), branch)
    return kind


def _closed(tree: exp.Expression, tables: set[str] | None, names: set[str]) -> str | None:
    if not isinstance(tree, exp.Select):
        return f"the statement is a {type(tree).__name__}, not a SELECT"
    ctes = None  # the tree's CTE names, collected when a table name needs them
    for node in nodes(tree):
        statement, subquery, select, slot, branch = _kind(type(node))
        if statement:
            return f"a {type(node).__name__} node"
        if subquery and not isinstance(node.parent, exp.From | exp.Join | exp.In | exp.CTE):
            return "a scalar subquery"  # dpsql builds subqueries only in FROM and IN
        if select and node is not tree and not isinstance(
                node.parent, exp.Subquery | exp.CTE | exp.Union | exp.In):
            return "a SELECT outside FROM, IN, WITH or UNION"
        if slot is not None:
            part = node.args.get(slot)
            if part is not None and not (isinstance(part, exp.Var | exp.Literal)
                                         and str(part.this).upper() in KEYWORDS):
                return "a date part outside the fixed list"
        if branch == _OTHER:
            pass
        elif branch == _DATATYPE:
            if node.this not in TYPES:
                return f"type {node.this.name}"
        elif branch == _VAR:
            if str(node.this).upper() not in KEYWORDS:
                return "a bare keyword outside the fixed list"
        elif branch == _ANONYMOUS:
            if not isinstance(node.this, str) or node.this.lower() not in FUNCTIONS:
                return "a function outside the fixed list"
        elif branch == _IDENTIFIER:
            if not isinstance(node.this, str) or not (
                    SAFE_NAME.fullmatch(node.this) or node.this in names):
                return "a name that is neither plain nor the catalog's"
        elif branch == _TABLE:
            if not isinstance(node.this, exp.Identifier):
                return "a table function"
            if node.args.get("db") or node.args.get("catalog"):
                return "a qualified table name"
            name = node.name.lower()
            if tables is not None and name not in tables and not name.startswith("__"):
                if ctes is None:
                    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
                if name not in ctes:
                    return f"table {name!r} is not in the catalog"
        elif not isinstance(node.this, str):  # _LITERAL
            return "a literal that is not text"
        if node.comments:
            return "a comment"
    return None


@contextlib.contextmanager
def _deep_recursion(limit: int = 20_000):
    """dpsql's own SQL nests deeper than the analyst's (guards over every node): room
    for sqlglot's recursive parser, restored afterwards."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _same(sql: str, dialect: str, tables: set[str] | None, names: set[str]) -> str | None:
    """The text parses again into one SELECT, closed (the backend runs the text, so the
    tree read back from it must be closed too), that writes back to the text."""
    try:
        with _deep_recursion():
            statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return "the text does not parse again"
    except RecursionError:
        return "the text is nested too deeply to parse again"
    if len(statements) != 1:
        return f"the text holds {len(statements)} statements"
    parsed = statements[0]
    if not isinstance(parsed, exp.Select):
        return f"the text is a {type(parsed).__name__}, not a SELECT"
    problem = _closed(parsed, tables, names)
    # walked first: the tree is then written without a copy (it is not used again, and
    # sqlglot may change a tree it writes without one)
    if problem is None and parsed.sql(dialect=dialect, copy=False) != sql:
        problem = "the text does not parse back to the same query"
    return problem
