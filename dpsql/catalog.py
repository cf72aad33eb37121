"""The catalog: what the data owner declares about each table.

A catalog is YAML (or the equivalent dict)::

    dataset: pums                 # optional name of the data set (its key in the ledger)
    database: pums.duckdb         # optional: the only database (relative to this file, or a URL)
    ledger: pums.ledger.sqlite    # optional: the only ledger (relative to this file, or a URL)
    ledger_id: 3f2a...            # optional: the pinned ledger's id (dpsql budget show)
    analyst: alice                # optional: the only analyst identity
    budget: {epsilon: 10, delta: 1e-5, accountant: basic}   # accountant: basic or zcdp
    tables:
      pums:
        user_key: pid             # or `row_privacy: true`, or `public: true`
        max_groups: 1             # groups one user may touch (L0), default 1
        max_rows: 1               # rows one user may add to one group (Linf), default 1
        columns:
          pid:    {type: int}
          age:    {type: int, lower: 0, upper: 100}
          sex:    {type: int, values: [0, 1], one_per_user: true}   # see one_per_user.py
          income: {type: float, lower: 0, upper: 500000, nullable: true}

Mistakes are refused when the catalog is loaded, with an error that names the table,
the column and the problem. Names are case-insensitive (stored lower-case), as unquoted
SQL identifiers are.

>>> cat = load_catalog({"tables": {"t": {"row_privacy": True,
...     "columns": {"x": {"type": "int", "lower": 0, "upper": 9}}}}})
>>> cat.table("T").column("X").upper
9
>>> load_catalog({"tables": {"t": {"user_key": "uid", "columns": {"x": {"type": "int"}}}}})
Traceback (most recent call last):
...
dpsql.errors.CatalogError: table 't': user_key 'uid' is not one of its columns (x)
"""

from __future__ import annotations

import datetime
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dpsql.errors import CatalogError
from dpsql.limits import DEFAULT as DEFAULT_LIMITS
from dpsql.limits import Limits
from dpsql.text import is_plain

#: Column types the catalog accepts.
TYPES = ("int", "float", "string", "bool", "date", "timestamp")
NUMERIC_TYPES = ("int", "float")
#: Types whose equal values are the same value, which ``one_per_user`` needs.
ONE_PER_USER_TYPES = ("int", "bool", "date")

_TOP_KEYS = {"dataset", "tables", "budget", "description", "ledger", "analyst", "limits",
             "database", "ledger_id", "data_version",
             "answer_cache"}
_TABLE_KEYS = {
    "user_key",
    "row_privacy",
    "public",
    "max_groups",
    "max_rows",
    "columns",
    "description",
}
_COLUMN_KEYS = {"type", "lower", "upper", "values", "nullable", "one_per_user", "values_only",
                "in_bounds", "description"}


@dataclass(frozen=True)
class Column:
    """One column of a catalog table.

    Attributes:
        name: lower-case column name.
        type: one of :data:`TYPES`.
        lower: smallest value an aggregate may use (values below are clamped), or None;
            for a date column, its earliest date (``datetime.date``), which bounds the
            year and the public domain of date keys such as ``date_trunc('month', d)``.
        upper: largest value an aggregate may use (latest date), or None.
        values: the public domain of the column when grouped by, or None.
        nullable: whether the column may hold NULL.
        one_per_user: the owner's word that the column has one value on all rows of any
            one user (an attribute of the person, such as sex): dpsql checks it on the
            data before relying on it, and then only to run a step that changes nothing
            (:mod:`dpsql.one_per_user`).
        values_only: the owner's word that every row holds one of :attr:`values` (or
            NULL, where the column is nullable): dpsql checks it on the data before
            relying on it, and then only to leave out a filter that would keep every
            row (:mod:`dpsql.values_only`).
        in_bounds: the owner's word that every value lies within :attr:`lower` and
            :attr:`upper` (or is NULL, where the column is nullable): dpsql checks it on
            the data before relying on it, and then only to leave out a clamp that would
            keep every value (:mod:`dpsql.in_bounds`).
    """

    name: str
    type: str
    lower: float | None = None
    upper: float | None = None
    values: tuple | None = None
    nullable: bool = False
    one_per_user: bool = False
    values_only: bool = False
    in_bounds: bool = False

    @property
    def bounded(self) -> bool:
        return self.lower is not None and self.upper is not None

    @property
    def numeric(self) -> bool:
        return self.type in NUMERIC_TYPES


