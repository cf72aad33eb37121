"""Spark SQL over a ``SparkSession`` (classic or Spark Connect): ``dpsql.connect(spark, ...)``.

The catalog's tables are whatever the session resolves by name: tables of its catalog
or (temporary) views registered in it. dpsql runs one ``spark.sql(...)`` per query and
collects only the aggregated rows (one per group) to the driver.

Error freedom: Spark with ANSI mode on (the default since Spark 4) raises on overflow,
division by zero and bad casts, so dpsql sets ``spark.sql.ansi.enabled = false`` for the
duration of each of its queries and restores the previous value afterwards. Even so
some operations raise (a far DATE converted to a TIMESTAMP, interval arithmetic, the
negation of a large DECIMAL, a LIKE pattern read from a row): every operation is checked
against :data:`TOTAL`, the operations Spark cannot fail on, on the types Spark itself
binds (:meth:`SparkBackend.bind_types`); the rest is guarded in a Spark form
(``try_*`` functions, ``TRY_CAST``, a CASE on a range test) or refused before the charge.
Give dpsql a session (or a Spark Connect session) of its own: another thread running
queries on the same session at the same moment would see ANSI mode off.

Spark enforces no PRIMARY KEY/UNIQUE constraints, so :meth:`SparkBackend.unique_columns`
is always empty and dpsql refuses joins that follow a foreign key to the user (a
duplicated key would attach a row to two users); joins on the user key itself and to
public tables work. Least privilege is the cluster's: run dpsql as a principal that may
only SELECT the catalog's tables (e.g. Unity Catalog or Hive grants, a Spark Connect
server with such a user); dpsql issues nothing but SELECT statements.

The SQL text dpsql checked is the text Spark runs: :data:`SAFE_CONF` switches off every
session feature that rewrites or reinterprets SQL text after dpsql — ``${...}``
variable substitution (which would put environment variables, Java properties and
Spark settings into string literals), SQL scripting (``BEGIN ... END`` blocks of
several statements), pipe syntax, regex column names, legacy parsing rules. Each
``spark.sql`` call gets exactly one statement: on a classic session it is first parsed
as a query by the session's own parser (``parseQuery``: one query, no command, no
second statement); Spark Connect sessions parse on the server, which takes one
statement. The pre-charge check only analyses the query (names and types) — it does not
optimise it, because Spark's optimiser evaluates expressions over local relations
(``ConvertToLocalRelation``), so a planning error could depend on the data. Spark has
no statement timeout. Engine error texts go to the owner's log only
(:mod:`dpsql.backends._boundary`).

Values: dpsql's queries run in the UTC session time zone (timestamp parts, truncation
and keys are UTC); every table is read with dates and timestamps outside years 1..9999
as NULL, and casts to dates give NULL outside them (:func:`~dpsql.backends.spark_dialect.
spark_typed_tables` says why); a difference of dates is a number of days, as in DuckDB;
a text key that is not valid UTF-8 is NULL (:func:`~dpsql.backends.spark_dialect.
spark_text_keys`). A view keeps the settings it
was created with (ANSI mode on by default in Spark 4): a view whose own expressions can
fail on some rows (a cast of text) fails dpsql's queries after the charge, so the owner
defines views with ``try_cast`` (SECURITY.md, Deploying).
"""

from __future__ import annotations

import contextlib
import re
import threading

from sqlglot import exp

from dpsql.backends import _boundary, spark_dialect, total
from dpsql.backends.base import Backend
from dpsql.errors import BackendError
from dpsql.limits import Limits

