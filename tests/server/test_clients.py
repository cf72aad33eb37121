"""Real clients against a real ``dpsql serve`` process: what an analyst sees.

psql, psycopg 3 (simple and extended protocol, text and binary), pg8000, asyncpg,
SQLAlchemy with pandas, and pgjdbc (skipped when javac or Debian's jar is missing).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import ssl
import subprocess
from pathlib import Path

import psycopg
import pytest

from .conftest import PASSWORDS


def _ctx() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # sslmode=require: encrypted, certificate unchecked
    return ctx


def test_psql_rows_notices_and_describe(service):
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    env = {**os.environ, "PGPASSWORD": PASSWORDS["alice"]}
    dsn = f"host={service.host} port={service.port} user=alice dbname=pums sslmode=require"
    out = subprocess.run(
        ["psql", dsn, "-X", "-c", "SET dpsql.epsilon = 0.5", "-c",
         "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex ORDER BY sex", "-c", r"\d pums",
         "-c", r"\dt"],
        capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "(2 rows)" in out.stdout
    assert "NOTICE:  dpsql: this answer spent epsilon=0.5" in out.stderr
    assert 'Table "public.pums"' in out.stdout and "bigint" in out.stdout
    assert "income" in out.stdout and "double precision" in out.stdout
    err = subprocess.run(["psql", dsn, "-X", "-c", "SELECT COUNT(*) FROM pums"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert err.returncode != 0 and "SET dpsql.epsilon" in err.stderr
    err = subprocess.run(["psql", dsn, "-X", "-c", "SET dpsql.epsilon = 0.1", "-c",
                          "SELECT * FROM pums"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert err.returncode != 0 and "raw rows" in err.stderr


def test_psycopg_simple_extended_binary(service):
    notices: list[str] = []
    with psycopg.connect(service.dsn("alice"), autocommit=True) as con:
        con.add_notice_handler(lambda d: notices.append(d.message_primary))
        con.execute("SET dpsql.epsilon = 0.25")
        # simple protocol (no parameters): psycopg sends Query
        cur = con.execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex ORDER BY sex")
        assert [d.name for d in cur.description] == ["sex", "n"]
        assert [d.type_code for d in cur.description] == [20, 20]  # int8
        rows = cur.fetchall()
        assert [r[0] for r in rows] == [0, 1] and all(400 < r[1] < 650 for r in rows)
        assert any("spent epsilon=0.25" in n for n in notices)
        # extended protocol with a parameter, text then binary
        for binary in (False, True):
            cur = con.execute("SELECT COUNT(*) AS n, AVG(income) AS m FROM pums WHERE age > %s",
                              [30], binary=binary)
            (n, m), = cur.fetchall()
            assert 650 < n < 850 and isinstance(m, float)
            assert [d.type_code for d in cur.description] == [20, 701]
        # a string parameter is a literal, never SQL
        cur = con.execute("SELECT COUNT(*) AS n FROM pums WHERE CAST(sex AS VARCHAR) = %s",
                          ["0' OR '1'='1"])
        assert cur.fetchone()[0] < 60
        # the query's own options win over the session's default
        notices.clear()
        con.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.125) COUNT(*) "
                    "FROM pums").fetchall()
        assert any("epsilon=0.125" in n for n in notices)


def test_error_columns_set_and_startup_option(service):
    with psycopg.connect(service.dsn("alice"), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 0.25")
        con.execute("SET dpsql.error_columns = on")
        cur = con.execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex")
        assert [d.name for d in cur.description] == ["sex", "n", "n_error", "confidence"]
        assert all(r[3] == 0.95 and r[2] > 0 for r in cur.fetchall())
        # extended protocol: Describe promises the same columns before Execute
        cur = con.execute("SELECT sex, COUNT(*) AS n FROM pums WHERE age > %s GROUP BY sex",
                          [10])
        assert [d.name for d in cur.description] == ["sex", "n", "n_error", "confidence"]
        con.execute("RESET dpsql.error_columns")
        cur = con.execute("SELECT COUNT(*) AS n FROM pums")
        assert [d.name for d in cur.description] == ["n"]
    dsn = service.dsn("alice", options="'-c dpsql.error_columns=on -c dpsql.epsilon=0.25'")
    with psycopg.connect(dsn, autocommit=True) as con:
        cur = con.execute("SELECT COUNT(*) AS n FROM pums")
        assert [d.name for d in cur.description] == ["n", "n_error", "confidence"]
        assert con.execute("SHOW dpsql.epsilon").fetchone() == ("0.25",)


@pytest.mark.parametrize("sql, state", [
    ("SELEC COUNT(*) FROM pums", "42601"),
    ("SELECT COUNT(*) FROM nowhere", "42P01"),
    ("SELECT COUNT(nope) FROM pums", "42703"),
    ("SELECT * FROM pums", "0A000"),
    ("SELECT pid FROM pums", "0A000"),
    ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", "0A000"),
    ("SELECT * FROM pg_catalog.pg_class, read_csv('/etc/passwd')", "0A000"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = -1) COUNT(*) FROM pums", "22023"),
])
def test_sqlstates(service, sql, state):
    with psycopg.connect(service.dsn("bob"), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 0.01")
        with pytest.raises(psycopg.Error) as info:
            con.execute(sql)
        assert info.value.sqlstate == state, str(info.value)
        # no backend (DuckDB) text ever reaches the analyst
        assert "duckdb" not in str(info.value).lower()
        assert con.execute("SELECT 1").fetchone() == (1,)  # the session goes on


def test_budget_spent_and_own_budget_only(service):
    with psycopg.connect(service.dsn("carol"), autocommit=True) as con:
        (analyst, eps_spent, _, eps_left, _, eps_total, _), = con.execute(
            "SHOW dpsql.budget").fetchall()
        assert analyst == "carol" and eps_total == pytest.approx(0.2)
        con.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.15) COUNT(*) "
                    "FROM pums").fetchall()
        with pytest.raises(psycopg.Error) as info:
            con.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.15) COUNT(*) "
                        "FROM pums")
        assert info.value.sqlstate == "53400"
        row = con.execute("SHOW dpsql.budget").fetchone()
        assert row[0] == "carol" and row[1] == pytest.approx(eps_spent + 0.15)
        # no way to name another login: SHOW takes no argument, and nothing else
        # reads the ledger
        with pytest.raises(psycopg.Error):
            con.execute("SHOW dpsql.budget.alice")


def test_transactions_and_session_commands(service):
    with psycopg.connect(service.dsn("bob")) as con:  # not autocommit: BEGIN first
        con.execute("SET dpsql.epsilon = 0.01")
        assert con.execute("SELECT current_schema()").fetchone() == ("public",)
        assert con.execute("SELECT current_user").fetchone() == ("bob",)
        assert "PostgreSQL 15" in con.execute("SELECT version()").fetchone()[0]
        with pytest.raises(psycopg.Error):
            con.execute("SELECT COUNT(*) FROM nowhere")
        con.rollback()
        assert con.execute("SELECT COUNT(*) FROM pums").fetchone()[0] > 0
        con.commit()
        con.autocommit = True
        con.execute("DISCARD ALL")
        assert con.execute("SHOW dpsql.epsilon").fetchone() == ("",)


def test_pg8000(service):
    pg8000 = pytest.importorskip("pg8000.dbapi")
    con = pg8000.connect(user="alice", password=PASSWORDS["alice"], host=service.host,
                         port=service.port, database="pums", ssl_context=_ctx())
    try:
        cur = con.cursor()
        cur.execute("SET dpsql.epsilon = 0.25")
        cur.execute("SELECT COUNT(*) AS n FROM pums WHERE age > %s", (30,))
        assert cur.description[0][:2] == ("n", 20)
        assert 650 < cur.fetchall()[0][0] < 850
        with pytest.raises(pg8000.DatabaseError) as info:
            cur.execute("SELECT COUNT(*) FROM nowhere")
        assert info.value.args[0]["C"] == "42P01"
    finally:
        con.close()


def test_asyncpg(service):
    asyncpg = pytest.importorskip("asyncpg")

    async def main():
        con = await asyncpg.connect(user="alice", password=PASSWORDS["alice"],
                                    host=service.host, port=service.port, database="pums",
                                    ssl=_ctx())
        try:
            await con.execute("SET dpsql.epsilon = 0.25")
            rows = await con.fetch("SELECT COUNT(*) AS n FROM pums WHERE age > $1", 30)
            assert 650 < rows[0]["n"] < 850
            stmt = await con.prepare("SELECT sex, AVG(income) AS m FROM pums GROUP BY sex")
            assert [a.name for a in stmt.get_attributes()] == ["sex", "m"]
            rows = await stmt.fetch()
            assert [r["sex"] for r in sorted(rows)] == [0, 1]
            with pytest.raises(asyncpg.PostgresError) as info:
                await con.fetch("SELECT COUNT(nope) FROM pums")
            assert info.value.sqlstate == "42703"
        finally:
            await con.close()

    asyncio.run(main())


def test_sqlalchemy_inspect_and_pandas(service):
    sa = pytest.importorskip("sqlalchemy")
    pd = pytest.importorskip("pandas")
    url = (f"postgresql+psycopg://alice:{PASSWORDS['alice']}@{service.host}:{service.port}"
           "/pums?sslmode=require&options=-c%20dpsql.epsilon%3D0.25")
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        assert insp.get_table_names() == ["pums"]
        cols = {c["name"]: str(c["type"]) for c in insp.get_columns("pums")}
        assert cols["age"] == "BIGINT" and cols["income"] == "DOUBLE PRECISION"
        with engine.connect() as con:
            frame = pd.read_sql("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", con)
        assert list(frame.columns) == ["sex", "n"] and len(frame) == 2
    finally:
        engine.dispose()


def test_sqlalchemy_constraints_and_indexes(service):
    """The constraint and index reflection of SQLAlchemy's PostgreSQL dialect (pg_index,
    pg_constraint, pg_opclass probes): answered, empty (the catalog declares no
    constraints, and the user key is not reported as a primary key)."""
    sa = pytest.importorskip("sqlalchemy")
    url = (f"postgresql+psycopg://alice:{PASSWORDS['alice']}@{service.host}:{service.port}"
           "/pums?sslmode=require")
    engine = sa.create_engine(url)
    try:
        insp = sa.inspect(engine)
        assert insp.get_pk_constraint("pums")["constrained_columns"] == []
        assert insp.get_indexes("pums") == []
        assert insp.get_foreign_keys("pums") == []
        assert insp.get_unique_constraints("pums") == []
        assert insp.get_check_constraints("pums") == []
        assert insp.get_table_comment("pums") == {"text": None}
        assert insp.get_multi_indexes() == {(None, "pums"): []}
        assert insp.has_table("pums") and not insp.has_table("nowhere")
        assert insp.get_view_names() == [] and insp.get_sequence_names() == []
        assert insp.get_schema_names() == ["public"]  # DuckDB's main is pg_catalog
        # a whole MetaData reflection, as pandas/Alembic/Superset do
        meta = sa.MetaData()
        meta.reflect(engine)
        table = meta.tables["pums"]
        assert "income" in table.c and list(table.primary_key) == []
    finally:
        engine.dispose()


JAVA = r"""
import java.sql.*;
import java.util.Properties;
public class Probe {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.setProperty("user", a[1]); p.setProperty("password", a[2]);
        p.setProperty("sslmode", "require");
        p.setProperty("options", "-c dpsql.epsilon=0.25");
        try (Connection c = DriverManager.getConnection(a[0], p)) {
            DatabaseMetaData md = c.getMetaData();
            try (ResultSet rs = md.getTables(null, "public", "%", new String[]{"TABLE"})) {
                while (rs.next()) System.out.println("TABLE " + rs.getString("TABLE_NAME"));
            }
            try (ResultSet rs = md.getColumns(null, "public", "pums", "%")) {
                while (rs.next()) System.out.println("COLUMN " + rs.getString("COLUMN_NAME")
                    + " " + rs.getString("TYPE_NAME"));
            }
            int types = 0;
            try (ResultSet rs = md.getTypeInfo()) { while (rs.next()) types++; }
            System.out.println("TYPES " + types);
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT COUNT(*) AS n FROM pums WHERE age > ?")) {
                ps.setInt(1, 30);
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) System.out.println("ROW " + rs.getLong(1));
                }
            }
            try (Statement st = c.createStatement()) {
                st.executeQuery("SELECT * FROM pums");
            } catch (SQLException e) { System.out.println("SQLSTATE " + e.getSQLState()); }
        }
    }
}
"""


def _jdbc_jar() -> Path | None:
    for name in ("postgresql.jar", "postgresql-jdbc4.jar"):
        p = Path("/usr/share/java") / name
        if p.exists():
            return p
    return None


def test_jdbc(service, tmp_path):
    jar = _jdbc_jar()
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("javac/java not installed (Java 17 JDK needed)")
    if jar is None:
        pytest.skip("pgjdbc not installed: apt-get install libpostgresql-jdbc-java")
    (tmp_path / "Probe.java").write_text(JAVA)
    subprocess.run(["javac", "-cp", str(jar), "Probe.java"], cwd=tmp_path, check=True,
                   timeout=120)
    out = subprocess.run(["java", "-cp", f"{jar}:.", "Probe",
                          f"jdbc:postgresql://{service.host}:{service.port}/pums", "alice",
                          PASSWORDS["alice"]], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "TABLE pums" in lines
    assert "COLUMN age int8" in lines and "COLUMN income float8" in lines
    assert int(next(x for x in lines if x.startswith("TYPES")).split()[1]) > 10
    assert 650 < int(next(x for x in lines if x.startswith("ROW")).split()[1]) < 850
    assert "SQLSTATE 0A000" in lines


def _fixture_queries(client: str) -> list[str]:
    text = (Path(__file__).parent / "fixtures" / f"{client}.sql").read_text()
    return [q.strip() for q in text.split("\n;;\n") if q.strip()]


def test_rebuilt_dbeaver_and_metabase_probes(service):
    """DBeaver's and Metabase's metadata queries (rebuilt from their sources, see the
    fixtures' headers) over the wire, with the parameters those tools bind: they find
    the catalog's table and its columns, with PostgreSQL's type names, free."""
    with psycopg.connect(service.dsn("bob"), autocommit=True,
                         cursor_factory=psycopg.RawCursor) as con:
        before = con.execute("SHOW dpsql.budget").fetchone()[1]
        dbeaver = _fixture_queries("dbeaver")
        ns, = con.execute(next(q for q in dbeaver if "s.oid as schema_id" in q),
                          ["public"]).fetchone()
        tables = con.execute(next(q for q in dbeaver if "partition_expr" in q),
                             [ns]).fetchall()
        assert [r[2] for r in tables] == ["pums"]
        cur = con.execute(next(q for q in dbeaver if "def_value" in q and "c.oid=$1" in q),
                          [tables[0][0]])
        names = [d.name for d in cur.description]
        cols = {r[names.index("attname")]: r[names.index("atttypid")] for r in cur}
        assert cols["age"] == 20 and cols["income"] == 701  # int8, float8
        for q in dbeaver:  # every other DBeaver probe answers (tables may be empty)
            n = len(set(re.findall(r"\$(\d+)", q)))
            arg = "public" if re.search(r"name =\$1", q) else ns  # a name or an oid
            con.execute(q, [arg] * n).fetchall()
        metabase = _fixture_queries("metabase")
        schemas = [r[0] for r in con.execute(next(q for q in metabase
                                                  if "TABLE_SCHEM" in q)).fetchall()]
        assert "public" in schemas
        rows = con.execute(next(q for q in metabase if "estimated_row_count" in q),
                           ["^pg_", "information_schema", "public"]).fetchall()
        assert rows == [("public", "pums", "TABLE", None, None)]  # no row count
        fields = con.execute(next(q for q in metabase if "database-type" in q),
                             ["public", "pums", "public", "pums"]).fetchall()
        assert {r[0]: r[1] for r in fields}["income"] == "float8"
        assert [r[2] for r in fields] == list(range(len(fields)))
        privileges = con.execute(next(q for q in metabase if "table_privileges" in q))
        assert ("public", "pums") in {(r[1], r[2]) for r in privileges}
        assert con.execute("show timezone;").fetchone() == ("UTC",)
        assert con.execute("SHOW dpsql.budget").fetchone()[1] == before  # free
