"""The hostile-query corpus: SQL an analyst must never get an answer to.

Each :class:`Case` names the refusal dpsql must give: the exception class (a
``dpsql.DpsqlError`` subclass, or a tuple of acceptable ones) and a substring its
message must contain (matched case-insensitively; ``None`` when the wording is free).
Every refusal must charge nothing.

``finding`` marks a case that dpsql currently gets wrong; the test is kept as a strict
xfail carrying the finding, so it turns into an error the day the bug is fixed and the
marker can go.

:data:`SAFE` lists hostile-looking queries for which answering *is* acceptable (the
engine guards them); there the property is weaker: answered, or refused for free — never
a raw exception, never a failure after the charge.

:data:`ERROR_CHANNELS` lists data-dependent error probes: a template with a ``{cond}``
slot is run once with a condition that holds for a few rows (``age > 90``) and once
with one that holds for none (``age > 200``). If the two runs end differently, whether
the query fails reveals something about the data without noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dpsql
from dpsql import (
    BackendError,
    BudgetExhaustedError,
    ParseError,
    PrivacyParameterError,
    UnboundedExpressionError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedQueryError,
)
from dpsql.errors import AnalysisError

U = UnsupportedQueryError
P = ParseError
T = UnknownTableError
C = UnknownColumnError
B = UnboundedExpressionError
PP = PrivacyParameterError
#: Statements sqlglot does not know are either a parse error or refused as a statement.
STMT = (UnsupportedQueryError, ParseError)


#: Findings of the first review that the engine has since fixed (by case id, theme prefix
#: dropped): they stay in the corpus as ordinary tests.
FIXED = {
    '5000-digit-literal',
    'delta-huge-int',
    'derived-where',
    'eps-1e-320',
    'eps-1e300',
    'eps-denormal',
    'eps-denormal-avg',
    'eps-huge-int',
    'eps-large-groups',
    'eps-tiny-count',
    'eps-tiny-groups',
    'eps-tiny-sum',
    'infinite-bounds-avg-income',
    'infinite-bounds-sum-income',
    'infinite-bounds-sum-literal',
    'join-on',
    'left-join-on',
    'options-eps-denormal',
    'options-eps-huge-int',
    'redos-select-with',
    'redos-with-newlines',
    'redos-with-spaces',
}


@dataclass(frozen=True)
class Case:
    sql: object
    error: type | tuple[type, ...]
    match: str | tuple[str, ...] | None = None  # tuple: any of them
    epsilon: object = 1.0
    delta: object = 1e-6  # > 0 so that a refusal is never just "partition selection needs delta"
    kwargs: dict = field(default_factory=dict)
    finding: str | None = None
    id: str | None = None
    timeout: float | None = None  # seconds before the case counts as a hang

    def __post_init__(self):
        if self.id in FIXED:  # reported, then fixed in the engine: an ordinary test now
            object.__setattr__(self, "finding", None)


def R(sql, error, match=None, **kw) -> Case:
    return Case(sql, error, match, **kw)


# -- 1. raw rows and anything computed from them without noise ----------------------
RAW_ROWS = [
    R("SELECT * FROM pums", U, "SELECT *"),
    R("SELECT * FROM pums_dup", U, "SELECT *"),
    R("SELECT pums.* FROM pums", U, "raw rows"),
    R("SELECT p.* FROM pums AS p", U, "raw rows"),
    R("SELECT *, COUNT(*) FROM pums", U, "SELECT *"),
    R("SELECT * EXCLUDE (pid) FROM pums", U, "SELECT *"),
    R("SELECT * REPLACE (0 AS pid) FROM pums", U, "SELECT *"),
    R("SELECT COLUMNS('.*') FROM pums", U, "COLUMNS"),
    R("FROM pums", U, "SELECT *"),
    R("TABLE pums", U, "SELECT *"),
    R("SELECT age FROM pums", U, "GROUP BY"),
    R("SELECT pid, income FROM pums", U, "GROUP BY"),
    R("SELECT age + 0 FROM pums", U, "GROUP BY"),
    R("SELECT CASE WHEN income > 100000 THEN pid END FROM pums", U, "GROUP BY"),
    R("SELECT COUNT(*), age FROM pums", U, "GROUP BY"),
    R("SELECT DISTINCT age FROM pums", U, "DISTINCT"),
    R("SELECT DISTINCT ON (pid) income FROM pums", U, "DISTINCT"),
    R("SELECT pums FROM pums", C, "pums"),
    R("SELECT COUNT(pums) FROM pums", C, "pums"),
    R("SELECT MIN(pid) FROM pums", B, "no lower/upper bounds"),
    R("SELECT MAX(pid + 0) FROM pums", B, "no lower/upper bounds"),
    R("SELECT QUANTILE_CONT(income, [0.1, 0.5]) FROM pums", U, "ARRAY"),
    R("SELECT QUANTILE_CONT(income, age / 100) FROM pums", U, "number literal"),
    R("SELECT PERCENTILE_CONT(1.5) WITHIN GROUP (ORDER BY income) FROM pums", U,
      "between 0 and 1"),
    R("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY income, age) FROM pums", U,
      "exactly one ORDER BY"),
    R("SELECT MEDIAN(DISTINCT income) FROM pums", U, "DISTINCT"),
    R("SELECT MAX(income) OVER () FROM pums", U, "window"),
    R("SELECT LIST(pid) FROM pums", U, "not supported"),
    R("SELECT ARRAY_AGG(pid) FROM pums", U, "ARRAY_AGG"),
    R("SELECT STRING_AGG(CAST(pid AS VARCHAR), ',') FROM pums", U, "not supported"),
    R("SELECT FIRST(income) FROM pums", U, "FIRST"),
    R("SELECT ANY_VALUE(income) FROM pums", U, "not supported"),
    R("SELECT ARG_MAX(pid, income) FROM pums", U, "ARG_MAX"),
    R("SELECT MODE(age) FROM pums", U, "MODE"),
    R("SELECT HISTOGRAM(age) FROM pums", U, "HISTOGRAM"),
    R("SELECT STDDEV(pid) FROM pums", (U, B), None),
    R("SELECT COUNT(DISTINCT age, sex) FROM pums", U, "one expression"),
    R("SELECT COUNT(DISTINCT COUNT(*)) FROM pums", U, "aggregates inside"),
    R("SELECT SUM(DISTINCT income) FROM pums", U, "DISTINCT"),
    R("SELECT COUNT(*) FROM pums HAVING age > 50", U, "GROUP BY"),
    R("SELECT income FROM pums GROUP BY income", PP, "partition selection", delta=0.0),
    # every group one user's: it could never be released, so it is refused for free
    R("SELECT pid, COUNT(*) FROM pums GROUP BY pid", U, "user key", delta=0.0),
    R("SELECT pid, COUNT(*) FROM pums GROUP BY pid", U, "user key"),
    R("SELECT pid, COUNT(*) FROM pums_dup GROUP BY pid", U, "user key", epsilon=50.0,
      delta=1e-3),
    # a literal outside the public values can match no declared value
    R("SELECT sex, COUNT(*) FROM pums WHERE sex = 7 GROUP BY sex", AnalysisError,
      "public values"),
    R("SELECT SUM(pid) FROM pums", B, None),
]

# -- 2. LIMIT / ORDER BY reaching into the private rows ------------------------------
ORDER_LIMIT = [
    R("SELECT COUNT(*) FROM pums ORDER BY age", U, "ORDER BY"),
    R("SELECT COUNT(*) FROM pums ORDER BY pid LIMIT 1", U, "ORDER BY"),
    R("SELECT COUNT(*) FROM pums ORDER BY income DESC LIMIT 1", U, "ORDER BY"),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY sex ORDER BY income", U, "ORDER BY"),
    R("SELECT COUNT(*) FROM pums ORDER BY random()", U, "not supported"),
    R("SELECT COUNT(*) FROM pums LIMIT age", U, "LIMIT"),
    R("SELECT COUNT(*) FROM pums LIMIT (SELECT 1)", U, None),
    R("SELECT COUNT(*) FROM pums LIMIT (SELECT COUNT(*) FROM pums)", U, None),
    R("SELECT COUNT(*) FROM pums LIMIT -1", U, "LIMIT"),
    R("SELECT COUNT(*) FROM pums LIMIT 1.5", U, "LIMIT"),
    R("SELECT COUNT(*) FROM pums LIMIT NULL", U, "LIMIT"),
    R("SELECT COUNT(*) FROM pums LIMIT 10%", U, None),
    R("SELECT COUNT(*) FROM pums OFFSET 'x'", U, "OFFSET"),
    R("SELECT COUNT(*) FROM pums OFFSET age", U, "OFFSET"),
    R("SELECT COUNT(*) FROM pums LIMIT 1 OFFSET pid", U, "OFFSET"),
    R("SELECT COUNT(*) FROM pums FETCH FIRST age ROWS ONLY", U, None),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY 0", U, "position"),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY 99999999999999999999", U, "position"),
]

# -- 3. window functions -------------------------------------------------------------
WINDOWS = [
    R("SELECT COUNT(*), ROW_NUMBER() OVER () FROM pums", U, "window"),
    R("SELECT COUNT(*) OVER () FROM pums", U, "window"),
    R("SELECT SUM(income) OVER (PARTITION BY sex) FROM pums", U, "window"),
    R("SELECT RANK() OVER (ORDER BY income) FROM pums", U, "window"),
    R("SELECT LAG(income) OVER (ORDER BY pid) FROM pums", U, "window"),
    R("SELECT FIRST_VALUE(income) OVER (ORDER BY income DESC) FROM pums", U, "window"),
    R("SELECT NTILE(1000) OVER (ORDER BY income) FROM pums", U, "window"),
    R("SELECT SUM(age) OVER w FROM pums WINDOW w AS (ORDER BY pid)", U, "window"),
    R("SELECT COUNT(*) FROM pums WINDOW w AS (PARTITION BY sex)", U, "window"),
    R("SELECT COUNT(*) FROM pums QUALIFY COUNT(*) > 1", U, "QUALIFY"),
    R("SELECT COUNT(*) FROM pums QUALIFY ROW_NUMBER() OVER (ORDER BY income) = 1", U, None),
]

# -- 4. subqueries, CTEs, joins, set operations --------------------------------------
SUBQ = ("subquer", "derived table", "SELECT *", "private", "scalar", "not supported")
COMPOSITION = [
    # derived tables and CTEs must aggregate per user inside, and never LIMIT/ORDER/OFFSET
    R("SELECT COUNT(*) FROM (SELECT * FROM pums)", U, SUBQ),
    R("SELECT COUNT(*) FROM (SELECT * FROM pums LIMIT 1) AS t", U, SUBQ),
    R("SELECT COUNT(*) FROM (SELECT * FROM pums ORDER BY income DESC LIMIT 1)", U, SUBQ),
    # a row-level derived table is written out: an expression named like the user key
    # is not the user key
    R("SELECT COUNT(*) FROM (SELECT pid % 2 AS pid FROM pums_dup) t JOIN pums p "
      "ON p.pid = t.pid", U, "user key"),
    R("SELECT COUNT(*) FROM (SELECT age FROM pums LIMIT 1) t", U, "LIMIT"),
    R("SELECT COUNT(*) FROM (SELECT pid, COUNT(*) AS c FROM pums GROUP BY pid LIMIT 5) t", U,
      "LIMIT"),
    R("SELECT COUNT(*) FROM (SELECT pid, age FROM pums ORDER BY income DESC LIMIT 10) t", U,
      ("ORDER", "LIMIT")),
    R("SELECT COUNT(*) FROM (SELECT pid, age FROM pums OFFSET 5) t", U, "OFFSET"),
    R("SELECT SUM(c) FROM (SELECT age, COUNT(*) AS c FROM pums GROUP BY age) t", U,
      "user key"),
    R("SELECT SUM(c * c) FROM (SELECT age AS pid, COUNT(*) AS c FROM pums GROUP BY age) t", U,
      "user key"),
    R("SELECT SUM(c) FROM (SELECT pid % 10 AS pid, COUNT(*) AS c FROM pums GROUP BY pid % 10) t",
      U, "user key"),
    R("SELECT SUM(c) FROM (SELECT age AS pid, COUNT(*) AS c FROM pums GROUP BY pid) t", U,
      None),
    R("SELECT SUM(c) FROM (SELECT age, COUNT(*) AS c FROM pums GROUP BY pid, age) t", U,
      "user key"),
    R("SELECT SUM(x) FROM (SELECT pid, COUNT(*) * 1e300 AS x FROM pums_dup GROUP BY pid) t", U,
      None),
    R("SELECT SUM(x) FROM (SELECT pid, MAX(pid) AS x FROM pums_dup GROUP BY pid) t", B,
      "no lower/upper bounds"),
    R("SELECT COUNT(*) FROM (SELECT DISTINCT age FROM pums) t", U, "DISTINCT"),
    R("SELECT COUNT(*) FROM (SELECT pid, ROW_NUMBER() OVER () AS rn FROM pums) t WHERE rn = 1",
      U, "window"),
    R("SELECT COUNT(*) FROM (SELECT pid, age FROM pums GROUP BY pid, age HAVING COUNT(*) > 0) t",
      U, "HAVING"),
    R("SELECT COUNT(*) FROM (SELECT pid FROM read_csv('/etc/passwd')) t", U,
      "table function"),
    R("SELECT (SELECT MAX(income) FROM pums) FROM pums", U, SUBQ),
    R("SELECT COUNT(*) FROM pums WHERE age IN (SELECT age FROM pums WHERE pid = 1)", U, SUBQ),
    R("SELECT COUNT(*) FROM pums WHERE income = (SELECT MAX(income) FROM pums)", U, SUBQ),
    R("SELECT COUNT(*) FROM pums WHERE EXISTS (SELECT 1 FROM pums WHERE pid = 7)", U,
      ("EXISTS", "scalar")),
    R("SELECT SUM((SELECT 1)) FROM pums", U, SUBQ),
    R("WITH t AS (SELECT * FROM pums) SELECT * FROM t", U, ("WITH", "SELECT *")),
    R("WITH t AS (SELECT pid, age FROM pums WHERE pid = 7) SELECT age FROM t", U,
      ("WITH", "GROUP BY")),
    R("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM pums",
      U, ("WITH", "UNION", "RECURSIVE")),
    R("SELECT COUNT(*) FROM pums UNION SELECT COUNT(*) FROM pums", U, "UNION"),
    R("SELECT COUNT(*) FROM pums UNION ALL SELECT pid FROM pums", U, "UNION"),
    R("SELECT COUNT(*) FROM pums UNION BY NAME SELECT COUNT(*) FROM pums_dup", U, "UNION"),
    R("SELECT COUNT(*) FROM (SELECT pid, age FROM pums UNION ALL SELECT pid, age FROM pums) t",
      U, "UNION"),
    R("SELECT COUNT(*) FROM pums INTERSECT SELECT COUNT(*) FROM pums_dup", U, "INTERSECT"),
    R("SELECT COUNT(*) FROM pums EXCEPT SELECT COUNT(*) FROM pums_dup", U, "EXCEPT"),
    # joins must match users (user key or foreign-key path); no cross joins
    R("SELECT COUNT(*) FROM pums, pums_dup", U, "join"),
    R("SELECT COUNT(*) FROM pums CROSS JOIN pums_dup", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.age = b.age", U, "join"),
    R("SELECT SUM(a.income) FROM pums a JOIN pums_dup b ON a.sex = b.sex", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums_dup b ON a.pid < b.pid", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid OR a.age = b.age", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid OR TRUE", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = a.pid", U, "join"),
    R("SELECT COUNT(*) FROM pums a, pums b WHERE a.pid = a.pid", U, "join"),
    R("SELECT COUNT(*) FROM pums a, pums b WHERE a.pid = b.pid OR a.age > 0", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON NOT (a.pid <> b.pid)", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON CASE WHEN a.pid = b.pid THEN TRUE ELSE TRUE "
      "END", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = CAST(b.pid AS DOUBLE)", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid + 1", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.age", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid IN (b.pid, b.age)", U, "join"),
    R("SELECT COUNT(*) FROM pums a LEFT JOIN pums b ON FALSE", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid JOIN pums c ON a.age = c.age",
      U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid, pums c", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid LEFT JOIN pums c ON TRUE", U,
      "join"),
    R("SELECT COUNT(*) FROM pums a, pums b, pums c WHERE a.pid = b.pid AND (b.pid = c.pid OR "
      "c.age > 0)", U, "join"),
    R("SELECT COUNT(*) FROM pums a FULL JOIN pums b ON a.pid = b.pid", U, "join"),
    R("SELECT COUNT(*) FROM pums a RIGHT JOIN pums_dup b ON a.pid = b.pid", U, "join"),
    R("SELECT COUNT(*) FROM pums NATURAL JOIN pums_dup", U, "join"),
    R("SELECT COUNT(*) FROM pums POSITIONAL JOIN pums_dup", U, "join"),
    R("SELECT COUNT(*) FROM pums ASOF JOIN pums_dup USING (pid)", U, "join"),
    R("SELECT COUNT(*) FROM pums SEMI JOIN pums_dup USING (pid)", U, "join"),
    R("SELECT COUNT(*) FROM pums ANTI JOIN pums_dup USING (pid)", U, "join"),
    R("SELECT COUNT(*) FROM pums, LATERAL (SELECT pums.age)", U, None),
    R("SELECT COUNT(*) FROM (VALUES (1), (2)) AS t(x)", U, None),
    R("VALUES (1)", U, "VALUES"),
    R("PIVOT pums ON sex USING COUNT(*)", U, "PIVOT"),
    R("UNPIVOT pums ON age INTO NAME k VALUE v", U, None),
    R("SELECT COUNT(*) FROM pums TABLESAMPLE 10%", U, "SAMPLE"),
    R("SELECT COUNT(*) FROM pums USING SAMPLE 10", U, "SAMPLE"),
]

# -- 5. table functions: files, other databases, generated rows ------------------------
TABLE_FUNCTIONS = [
    R("SELECT COUNT(*) FROM read_csv('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM read_csv_auto('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM read_csv('/etc/passwd', header = false, columns = {'a': 'VARCHAR'})",
      U, "table function"),
    R("SELECT COUNT(*) FROM read_parquet('/tmp/x.parquet')", U, "table function"),
    R("SELECT COUNT(*) FROM read_parquet(['a.parquet', 'b.parquet'])", U, "table function"),
    R("SELECT COUNT(*) FROM parquet_scan('/tmp/x.parquet')", U, "table function"),
    R("SELECT COUNT(*) FROM read_json('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM read_json_auto('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM read_ndjson('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM read_text('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM read_blob('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM glob('/*')", U, "table function"),
    R("SELECT COUNT(*) FROM query('SELECT * FROM pums')", U, "table function"),
    R("SELECT COUNT(*) FROM query_table('pums')", U, "table function"),
    R("SELECT COUNT(*) FROM sqlite_scan('/tmp/x.db', 't')", U, "table function"),
    R("SELECT COUNT(*) FROM postgres_scan('host=localhost', 'public', 't')", U,
      "table function"),
    R("SELECT COUNT(*) FROM iceberg_scan('s3://bucket/t')", U, "table function"),
    R("SELECT COUNT(*) FROM delta_scan('/tmp/t')", U, "table function"),
    R("SELECT COUNT(*) FROM sniff_csv('/etc/passwd')", U, "table function"),
    R("SELECT COUNT(*) FROM range(10)", U, "table function"),
    R("SELECT COUNT(*) FROM generate_series(1, 10)", U, "table function"),
    R("SELECT COUNT(*) FROM unnest([1, 2, 3])", U, None),
    R("SELECT COUNT(*) FROM pums WHERE read_text('/etc/passwd') IS NULL", U, "READ_TEXT"),
    R("SELECT COUNT(*) FROM 'data.csv'", T, "unknown table"),
    R("SELECT COUNT(*) FROM '/etc/passwd'", T, "unknown table"),
    R("SELECT COUNT(*) FROM \"/etc/passwd\"", T, "unknown table"),
    R("SELECT COUNT(*) FROM 'https://example.com/x.parquet'", T, "unknown table"),
    R("SELECT COUNT(*) FROM 's3://bucket/pums.parquet'", T, "unknown table"),
]

# -- 6. statements other than SELECT ---------------------------------------------------
STATEMENTS = [
    R("ATTACH '/tmp/other.duckdb'", U, "ATTACH"),
    R("ATTACH '/tmp/other.db' AS o (TYPE sqlite)", U, "ATTACH"),
    R("ATTACH DATABASE ':memory:' AS m", U, "ATTACH"),
    R("DETACH pums", U, "DETACH"),
    R("DETACH DATABASE m", U, "DETACH"),
    R("COPY pums TO '/tmp/pums.csv'", U, "COPY"),
    R("COPY (SELECT * FROM pums) TO '/tmp/pums.parquet' (FORMAT parquet)", U, "COPY"),
    R("COPY pums FROM '/tmp/pums.csv'", U, "COPY"),
    R("EXPORT DATABASE '/tmp/export'", STMT, None),
    R("IMPORT DATABASE '/tmp/export'", STMT, None),
    R("INSTALL httpfs", U, "INSTALL"),
    R("FORCE INSTALL httpfs", STMT, None),
    R("LOAD httpfs", U, "LOAD"),
    R("PRAGMA table_info('pums')", U, "PRAGMA"),
    R("PRAGMA enable_profiling", U, "PRAGMA"),
    R("SET enable_external_access = true", U, "SET"),
    R("SET GLOBAL threads = 1", U, "SET"),
    R("SET VARIABLE x = 1", U, "SET"),
    R("RESET threads", U, "RESET"),
    R("CALL pragma_version()", U, "CALL"),
    R("CREATE TABLE x AS SELECT * FROM pums", U, "CREATE"),
    R("CREATE OR REPLACE TABLE pums AS SELECT 1 AS pid", U, "CREATE"),
    R("CREATE TEMP TABLE t AS SELECT * FROM pums", U, "CREATE"),
    R("CREATE VIEW v AS SELECT * FROM pums", U, "CREATE"),
    R("CREATE MACRO m(x) AS x", U, "CREATE"),
    R("CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')", U, "CREATE"),
    R("CREATE SEQUENCE s", U, "CREATE"),
    R("DROP TABLE pums", U, "DROP"),
    R("DROP TABLE IF EXISTS pums_dup", U, "DROP"),
    R("INSERT INTO pums VALUES (1, 2, 3, 4, 5, 6, 7)", U, "INSERT"),
    R("INSERT INTO pums SELECT * FROM pums", U, "INSERT"),
    R("UPDATE pums SET income = 0", U, "UPDATE"),
    R("DELETE FROM pums", U, "DELETE"),
    R("TRUNCATE pums", STMT, None),
    R("ALTER TABLE pums ADD COLUMN x INT", U, "ALTER"),
    R("ALTER TABLE pums RENAME TO p", U, "ALTER"),
    R("VACUUM", U, "VACUUM"),
    R("CHECKPOINT", STMT, None),
    R("FORCE CHECKPOINT", STMT, None),
    R("USE memory", U, "USE"),
    R("DESCRIBE pums", U, "DESCRIBE"),
    R("SHOW TABLES", U, "SHOW"),
    R("SUMMARIZE pums", U, "SUMMARIZE"),
    R("EXPLAIN SELECT COUNT(*) FROM pums", U, "EXPLAIN"),
    R("EXPLAIN ANALYZE SELECT * FROM pums", U, "EXPLAIN"),
    R("PREPARE s AS SELECT * FROM pums", U, "PREPARE"),
    R("EXECUTE s", U, "EXECUTE"),
    R("DEALLOCATE s", STMT, None),
    R("BEGIN TRANSACTION", U, None),
    R("COMMIT", U, "COMMIT"),
    R("ROLLBACK", U, "ROLLBACK"),
    R("SELECT COUNT(*) INTO t FROM pums", U, "INTO"),
    R("SELECT COUNT(*) FROM pums FOR UPDATE", U, None),
    R("COMMENT ON TABLE pums IS 'x'", STMT, None),
]

# -- 7. system catalogs and qualified names -------------------------------------------
CATALOGS = [
    R("SELECT COUNT(*) FROM information_schema.tables", U, "qualified table name"),
    R("SELECT COUNT(*) FROM information_schema.columns", U, "qualified table name"),
    R("SELECT COUNT(*) FROM information_schema.schemata", U, "qualified table name"),
    R("SELECT COUNT(*) FROM main.information_schema.tables", U, "qualified table name"),
    R("SELECT COUNT(*) FROM pg_catalog.pg_tables", U, "qualified table name"),
    R("SELECT COUNT(*) FROM pg_catalog.pg_class", U, "qualified table name"),
    R("SELECT COUNT(*) FROM pg_class", T, "unknown table"),
    R("SELECT COUNT(*) FROM pg_tables", T, "unknown table"),
    R("SELECT COUNT(*) FROM duckdb_tables()", U, "table function"),
    R("SELECT COUNT(*) FROM duckdb_settings()", U, "table function"),
    R("SELECT COUNT(*) FROM duckdb_columns()", U, "table function"),
    R("SELECT COUNT(*) FROM duckdb_functions()", U, "table function"),
    R("SELECT COUNT(*) FROM duckdb_extensions()", U, "table function"),
    R("SELECT COUNT(*) FROM duckdb_secrets()", U, "table function"),
    R("SELECT COUNT(*) FROM duckdb_databases()", U, "table function"),
    R("SELECT COUNT(*) FROM duckdb_tables", T, "unknown table"),
    R("SELECT COUNT(*) FROM sqlite_master", T, "unknown table"),
    R("SELECT COUNT(*) FROM sqlite_schema", T, "unknown table"),
    R("SELECT COUNT(*) FROM pragma_database_list", T, "unknown table"),
    R("SELECT COUNT(*) FROM pragma_database_list()", U, "table function"),
    R("SELECT COUNT(*) FROM pragma_table_info('pums')", U, "table function"),
    R("SELECT COUNT(*) FROM pragma_storage_info('pums')", U, "table function"),
    # main.pums and "main"."pums" name the catalog's pums: main is the schema the
    # SQLAlchemy dialect reflects (issue 22; answered in tests/clients/test_bi_tools.py)
    R("SELECT COUNT(*) FROM memory.main.pums", U, "qualified table name"),
    R("SELECT COUNT(*) FROM pums.main.pums", U, "qualified table name"),
    R("SELECT COUNT(*) FROM census.pums", U, "qualified table name"),
    R("SELECT COUNT(*) FROM pums.pums WHERE other.pums.age > 1", U, "column reference"),
    R("SELECT COUNT(*) FROM pums WHERE POWER(age, 2) > 1", U, "POWER"),
    R("SELECT SUM(POWER(income, 2)) FROM pums", U, "POWER"),
    R("SELECT TOP 5 PERCENT sex, COUNT(*) FROM pums GROUP BY sex", U, "PERCENT"),
    R("SELECT COUNT(*) FROM pums RIGHT JOIN pums_dup USING (pid)", U, "join"),
    R("SELECT COUNT(*) FROM pums a JOIN pums_dup b USING (age)", U, "join"),
    R("SELECT COUNT(*) FROM temp.main.pums", U, "qualified table name"),
    R("SELECT COUNT(*) FROM system.main.duckdb_tables", U, "qualified table name"),
    R("SELECT COUNT(*) FROM pums WHERE other.age > 1", (C, T), "not in FROM"),
    R("SELECT COUNT(*) FROM pums AS p WHERE pums_dup.age > 1", (C, T), "not in FROM"),
]

# -- 8. several statements in one string ----------------------------------------------
MULTI_STATEMENT = [
    R("SELECT COUNT(*) FROM pums; DROP TABLE pums", U, "several statements"),
    R("SELECT COUNT(*) FROM pums; SELECT * FROM pums", U, "several statements"),
    R("SELECT COUNT(*) FROM pums; ATTACH '/tmp/x.db'", U, "several statements"),
    R("SELECT COUNT(*) FROM pums WHERE age > 1; COPY pums TO '/tmp/x.csv'", U,
      "several statements"),
    R("SELECT COUNT(*) FROM pums; -- trailing comment", U, "several statements"),
    R("SELECT COUNT(*) FROM pums; /* trailing block comment */", U, "several statements"),
    R("SELECT COUNT(*) FROM pums WHERE '--' = '--'; SELECT 1", U, "several statements"),
    R("SELECT COUNT(*) FROM pums WHERE sex = 1 OR 1 = 1 /* ' */ ; DROP TABLE pums", U,
      "several statements"),
    R("SELECT COUNT(*) FROM pums\x00; DROP TABLE pums", U, "several statements"),
    R("SELECT COUNT(*) FROM pums; ; SELECT COUNT(*) FROM pums", U, "several statements"),
    R("SELECT COUNT(*) FROM pums;\nSET enable_external_access = true", U,
      "several statements"),
    R("SELECT COUNT(*) FROM pums junk junk", P, "cannot parse"),
    R("SELECT COUNT(*) FROM pums WHERE age > 1 )", P, None),
    R("SELECT COUNT(*) FROM pums WHERE age = 1\x00", P, None),
    R(";", U, "empty"),
    R("", U, "empty"),
    R("   \n\t  ", U, "empty"),
]

# -- 9. injection through identifiers and string literals -----------------------------
INJECTION = [
    R('SELECT COUNT(*) FROM "pums; DROP TABLE pums"', T, "unknown table"),
    R('SELECT COUNT(*) FROM "pums""; DROP TABLE pums; --"', T, "unknown table"),
    R('SELECT COUNT(*) FROM "pu""ms"', T, "unknown table"),
    R('SELECT COUNT("age""; DROP TABLE pums; --") FROM pums', C, "unknown column"),
    R('SELECT SUM("income"" FROM pums; --") FROM pums', C, "unknown column"),
    R('SELECT COUNT(*) FROM "pums "', T, "unknown table"),
    R("SELECT COUNT(*) FROM \u0440ums", T, "unknown table"),          # Cyrillic р
    R("SELECT COUNT(*) FROM pum\u0455", T, "unknown table"),          # Cyrillic ѕ
    R("SELECT COUNT(*) FROM pums WHERE \u0430ge > 1", C, "unknown column"),  # Cyrillic а
    R("SELECT \u0421OUNT(*) FROM pums", U, "not supported"),            # Cyrillic С
    R("SELECT COUNT(*) FROM pu\u200bms", T, "unknown table"),          # zero-width space
    R('SELECT COUNT(*) FROM "pums\u200b"', T, "unknown table"),
    R("SELECT COUNT(*) FROM pums\ufeff", U, "control characters"),     # BOM
    R('SELECT COUNT(*) FROM pums WHERE "a\u200dge" > 1', C, "unknown column"),  # ZWJ
    R("SELECT COUNT(*) FROM \uff50\uff55\uff4d\uff53", T, "unknown table"),  # fullwidth
    R("SELECT COUNT(*) FROM pums WHERE \uff41\uff47\uff45 > 1", C, "unknown column"),
    R("\uff33\uff25\uff2c\uff25\uff23\uff34 COUNT(*) FROM pums", P, None),
    R("SELECT COUNT(*) FROM pums WHERE age >\u202e 1", P, None),     # RTL override
    R("SELECT COUNT(*) FROM `pums`", P, None),
    R("SELECT COUNT(*) FROM [pums]", P, None),
    R('SELECT COUNT(*) FROM "pums', P, "tokenize"),
    R("SELECT COUNT(*) FROM pums WHERE CAST(sex AS VARCHAR) = 'unterminated", P, "tokenize"),
    R("SELECT COUNT(*) FROM pums WHERE CAST(sex AS VARCHAR) = E'\\x27'", U, None),
    R("SELECT COUNT(*) FROM pums WHERE CAST(sex AS VARCHAR) = $$x$$", U, None),
    R("SELECT COUNT(*) FROM pums WHERE age = $1", U, "parameter"),
    R("SELECT COUNT(*) FROM pums WHERE age = ?", dpsql.ParameterError, "but 0 parameters"),
    R("SELECT COUNT(*) FROM pums WHERE age = :age", U, "parameter"),
    R("SELECT COUNT(*) FROM pums WHERE age = getvariable('x')", U, "GETVARIABLE"),
    R(b"SELECT COUNT(*) FROM pums", U, "string"),
    R(None, U, "string"),
    R(["SELECT COUNT(*) FROM pums"], U, "string"),
]

# -- 10. comments ---------------------------------------------------------------------
COMMENTS = [
    R("/* c */ DROP TABLE pums", U, "DROP"),
    R("-- c\nDROP TABLE pums", U, "DROP"),
    R("SELECT COUNT(*) FROM pums /* unterminated", P, "tokenize"),
    R("SELECT COUNT(*) FROM pums /* x */; DROP TABLE pums", U, "several statements"),
    R("SELECT COUNT(*) -- c\nFROM pums; ATTACH '/tmp/x.db'", U, "several statements"),
    R("SELECT COUNT(*) FROM pums /* a /* nested */ b */; DROP TABLE pums", U,
      "several statements"),
    R("/* SELECT COUNT(*) FROM pums */ SELECT * FROM pums", U, "SELECT *"),
    R("SELECT * /* COUNT(*) */ FROM pums", U, "SELECT *"),
    R("SELECT COUNT(*) FROM pums -- \n, pums_dup", U, "JOIN"),
    R("-- only a comment", U, "empty"),
    R("/* only a comment */", U, "empty"),
    R("SELECT/**/pid/**/FROM/**/pums", U, "GROUP BY"),
]

# -- 11. functions that read settings, files, the environment or the clock ---------------
SETTINGS_FUNCTIONS = [
    R("SELECT COUNT(*) FROM pums WHERE age = current_setting('threads')", U,
      "CURRENT_SETTING"),
    R("SELECT COUNT(*) FROM pums WHERE getenv('HOME') = '/root'", U, "GETENV"),
    R("SELECT COUNT(*) FROM pums WHERE version() = 'v1'", U, "not supported"),
    R("SELECT COUNT(*) FROM pums WHERE current_database() = 'pums'", U, "CURRENT_DATABASE"),
    R("SELECT COUNT(*) FROM pums WHERE current_schema() = 'main'", U, "CURRENT_SCHEMA"),
    R("SELECT COUNT(*) FROM pums WHERE current_user = 'x'", U, "CURRENT_USER"),
    # now(), current_timestamp and current_date are answered: dpsql reads the clock once,
    # before the charge, and sends a literal (dpsql.client_sql.constants, issue 22); a
    # backend never reads a clock. Other clock functions stay refused:
    R("SELECT COUNT(*) FROM pums WHERE current_time IS NULL", U, "CURRENT_TIME"),
    R("SELECT COUNT(*) FROM pums WHERE get_current_timestamp() IS NULL", U,
      "get_current_timestamp"),
    R("SELECT COUNT(*) FROM pums WHERE now(1) IS NULL", U, "now"),
    R("SELECT COUNT(*) FROM pums WHERE random() < 0.5", U, "not supported"),
    R("SELECT COUNT(*) FROM pums WHERE setseed(0.5) IS NULL", U, "SETSEED"),
    R("SELECT COUNT(*) FROM pums WHERE uuid() IS NULL", U, "UUID"),
    R("SELECT COUNT(*) FROM pums WHERE nextval('s') > 0", U, "NEXTVAL"),
    R("SELECT COUNT(*) FROM pums WHERE typeof(age) = 'BIGINT'", U, "TYPEOF"),
    R("SELECT COUNT(*) FROM pums WHERE hash(pid) % 2 = 0", U, "HASH"),
    R("SELECT COUNT(*) FROM pums WHERE md5(CAST(pid AS VARCHAR)) = 'x'", U, "MD5"),
    R("SELECT COUNT(*) FROM pums WHERE regexp_matches(CAST(pid AS VARCHAR), '(a+)+$')", U,
      "not supported"),
    R("SELECT COUNT(*) FROM pums WHERE json_extract('{}', '$.a') IS NULL", U,
      "JSON_EXTRACT"),
    R("SELECT COUNT(*) FROM pums WHERE [age][1] = 1", U, None),
    R("SELECT COUNT(*) FROM pums WHERE {'a': age}.a = 1", U, None),
    R("SELECT COUNT(*) FROM pums WHERE list_transform([age], x -> x + 1)[1] = 1", U, None),
]

_INF = ("derived bounds overflow to inf; the mechanism's scale becomes infinite and "
        "OverflowError('cannot convert float infinity to integer') escapes from "
        "dpsql/mechanisms instead of an UnboundedExpressionError")

# -- 12. error channels that dpsql refuses outright -----------------------------------
ERROR_REFUSALS = [
    R("SELECT COUNT(*) FROM pums WHERE error('boom')", U, "ERROR"),
    R("SELECT COUNT(*) FROM pums WHERE CASE WHEN pid = 7 THEN error('x') ELSE true END", U,
      "ERROR"),
    R("SELECT COUNT(*) FROM pums WHERE 10 ** 1000 > 1", U, "not supported"),
    R("SELECT COUNT(*) FROM pums WHERE age ^ 100 > 1", U, "not supported"),
    R("SELECT COUNT(*) FROM pums WHERE age << 70 > 1", U, None),
    R("SELECT COUNT(*) FROM pums WHERE CAST(age AS VARCHAR) LIKE 'a' ESCAPE 'ab'", U,
      "ESCAPE"),
    R("SELECT COUNT(*) FROM pums WHERE repeat('x', age * 100000000) = ''", U, "REPEAT"),
    R("SELECT SUM(exp(age * 10)) FROM pums", B, "overflow"),
    R("SELECT SUM(income / age) FROM pums", B, None),
    R("SELECT SUM(ln(age)) FROM pums", B, None),
    # bounds that overflow to infinity must be refused, not crash the mechanism
    R("SELECT SUM(1e400) FROM pums", (B, U), None, id="infinite-bounds-sum-literal",
      finding=_INF),
    R("SELECT SUM(income * 1e303) FROM pums", (B, U), None, id="infinite-bounds-sum-income",
      finding=_INF),
    R("SELECT sex, AVG(income * 1e305) FROM pums GROUP BY sex", (B, U), None,
      id="infinite-bounds-avg-income", finding=_INF),
]

# -- 13. resource abuse -----------------------------------------------------------------
RESOURCE = [
    R("SELECT COUNT(*) FROM pums WHERE age > 1 -- " + "x" * 100_000, U, "limit"),
    R("SELECT COUNT(*) FROM pums WHERE age IN (" + ",".join(["1"] * 50_000) + ")", U,
      "limit"),
    R("SELECT COUNT(*) FROM pums WHERE age IN (" + ",".join(["1"] * 40_000) + ")", U,
      "nodes"),
    R("SELECT COUNT(*) FROM pums WHERE " + "(" * 10_000 + "age > 1" + ")" * 10_000, U,
      "nested"),
    R("SELECT " + "(" * 40_000 + "COUNT(*)" + ")" * 40_000 + " FROM pums", U, "nested"),
    R("SELECT COUNT(*) FROM pums WHERE " + "NOT " * 20_000 + "age > 1", U, "nested"),
    R("SELECT COUNT(*) FROM pums WHERE " + " OR ".join(["age = 1"] * 3_000), U, "nested"),
    R("SELECT COUNT(*) FROM pums WHERE " + " + ".join(["age"] * 5_000) + " > 1", U,
      "nested"),
    R("SELECT SUM(" + "-" * 5_000 + "age) FROM pums", (U, P), None),
    R("SELECT " + ", ".join(["COUNT(*)"] * 6_000) + " FROM pums", U, "nodes"),
    R("SELECT COUNT(*) FROM " + "p" * 90_000, U, "at most 128 characters"),
    R("SELECT COUNT(*) FROM pums WHERE age = " + "9" * 5_000, (BackendError, U, P), None,
      id="5000-digit-literal",
      finding="a literal DuckDB cannot represent passes the pre-charge check (DESCRIBE does "
              "not constant-fold, unlike the EXPLAIN it replaced) and fails at execution: "
              "BackendError charged=True for a query that could never run"),
]

# -- 14. privacy parameters and API arguments ----------------------------------------
Q = "SELECT COUNT(*) FROM pums"
QG = "SELECT income, COUNT(*) FROM pums GROUP BY income"
PRIVACY_PARAMS = [
    R(Q, PP, "epsilon", epsilon=0, id="eps-0"),
    R(Q, PP, "epsilon", epsilon=0.0, id="eps-0.0"),
    R(Q, PP, "epsilon", epsilon=-1.0, id="eps-neg"),
    R(Q, PP, "epsilon", epsilon=-0.0, id="eps-neg-zero"),
    R(Q, PP, "epsilon", epsilon=float("nan"), id="eps-nan"),
    R(Q, PP, "epsilon", epsilon=float("inf"), id="eps-inf"),
    R(Q, PP, "epsilon", epsilon=float("-inf"), id="eps-neg-inf"),
    R(Q, PP, "epsilon", epsilon="1", id="eps-str"),
    R(Q, PP, "epsilon", epsilon=None, id="eps-none"),
    R(Q, PP, "epsilon", epsilon=True, id="eps-bool"),
    R(Q, PP, "epsilon", epsilon=1 + 0j, id="eps-complex"),
    R(Q, PP, "epsilon", epsilon=[1.0], id="eps-list"),
    R(Q, PP, "delta", delta=1, id="delta-1"),
    R(Q, PP, "delta", delta=1.0, id="delta-1.0"),
    R(Q, PP, "delta", delta=1.5, id="delta-1.5"),
    R(Q, PP, "delta", delta=-1e-9, id="delta-neg"),
    R(Q, PP, "delta", delta=float("nan"), id="delta-nan"),
    R(Q, PP, "delta", delta=float("inf"), id="delta-inf"),
    R(Q, PP, "delta", delta="0", id="delta-str"),
    R(Q, PP, "delta", delta=False, id="delta-bool"),
    R(QG, PP, "delta", delta=0.0, id="groups-need-delta"),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY sex", PP, "max_groups",
      kwargs={"max_groups": 0}, id="max-groups-0"),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY sex", PP, "max_groups",
      kwargs={"max_groups": -1}, id="max-groups-neg"),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY sex", PP, "max_groups",
      kwargs={"max_groups": 1.5}, id="max-groups-float"),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY sex", PP, "max_groups",
      kwargs={"max_groups": True}, id="max-groups-bool"),
    R("SELECT sex, COUNT(*) FROM pums GROUP BY sex", PP, "max_groups",
      kwargs={"max_groups": "2"}, id="max-groups-str"),
    R("SELECT SUM(age) FROM pums_dup", PP, "max_rows", kwargs={"max_rows": 0},
      id="max-rows-0"),
    R("SELECT SUM(age) FROM pums_dup", PP, "max_rows", kwargs={"max_rows": -3},
      id="max-rows-neg"),
    R("SELECT SUM(age) FROM pums_dup", PP, "max_rows", kwargs={"max_rows": float("nan")},
      id="max-rows-nan"),
    # extreme but well-typed values: must be refused as parameters, not crash the noise
    R(Q, PP, "epsilon", epsilon=10 ** 400, id="eps-huge-int",
      finding="OverflowError from math.isfinite(int) in _privacy_parameters"),
    R(Q, PP, "delta", delta=10 ** 400, id="delta-huge-int",
      finding="OverflowError from math.isfinite(int) in _privacy_parameters"),
    R(Q, PP, "epsilon", epsilon=5e-324, id="eps-denormal",
      finding="OverflowError (float infinity to integer) while building the mechanism"),
    R(Q, PP, "epsilon", epsilon=1e-320, id="eps-1e-320",
      finding="OverflowError (float infinity to integer) while building the mechanism"),
    R(Q, PP, "epsilon", epsilon=1e300, id="eps-1e300",
      finding="OverflowError (Numerical result out of range) in the mechanism"),
]

# -- 16. BigQuery's SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (...) clause --------------
W = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS "
_REDOS = ("ReDoS in dpsql/bigquery_options.py: _GAP = (?:\\s+|--...|/*...*/)* nests a "
          "quantifier (\\s+ inside *), so _CLAUSE backtracks exponentially over a run of "
          "whitespace that is not followed by DIFFERENTIAL_PRIVACY; ~2.7x per extra space "
          "(12 spaces: 0.4 s, 16: ~90 s), before the length limit or any budget check. "
          "Fix: _GAP = r'(?:\\s|--[^\\n]*(?:\\n|\\Z)|/\\*.*?\\*/)*' (single \\s), or "
          "tokenize with sqlglot")
DP_OPTIONS = [
    R(W + "(epsilon = 0) COUNT(*) FROM pums", PP, "epsilon", epsilon=None),
    R(W + "(epsilon = -1) COUNT(*) FROM pums", PP, "epsilon", epsilon=None),
    R(W + "(epsilon = 'a') COUNT(*) FROM pums", P, "finite number", epsilon=None),
    R(W + "(epsilon = nan) COUNT(*) FROM pums", P, "finite number", epsilon=None),
    R(W + "(epsilon = inf) COUNT(*) FROM pums", P, "finite number", epsilon=None),
    R(W + "(epsilon = 1e400) COUNT(*) FROM pums", P, "finite number", epsilon=None),
    R(W + "(epsilon = 0x10) COUNT(*) FROM pums", P, "finite number", epsilon=None),
    R(W + "(epsilon = 1; DROP TABLE pums) COUNT(*) FROM pums", P, "finite number",
      epsilon=None),
    R(W + "(epsilon = 1, delta = 1) COUNT(*) FROM pums", PP, "delta", epsilon=None),
    R(W + "(epsilon = 1, delta = -0.1) COUNT(*) FROM pums", PP, "delta", epsilon=None),
    R(W + "(epsilon = 1, max_groups_contributed = 0) sex, COUNT(*) FROM pums GROUP BY sex",
      PP, "max_groups", epsilon=None),
    R(W + "(epsilon = 1, max_rows_contributed = 1.5) SUM(age) FROM pums_dup", PP, "max_rows",
      epsilon=None),
    R(W + "(privacy_unit_column = pid) COUNT(*) FROM pums", U, "privacy_unit_column",
      epsilon=None),
    R(W + "(epsilon = 1, epsilon = 2) COUNT(*) FROM pums", P, "twice", epsilon=None),
    R(W + "(epsilon = 1,) COUNT(*) FROM pums", P, "key = number", epsilon=None),
    R("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS epsilon = 1 COUNT(*) FROM pums", P, "OPTIONS",
      epsilon=None),
    R(W + "(epsilon = (1)) COUNT(*) FROM pums", P, "parentheses", epsilon=None),
    R(W + "(epsilon = 1) * FROM pums", U, "SELECT *", epsilon=None),
    R(W + "(epsilon = 1) age FROM pums", U, "GROUP BY", epsilon=None),
    R(W + "(epsilon = 1) COUNT(*) FROM read_csv('/etc/passwd')", U, "table function",
      epsilon=None),
    R(W + "(epsilon = 1) COUNT(*) FROM pums; DROP TABLE pums", U, "several statements",
      epsilon=None),
    R(W + "(epsilon = 1) WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1) COUNT(*) FROM pums",
      (P, U), None, epsilon=None),
    R(W + "(epsilon = 1, delta = 0) income, COUNT(*) FROM pums GROUP BY income", PP,
      "partition selection", epsilon=None),
    R("SELECT WITH DIFFERENTIAL_PRIVACY COUNT(*) FROM pums", PP, "epsilon", epsilon=None),
    R(W + "() COUNT(*) FROM pums", PP, "epsilon", epsilon=None),
    R("SELECT COUNT(*) FROM pums WHERE WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1)",
      (PP, P), None, epsilon=None),
    # the clause's epsilon wins over the argument: a big one is refused by the budget
    R(W + "(epsilon = 100) COUNT(*) FROM pums", BudgetExhaustedError, "budget", epsilon=0.1),
    R(W + "(epsilon = 1" + "0" * 400 + ") COUNT(*) FROM pums", PP, "epsilon", epsilon=None,
      id="options-eps-huge-int",
      finding="an integer option literal is int(text): epsilon = 1 followed by 400 zeros "
              "reaches math.isfinite and raises OverflowError"),
    R(W + "(epsilon = 1e-320) COUNT(*) FROM pums", PP, "epsilon", epsilon=None,
      id="options-eps-denormal",
      finding="epsilon = 1e-320 passes the option parser and the parameter check; the "
              "mechanism raises OverflowError"),
    # ReDoS: run with a short time limit; the alarm interrupts the regex
    R("SELECT" + " " * 28 + "WITH" + " " * 28 + "COUNT(*) FROM pums", (P, U), None,
      id="redos-select-with", timeout=3.0, finding=_REDOS),
    R("SELECT WITH" + " " * 40 + "COUNT(*) FROM pums", (P, U), None,
      id="redos-with-spaces", timeout=3.0, finding=_REDOS),
    R("SELECT WITH" + "\n" * 40 + "COUNT(*) FROM pums", (P, U), None,
      id="redos-with-newlines", timeout=3.0, finding=_REDOS),
]

# -- 15. dpsql's own internal names (CTEs, placeholders, post-processing columns) ------
INTERNAL_NAMES = [
    R("SELECT COUNT(*) FROM __per_user", T, "unknown table"),
    R("SELECT COUNT(*) FROM __bounded", T, "unknown table"),
    R("SELECT COUNT(*) FROM __noisy", T, "unknown table"),
    R("SELECT COUNT(*) FROM pums WHERE __uid > 1", C, "unknown column"),
    R("SELECT SUM(__s0) FROM pums", C, "unknown column"),
    R("SELECT COUNT(*) FROM pums HAVING __a0 > 1", C, "unknown column"),
    R("SELECT COUNT(*) FROM pums ORDER BY __rid", C, "unknown column"),
    R("SELECT COUNT(*) FROM pums GROUP BY __k0", C, "unknown column"),
    R("SELECT COUNT(*) AS x FROM pums ORDER BY \"__alias:x\"", C, "unknown column"),
    R("SELECT COUNT(*) AS n FROM pums WHERE n > 0", C, "unknown column"),
    # an output named like an ungrouped input column: SQL (and DuckDB) read the output in
    # ORDER BY <name> and HAVING (answered, tests/test_spellings.py); nested in an
    # expression in ORDER BY the input column wins and is refused, as DuckDB refuses it
    R("SELECT COUNT(*) AS age FROM pums GROUP BY sex ORDER BY age + 1", U, "ORDER BY"),
    R("SELECT pid AS sex, COUNT(*) FROM pums GROUP BY sex", U, "GROUP BY"),
    R("SELECT sex AS pid, COUNT(*) FROM pums GROUP BY pid", U, "GROUP BY"),
    R("SELECT sex, SUM(income) AS income FROM pums GROUP BY sex HAVING SUM(income) > 0 "
      "ORDER BY -income", U, "ORDER BY"),
]

THEMES: dict[str, list[Case]] = {
    "raw-rows": RAW_ROWS,
    "order-limit": ORDER_LIMIT,
    "windows": WINDOWS,
    "composition": COMPOSITION,
    "table-functions": TABLE_FUNCTIONS,
    "statements": STATEMENTS,
    "catalogs": CATALOGS,
    "multi-statement": MULTI_STATEMENT,
    "injection": INJECTION,
    "comments": COMMENTS,
    "settings-functions": SETTINGS_FUNCTIONS,
    "error-refusals": ERROR_REFUSALS,
    "resource": RESOURCE,
    "privacy-params": PRIVACY_PARAMS,
    "internal-names": INTERNAL_NAMES,
    "dp-options": DP_OPTIONS,
}


def all_cases() -> list[tuple[str, str, Case]]:
    """(theme, test id, case) for every refusal case."""
    out = []
    for theme, cases in THEMES.items():
        for i, case in enumerate(cases):
            out.append((theme, f"{theme}-{case.id or i}", case))
    return out


# -- hostile-looking queries that may be answered ---------------------------------------
@dataclass(frozen=True)
class Safe:
    sql: str
    epsilon: object = 1.0
    delta: object = 1e-6
    kwargs: dict = field(default_factory=dict)
    #: the answer must release no group at all (keys without a public domain that
    #: no crowd of users shares)
    releases_nothing: bool = False
    #: the number of rows the answer must have whatever the data (public domains)
    expect_rows: int | None = None
    finding: str | None = None
    id: str | None = None

    def __post_init__(self):
        if self.id in FIXED:
            object.__setattr__(self, "finding", None)


S = Safe
SAFE = [
    # COUNT(DISTINCT col): at most max_rows values per user and group
    S("SELECT COUNT(DISTINCT age) FROM pums"),
    S("SELECT COUNT(DISTINCT income) FROM pums_dup"),
    S("SELECT COUNT(DISTINCT CASE WHEN pid = 5 THEN age END) FROM pums_dup"),
    S("SELECT sex, COUNT(DISTINCT CAST(income AS VARCHAR) || 'x') FROM pums_dup GROUP BY sex"),
    # quantiles: bounded by the catalog, answered from a noisy histogram
    S("SELECT MIN(age), MAX(income), MEDIAN(income) FROM pums"),
    S("SELECT QUANTILE_CONT(income * 2 - age, 0.1) FROM pums_dup"),
    S("SELECT MAX(CASE WHEN pid = 5 THEN income ELSE 0 END) FROM pums"),
    S("SELECT MEDIAN(income / 0) FROM pums"),
    S("SELECT SUM(x) FROM (SELECT pid, MAX(income) AS x FROM pums_dup GROUP BY pid) t"),
    # guarded error channels: answered with noise, never an error
    S("SELECT COUNT(*) FROM pums WHERE CAST('x' AS INT) = 1"),
    S("SELECT COUNT(*) FROM pums WHERE 1 / 0 = 1"),
    S("SELECT COUNT(*) FROM pums WHERE age / 0 > 1"),
    S("SELECT COUNT(*) FROM pums WHERE age % 0 = 1"),
    S("SELECT COUNT(*) FROM pums WHERE age // 0 = 1"),
    S("SELECT COUNT(*) FROM pums WHERE income / age > 3"),
    S("SELECT COUNT(*) FROM pums WHERE CAST(income AS TINYINT) > 1"),
    S("SELECT COUNT(*) FROM pums WHERE CAST(income * 1e300 * 1e300 AS BIGINT) > 1"),
    S("SELECT COUNT(*) FROM pums WHERE ln(age - 50) > 1"),
    S("SELECT COUNT(*) FROM pums WHERE sqrt(age - 50) > 1"),
    S("SELECT COUNT(*) FROM pums WHERE exp(income) > 1"),
    S("SELECT COUNT(*) FROM pums WHERE 1e400 > 1"),
    S("SELECT COUNT(*) FROM pums WHERE age = 'abc'"),
    S("SELECT COUNT(*) FROM pums WHERE age IN (1, 'x')"),
    S("SELECT COUNT(*) FROM pums WHERE age * 9223372036854775807 > 1"),
    S("SELECT COUNT(*) FROM pums WHERE CAST(age AS TINYINT) * 100 > 1"),
    S("SELECT COUNT(*) FROM pums WHERE substring('abc', 1, 9223372036854775807) = 'a'"),
    S("SELECT sex, COUNT(*) FROM pums WHERE pid + 9223372036854775807 > 0 GROUP BY sex"),
    # strings and identifiers that look like injection but are just values
    S("SELECT COUNT(*) FROM pums WHERE sex = 'x''; DROP TABLE pums; --'"),
    S("SELECT COUNT(*) FROM pums WHERE sex = '\\'"),
    S("SELECT COUNT(*) FROM pums WHERE CAST(sex AS VARCHAR) = '\u0440'"),
    S('SELECT COUNT(*) FROM "PUMS"'),
    S("SELECT COUNT(*) FROM pums AS information_schema"),
    S("SELECT COUNT(*) FROM pums AS p WHERE pums.age > 1"),
    # row-level derived tables and CTEs: the same rows, written out, bounded per user
    S("SELECT COUNT(*) FROM (SELECT pid, age FROM pums) t"),
    S("WITH t AS (SELECT * FROM pums) SELECT COUNT(*) FROM t"),
    S("WITH t AS (SELECT pid, age FROM pums WHERE pid = 7) SELECT COUNT(*) FROM t"),
    S("WITH pums AS (SELECT pid, age * 1e300 AS age FROM pums) SELECT SUM(age) FROM pums"),
    # joins on the user key, derived tables grouped by the user key: bounded per user
    S("SELECT COUNT(*) FROM pums AS a, pums AS b WHERE a.pid = b.pid"),
    S("SELECT COUNT(*) FROM pums JOIN pums_dup ON pums.pid = pums_dup.pid"),
    S("SELECT COUNT(*) FROM pums_dup a JOIN pums_dup b ON a.pid = b.pid"),
    S("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid AND a.pid = 7"),
    S("SELECT b.age, COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid GROUP BY b.age"),
    S("SELECT COUNT(*) FROM (SELECT pid, COUNT(*) AS c FROM pums_dup GROUP BY pid) t "
      "WHERE c > 2"),
    S("SELECT SUM(x) FROM (SELECT pid, SUM(age) AS x FROM pums_dup GROUP BY pid) t"),
    S("SELECT pid + 0 AS p, COUNT(*) FROM (SELECT pid, COUNT(*) AS c FROM pums GROUP BY "
      "pid) t GROUP BY p", releases_nothing=True, delta=1e-12),
    S("SELECT c, COUNT(*) FROM (SELECT pid, income AS c FROM pums GROUP BY pid, income) t "
      "GROUP BY c"),
    S("SELECT STDDEV(income) FROM pums"),
    # other engines' spellings, rewritten before the validator (dpsql/normalize.py)
    S("SELECT sex, COUNT(*) FROM pums GROUP BY ALL"),
    S("SELECT COUNT(*) FROM pums LEFT JOIN pums_dup USING (pid)"),
    S("SELECT COUNT(*) FILTER (WHERE age > 50) FROM pums"),
    S("SELECT SUM(income) FILTER (WHERE pid = 5) FROM pums_dup"),
    # the data set's name as the schema (SmartNoise's PUMS.PUMS): the catalog table, and
    # only its name reaches the backend
    S("SELECT COUNT(*) FROM pums.pums"),
    S("SELECT COUNT(*) AS age FROM pums GROUP BY sex ORDER BY age"),
    S("SELECT sex, SUM(income) AS income FROM pums GROUP BY sex HAVING income > 0"),
    S("SELECT TOP 1 sex, COUNT(*) AS n FROM PUMS.PUMS GROUP BY sex ORDER BY n DESC"),
    S("SELECT VAR(age), STD(income), POWER(AVG(income), 2) FROM pums"),
    S("SELECT COUNT(*) FROM pums -- ; DROP TABLE pums"),
    S("SELECT COUNT(*) FROM pums /* ; DROP TABLE pums */"),
    S("SELECT COUNT(*) FROM pums /* a /* nested */ ; DROP TABLE pums */"),
    S("SELECT /*+ hint */ COUNT(*) FROM pums"),
    S("SELECT COUNT(*) FROM pums;;"),
    S(";SELECT COUNT(*) FROM pums"),
    S("FROM pums SELECT COUNT(*)"),
    S("SELECT 1 FROM pums", expect_rows=1),
    S("SELECT 1 FROM pums WHERE pid = 7 AND age > 90", expect_rows=1),
    # aliases that collide with dpsql's internal names, or try to break out of quotes
    S("SELECT COUNT(*) AS __a0 FROM pums HAVING __a0 > 1"),
    S("SELECT COUNT(*) AS __rid FROM pums"),
    S("SELECT sex AS __rid, COUNT(*) FROM pums GROUP BY sex", expect_rows=2),
    S("SELECT sex AS __k0, race AS __k1, COUNT(*) FROM pums GROUP BY __k1, __k0",
      expect_rows=12),
    S("SELECT sex AS __a0, COUNT(*) AS __k0 FROM pums GROUP BY sex HAVING __k0 > -1e9 "
      "ORDER BY __a0", expect_rows=2),
    S('SELECT sex AS "__alias:age", COUNT(*) FROM pums GROUP BY sex ORDER BY "__alias:age"',
      expect_rows=2),
    S('SELECT COUNT(*) AS "a"" FROM __noisy; --" FROM pums'),
    # public-domain keys: the shape of the answer never depends on the data
    S("SELECT sex, COUNT(*) FROM pums WHERE pid = 7 GROUP BY sex", expect_rows=2),
    S("SELECT married, COUNT(*) FROM pums WHERE pid = 7 AND age > 50 GROUP BY married",
      expect_rows=2),
    S("SELECT educ, race, COUNT(*) FROM pums WHERE pid = 7 GROUP BY educ, race",
      expect_rows=96),
    S("SELECT race, SUM(income) FROM pums WHERE income > 400000 GROUP BY race", delta=0.0,
      expect_rows=6),
    # WHERE decides on the public domain alone: no key can satisfy it
    S("SELECT sex, COUNT(*) FROM pums WHERE sex > 1 GROUP BY sex", expect_rows=0),
    # group keys without a public domain: partition selection, nothing released (GROUP
    # BY the user key itself is refused for free, see RAW_ROWS)
    S("SELECT pid + 0 AS p, COUNT(*) FROM pums GROUP BY p", releases_nothing=True,
      delta=1e-12),
    S("SELECT pid + 0 AS p FROM pums GROUP BY p", releases_nothing=True, delta=1e-12),
    S("SELECT pid + 0 AS p, SUM(income) FROM pums GROUP BY p", releases_nothing=True,
      delta=1e-12),
    S("SELECT income * 1000 + age AS k, COUNT(*) FROM pums GROUP BY k", releases_nothing=True,
      delta=1e-12),
    S("SELECT CAST(income AS VARCHAR) || CAST(pid AS VARCHAR) AS k, COUNT(*) FROM pums "
      "GROUP BY k", releases_nothing=True, delta=1e-12),
    S("SELECT sex, race, educ, married, income, COUNT(*) FROM pums "
      "GROUP BY sex, race, educ, married, income", releases_nothing=True,
      delta=1e-12),  # "nothing" must not be a matter of luck: a tiny delta
    S("SELECT pid + 0 AS p, COUNT(*) FROM pums_dup GROUP BY p", releases_nothing=True,
      delta=1e-12),
    S("SELECT pid + 0 AS p, COUNT(*) FROM pums GROUP BY p", epsilon=50.0, delta=1e-3,
      releases_nothing=True),
    S("SELECT income, COUNT(*) FROM pums GROUP BY income", delta=5e-324),
    S("SELECT AVG(1e308) FROM pums"),  # a constant near the float maximum: exact, no noise
    S("SELECT COUNT(*) FROM pums WHERE age IN (" + ",".join(["1"] * 3_000) + ")"),
    S("SELECT COUNT(*) FROM pums LIMIT 9223372036854775807"),
    # post-processing of noisy values (HAVING / ORDER BY / LIMIT / outputs)
    S("SELECT COUNT(*) / 0 FROM pums"),
    S("SELECT COUNT(*) FROM pums HAVING COUNT(*) / 0 > 1"),
    S("SELECT COUNT(*) FROM pums HAVING ln(COUNT(*) - 5000) > 1"),
    S("SELECT CAST(COUNT(*) AS TINYINT) FROM pums", id="post-cast-output"),
    S("SELECT COUNT(*) * 9223372036854775807 FROM pums", id="post-overflow-output"),
    S("SELECT COUNT(*) + 'abc' FROM pums", id="post-implicit-cast"),
    S("SELECT COUNT(*) FROM pums HAVING CAST(COUNT(*) AS TINYINT) > 1", id="post-cast-having"),
    S("SELECT COUNT(*) FROM pums HAVING COUNT(*) = 'abc'", id="post-having-string"),
    S("SELECT COUNT(*) FROM pums HAVING substring('abc', 1, 9223372036854775807) = 'a'",
      id="post-having-substring"),
    S("SELECT COUNT(*) FROM pums ORDER BY CAST(COUNT(*) AS TINYINT)", id="post-order-cast"),
    S("SELECT COUNT(*) FROM pums ORDER BY 5", id="order-position-range"),
    S("SELECT COUNT(*) FROM pums ORDER BY 0", id="order-position-0"),
    S("SELECT COUNT(*) FROM pums ORDER BY 'x'", id="order-string-literal"),
    S("SELECT COUNT(*) FROM pums ORDER BY NULL", id="order-null"),
    S("SELECT COUNT(*) FROM pums LIMIT 9223372036854775808", id="limit-int64-overflow"),
    S("SELECT COUNT(*) FROM pums OFFSET 99999999999999999999999", id="offset-overflow"),
    S("SELECT ROUND(COUNT(*), 9223372036854775807) FROM pums", id="round-digits-overflow"),
    # aggregates whose derived bounds are astronomically large
    S("SELECT SUM(age * 9223372036854775807) FROM pums", id="sum-huge-bounds"),
    S("SELECT AVG(CAST(income AS HUGEINT) * 170141183460469231731687303715884105727) FROM pums",
      id="avg-hugeint-bounds"),
    # extreme but valid privacy parameters
    S(QG, epsilon=1e-300, id="eps-tiny-groups",
      finding="epsilon=1e-300 with partition selection: ZeroDivisionError"),
    S("SELECT SUM(income) FROM pums", epsilon=1e-300, delta=0.0, id="eps-tiny-sum",
      finding="epsilon=1e-300: OverflowError while building the mechanism"),
    S(Q, epsilon=1e-300, delta=0.0, id="eps-tiny-count",
      finding="epsilon=1e-300: charged, then OverflowError in the noise stage"),
    S(QG, epsilon=1500.0, delta=1e-6, id="eps-large-groups",
      finding="epsilon >= ~1490 with partition selection: q = exp(-1/scale) underflows to "
              "0 and math.log(q) raises ValueError('math domain error') in LaplaceThreshold"),
    S(QG, epsilon=1000.0, delta=1e-6, id="eps-1000-groups"),
    S(Q, epsilon=1.0, delta=None, id="delta-none"),
    S(W + "(EPSILON = +.5) COUNT(*) FROM pums", epsilon=None, id="options-plus-dot"),
    S(W + "(epsilon = \u0661) COUNT(*) FROM pums", epsilon=None, id="options-arabic-digit"),
    S("/* x */ SELECT /* y */ WITH /* z */ DIFFERENTIAL_PRIVACY -- c\n OPTIONS (epsilon = 0.5) "
      "COUNT(*) FROM pums", epsilon=None, id="options-comments"),
    S(W + "(epsilon = 0.5) COUNT(*) FROM pums WHERE 'WITH DIFFERENTIAL_PRIVACY OPTIONS "
      "(epsilon = 1)' = ''", epsilon=None, id="options-in-string"),
    S("SELECT 'x' WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1) COUNT(*) FROM pums",
      id="options-not-leading"),
    S(Q, epsilon=1e6, delta=0.0, id="eps-1e6-count"),
    S("SELECT AVG(income) FROM pums", epsilon=5e-324, delta=0.0, id="eps-denormal-avg",
      finding="epsilon=5e-324 on AVG: plain ValueError('epsilon must be positive') from "
              "the mechanism, not a PrivacyParameterError"),
]

# -- data-dependent error probes -----------------------------------------------------------
@dataclass(frozen=True)
class Channel:
    template: str
    delta: float = 1e-6
    finding: str | None = None
    id: str | None = None

    def __post_init__(self):
        if self.id in FIXED:
            object.__setattr__(self, "finding", None)


_DERIVED = ("guard_errors wraps the outer WHERE, keys and aggregate arguments in TRY() but "
            "not the WHERE inside a derived table / CTE body: an overflow there fails the "
            "query (BackendError, charged) only when a row reaches the failing branch")
_ON = ("guard_errors does not wrap JOIN ... ON conditions in TRY(): an overflow in the ON "
       "clause fails the query (BackendError, charged) only when a joined row reaches it")
HITS, MISSES = "age > 90", "age > 200"  # a handful of rows / no row (ages are 18..93)
ERROR_CHANNELS = [
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN age * 9223372036854775807 "
            "ELSE 0 END > 1"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN CAST(age AS TINYINT) * 100 "
            "ELSE 0 END > 1"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN age = 'abc' ELSE false END"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN age + 'x' = 1 ELSE false END"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN ln(age - 100) > 0 "
            "ELSE false END"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN sqrt(age - 100) > 0 "
            "ELSE false END"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN "
            "substring('abc', 1, 9223372036854775807) ELSE 'a' END = 'a'"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN CAST('x' AS INT) ELSE 0 END "
            "= 0"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN age // (age - age) ELSE 0 END "
            "= 0"),
    Channel("SELECT COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN greatest(age, 'x') = 1 "
            "ELSE false END"),
    Channel("SELECT sex, COUNT(*) FROM pums WHERE CASE WHEN {cond} THEN CAST(age AS TINYINT) * 100 "
            "ELSE 0 END > 0 GROUP BY sex"),
    Channel("SELECT SUM(CASE WHEN {cond} THEN CAST(age AS TINYINT) * 100 ELSE 0 END) FROM pums"),
    Channel("SELECT AVG(CASE WHEN {cond} THEN CAST(age AS TINYINT) * 100 ELSE 0 END) FROM pums"),
    Channel("SELECT COUNT(CASE WHEN {cond} THEN age * 9223372036854775807 ELSE 0 END) FROM pums"),
    Channel("SELECT SUM(CASE WHEN {cond} THEN age * 9223372036854775807 ELSE 0 END) FROM pums",
            id="sum-overflow"),
    Channel("SELECT CASE WHEN {cond} THEN age * 9223372036854775807 ELSE 0 END AS k, COUNT(*) "
            "FROM pums GROUP BY k", id="key-overflow"),
    Channel("SELECT CASE WHEN {cond} THEN CAST(age AS TINYINT) * 100 ELSE 0 END AS k, COUNT(*) "
            "FROM pums GROUP BY k", id="key-tinyint"),
    Channel("SELECT CASE WHEN {cond} THEN age = 'abc' ELSE false END AS k, COUNT(*) "
            "FROM pums GROUP BY k", id="key-cast"),
    Channel("SELECT COUNT(*) FROM pums_dup WHERE CASE WHEN {cond} THEN age * 9223372036854775807 "
            "ELSE 0 END > 1"),
    # derived tables: inner WHERE, inner aggregate, inner key, outer WHERE
    Channel("SELECT SUM(c) FROM (SELECT pid, COUNT(*) AS c FROM pums WHERE CASE WHEN {cond} THEN "
            "CAST(age AS TINYINT) * 100 ELSE 0 END > 0 GROUP BY pid) t", id="derived-where",
            finding=_DERIVED),
    Channel("SELECT SUM(x) FROM (SELECT pid, SUM(CASE WHEN {cond} THEN age * 9223372036854775807 "
            "ELSE 0 END) AS x FROM pums GROUP BY pid) t", id="derived-sum-arg"),
    Channel("SELECT COUNT(*) FROM (SELECT pid, COUNT(CASE WHEN {cond} THEN age = 'abc' END) AS c "
            "FROM pums GROUP BY pid) t", id="derived-count-arg"),
    Channel("SELECT k, COUNT(*) FROM (SELECT pid, CASE WHEN {cond} THEN CAST(age AS TINYINT) * 100 "
            "ELSE 0 END AS k FROM pums GROUP BY pid, k) t GROUP BY k", id="derived-key"),
    Channel("SELECT COUNT(*) FROM (SELECT pid, age, COUNT(*) AS c FROM pums GROUP BY pid, age) t "
            "WHERE CASE WHEN {cond} THEN CAST(age AS TINYINT) * 100 ELSE 0 END > 0",
            id="derived-outer-where"),
    Channel("WITH t AS (SELECT pid, age, COUNT(*) AS c FROM pums GROUP BY pid, age) SELECT SUM(c) "
            "FROM t WHERE CASE WHEN {cond} THEN age * 9223372036854775807 ELSE 0 END > 1",
            id="cte-where"),
    # joins: ON condition, WHERE, group key, aggregate argument
    Channel("SELECT COUNT(*) FROM pums a JOIN pums b ON a.pid = b.pid AND CASE WHEN a.{cond} "
            "THEN CAST(b.age AS TINYINT) * 100 ELSE 0 END > 0", id="join-on", finding=_ON),
    Channel("SELECT COUNT(*) FROM pums a LEFT JOIN pums_dup b ON a.pid = b.pid AND CASE WHEN "
            "a.{cond} THEN b.age * 9223372036854775807 ELSE 0 END > 1", id="left-join-on",
            finding=_ON),
    Channel("SELECT COUNT(*) FROM pums a JOIN pums_dup b ON a.pid = b.pid WHERE CASE WHEN a.{cond} "
            "THEN b.age * 9223372036854775807 ELSE 0 END > 1", id="join-where"),
    Channel("SELECT CASE WHEN a.{cond} THEN b.age * 9223372036854775807 ELSE 0 END AS k, COUNT(*) "
            "FROM pums a JOIN pums b ON a.pid = b.pid GROUP BY k", id="join-key"),
    Channel("SELECT SUM(CASE WHEN a.{cond} THEN CAST(b.age AS TINYINT) * 100 ELSE 0 END) "
            "FROM pums a JOIN pums_dup b ON a.pid = b.pid", id="join-sum-arg"),
]
