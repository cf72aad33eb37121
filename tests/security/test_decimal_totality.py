"""DuckDB's DECIMAL arithmetic entries (issue 23) against the engine, at every extreme.

The entries in :data:`dpsql.backends.duckdb_total.TOTAL` for ``+``, ``-``, ``*``, unary ``-``,
``ABS`` and DECIMAL-to-float arithmetic are proved from DuckDB's binding rules (the
comment above ``_decimal_bound``). This test does not trust the proof: for every pair of
operand types below (DECIMALs of several widths and scales, the integer types, a DOUBLE,
whole-number and decimal literals) and every operator, it asks the allow-list whether the
operation is total (typed by the engine, as the real path does) and runs every operation
it accepts on every pair of extreme values (each type's largest and smallest values, the
smallest step, 0, NULL) on DuckDB: none may raise. It also checks that the known partial
shapes (DECIMAL(15,2) × DECIMAL(15,2), which DuckDB cuts to DECIMAL(18,4); DECIMAL(38,s) +
DECIMAL(38,s); INTEGER × DECIMAL(15,2)) raise on DuckDB and are not accepted, and that
the entries accept what issue 23 needs (TPC-H q1's ``1 - l_discount``).

Widen an entry on purpose (e.g. take ``p1 + p2 <= 38`` as the product's rule) and
``test_every_accepted_operation_runs_on_every_extreme`` fails on DECIMAL(15,2) squared.
"""

from __future__ import annotations

import itertools

import duckdb
import pytest
from sqlglot import exp, parse_one

from dpsql.backends import duckdb_total as duck
from dpsql.backends import open_backend

#: column → (type, extreme values as SQL text). Every column has 6 rows (cycled).
COLUMNS = {
    "d4_4": ("DECIMAL(4,4)", ("0.9999", "-0.9999", "0.0001", "0")),
    "d9_2": ("DECIMAL(9,2)", ("9999999.99", "-9999999.99", "0.01", "0")),
    "d15_2": ("DECIMAL(15,2)", ("9999999999999.99", "-9999999999999.99", "0.01", "0")),
    "d16_2": ("DECIMAL(16,2)", ("99999999999999.99", "-99999999999999.99", "0.01", "0")),
    "d18_2": ("DECIMAL(18,2)", ("9999999999999999.99", "-9999999999999999.99", "0.01", "0")),
    "d18_0": ("DECIMAL(18,0)", ("999999999999999999", "-999999999999999999", "1", "0")),
    "d19_4": ("DECIMAL(19,4)", ("999999999999999.9999", "-999999999999999.9999", "0.0001",
                                "0")),
    "d20_10": ("DECIMAL(20,10)", ("9999999999.9999999999", "-9999999999.9999999999",
                                  "0.0000000001", "0")),
    "d23_11": ("DECIMAL(23,11)", ("9" * 12 + "." + "9" * 11, "-" + "9" * 12 + "." + "9" * 11,
                                  "0.00000000001", "0")),
    "d24_2": ("DECIMAL(24,2)", ("9" * 22 + ".99", "-" + "9" * 22 + ".99", "0.01", "0")),
    "d37_2": ("DECIMAL(37,2)", ("9" * 35 + ".99", "-" + "9" * 35 + ".99", "0.01", "0")),
    "d38_10": ("DECIMAL(38,10)", ("9" * 28 + "." + "9" * 10, "-" + "9" * 28 + "." + "9" * 10,
                                  "0.0000000001", "0")),
    "i8": ("TINYINT", ("127", "-128", "1", "0")),
    "u8": ("UTINYINT", ("255", "0", "1", "0")),
    "i16": ("SMALLINT", ("32767", "-32768", "1", "0")),
    "i32": ("INTEGER", ("2147483647", "-2147483648", "1", "0")),
    "i64": ("BIGINT", ("9223372036854775807", "-9223372036854775808", "1", "0")),
    "h": ("HUGEINT", ("170141183460469231731687303715884105727",
                      "-170141183460469231731687303715884105728", "1", "0")),
    "f": ("DOUBLE", ("'inf'", "'-inf'", "'nan'", "0")),
}
#: Literal operands, as an analyst (or a rewrite) writes them.
LITERALS = ("1", "2", "99", "12345678901234567890", "99999999999999999999999999999999999999",
            "1.5", "0.05", "113400.00000000001")