@dataclass(frozen=True)
class Table:
    """One catalog table and its privacy unit.

    Exactly one of ``user_key``, ``row_privacy`` and ``public`` describes who a row
    belongs to: the column holding the user id, each row its own user, or nobody.
    """

    name: str
    columns: dict[str, Column]
    user_key: str | None = None
    row_privacy: bool = False
    public: bool = False
    max_groups: int = 1
    max_rows: int = 1
    #: Foreign-key path to the user: (column, referenced table, referenced column) steps.
    user_path: tuple[tuple[str, str, str], ...] = ()
    #: A derived table or CTE of one query (never a catalog or database table): it has
    #: a fresh internal name and inherits no database fact (uniqueness, constraints).
    derived: bool = False

    def column(self, name: str) -> Column:
        """Returns the column named ``name`` (case-insensitive); KeyError if absent."""
        return self.columns[name.lower()]

    def has_column(self, name: str) -> bool:
        return name.lower() in self.columns


@dataclass(frozen=True)
class Catalog:
    """All tables of one data set."""

    tables: dict[str, Table]
    dataset: str = "default"
    budget: tuple[float, float] | None = None
    analyst_budgets: dict[str, tuple[float, float]] = field(default_factory=dict)
    source: str = field(default="<dict>", compare=False)
    #: The owner's pin of the ledger file (an absolute path): every connection with this
    #: catalog is charged there and a connection asking for another ledger is refused.
    ledger: str | None = None
    #: The owner's pin of the analyst identity every connection is charged as.
    analyst: str | None = None
    #: The owner's pin of the database (an absolute path or a URL): a connection naming
    #: another database file or server is refused.
    database: str | None = None
    #: The owner's pin of the ledger's id: a ledger file replaced by another is refused.
    ledger_id: str | None = None
    #: The data set's accountant, ``"basic"`` or ``"zcdp"`` (see dpsql.accounting).
    accountant: str = "basic"
    #: Resource limits on the work done before the charge (:mod:`dpsql.limits`).
    limits: Limits = field(default=DEFAULT_LIMITS, compare=False)
    #: The owner's name for the data's current version (any text or number): answers
    #: cached under another version are never returned (:mod:`dpsql.answer_cache`);
    #: the owner changes it when the data changes.
    data_version: str | None = None
    #: The owner's default for connections' answer cache (:mod:`dpsql.answer_cache`).
    answer_cache: bool = False

    def table(self, name: str) -> Table:
        """Returns the table named ``name`` (case-insensitive); KeyError if absent."""
        return self.tables[name.lower()]

    def has_table(self, name: str) -> bool:
        return name.lower() in self.tables