#: Session settings for dpsql's queries, restored afterwards. ANSI mode off (errors
#: become NULLs, see the module docstring); and nothing may rewrite or reinterpret the
#: SQL text dpsql checked.
SAFE_CONF = {
    "spark.sql.ansi.enabled": "false",
    # a guard covers only the node it wraps: Spark's common-subexpression elimination
    # would compute a part shared by two guarded nodes (the implicit CAST of a DATE in
    # TRY_ADD(d, INTERVAL ...)) once, outside both guards, where it fails after the charge
    "spark.sql.subexpressionElimination.enabled": "false",
    # ${env:X}, ${system:X}, ${spark.X} would be replaced everywhere, literals included
    "spark.sql.variable.substitute": "false",
    # BEGIN ... END would run several statements in one spark.sql call
    "spark.sql.scripting.enabled": "false",
    # |> (and a lone |) as pipe operators: a second grammar dpsql never writes
    "spark.sql.operatorPipeSyntaxEnabled": "false",
    "spark.sql.parser.singleCharacterPipeOperator.enabled": "false",
    # string literals and identifiers read as sqlglot writes them
    "spark.sql.parser.escapedStringLiterals": "false",
    "spark.sql.parser.quotedRegexColumnNames": "false",
    "spark.sql.ansi.doubleQuotedIdentifiers": "false",
    "spark.sql.legacy.exponentLiteralAsDecimal.enabled": "false",
    "spark.sql.legacy.bangEqualsNot": "false",
    "spark.sql.legacy.allowParameterlessCount": "false",
    # names and clauses resolve as written: inner CTEs shadow outer ones, HAVING stays
    # HAVING, set operations keep their standard precedence
    "spark.sql.legacy.ctePrecedencePolicy": "CORRECTED",
    "spark.sql.legacy.parser.havingWithoutGroupByAsWhere": "false",
    "spark.sql.legacy.setopsPrecedence.enabled": "false",
    # timestamps (Spark's TIMESTAMP is time-zone aware) read, written and cut into
    # parts in UTC: in a zone with daylight saving the repeated autumn hour is one local
    # text for two instants, so two groups would come back as one key
    "spark.sql.session.timeZone": "UTC",
}

_SCALARS = {"bigint": "BIGINT", "int": "INTEGER", "integer": "INTEGER", "smallint": "SMALLINT",
            "tinyint": "TINYINT", "double": "DOUBLE", "float": "FLOAT", "boolean": "BOOLEAN",
            "date": "DATE", "timestamp": "TIMESTAMP", "timestamp_ntz": "TIMESTAMP",
            "timestamp_ltz": "TIMESTAMP", "string": "VARCHAR", "binary": "BLOB"}
_STRING = re.compile(r"(string|varchar\(\d+\)|char\(\d+\))(?: collate (\w+))?")
_DECIMAL = re.compile(r"decimal\(\d+,\d+\)")
_COLLATE = re.compile(r"\bcollate (\w+)", re.IGNORECASE)


def duckdb_type(spark_type: str) -> str:
    """A Spark type's ``simpleString`` → the DuckDB type name.

    Only scalar types get scalar names. A string under a collation other than
    ``UTF8_BINARY`` keeps it (``VARCHAR COLLATE UTF8_LCASE``: its equality is not
    byte-wise), and arrays, maps, structs, variants, intervals keep Spark's own name,
    so neither passes for a plain column type.

    >>> duckdb_type("string"), duckdb_type("decimal(10,2)"), duckdb_type("timestamp_ntz")
    ('VARCHAR', 'DECIMAL(10,2)', 'TIMESTAMP')
    >>> duckdb_type("string collate UTF8_LCASE"), duckdb_type("array<string>")
    ('VARCHAR COLLATE UTF8_LCASE', 'ARRAY<STRING>')
    """
    t = spark_type.lower().strip()
    if _DECIMAL.fullmatch(t):
        return t.upper()
    string = _STRING.fullmatch(t)
    if string:
        collation = string.group(2)
        if collation is None or collation == "utf8_binary":
            return "VARCHAR"
        return "VARCHAR COLLATE " + collation.upper()
    return _SCALARS.get(t, t.upper())


def nonbinary_collations(spark_type: str) -> bool:
    """Whether a Spark type string holds a string under a collation whose equality is
    not byte-wise (anything but ``UTF8_BINARY``), at any depth."""
    return any(c.upper() != "UTF8_BINARY" for c in _COLLATE.findall(spark_type))


def is_spark_session(obj) -> bool:
    """True for a pyspark SparkSession (classic or Connect), without importing pyspark."""
    cls = type(obj)
    return cls.__name__ == "SparkSession" and cls.__module__.startswith("pyspark.")


