"""A catalog skeleton drafted from a DuckDB database's schema, never from its rows.

The data owner starts a catalog with :func:`draft_catalog` (``dpsql catalog draft`` on
the command line): table and column names, catalog types and NOT NULL constraints come
from DuckDB's ``information_schema``; bounds, contribution limits and (unless given)
the user key are left as TODOs. Bounds must come from outside knowledge: bounds read
from the private data would themselves leak it, which is why no row is ever read here.

>>> import duckdb, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "shop.duckdb")
>>> con = duckdb.connect(path)
>>> _ = con.execute("CREATE TABLE sales (cid INTEGER NOT NULL, amount DOUBLE)")
>>> con.close()
>>> text = draft_catalog(path, ["sales"], user_key="cid")
>>> print(text.split("tables:")[1])
<BLANKLINE>
  sales:
    user_key: cid    # the column that identifies a person
    max_groups: 1    # TODO: groups one person may contribute to
    max_rows: 1      # TODO: rows one person may add to one group
    columns:
      cid: {type: int}
      amount: {type: float, lower: null, upper: null, nullable: true}    # TODO: lower, upper
<BLANKLINE>

The draft loads as it is once the user key is chosen (columns without bounds load but
cannot be aggregated):

>>> import dpsql, yaml
>>> dpsql.load_catalog(yaml.safe_load(text)).table("sales").column("amount").bounded
False
"""

from __future__ import annotations

from pathlib import Path

import yaml

from dpsql.errors import CatalogError, UnknownTableError
from dpsql.types import catalog_type


class DraftArgumentError(CatalogError, ValueError):
    """An argument of :func:`draft_catalog` cannot be used: the database cannot be
    opened, the user key is not a column, or both a user key and row privacy are given.

    ``argument`` names the parameter (``"database"``, ``"user_key"``, ``"row_privacy"``)
    so that the command line can name its own flag.
    """

    def __init__(self, message: str, argument: str):
        super().__init__(message)
        self.argument = argument


def yaml_scalar(value) -> str:
    """One YAML scalar or flow collection, as text on one line.

    >>> yaml_scalar("a: b"), yaml_scalar(None), yaml_scalar(1e-6), yaml_scalar("TODO")
    ("'a: b'", 'null', '1.0e-06', 'TODO')
    """
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True)
    text = text.strip()
    if text.endswith("\n..."):
        text = text[:-4].strip()
    return text


def yaml_flow(entries: list[tuple[str, object]]) -> str:
    """A YAML flow mapping of ``entries``, in their order, on one line.

    >>> yaml_flow([("type", "int"), ("lower", 0), ("upper", None)])
    '{type: int, lower: 0, upper: null}'
    """
    return "{" + ", ".join(f"{k}: {yaml_scalar(v)}" for k, v in entries) + "}"


def duckdb_catalog_type(dtype: str) -> str | None:
    """The catalog type of a DuckDB column type, or None when dpsql has none for it.

    >>> duckdb_catalog_type("DECIMAL(10,2)"), duckdb_catalog_type("TIMESTAMP WITH TIME ZONE")
    ('float', 'timestamp')
    >>> duckdb_catalog_type("VARCHAR[]") is None
    True
    """
    return catalog_type(dtype)


def read_schema(database: str | Path, tables: list[str]
                ) -> dict[str, list[tuple[str, str, bool]]]:
    """The columns of ``tables`` in a DuckDB file: ``{table: [(name, type, nullable)]}``.

    Reads ``information_schema`` only (never a row), through a read-only connection
    without external access. Tables are matched without regard to case and keyed by
    their names as the database spells them.

    Raises:
        DraftArgumentError: the file cannot be opened as a DuckDB database.
        UnknownTableError: a table is not in the database (the message lists its tables).
    """
    import duckdb

    try:
        con = duckdb.connect(str(database), read_only=True,
                             config={"enable_external_access": False})
    except duckdb.Error as exc:
        raise DraftArgumentError(f"cannot open DuckDB database {str(database)!r}: {exc}",
                                 "database") from None
    try:
        schemas = {}
        for table in tables:
            rows = con.execute(
                "SELECT table_name, column_name, data_type, is_nullable "
                "FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND lower(table_name) = lower(?) ORDER BY ordinal_position", [table],
            ).fetchall()
            if not rows:
                known = [r[0] for r in con.execute(
                    "SELECT DISTINCT table_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() ORDER BY 1").fetchall()]
                raise UnknownTableError(f"no table {table!r} in {database} (tables: "
                                        f"{', '.join(known) or 'none'})")
            schemas[rows[0][0]] = [(name, dtype, nullable == "YES")
                                   for _, name, dtype, nullable in rows]
    finally:
        con.close()
    return schemas