class _Loader(yaml.SafeLoader):
    """YAML as people write it: ``1e-5`` is a number (YAML 1.1, PyYAML's, reads a float
    without a dot as text)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """Parses a catalog or config YAML text, reading ``1e-5`` as a number.

    >>> load_yaml("budget: {epsilon: 1, delta: 1e-5}")
    {'budget': {'epsilon': 1, 'delta': 1e-05}}
    """
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def load_catalog(source: str | Path | Mapping[str, Any] | Catalog) -> Catalog:
    """Loads and checks a catalog from a YAML path, a dict, or returns a Catalog as is.

    Raises:
        CatalogError: the file is missing or not YAML, or the catalog has a mistake.
    """
    if isinstance(source, Catalog):
        return source
    origin = "<dict>"
    if isinstance(source, str | Path):
        path = Path(source)
        origin = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CatalogError(f"cannot read catalog file {origin!r}: {exc.strerror}") from None
        try:
            source = load_yaml(text)
        except yaml.YAMLError as exc:
            raise CatalogError(f"catalog file {origin!r} is not valid YAML: {exc}") from None
    if not isinstance(source, Mapping):
        raise CatalogError(f"catalog {origin}: expected a mapping with a 'tables' key")
    return _build(source, origin)


def _build(doc: Mapping[str, Any], origin: str) -> Catalog:
    _no_unknown_keys(doc, _TOP_KEYS, "catalog")
    tables_doc = doc.get("tables")
    if not isinstance(tables_doc, Mapping) or not tables_doc:
        raise CatalogError("catalog: 'tables' must be a non-empty mapping of table names")
    tables: dict[str, Table] = {}
    for raw_name, tdoc in tables_doc.items():
        name = str(raw_name).lower()
        if name in tables:
            raise CatalogError(f"table {name!r} is declared twice (names are case-insensitive)")
        tables[name] = _table(name, tdoc)
    for table in tables.values():
        _check_path(table, tables)
    budget, analysts = None, {}
    if doc.get("budget") is not None:
        bdoc = doc["budget"]
        budget = _budget(bdoc, "catalog budget", {"epsilon", "delta", "analysts",
                                                  "accountant"})
        accountant = bdoc.get("accountant", "basic")
        if accountant not in ("basic", "zcdp"):
            raise CatalogError(f"catalog budget: accountant must be basic or zcdp, got "
                               f"{accountant!r}")
        if accountant == "zcdp" and not budget[1] > 0:
            raise CatalogError("catalog budget: the zcdp accountant needs delta > 0")
        adoc = bdoc.get("analysts") or {}
        if not isinstance(adoc, Mapping):
            raise CatalogError("catalog budget: 'analysts' must map analyst names to budgets")
        for name, value in adoc.items():
            if not isinstance(name, str):
                raise CatalogError(f"catalog budget: analyst name {name!r} is not text")
            _analyst_pin(name, "catalog budget: an analyst")
            analysts[name] = _budget(value, f"catalog budget of analyst {name!r}",
                                     {"epsilon", "delta"})
    else:
        accountant = "basic"
    dataset = doc.get("dataset", "default")
    if not isinstance(dataset, str) or not dataset.strip() or dataset == "*" \
            or not is_plain(dataset) or len(dataset) > 200:
        raise CatalogError(f"catalog: dataset must be a printable name, got {dataset!r}")
    data_version = doc.get("data_version")
    if data_version is not None:
        if isinstance(data_version, bool) or not isinstance(data_version, str | int | float) \
                or not is_plain(str(data_version)) or len(str(data_version)) > 200:
            raise CatalogError(f"catalog: data_version must be a short text or number, got "
                               f"{data_version!r}")
        data_version = str(data_version)
    answer_cache = doc.get("answer_cache", False)
    if not isinstance(answer_cache, bool):
        raise CatalogError(f"catalog: answer_cache must be true or false, got "
                           f"{answer_cache!r}")
    ledger_id = doc.get("ledger_id")
    if ledger_id is not None and not (isinstance(ledger_id, str) and ledger_id.isalnum()):
        raise CatalogError(f"catalog: ledger_id must be the ledger's id, got {ledger_id!r}")
    return Catalog(tables, dataset, budget, analysts, origin,
                   ledger=_ledger_pin(doc.get("ledger"), origin),
                   analyst=_analyst_pin(doc.get("analyst")),
                   database=_database_pin(doc.get("database"), origin),
                   ledger_id=ledger_id, accountant=accountant, data_version=data_version,
                   answer_cache=answer_cache,
                   limits=Limits.from_mapping(doc.get("limits")))


def _ledger_pin(value: Any, origin: str, key: str = "ledger") -> str | None:
    """The catalog's ``ledger:`` (or ``database:``) as an absolute path (relative: to the
    catalog's folder), or a server URL as written."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(f"catalog: {key} must be a file path or a URL, got {value!r}")
    if value == ":memory:":
        # a pin exists to make spending outlive the connection, on the owner's data
        raise CatalogError(f"catalog: {key} cannot be ':memory:'; pin a file path")
    if "://" in value:
        from dpsql.ledger import normalise_url

        if normalise_url(value) is None:
            raise CatalogError(f"catalog: {key} {value!r} is not a URL dpsql reads")
        return value
    path = Path(value)
    if not path.is_absolute():
        if origin == "<dict>":
            raise CatalogError(
                f"catalog: {key} {value!r} is relative, and a catalog given as a dict has "
                "no folder to resolve it against; give an absolute path")
        path = Path(origin).parent / path
    return str(path.resolve())