class SparkBackend(Backend):
    dialect = "spark"
    supports_hash = True                 # xxhash64(..., seed)
    supports_no_external_access = False  # the cluster's grants decide
    supports_greatest_least = True
    supports_try = False                 # ANSI off plus try_* arithmetic instead
    supports_exact_integer_sums = False  # try_sum: NULL (read as 0) beyond 2^63
    supports_unique_constraints = False
    supports_materialized_ctes = False   # CTEs are inlined: one window, not three scans
    # BIGINT grid units are summed as DECIMAL(38, 0) (spark_dialect.spark_sums): exact
    # for fewer than 2^48 rows of at most 2^62 units (dpsql.grid_units)
    supports_grid_sums = True
    # its transforms wrap the GROUP BY key in a UTF-8 guard: HAVING b.race resolves to
    # no grouped expression (AnalysisException, refused before the charge)
    supports_key_filter_after_grouping = False
    transforms = spark_dialect.SPARK
    functions = spark_dialect.FUNCTIONS
    pre_transforms = spark_dialect.SPARK_PRE
    allow = None  # set below, after the allow-list is defined

    def __init__(self, session, limits: Limits | None = None):
        if not is_spark_session(session):
            raise BackendError(f"not a SparkSession: {type(session).__name__}")
        self._spark = session
        #: Kept for the owner's settings; Spark has no statement timeout to give them to.
        self.limits = limits or Limits()
        self._lock = threading.RLock()
        self._types: dict[str, dict[str, str] | None] = {}
        self._safe_depth = 0
        self.name = "spark session"

    @contextlib.contextmanager
    def _safe_session(self, stage: str):
        """Applies :data:`SAFE_CONF` for one query (``stage``: check or execute) and
        restores the session's own values afterwards; a session that refuses a setting
        runs nothing."""
        conf = self._spark.conf
        with self._lock:
            if self._safe_depth:  # already applied by an enclosing call (same thread)
                self._safe_depth += 1
                try:
                    yield
                finally:
                    self._safe_depth -= 1
                return
            old = {key: conf.get(key, None) for key in SAFE_CONF}
            failure = None
            try:
                try:
                    for key, value in SAFE_CONF.items():
                        conf.set(key, value)
                except Exception as exc:  # noqa: BLE001 - py4j or Connect errors
                    failure = exc
                if failure is not None:
                    detail = f"cannot apply the safe settings: {type(failure).__name__}: {failure}"
                    raise (_boundary.plan_failed if stage == "check" else
                           _boundary.run_failed)(self.name, detail, None)
                self._safe_depth = 1
                try:
                    yield
                finally:
                    self._safe_depth = 0
            finally:
                for key, value in old.items():
                    if value is None:
                        conf.unset(key)
                    else:
                        conf.set(key, value)

    def _spark_types(self, table: str) -> dict[str, str] | None:
        """Column name (lower-case) → Spark type string of ``table``, or None if absent."""
        key = table.lower()
        if key not in self._types:
            failure = None
            with self._lock:
                try:
                    if not self._spark.catalog.tableExists(key):
                        return None
                    fields = self._spark.table(key).schema.fields
                except Exception as exc:  # noqa: BLE001 - pyspark raises many kinds
                    failure = exc
            if failure is not None:
                raise _boundary.schema_failed(self.name, table, failure)
            self._types[key] = {f.name.lower(): f.dataType.simpleString() for f in fields}
        return self._types[key]

    def columns(self, table: str) -> dict[str, str] | None:
        types = self._spark_types(table)
        return None if types is None else {n: duckdb_type(t) for n, t in types.items()}

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        return set()  # Spark enforces no uniqueness: never trust a declared key

    def nonbinary_collation_columns(self, table: str) -> set[str]:
        """Columns whose type holds a string collated other than ``UTF8_BINARY``
        (``UTF8_LCASE``, ``UNICODE_CI``, ``..._RTRIM``...): equality is not byte-wise."""
        types = self._spark_types(table) or {}
        return {name for name, t in types.items() if nonbinary_collations(t)}

    def _one_query(self, sql: str, stage: str) -> None:
        """Refuses ``sql`` unless the session's own parser reads it as one query.

        Classic sessions only (Spark Connect parses on the server, where one
        ``spark.sql`` call takes one statement). Runs inside :meth:`_safe_session`, so
        the parser sees the text exactly as ``spark.sql`` will.
        """
        session = getattr(self._spark, "_jsparkSession", None)
        if session is None:
            return
        failure = None
        try:
            session.sessionState().sqlParser().parseQuery(sql)
        except Exception as exc:  # noqa: BLE001 - py4j and Spark parse errors
            failure = exc
        if failure is not None:
            raise _boundary.not_one_select(
                self.name, stage, f"{type(failure).__name__}: {failure}", sql)

    def bind_types(self, sql: str) -> list[str]:
        """The output types of one SELECT over no data (the totality check's probes,
        :func:`dpsql.backends.probe_types.expression_types`), as :func:`total_type` names.

        Analysis only (``spark.sql(q).schema``: names and types, no job, no optimiser),
        under :data:`SAFE_CONF` (ANSI mode off types some operations differently), and
        only of text the session's own parser reads as one query."""
        with self._safe_session("check"):
            self._one_query(sql, "check")
            fields = self._spark.sql(sql).schema.fields
        return [total_type(f.dataType.simpleString()) for f in fields]

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        with self._safe_session("check"):
            sql = self.to_sql(expression)  # its probes bind under the same settings
        failure = None
        with self._safe_session("check"):
            self._one_query(sql, "check")
            try:  # analysis only: resolves names and types, reads and optimises nothing
                fields = self._spark.sql(sql).schema.fields
            except Exception as exc:  # noqa: BLE001
                failure = exc
        if failure is not None:
            raise _boundary.plan_failed(self.name, failure, sql)
        return [(f.name, duckdb_type(f.dataType.simpleString())) for f in fields]

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        with self._safe_session("check"):
            sql = self.to_sql(expression)  # refused here before anything runs
        failure = None
        with self._safe_session("execute"):
            self._one_query(sql, "execute")
            try:
                frame = self._spark.sql(sql)
                columns = list(frame.columns)
                rows = [tuple(r) for r in frame.collect()]  # one row per group
            except Exception as exc:  # noqa: BLE001
                failure = exc
        if failure is not None:
            raise _boundary.run_failed(self.name, failure, sql)
        return columns, rows

    def close(self) -> None:
        """The session belongs to the caller: dpsql leaves it running."""


