"""The benchmark's queries: what the analyst sends, and the hand-written floor.

Each query has the analyst's SQL (answered by dpsql, and run as is on DuckDB for the
plain time and the true answer) and a *floor*: the same statistics written by hand in
the cheapest shape any user-level engine needs (DESIGN.md, "Rewriting"): one clamped
aggregate per (user, group), with the join that finds the user where the user sits
behind foreign keys, then the aggregate per group. The floor has the same output
columns as the query and returns the exact *bounded* statistics (rows per user capped at
``max_rows``, values and per-user sums clamped; AVG as dpsql computes it: the centred
sum of each user rescaled to the user's capped count, over the capped count), which the
coverage check also uses. It skips the L0 step (``max_groups``).

This module holds the helpers and the PUMS queries; :mod:`benchmarks.tpch_queries`
holds TPC-H's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Contribution and value bounds of catalog/pums_dup.yaml that the floors spell out.
MAX_ROWS = 3
INCOME = (0, 500_000)
AGE = (0, 100)


@dataclass(frozen=True)
class Query:
    """One benchmark query.

    Attributes:
        name: short name, unique within its workload.
        sql: what the analyst sends (and what the plain run executes).
        keys: the output columns that are group keys.
        floor: the hand-written bounded query (same output columns as ``sql``).
        delta: the query's delta (keys from the data need one).
        note: what the query exercises, for the report.
        tags: free-form labels.
    """

    name: str
    sql: str
    keys: tuple[str, ...]
    floor: str
    delta: float = 0.0
    note: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


def lit(x: float) -> str:
    """A numeric SQL literal: integers without a decimal point, floats as Python writes them."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def clamp(expr: str, bounds: tuple[float, float]) -> str:
    """``expr`` clamped to ``bounds``."""
    return f"LEAST(GREATEST({expr}, {lit(bounds[0])}), {lit(bounds[1])})"


def user_sum(expr: str, bounds: tuple[float, float], max_rows: int = MAX_ROWS) -> str:
    """One user's clamped partial sum of a clamped expression."""
    lo, hi = min(bounds[0], 0) * max_rows, max(bounds[1], 0) * max_rows
    return clamp(f"SUM({clamp(expr, bounds)})", (lo, hi))


def user_centered_sum(expr: str, bounds: tuple[float, float], max_rows: int = MAX_ROWS) -> str:
    """One user's partial sum of ``x − m`` (m the middle of the bounds), for AVG.

    As dpsql computes it: rescaled to the user's capped row count (so a user with more
    than ``max_rows`` rows keeps their mean), then clamped to ``± max_rows·(U − L)/2``.
    """
    mid = (bounds[0] + bounds[1]) / 2
    half = max_rows * (bounds[1] - bounds[0]) / 2
    x = clamp(expr, bounds)
    return clamp(f"SUM({x} - {lit(mid)}) * LEAST(COUNT({x}), {max_rows}) / COUNT({x})",
                 (-half, half))


def avg(name: str, bounds: tuple[float, float], centred: str, count: str) -> str:
    """AVG as DESIGN.md defines it: m + (sum of centred partial sums) / count."""
    mid = (bounds[0] + bounds[1]) / 2
    return f"{lit(mid)} + SUM({centred}) / SUM({count}) AS {name}"


def count(col: str = "*", max_rows: int = MAX_ROWS) -> str:
    """One user's row count in a group, capped at ``max_rows``."""
    return f"LEAST(COUNT({col}), {max_rows})"


def floor_query(source: str, user: str, keys: list[str], partials: dict[str, str],
                outputs: list[str]) -> str:
    """The floor: one clamped aggregate per (user, group), then the aggregate per group.

    Args:
        source: ``FROM … [WHERE …]`` of the per-user aggregate (with the joins that find
            the user).
        user: the user key expression.
        keys: group key columns (unqualified, as the output names them).
        partials: name → per-user partial aggregate.
        outputs: the output expressions over ``per_user``.
    """
    inner = ", ".join([f"{user} AS uid", *keys, *(f"{e} AS {n}" for n, e in partials.items())])
    outer = ", ".join([*keys, *outputs])
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return (f"WITH per_user AS (SELECT {inner} {source} GROUP BY {', '.join([user, *keys])}) "
            f"SELECT {outer} FROM per_user{group}")


def _floor(keys: list[str], partials: dict[str, str], outputs: list[str],
           where: str = "") -> str:
    return floor_query(f"FROM pums_dup{where}", "pid", keys, partials, outputs)


def _avg(col: str, bounds: tuple[int, int], name: str) -> str:
    return avg(name, bounds, f"d_{col}", f"c_{col}")


PUMS: tuple[Query, ...] = (
    Query(
        "count_by_sex",
        "SELECT sex, COUNT(*) AS n FROM pums_dup GROUP BY sex",
        ("sex",),
        _floor(["sex"], {"n": count()}, ["SUM(n) AS n"]),
        note="public keys (2)",
    ),
    Query(
        "income_by_race",
        "SELECT race, SUM(income) AS total_income, AVG(income) AS avg_income "
        "FROM pums_dup GROUP BY race",
        ("race",),
        _floor(["race"], {"s": user_sum("income", INCOME), "c_income": count("income"),
                          "d_income": user_centered_sum("income", INCOME)},
               ["SUM(s) AS total_income", _avg("income", INCOME, "avg_income")]),
        note="public keys (6), SUM and AVG",
    ),
    Query(
        "age_by_educ_married",
        "SELECT educ, married, COUNT(*) AS n, AVG(age) AS avg_age "
        "FROM pums_dup GROUP BY educ, married",
        ("educ", "married"),
        _floor(["educ", "married"], {"n": count(), "c_age": count("age"),
                                     "d_age": user_centered_sum("age", AGE)},
               ["SUM(n) AS n", _avg("age", AGE, "avg_age")]),
        note="public keys (16 × 2)",
    ),
    Query(
        "filtered_income_by_sex",
        "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums_dup "
        "WHERE age >= 30 AND age < 50 GROUP BY sex",
        ("sex",),
        _floor(["sex"], {"n": count(), "c_income": count("income"),
                         "d_income": user_centered_sum("income", INCOME)},
               ["SUM(n) AS n", _avg("income", INCOME, "avg_income")],
               where=" WHERE age >= 30 AND age < 50"),
        note="WHERE filter, public keys",
    ),
    Query(
        "count_by_age",
        "SELECT age, COUNT(*) AS n FROM pums_dup GROUP BY age",
        ("age",),
        _floor(["age"], {"n": count()}, ["SUM(n) AS n"]),
        delta=1e-6,
        note="keys from the data: partition selection (δ = 1e-6)",
    ),
    Query(
        "people_by_married",
        "SELECT married, COUNT(DISTINCT pid) AS people FROM pums_dup GROUP BY married",
        ("married",),
        _floor(["married"], {"one": "1"}, ["COUNT(*) AS people"]),
        note="COUNT(DISTINCT user key)",
    ),
    Query(
        "totals",
        "SELECT COUNT(*) AS n, SUM(income) AS total_income FROM pums_dup",
        (),
        _floor([], {"n": count(), "s": user_sum("income", INCOME)},
               ["SUM(n) AS n", "SUM(s) AS total_income"]),
        note="no GROUP BY",
    ),
)


def by_name(queries: tuple[Query, ...], names: list[str] | None = None,
            ) -> tuple[Query, ...]:
    """The queries named (all when ``names`` is None), in the workload's order."""
    if names is None:
        return queries
    known = {q.name: q for q in queries}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown queries: {', '.join(unknown)}; known: {', '.join(known)}")
    return tuple(known[n] for n in names)