def draft_catalog(database: str | Path, tables: list[str], user_key: str | None = None,
                  row_privacy: bool = False, dataset: str | None = None) -> str:
    """A catalog skeleton (YAML text) for ``tables``, from the database's schema only.

    Only column names, types and NOT NULL constraints are read (:func:`read_schema`),
    never a row: bounds are left as ``null`` with a TODO for the data owner, who knows
    them from outside the data. The draft loads as it is (columns without bounds cannot
    be aggregated) once the user key is chosen; ``user_key: TODO`` fails closed until
    then. Columns whose DuckDB type has no catalog type are listed in comments.

    Args:
        database: a DuckDB database file.
        tables: the tables to describe (case-insensitive).
        user_key: the column that identifies a person in every table, if known.
        row_privacy: each row is a different person (no user key, no contribution
            limits).
        dataset: the data set's name (default: the file's name without its suffix).

    Raises:
        DraftArgumentError: the database cannot be opened, ``user_key`` is not a column
            of a table, or both ``user_key`` and ``row_privacy`` are given.
        UnknownTableError: a table is not in the database.
    """
    if user_key and row_privacy:
        raise DraftArgumentError("give a user key or row privacy, not both", "row_privacy")
    schemas = read_schema(database, tables)
    out = [
        f"# dpsql catalog draft for {Path(database).name}, made from the schema alone (no "
        "row was read).",
        "# TODO: fill in what you know about the data from outside it, never from the",
        "# data itself (bounds computed from private data leak them):",
        "#   lower, upper  the range an aggregate clamps a column to; a column left",
        "#                 without bounds cannot be aggregated (such queries are refused)",
        "#   values        optional: the public domain of a grouping column",
        f"dataset: {yaml_scalar(dataset or Path(database).stem)}",
        "# budget: {epsilon: 1, delta: 1e-6}   # TODO (optional): the data set's total",
        "tables:",
    ]
    for table, columns in schemas.items():
        out += _draft_table(table, columns, user_key, row_privacy)
    return "\n".join(out) + "\n"


def _draft_table(table: str, columns: list[tuple[str, str, bool]], user_key: str | None,
                 row_privacy: bool) -> list[str]:
    names = [c[0] for c in columns]
    if user_key is not None and user_key.lower() not in [n.lower() for n in names]:
        raise DraftArgumentError(f"{user_key!r} is not a column of {table!r} "
                                 f"({', '.join(names)})", "user_key")
    out = [f"  {yaml_scalar(table)}:"]
    if user_key is not None:
        key = next(n for n in names if n.lower() == user_key.lower())
        out.append(f"    user_key: {yaml_scalar(key)}    # the column that identifies a person")
    elif row_privacy:
        out.append("    row_privacy: true    # each row is a different person")
    else:
        out.append("    user_key: TODO    # TODO: the column that identifies a person, "
                   "or replace this line with row_privacy: true")
    if not row_privacy:
        out.append("    max_groups: 1    # TODO: groups one person may contribute to")
        out.append("    max_rows: 1      # TODO: rows one person may add to one group")
    out.append("    columns:")
    for name, dtype, nullable in columns:
        ctype = duckdb_catalog_type(dtype)
        if ctype is None:
            out.append(f"      # {yaml_scalar(name)}: DuckDB type {dtype} has no dpsql type; "
                       "left out")
            continue
        entries: list[tuple[str, object]] = [("type", ctype)]
        is_key = user_key is not None and name.lower() == user_key.lower()
        note = ""
        if ctype in ("int", "float") and not is_key:
            entries += [("lower", None), ("upper", None)]
            note = "    # TODO: lower, upper"
        if nullable:
            entries.append(("nullable", True))
        out.append(f"      {yaml_scalar(name)}: {yaml_flow(entries)}{note}")
    return out