# -- totality: Spark's allow-list ----------------------------------------------------------------


def total_type(spark_type: str) -> str:
    """A Spark type's ``simpleString`` → the name the allow-list speaks: the scalar names
    of :func:`duckdb_type` (INTEGER, BIGINT, DOUBLE, DECIMAL(p,s), VARCHAR, DATE,
    TIMESTAMP, ...) and the NULL type (Spark's ``void``) as :data:`total.NULL`.

    >>> total_type("void"), total_type("int"), total_type("decimal(38,0)")
    ('"NULL"', 'INTEGER', 'DECIMAL(38,0)')
    """
    if spark_type.strip().lower() == "void":
        return total.NULL
    return duckdb_type(spark_type)


#: Spark's integer types, narrowest first (duckdb_type's names).
_INTS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT")
_FLOATS = ("FLOAT", "DOUBLE")
#: Scalar types whose meeting Spark decides with conversions that give NULL, never an
#: error, with ANSI mode off (dates are the exception: see :func:`_meet`).
_SCALARS_OK = (*_INTS, *_FLOATS, "VARCHAR", "BOOLEAN", "DATE", "TIMESTAMP", total.NULL)


def _scalar(t: str | None) -> bool:
    return t in _SCALARS_OK or total.decimal_digits(t) is not None or (
        t is not None and t.startswith("INTERVAL"))


def _meet(node: exp.Expression, types: total.Types) -> bool:
    """Operands (and result) of scalar types, not a DATE meeting a TIMESTAMP.

    With ANSI mode off Spark's implicit conversions between numbers, text and booleans
    give NULL where they cannot convert, and decimals that do not fit give NULL; but a
    DATE converted to a TIMESTAMP multiplies days by microseconds exactly and raises
    "long overflow" for a far date (``make_date(5000000, 1, 1)``), so that meeting is
    guarded (the DATE operand as ``TRY_CAST(d AS TIMESTAMP)``)."""
    values = [total.NULL if isinstance(o, exp.Null) else types(o)
              for o in total.operands(node)]
    if not isinstance(node, total.COMPARISONS):
        values.append(types(node))
    if not all(_scalar(t) for t in values):
        return False
    return not {"DATE", "TIMESTAMP"} <= set(values)


def _all_of(*allowed: str, decimals: bool = False, intervals: bool = False):
    def test(node: exp.Expression, types: total.Types) -> bool:
        for o in total.operands(node):
            t = types(o)
            if t in (*allowed, total.NULL) or (decimals and total.decimal_digits(t)) or (
                    intervals and t is not None and t.startswith("INTERVAL")):
                continue
            return False
        return True
    return test


def _try_arith(node: exp.Expression, types: total.Types) -> bool:
    """``TRY_ADD``/``TRY_SUBTRACT``/``TRY_MULTIPLY``/``TRY_DIVIDE`` of numbers, dates,
    timestamps or intervals."""
    if str(node.this).upper() not in ("TRY_ADD", "TRY_SUBTRACT", "TRY_MULTIPLY",
                                      "TRY_DIVIDE") or len(node.expressions) != 2:
        return False
    return all(types(o) in (*_INTS, *_FLOATS, "DATE", "TIMESTAMP", total.NULL)
               or total.decimal_digits(types(o)) is not None
               or (types(o) or "").startswith("INTERVAL") for o in node.expressions)