BINARY = ("+", "-", "*", "/")


def _rows() -> list[str]:
    out = []
    for k in range(6):
        out.append("(" + ", ".join(
            "NULL" if k == 4 else f"CAST({values[k % 4]} AS {t})"
            for t, values in COLUMNS.values()) + ")")
    return out


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    path = tmp_path_factory.mktemp("dec") / "ext.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE ext (" + ", ".join(f"{c} {t}" for c, (t, _) in COLUMNS.items())
                + ")")
    con.execute("INSERT INTO ext VALUES " + ", ".join(_rows()))
    con.close()
    b = open_backend(str(path))
    yield b, path
    b.close()


def _operands() -> list[str]:
    return [f"a.{c}" for c in COLUMNS] + list(LITERALS)


def _expressions() -> list[str]:
    out = []
    for left, right in itertools.product(_operands(), repeat=2):
        if left in LITERALS and right in LITERALS:
            continue
        right_side = right if not right.startswith("a.") else "b." + right[2:]
        out.extend(f"({left} {op} {right_side})" for op in BINARY)
    out += [f"(-a.{c})" for c in COLUMNS] + [f"ABS(a.{c})" for c in COLUMNS]
    return out


def _accepted(backend, expressions: list[str]) -> dict[str, bool]:
    """Whether DuckDB's allow-list takes each expression's top operation as total, with
    the engine's own types (one probe per batch, as the real path types a query)."""
    out = {}
    for start in range(0, len(expressions), 200):
        batch = expressions[start:start + 200]
        sql = "SELECT " + ", ".join(f"{e} AS c{i}" for i, e in enumerate(batch)) + \
            " FROM ext AS a CROSS JOIN ext AS b"
        tree = parse_one(sql, read="duckdb")
        types = backend.engine_types(tree)
        for e, item in zip(batch, tree.expressions, strict=True):
            node = item.this
            while isinstance(node, exp.Paren):
                node = node.this
            out[e] = backend.allow.entry(node, types) is not None
    return out


