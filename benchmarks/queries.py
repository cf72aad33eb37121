"""The benchmark's queries: what the analyst sends, and the hand-written floor.

Each query has the analyst's SQL (answered by dpsql, and run as is on DuckDB for the
plain time and the true answer) and a *floor*: the same statistics written by hand in
the cheapest shape any user-level engine needs (DESIGN.md, "Rewriting"): one clamped
aggregate per (user, group), then the aggregate per group. The floor has the same output
columns as the query and returns the exact *bounded* statistics (rows per user capped at
``max_rows``, values and per-user sums clamped; AVG as DESIGN.md's centred sum over the
capped count), which the coverage check also uses. It skips the L0 step
(``max_groups``), as each generated person holds one group anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Contribution and value bounds of catalog/pums_dup.yaml that the floors spell out.
MAX_ROWS = 3
INCOME = (0, 500_000)
AGE = (0, 100)


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    keys: tuple[str, ...]
    floor: str
    delta: float = 0.0
    note: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


def _clamp(col: str, bounds: tuple[int, int]) -> str:
    return f"LEAST(GREATEST({col}, {bounds[0]}), {bounds[1]})"


def _user_sum(col: str, bounds: tuple[int, int]) -> str:
    """One user's clamped partial sum of a clamped column."""
    lo, hi = min(bounds[0], 0) * MAX_ROWS, max(bounds[1], 0) * MAX_ROWS
    return f"LEAST(GREATEST(SUM({_clamp(col, bounds)}), {lo}), {hi})"


def _user_centered_sum(col: str, bounds: tuple[int, int]) -> str:
    """One user's clamped partial sum of ``x − m``, m the middle of the bounds (for AVG)."""
    mid = (bounds[0] + bounds[1]) / 2
    half = MAX_ROWS * (bounds[1] - bounds[0]) / 2
    return f"LEAST(GREATEST(SUM({_clamp(col, bounds)} - {mid:g}), {-half:g}), {half:g})"


def _avg(col: str, bounds: tuple[int, int], name: str) -> str:
    """AVG as DESIGN.md defines it: m + (sum of centred partial sums) / count."""
    mid = (bounds[0] + bounds[1]) / 2
    return f"{mid:g} + SUM(d_{col}) / SUM(c_{col}) AS {name}"


def _count(col: str = "*") -> str:
    return f"LEAST(COUNT({col}), {MAX_ROWS})"


def _floor(keys: list[str], partials: dict[str, str], outputs: list[str],
           where: str = "") -> str:
    by = ", ".join(["pid", *keys])
    inner = ", ".join(["pid", *keys, *(f"{e} AS {n}" for n, e in partials.items())])
    outer = ", ".join([*keys, *outputs])
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return (f"WITH per_user AS (SELECT {inner} FROM pums_dup{where} GROUP BY {by}) "
            f"SELECT {outer} FROM per_user{group}")


QUERIES: tuple[Query, ...] = (
    Query(
        "count_by_sex",
        "SELECT sex, COUNT(*) AS n FROM pums_dup GROUP BY sex",
        ("sex",),
        _floor(["sex"], {"n": _count()}, ["SUM(n) AS n"]),
        note="public keys (2)",
    ),
    Query(
        "income_by_race",
        "SELECT race, SUM(income) AS total_income, AVG(income) AS avg_income "
        "FROM pums_dup GROUP BY race",
        ("race",),
        _floor(["race"], {"s": _user_sum("income", INCOME), "c_income": _count("income"),
                          "d_income": _user_centered_sum("income", INCOME)},
               ["SUM(s) AS total_income", _avg("income", INCOME, "avg_income")]),
        note="public keys (6), SUM and AVG",
    ),
    Query(
        "age_by_educ_married",
        "SELECT educ, married, COUNT(*) AS n, AVG(age) AS avg_age "
        "FROM pums_dup GROUP BY educ, married",
        ("educ", "married"),
        _floor(["educ", "married"], {"n": _count(), "c_age": _count("age"),
                                     "d_age": _user_centered_sum("age", AGE)},
               ["SUM(n) AS n", _avg("age", AGE, "avg_age")]),
        note="public keys (16 × 2)",
    ),
    Query(
        "filtered_income_by_sex",
        "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums_dup "
        "WHERE age >= 30 AND age < 50 GROUP BY sex",
        ("sex",),
        _floor(["sex"], {"n": _count(), "c_income": _count("income"),
                         "d_income": _user_centered_sum("income", INCOME)},
               ["SUM(n) AS n", _avg("income", INCOME, "avg_income")],
               where=" WHERE age >= 30 AND age < 50"),
        note="WHERE filter, public keys",
    ),
    Query(
        "count_by_age",
        "SELECT age, COUNT(*) AS n FROM pums_dup GROUP BY age",
        ("age",),
        _floor(["age"], {"n": _count()}, ["SUM(n) AS n"]),
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
        _floor([], {"n": _count(), "s": _user_sum("income", INCOME)},
               ["SUM(n) AS n", "SUM(s) AS total_income"]),
        note="no GROUP BY",
    ),
)


def by_name(names: list[str] | None = None) -> tuple[Query, ...]:
    """The queries named (all when ``names`` is None), in the suite's order."""
    if names is None:
        return QUERIES
    known = {q.name: q for q in QUERIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown queries: {', '.join(unknown)}; known: {', '.join(known)}")
    return tuple(known[n] for n in names)
