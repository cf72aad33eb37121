"""Copy tables from DuckDB into SQLite, PostgreSQL or Spark (tests, demos, benchmarks).

The bundled PUMS sample and a generated TPC-H are loaded into DuckDB by
:mod:`dpsql.datasets`; :func:`copy_tables` copies them, with the same column types and
primary keys, into another engine through a *writable* connection (the data owner's,
not dpsql's read-only one). Data definition statements here are written by sqlglot from
DuckDB's type names.

>>> import duckdb, sqlite3, tempfile, os
>>> src = duckdb.connect()
>>> _ = src.execute("CREATE TABLE t (a BIGINT PRIMARY KEY, b DOUBLE)")
>>> _ = src.execute("INSERT INTO t VALUES (1, 2.5), (2, NULL)")
>>> path = os.path.join(tempfile.mkdtemp(), "t.db")
>>> copy_tables(src, "sqlite:///" + path, ["t"], keys={"t": ["a"]})
>>> sqlite3.connect(path).execute("SELECT * FROM t ORDER BY a").fetchall()
[(1, 2.5), (2, None)]
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterable
from pathlib import Path

import duckdb
from sqlglot import exp

from dpsql.datasets import TPCH_KEYS


def _schema(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {table}").fetchall()]


def _create(table: str, schema, keys, dialect: str) -> tuple[str, str]:
    columns = [exp.ColumnDef(this=exp.to_identifier(name),
                             kind=exp.DataType.build(dtype, dialect="duckdb"))
               for name, dtype in schema]
    if keys:
        columns.append(exp.PrimaryKey(expressions=[exp.to_identifier(k) for k in keys]))
    create = exp.Create(this=exp.Schema(this=exp.to_table(table), expressions=columns),
                        kind="TABLE")
    drop = exp.Drop(tables=[exp.to_table(table)], kind="TABLE", exists=True)
    return drop.sql(dialect=dialect), create.sql(dialect=dialect)


def _sqlite_value(v):
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v


def copy_tables(source: duckdb.DuckDBPyConnection, target, tables: Iterable[str],
                keys: dict[str, list[str]] | None = None) -> None:
    """Copies DuckDB ``tables`` into ``target``: a writable SQLAlchemy URL (``sqlite:///``,
    ``postgresql+psycopg://``) — tables replaced, with their primary keys — or a
    SparkSession, where they become temporary views."""
    keys = keys or {}
    tables = list(tables)
    if not isinstance(target, str):
        return _copy_to_spark(source, target, tables)
    import sqlalchemy as sa

    url = sa.make_url(target)
    engine = sa.create_engine(url)
    dialect = "postgres" if url.get_backend_name() == "postgresql" else "sqlite"
    try:
        with engine.begin() as conn:
            for table in tables:
                schema = _schema(source, table)
                drop, create = _create(table, schema, keys.get(table), dialect)
                conn.exec_driver_sql(drop)
                conn.exec_driver_sql(create)
                rows = source.execute(f"SELECT * FROM {table}").fetchall()
                names = ", ".join(n for n, _ in schema)
                if dialect == "postgres":
                    raw = conn.connection.dbapi_connection
                    with raw.cursor() as cur, cur.copy(
                            f"COPY {table} ({names}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                else:
                    marks = ", ".join("?" for _ in schema)
                    conn.exec_driver_sql(f"INSERT INTO {table} ({names}) VALUES ({marks})",
                                         [tuple(_sqlite_value(v) for v in r) for r in rows])
    finally:
        engine.dispose()


def _copy_to_spark(source, spark, tables) -> None:
    for table in tables:
        schema = _schema(source, table)
        ddl = ", ".join(
            f"`{name}` {exp.DataType.build(dtype, dialect='duckdb').sql(dialect='spark')}"
            for name, dtype in schema)
        rows = source.execute(f"SELECT * FROM {table}").fetchall()
        spark.createDataFrame(rows, schema=ddl).createOrReplaceTempView(table)


def load_tpch_into(tpch_duckdb: str | Path, target) -> None:
    """The TPC-H tables of a DuckDB file (:func:`dpsql.datasets.load_tpch`) into ``target``."""
    con = duckdb.connect(str(tpch_duckdb), read_only=True)
    try:
        copy_tables(con, target, TPCH_KEYS, keys=TPCH_KEYS)
    finally:
        con.close()