def _failures(path, expressions: list[str]) -> list[tuple[str, str]]:
    """Expressions that raise on some pair of extreme rows (batched, bisected on error)."""
    con = duckdb.connect(str(path), read_only=True)
    found: list[tuple[str, str]] = []

    def run(batch: list[str]) -> None:
        if not batch:
            return
        sql = "SELECT " + ", ".join(f"COUNT({e})" for e in batch) + \
            " FROM ext AS a CROSS JOIN ext AS b"
        try:
            con.execute(sql).fetchall()
        except duckdb.Error as exc:
            if len(batch) == 1:
                found.append((batch[0], str(exc).splitlines()[0][:160]))
                return
            run(batch[:len(batch) // 2])
            run(batch[len(batch) // 2:])

    for start in range(0, len(expressions), 100):
        run(expressions[start:start + 100])
    con.close()
    return found


def test_every_accepted_operation_runs_on_every_extreme(backend):
    b, path = backend
    expressions = _expressions()
    accepted = _accepted(b, expressions)
    taken = [e for e in expressions if accepted[e]]
    # the entries must reach DECIMAL arithmetic at all, or this proves nothing
    decimal = [e for e in taken if "a.d" in e and any(f" {op} " in e for op in "+-*")]
    assert len(decimal) > 100, len(decimal)
    failures = _failures(path, taken)
    assert not failures, "\n".join(f"{e}: {err}" for e, err in failures)


@pytest.mark.parametrize("expression", [
    "(a.d15_2 * b.d15_2)",      # DECIMAL(18,4) after DuckDB cuts the width: overflows
    "(a.d38_10 + b.d38_10)",    # no 39th digit
    "(a.d37_2 * b.d4_4)",       # 41 digits, cut to 38
    "(a.d15_2 * b.d4_4)",       # 19 digits, cut to 18
    "(a.i32 * b.d15_2)",        # DECIMAL(10,0) × DECIMAL(15,2), cut to 18
    "(a.h + b.d4_4)",           # HUGEINT does not convert to DECIMAL(38,4)
    "(a.i64 * b.d20_10)",       # 19 + 20 digits
    "(2147483647 * b.d15_2)",   # a literal wider than the cut result leaves room for
])
def test_partial_shapes_fail_on_duckdb_and_are_not_accepted(backend, expression):
    b, path = backend
    assert _failures(path, [expression]), f"{expression} no longer fails on DuckDB"
    assert not _accepted(b, [expression])[expression]


@pytest.mark.parametrize("expression", [
    "(1 - a.d15_2)", "(1 + a.d15_2)", "(a.d15_2 + b.d15_2)", "(a.d18_2 - b.d18_2)",
    "(a.d37_2 + b.d37_2)", "(a.d9_2 * b.d4_4)", "(2 * a.d15_2)", "(a.d9_2 * b.d9_2)",
    "(a.d18_2 * b.d20_10)", "(a.i32 + b.d15_2)", "(a.i64 * b.d4_4)", "(-a.d38_10)",
    "ABS(a.d38_10)", "(a.d15_2 / b.d15_2)", "(a.f - 0.05)", "(a.d38_10 * b.f)",
])
def test_total_shapes_are_accepted(backend, expression):
    """What the entries are for: TPC-H's ``1 - l_discount``, sums with a spare digit,
    products as wide as both operands, signs, and DECIMALs in floating-point arithmetic."""
    assert _accepted(backend[0], [expression])[expression]


def test_product_rule_reads_the_width_duckdb_gives(backend, monkeypatch):
    """The rule ``p1 + p2 <= 38`` (ignoring that DuckDB cuts products of two operands of
    at most 18 digits to DECIMAL(18)) would accept DECIMAL(15,2) squared, which fails."""
    b, path = backend

    def too_wide(node, types):
        bounds = [duck._decimal_bound(o, types) for o in (node.this, node.expression)]
        return None not in bounds and sum(p for p, _ in bounds) <= 38

    entries = tuple(e if e.when is not duck._decimal_product else
                    type(e)(e.ops, too_wide, e.reason) for e in duck.TOTAL.entries)
    monkeypatch.setattr(b, "allow", type(duck.TOTAL)(duck.TOTAL.engine, entries,
                                                     guards=duck.TOTAL.guards))
    assert _accepted(b, ["(a.d15_2 * b.d15_2)"])["(a.d15_2 * b.d15_2)"]
    assert _failures(path, ["(a.d15_2 * b.d15_2)"])


def test_decimal_sums_up_to_23_digits(backend):
    """SUM/AVG of a DECIMAL of at most 23 digits is summed as it is (DuckDB: a 128-bit
    sum, a DECIMAL(38,s) result); past 23 digits it is summed as DOUBLE. The bound is
    arithmetic on the row limit: 2**48 rows of 23 digits fit DECIMAL(38), of 24 do not."""
    from dpsql.backends import total

    assert total.MAX_ROWS * (10**duck.SUM_DECIMAL_DIGITS - 1) < 10**38 - 1
    assert total.MAX_ROWS * (10**(duck.SUM_DECIMAL_DIGITS + 1) - 1) > 10**38 - 1
    b, path = backend
    for column, taken in (("d23_11", True), ("d20_10", True), ("d24_2", False),
                          ("d38_10", False)):
        for fn in ("SUM", "AVG"):
            tree = parse_one(f"SELECT {fn}(a.{column}) AS c FROM ext AS a", read="duckdb")
            types = b.engine_types(tree)
            assert (b.allow.entry(tree.expressions[0].this, types) is not None) is taken, \
                (fn, column)
    con = duckdb.connect(str(path), read_only=True)
    ends = con.execute("SELECT SUM(x), typeof(SUM(x)) FROM (SELECT a.d23_11 AS x FROM ext AS a, "
                       "range(100000)) WHERE x > 0").fetchone()
    con.close()
    assert ends[1] == "DECIMAL(38,11)" and ends[0] > 0