def _in_years_guard(node: exp.Expression, types: total.Types) -> bool:
    """A date truncation under ``CASE WHEN x BETWEEN <date> AND <date> THEN trunc(x) END``
    with literal dates of years 1..9999: Spark's truncation of such a value stays in
    range (it raises "long overflow" only near year -290308)."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if not isinstance(parent, exp.If) or parent.args.get("true") is not node:
        return False
    cond = parent.this
    if not (isinstance(cond, exp.Between) and cond.this == node.this):
        return False
    for bound in (cond.args.get("low"), cond.args.get("high")):
        if not (isinstance(bound, exp.Cast) and isinstance(bound.this, exp.Literal)
                and bound.this.is_string
                and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9:.]*)?", bound.this.this)
                and bound.this.this[:4] != "0000"):
            return False
    return True


def _sum_argument(node: exp.Expression, types: total.Types) -> bool:
    """SUM/AVG of floats (IEEE: inf, never an error), AVG of integers (Spark averages
    them as DOUBLE), and either of ``CAST(x AS DECIMAL(38, s))`` where ``x`` is an
    integer or a DECIMAL of at most 23 - s integer digits (``TRY_CAST`` too, which gives
    NULL for no such value): fewer than 2**48 rows
    (:data:`total.MAX_ROWS`) of such values stay below 10**(38 - s), so the DECIMAL(38, s)
    total neither overflows nor becomes NULL."""
    arg = node.this
    if isinstance(arg, exp.Distinct):
        return False
    t = types(arg)
    if t in (*_FLOATS, total.NULL) or (isinstance(node, exp.Avg) and t in _INTS):
        return True
    inner = arg
    while isinstance(inner, exp.Paren):
        inner = inner.this
    target = total.decimal_digits(t)
    if not isinstance(inner, exp.Cast) or target is None or target[0] != 38:
        return False
    source = types(inner.this)
    if source in _INTS:
        return True  # < 2**63 each, < 2**111 < 10**33 in total
    digits = total.decimal_digits(source)
    return digits is not None and digits[1] <= target[1] and \
        (digits[0] - digits[1]) + target[1] <= 23


def _like(node: exp.Expression, types: total.Types) -> bool:
    """A constant pattern without a backslash over text: Spark compiles a pattern per
    row when it is not constant, and a pattern ending in an escape raises."""
    pattern = node.expression
    return types(node.this) in ("VARCHAR", total.NULL) and isinstance(pattern, exp.Literal) \
        and pattern.is_string and "\\" not in pattern.this and not node.args.get("escape")


def _text_and_ints(node: exp.Expression, types: total.Types) -> bool:
    """LEFT/RIGHT/SUBSTRING of text by integers: Spark clamps any position and length."""
    return types(node.this) in ("VARCHAR", total.NULL) and all(
        types(o) in (*_INTS, total.NULL) for o in total.operands(node)[1:])


_E = total.Entry
#: Spark's operations that cannot fail, whatever the rows hold, as dpsql runs Spark
#: (``spark.sql.ansi.enabled = false``, :data:`SAFE_CONF`; pyspark 4). Each is exercised
#: by the extreme-value fuzzer (``tests/privacy/totality.py``). Spark has no generic TRY:
#: a guard placed by :func:`total.place_guards` becomes a Spark form on this list
#: (:func:`dpsql.backends.spark_dialect.spark_try`) or the query is refused before the charge.
TOTAL = total.AllowList("Spark SQL", (
    _E(total.COMPARISONS, _meet,
       "ANSI off: conversions between scalars give NULL, not errors; no DATE meets a "
       "TIMESTAMP"),
    _E((exp.Is,), total.is_test, total.is_test.__doc__.split(";")[0]),
    _E((exp.And, exp.Or, exp.Not), total.all_operands("BOOLEAN"), "boolean logic"),
    _E((exp.Case, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif),
       lambda n, t: total.searched_case(n, t) and _meet(n, t),
       "chooses one operand; conversions as for comparisons"),
    _E((exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Abs), total.floating,
       "IEEE arithmetic over operands widened to FLOAT/DOUBLE: inf or NaN, never an error"),
    _E((exp.Anonymous,), _try_arith,
       "TRY evaluation: overflow and a zero divisor give NULL; TryEval on dates and "
       "intervals turns any error into NULL"),
    _E((exp.Neg,), total.negated_literal, "the negation of a positive literal fits its type"),
    _E((exp.Abs,), _all_of(*_INTS, *_FLOATS),
       "ANSI off: ABS of an integer's minimum wraps to itself, never an error"),
    _E((exp.Mod,), lambda n, t: _all_of(*_INTS)(n, t) or (
        t(n) in _FLOATS and _all_of(*_INTS, *_FLOATS, decimals=True)(n, t)),
       "ANSI off: a zero divisor gives NULL; integers, or a floating-point remainder"),
    _E((exp.Sign,), _all_of(*_INTS, *_FLOATS, decimals=True),
       "the sign of a number as a DOUBLE (NaN stays NaN), never an error"),
    _E((exp.Floor, exp.Ceil), _all_of(*_INTS, *_FLOATS, decimals=True),
       "a float as BIGINT saturates (NaN gives 0); a DECIMAL gains one integer digit"),
    _E((exp.IntDiv,), _all_of(*_INTS),
       "ANSI off: DIV of integers by 0 gives NULL; the minimum DIV -1 wraps"),
    _E((exp.Sqrt, exp.Ln, exp.Exp), _all_of(*_INTS, *_FLOATS, decimals=True),
       "on DOUBLE: NaN, NULL or inf outside the domain, never an error"),
    _E((exp.Interval,), total.constant_interval, "a constant interval, parsed while planning"),
    _E((exp.TryCast,), lambda n, t: bool(n.args.get("safe")) and _scalar(t(n.this))
       and _scalar(t(n)),
       "TRY_CAST between scalar types (written as TRY_CAST: sqlglot writes an unmarked "
       "one as CAST): NULL where it cannot convert, overflow included"),
    _E((exp.Lower, exp.Upper, exp.Length, exp.Concat, exp.DPipe, exp.Trim, exp.Replace),
       _all_of("VARCHAR"), "text functions over text (REPLACE never lengthens: see validate)"),
    _E((exp.Left, exp.Right, exp.Substring), _text_and_ints,
       _text_and_ints.__doc__.split(": ")[1]),
    _E((exp.Like, exp.ILike), _like, _like.__doc__.split(":")[0]),
    _E((exp.Year, exp.Month, exp.Day, exp.Quarter, exp.DayOfWeek, exp.DayOfYear,
        exp.DayOfMonth, exp.WeekOfYear, exp.Extract), _all_of("DATE", "TIMESTAMP"),
       "parts of any date or timestamp Spark holds: integer field arithmetic"),
    _E((exp.TimestampTrunc, exp.DateTrunc), _in_years_guard,
       "truncation of a value kept to years 1..9999 by its CASE"),
    _E((exp.Anonymous,), lambda n, t: str(n.this).upper() == "DATEDIFF" and all(
        t(o) in ("DATE", total.NULL) for o in n.expressions),
       "a difference of day numbers (32-bit, wraps), never an error"),
    _E((exp.Anonymous,), lambda n, t: str(n.this).upper() == "BROUND" and all(
        t(o) in (*_FLOATS, total.NULL) for o in n.expressions),
       "rounds a DOUBLE to a DOUBLE (NaN and inf stay)"),
    _E((exp.Round,), lambda n, t: n.args.get("decimals") is None and (
        total.decimal_digits(t(n.this)) is not None or t(n.this) in _FLOATS),
       "rounds to a whole number with one more integer digit than its DECIMAL"),
    _E((exp.Count,), total.always, "counts rows"),
    _E((exp.Min, exp.Max), total.always, "picks one of the values"),
    _E((exp.Sum, exp.Avg), _sum_argument,
       "floats (inf, never an error), AVG of integers (as DOUBLE), or a DECIMAL(38, s) of "
       "integers or small DECIMALs that 2**48 rows cannot overflow"),
    _E((exp.RowNumber,), total.always, "numbers rows"),
    _E((exp.Anonymous,), total.anonymous("XXHASH64", "IS_VALID_UTF8"),
       "a hash of any values; a test of a text's bytes"),
), guards=(), refuse_unwrappable=False)


SparkBackend.allow = TOTAL


# -- how ``dpsql.connect`` reaches this engine (the registry: :mod:`dpsql.backends`) --------


def from_object(database, limits: Limits | None = None) -> SparkBackend | None:
    """A ``pyspark.sql.SparkSession`` (classic or Spark Connect); None for anything else."""
    if is_spark_session(database):
        return SparkBackend(database, limits)
    return None