def _database_pin(value: Any, origin: str) -> str | None:
    return _ledger_pin(value, origin, "database")


def _analyst_pin(value: Any, where: str = "catalog: analyst") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or value == "*" \
            or not is_plain(value) or len(value) > 200:
        raise CatalogError(
            f"{where} must be a name of at most 200 printable characters ('*' is "
            f"reserved), got {value if not isinstance(value, str) else value[:60]!r}")
    return value


def _budget(bdoc: Any, where: str, keys: set[str]) -> tuple[float, float]:
    if not isinstance(bdoc, Mapping):
        raise CatalogError(f"{where}: expected a mapping with epsilon and delta")
    _no_unknown_keys(bdoc, keys, where)
    eps = _number(bdoc.get("epsilon"), f"{where}: epsilon")
    delta = _number(bdoc.get("delta", 0.0), f"{where}: delta")
    for x in (eps, delta):
        if x != 0 and abs(x) < sys.float_info.min:
            raise CatalogError(f"{where}: {x!r} is too small to be a usable number")
    if eps <= 0 or not 0 <= delta < 1:
        raise CatalogError(f"{where}: need epsilon > 0 and 0 <= delta < 1")
    return (eps, delta)


def _table(name: str, tdoc: Any) -> Table:
    where = f"table {name!r}"
    if not isinstance(tdoc, Mapping):
        raise CatalogError(f"{where}: expected a mapping with 'columns'")
    _no_unknown_keys(tdoc, _TABLE_KEYS, where)
    cols_doc = tdoc.get("columns")
    if not isinstance(cols_doc, Mapping) or not cols_doc:
        raise CatalogError(f"{where}: 'columns' must be a non-empty mapping")
    columns: dict[str, Column] = {}
    for raw_col, cdoc in cols_doc.items():
        col = str(raw_col).lower()
        if col in columns:
            raise CatalogError(f"{where}: column {col!r} is declared twice")
        columns[col] = _column(name, col, cdoc)

    user_key = tdoc.get("user_key")
    path: tuple = ()
    if isinstance(user_key, Mapping):
        path = _path(where, user_key)
        user_key = None
    row_privacy = bool(tdoc.get("row_privacy", False))
    public = bool(tdoc.get("public", False))
    chosen = [k for k, v in (("user_key", user_key or path), ("row_privacy", row_privacy),
                             ("public", public)) if v]
    if len(chosen) != 1:
        raise CatalogError(
            f"{where}: declare exactly one of user_key, row_privacy: true, public: true "
            f"(got {', '.join(chosen) or 'none'})"
        )
    if user_key is not None:
        if not isinstance(user_key, str):
            raise CatalogError(f"{where}: user_key must be a column name")
        user_key = user_key.lower()
        if user_key not in columns:
            raise CatalogError(
                f"{where}: user_key {user_key!r} is not one of its columns "
                f"({', '.join(columns)})"
            )
        if columns[user_key].type == "float":
            # every NaN is one group: people whose keys are NaN (or any float the
            # database rounds together) would be one pseudo-user, whose max_groups
            # choice one added person could move
            raise CatalogError(
                f"{where}: user_key {user_key!r} is a float column; a user key must be "
                "an int, string, bool, date or timestamp column")
    declared = [c.name for c in columns.values() if c.one_per_user]
    if declared and not isinstance(user_key, str):
        raise CatalogError(
            f"{where}, column {declared[0]!r}: one_per_user is for a table with its own "
            "user_key column (a public table has no user; with row_privacy each row is "
            "its own user; a foreign-key path is not checked)")
    bounds = {}
    for key in ("max_groups", "max_rows"):
        value = tdoc.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CatalogError(f"{where}: {key} must be a positive integer, got {value!r}")
        bounds[key] = value
    return Table(name, columns, user_key, row_privacy, public, user_path=path, **bounds)


def _path(where: str, doc: Mapping) -> tuple[tuple[str, str, str], ...]:
    _no_unknown_keys(doc, {"path"}, f"{where}, user_key")
    steps = doc.get("path")
    if not isinstance(steps, list) or not steps:
        raise CatalogError(f"{where}: user_key path must be a non-empty list of steps")
    out = []
    for i, step in enumerate(steps):
        here = f"{where}, user_key path step {i + 1}"
        if not isinstance(step, Mapping):
            raise CatalogError(f"{here}: expected {{column: ..., references: table.column}}")
        _no_unknown_keys(step, {"column", "references"}, here)
        ref = step.get("references")
        if not isinstance(step.get("column"), str) or not isinstance(ref, str) \
                or ref.count(".") != 1:
            raise CatalogError(f"{here}: expected {{column: ..., references: table.column}}")
        table, column = ref.lower().split(".")
        out.append((step["column"].lower(), table, column))
    return tuple(out)


def _check_path(table: Table, tables: dict[str, Table]) -> None:
    """Each step's column exists where it is read, and the path ends at a user key."""
    where = f"table {table.name!r}, user_key path"
    current = table
    for i, (column, ref_table, ref_column) in enumerate(table.user_path):
        if column not in current.columns:
            raise CatalogError(f"{where} step {i + 1}: {current.name!r} has no column "
                               f"{column!r}")
        if ref_table not in tables:
            raise CatalogError(f"{where} step {i + 1}: unknown table {ref_table!r}")
        target = tables[ref_table]
        if ref_column not in target.columns:
            raise CatalogError(f"{where} step {i + 1}: {ref_table!r} has no column "
                               f"{ref_column!r}")
        current = target
    if table.user_path and current.user_key != table.user_path[-1][2]:
        raise CatalogError(f"{where}: the last step must reference the user key of the "
                           f"user's table ({current.name!r} has user_key "
                           f"{current.user_key!r})")


def _column(table: str, name: str, cdoc: Any) -> Column:
    where = f"table {table!r}, column {name!r}"
    if cdoc is None:
        cdoc = {}
    if isinstance(cdoc, str):
        cdoc = {"type": cdoc}
    if not isinstance(cdoc, Mapping):
        raise CatalogError(f"{where}: expected a mapping such as {{type: int}}")
    _no_unknown_keys(cdoc, _COLUMN_KEYS, where)
    ctype = cdoc.get("type")
    if ctype not in TYPES:
        raise CatalogError(f"{where}: type must be one of {', '.join(TYPES)}, got {ctype!r}")
    lower, upper = cdoc.get("lower"), cdoc.get("upper")
    if (lower is None) != (upper is None):
        raise CatalogError(f"{where}: give both lower and upper, or neither")
    if lower is not None and ctype == "date":
        lower, upper = _date(lower, f"{where}: lower"), _date(upper, f"{where}: upper")
        if lower > upper:
            raise CatalogError(f"{where}: lower ({lower}) is later than upper ({upper})")
    elif lower is not None:
        if ctype not in NUMERIC_TYPES:
            raise CatalogError(
                f"{where}: lower/upper are only for int, float and date columns")
        lower, upper = _number(lower, f"{where}: lower"), _number(upper, f"{where}: upper")
        if lower > upper:
            raise CatalogError(f"{where}: lower ({lower}) is greater than upper ({upper})")
        if ctype == "int" and (lower != int(lower) or upper != int(upper)):
            raise CatalogError(f"{where}: bounds of an int column must be integers")
        if ctype == "int":
            lower, upper = int(lower), int(upper)
    values = cdoc.get("values")
    if values is not None:
        if not isinstance(values, list | tuple) or not values:
            raise CatalogError(f"{where}: values must be a non-empty list (the public domain)")
        values = tuple(_domain_value(v, ctype, where) for v in values)
        # equality, not spelling: 0, 0.0 and -0.0 are one key and would be released
        # (and noised) several times over
        if len(set(values)) != len(values):
            raise CatalogError(f"{where}: values lists a value twice")
    nullable = cdoc.get("nullable", False)
    if not isinstance(nullable, bool):
        raise CatalogError(f"{where}: nullable must be true or false")
    one_per_user = cdoc.get("one_per_user", False)
    if not isinstance(one_per_user, bool):
        raise CatalogError(f"{where}: one_per_user must be true or false")
    if one_per_user and ctype not in ONE_PER_USER_TYPES:
        # equal floats or strings may differ (-0.0 and 0.0, collations): one value by
        # the check's comparison could be two groups by a key computed from it
        raise CatalogError(
            f"{where}: one_per_user is for {', '.join(ONE_PER_USER_TYPES)} columns, "
            f"not {ctype}")
    values_only = cdoc.get("values_only", False)
    if not isinstance(values_only, bool):
        raise CatalogError(f"{where}: values_only must be true or false")
    if values_only and values is None:
        raise CatalogError(f"{where}: values_only says every row holds one of the column's "
                           "values: give them (values: [...])")
    in_bounds = cdoc.get("in_bounds", False)
    if not isinstance(in_bounds, bool):
        raise CatalogError(f"{where}: in_bounds must be true or false")
    if in_bounds and (lower is None or ctype not in NUMERIC_TYPES):
        raise CatalogError(f"{where}: in_bounds says every value lies within the column's "
                           "bounds: give them (lower: ..., upper: ...) on a number column")
    return Column(name, ctype, lower, upper, values, nullable, one_per_user, values_only,
                  in_bounds)


def _domain_value(value: Any, ctype: str, where: str) -> Any:
    """One public value of a column's ``values``, of its type: a date or timestamp read
    as one (an ISO string too, as bounds are: kept as text, a date key's every group
    matched no key the engine returned, and each came out 0; attack review)."""
    if ctype == "date" and value is not None:
        return _date(value, f"{where}: value {value!r} in values")
    if ctype == "timestamp" and value is not None:
        return _timestamp(value, f"{where}: value {value!r} in values")
    ok = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: (isinstance(v, int | float) and not isinstance(v, bool)
                            and math.isfinite(v)),
        "string": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
    }.get(ctype, lambda v: True)
    if value is None or not ok(value):
        raise CatalogError(f"{where}: value {value!r} in values is not of type {ctype}")
    return value


def _timestamp(value: Any, where: str) -> datetime.datetime:
    """A timestamp value: a YAML timestamp or an ISO string (a date is its midnight),
    without a time zone: a key of a TIMESTAMP column comes back without one, and an
    aware value equals none of them (attack review: its group came out 0)."""
    if isinstance(value, datetime.datetime):
        stamp = value
    elif isinstance(value, datetime.date):
        stamp = datetime.datetime(value.year, value.month, value.day)
    else:
        try:
            stamp = datetime.datetime.fromisoformat(str(value))
        except ValueError:
            raise CatalogError(f"{where}: expected a timestamp such as 2024-01-01 12:00:00, "
                               f"got {value!r}") from None
    if stamp.tzinfo is not None:
        raise CatalogError(f"{where}: a timestamp with a time zone; give the time without "
                           "one, as the column holds it")
    return stamp


def _date(value: Any, where: str) -> datetime.date:
    """A date bound: a YAML date or an ISO ``YYYY-MM-DD`` string."""
    if isinstance(value, datetime.datetime):
        raise CatalogError(f"{where}: expected a date such as 1992-01-01, got a timestamp")
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise CatalogError(f"{where}: expected a date such as 1992-01-01, got {value!r}") \
            from None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CatalogError(f"{where}: expected a finite number, got {value!r}")
    return value


def _no_unknown_keys(doc: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(map(str, doc)) - allowed)
    if unknown:
        raise CatalogError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )
