"""The neighbour oracle: run one query on D and D′ with the noise off and compare.

D′ is D plus every row of one more user. dpsql calibrates its noise to the
sensitivities in the plan, so with the noise off the exact statistics the backend
returns (what :func:`dpsql.noise.add_noise` noises) must satisfy, for every query:

1. **Same verdict before the charge.** Parse, validate, analyze, rewrite and the
   pre-charge checks read the catalog and the schema only, which D and D′ share: both
   refuse or both pass, with the same rewritten SQL (the L0 seed is fixed to one value
   for both, see :func:`fixed_seed`).
2. **No failure after the charge.** Executing the rewritten SQL either succeeds on both
   or fails on both — a failure on one of them only is an error oracle on the added
   user's data — and any failure at all after the charge is recorded: invariant 5 says
   a query that passed the checks never fails on data.
3. **Per-group L∞.** Each statistic moves in each group by at most its declared
   ``linf`` (a histogram: the L1 norm over its bins); a statistic released without
   noise (``Constant``, linf 0) does not move at all.
4. **L0.** At most ``plan.max_groups`` groups move (the G the noise is scaled for), and
   each statistic's L1 over groups is at most ``G · linf``.
5. **Keys.** With public domains the released key set is the domain, identical on D and
   D′; under partition selection a key only D′ has carries a user count of at most 1
   (the threshold assumes exactly one user holds it).
6. **Release path.** ``add_noise`` and ``postprocess`` with zero noise run on both.

:class:`Neighbours` builds D and D′ as two DuckDB files from a :class:`World` (an
explicit catalog, schema, D's rows and the added user's rows) and checks queries
against them; :func:`check_world` is the one-shot form the regression tests use.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import duckdb

import dpsql
from dpsql.errors import BackendError, DpsqlError
from dpsql.grid_units import fine_exponent, to_grid
from dpsql.noise import read_units
from tests.support import prepare, to_run

#: One seed for the L0 order on D and D′ (a different seed would move every user's groups).
SEED = 1234567
#: Relative tolerance for floating-point statistics (sums added in another order).
REL_TOL = 1e-9


@dataclass
class World:
    """A catalog and a pair of neighbouring databases, in explicit SQL.

    Attributes:
        catalog: the dpsql catalog (a dict).
        schema: CREATE TABLE statements, run on both databases.
        data: INSERT statements of D.
        attacker: INSERT statements of the added user's rows (D′ only).
        attacker_first: D′ stores the added user's rows before D's (the physical order
            decides, e.g., which spelling a case-insensitive GROUP BY reports).
        backend: ``duckdb``, or ``sqlite`` (the same tables copied into SQLite files,
            read through dpsql's SQLite backend).
    """

    catalog: dict
    schema: list[str]
    data: list[str]
    attacker: list[str]
    attacker_first: bool = False
    backend: str = "duckdb"

    def statements(self, neighbour: bool) -> list[str]:
        if not neighbour:
            return self.schema + self.data
        if self.attacker_first:
            return self.schema + self.attacker + self.data
        return self.schema + self.data + self.attacker

    def source(self, query: str, indent: str = "") -> str:
        """Python source of this world and a query, for a regression test."""
        lines = ["dict(", f"    catalog={self.catalog!r},", "    schema=["]
        lines += [f"        {s!r}," for s in self.schema]
        lines += ["    ],", "    data=["]
        lines += [f"        {s!r}," for s in self.data]
        lines += ["    ],", "    attacker=["]
        lines += [f"        {s!r}," for s in self.attacker]
        lines += ["    ],", f"    attacker_first={self.attacker_first!r},"]
        if self.backend != "duckdb":
            lines += [f"    backend={self.backend!r},"]
        lines += [
                  f"    query={query!r},", ")"]
        return "\n".join(indent + line for line in lines)


@dataclass
class Violation:
    """One broken property: ``kind`` names the check, ``detail`` says what moved."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.detail}"


@dataclass
class Outcome:
    """What one query did on D and D′."""

    sql: str
    answered: bool = False
    refusal: str | None = None
    violations: list[Violation] = field(default_factory=list)
    #: informational observations that are not privacy violations
    notes: list[str] = field(default_factory=list)


#: Checks whose failure is a privacy violation (the CI slice asserts none happens).
KINDS = {
    "precharge-disagree": "D and D′ disagree before the charge (the stages read only the schema)",
    "plan-differs": "the rewritten SQL differs between D and D′",
    "internal-error": "a non-DpsqlError before the charge",
    "one-sided-failure": "the query fails after the charge on only one of D and D′",
    "failure-after-charge": "the query fails after the charge (on both D and D′)",
    "linf": "a statistic moves by more than its declared L∞ in one group",
    "groups": "more groups move than the max_groups the noise is scaled for",
    "l1": "a statistic's L1 over groups exceeds G·L∞",
    "new-key": "a key only D′ has carries more than one user",
    "public-keys": "the released public-domain keys differ between D and D′",
    "release": "add_noise/postprocess with the noise off raises",
}


@contextlib.contextmanager
def fixed_seed(seed: int = SEED):
    """Makes ``secrets.randbits`` (the L0 seed in analyze) return ``seed``."""
    original = secrets.randbits
    secrets.randbits = lambda k: seed % (1 << k)
    try:
        yield
    finally:
        secrets.randbits = original


class _ZeroNoise:
    """A mechanism's stand-in that releases the exact values (everything else delegated)."""

    def __init__(self, mechanism):
        self._mechanism = mechanism

    def __getattr__(self, name):
        return getattr(self._mechanism, name)

    def release(self, values):
        return list(values)

    def release_units(self, units):
        """Grid units the engine summed (dpsql.grid_units) as values, unnoised."""
        return [math.ldexp(float(u), self._mechanism.k) for u in units]


@contextlib.contextmanager
def noise_off(plan):
    saved = [(s, s.mechanism) for s in plan.stats]
    selection_noise = plan.selection.noise if plan.selection is not None else None
    try:
        for s in plan.stats:
            s.mechanism = _ZeroNoise(s.mechanism)
        if plan.selection is not None:
            plan.selection.noise = _ZeroNoise(selection_noise)
        yield
    finally:
        for s, m in saved:
            s.mechanism = m
        if plan.selection is not None:
            plan.selection.noise = selection_noise


def _key(v):
    """A group key value made hashable and comparable across D and D′ (NaN equals NaN)."""
    if isinstance(v, float) and math.isnan(v):
        return ("nan",)
    if isinstance(v, Decimal):
        return float(v) if v != v.to_integral_value() else int(v)
    if isinstance(v, list | dict):
        return repr(v)
    return v


def _value(v):
    if v is None:
        return 0
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bool):
        return int(v)
    return v


def _distance(a, b) -> float:
    """|a − b| with a NaN on either side counting as infinitely far."""
    a, b = _value(a), _value(b)
    if isinstance(a, int) and isinstance(b, int):
        return abs(a - b)
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError, OverflowError):
        return math.inf
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    if math.isinf(a) or math.isinf(b):
        return 0.0 if a == b else math.inf
    d = abs(a - b)
    return 0.0 if d <= REL_TOL * max(abs(a), abs(b), 1.0) else d


def _short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:200]}"


class Neighbours:
    """D and D′ of a world, as two DuckDB files, each behind its own dpsql connection."""

    def __init__(self, world: World, directory: str | Path | None = None):
        self.world = world
        self._tmp = None
        if directory is None:
            self._tmp = tempfile.mkdtemp(prefix="dpsql-neighbours-")
            directory = self._tmp
        directory = Path(directory)
        self.paths = (directory / "d.duckdb", directory / "d2.duckdb")
        con = duckdb.connect()  # one connection writes both files (half the cost of two)
        try:
            for neighbour, path in enumerate(self.paths):
                path.unlink(missing_ok=True)
                con.execute(f"ATTACH '{path}' AS db{neighbour}")
                con.execute(f"USE db{neighbour}")
                con.execute("BEGIN")
                for statement in world.statements(bool(neighbour)):
                    con.execute(statement)
                con.execute("COMMIT")
        finally:
            con.close()
        databases: list = list(self.paths)
        if world.backend == "sqlite":
            databases = [f"sqlite:///{_copy_to_sqlite(world, path)}" for path in self.paths]
        elif world.backend != "duckdb":
            raise ValueError(f"unknown backend {world.backend!r}")
        self.conns = [dpsql.connect(d, catalog=world.catalog, budget=(1e9, 0.9),
                                    ledger=":memory:", analyst="fuzz") for d in databases]

    def close(self) -> None:
        for c in self.conns:
            c.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Neighbours:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- one query -----------------------------------------------------------------------

    def check(self, sql: str, epsilon: float = 1.0, delta: float = 1e-6,
              mechanism: str = "laplace") -> Outcome:
        out = Outcome(sql)
        prepared = []
        for conn, name in zip(self.conns, ("D", "D′"), strict=True):
            try:
                with fixed_seed():
                    plan, expression, backend = prepare(conn, sql, epsilon, delta, None, None,
                                                        mechanism)
                    # the SQL the engine runs: _check may write it again (a statistic
                    # it summed in grid units, dpsql.grid_units) and reads keys back;
                    # without the L0 window where one_per_user keys are proven on this
                    # neighbour's data (dpsql.one_per_user), so D and D′ may run
                    # different SQL, yet must show the same
                    expression, read, shown = to_run(conn, plan, expression, backend)
                prepared.append((plan, (expression, read, shown), backend, None))
            except DpsqlError as exc:
                prepared.append((None, None, None, exc))
            except Exception as exc:  # not a DpsqlError: a bug, though nothing is charged
                prepared.append((None, None, None, exc))
                out.violations.append(Violation(
                    "internal-error", f"{name} raised {_short(exc)} before the charge"))
        errors = [p[3] for p in prepared]
        if errors[0] is not None or errors[1] is not None:
            if (errors[0] is None) != (errors[1] is None):
                which = "D" if errors[0] is not None else "D′"
                out.violations.append(Violation(
                    "precharge-disagree", f"only {which} is refused before the charge: "
                    f"{_short(errors[0] or errors[1])}"))
            out.refusal = _short(errors[0] or errors[1])
            return out
        out.answered = True
        (plan, (expr, read, shown), backend, _), (plan2, (expr2, read2, shown2), backend2, _) \
            = prepared
        sqls = shown, shown2
        if sqls[0] != sqls[1]:
            a, b = sqls
            i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                     min(len(a), len(b)))
            out.violations.append(Violation(
                "plan-differs", f"rewritten SQL differs at character {i}: "
                f"D …{a[max(0, i - 80):i + 80]}… vs D′ …{b[max(0, i - 80):i + 80]}…"))
            return out

        results = []
        for p, e, b, r in ((plan, expr, backend, read), (plan2, expr2, backend2, read2)):
            try:
                if p.stats or p.selection is not None:
                    columns, rows = b.execute(e)
                    results.append((columns, r(rows)))
                else:
                    results.append(([k.name for k in p.keys], []))
            except Exception as exc:  # noqa: BLE001 - every failure here is a finding
                results.append(exc)
        failed = [isinstance(r, BaseException) for r in results]
        if failed[0] != failed[1]:
            which = "D" if failed[0] else "D′"
            exc = results[0] if failed[0] else results[1]
            out.violations.append(Violation(
                "one-sided-failure", f"execute fails on {which} only: {_short(exc)}"
                + ("" if isinstance(exc, BackendError) else " (not a BackendError)")))
            return out
        if failed[0]:
            out.violations.append(Violation(
                "failure-after-charge", f"execute fails on both: {_short(results[0])}"))
            return out
        self._compare(plan, results[0], results[1], out)
        for p, (columns, rows), name in ((plan, results[0], "D"), (plan2, results[1], "D′")):
            self._release(p, columns, rows, name, out)
        if plan.selection is None:
            keys = []
            for p, (columns, rows) in ((plan, results[0]), (plan2, results[1])):
                keys.append(self._released_keys(p, columns, rows))
            if None not in keys and keys[0] != keys[1]:  # None: reported by _release
                out.violations.append(Violation(
                    "public-keys", f"public-domain keys differ: D {keys[0][:10]} vs "
                    f"D′ {keys[1][:10]}"))
        return out

    @staticmethod
    def _released_keys(plan, columns, rows):
        from dpsql.noise import add_noise

        with noise_off(plan):
            try:
                return [tuple(map(_key, k)) for k in add_noise(plan, columns, rows).keys]
            except Exception:  # noqa: BLE001 - reported by _release
                return None

    @staticmethod
    def _release(plan, columns, rows, name, out: Outcome) -> None:
        from dpsql.noise import add_noise
        from dpsql.postprocess import postprocess

        with noise_off(plan):
            try:
                postprocess(plan, add_noise(plan, columns, rows))
            except Exception as exc:  # noqa: BLE001
                out.violations.append(Violation(
                    "release", f"add_noise/postprocess with the noise off fails on {name}: "
                    f"{_short(exc)}"))

    @staticmethod
    def _compare(plan, first, second, out: Outcome) -> None:
        nk = len(plan.keys)
        tables = []
        for columns, rows in (first, second):
            index = {c: i for i, c in enumerate(columns)}
            table = {}
            for row in rows:
                table[tuple(_key(v) for v in row[:nk])] = row
            tables.append((index, table))
        (index, d), (index2, d2) = tables
        if plan.selection is None:
            groups = [tuple(_key(v) for v in g) for g in
                      itertools.product(*(k.domain for k in plan.keys))]
            domain = set(groups)
            for label, table in (("D", d), ("D′", d2)):
                outside = [g for g in table if g not in domain]
                if outside:
                    out.notes.append(f"{label}: exact keys outside the public domain "
                                     f"(dropped): {outside[:5]}")
        else:
            groups = list(dict.fromkeys(itertools.chain(d, d2)))
        G = plan.max_groups
        moved: dict[tuple, list[str]] = {}
        for stat in plan.stats:
            # a statistic summed in grid units (dpsql.grid_units) is compared in units,
            # against what its grid mechanism's privacy map counts per group
            linf = stat.linf if stat.grid is None else \
                math.floor(stat.linf / 2.0**stat.grid) + stat.width
            unit = "" if stat.grid is None else f" grid units of 2^{stat.grid}"
            total = 0.0
            for g in groups:
                a, b = d.get(g), d2.get(g)
                dist = 0.0
                for column in stat.columns:
                    va = a[index[column]] if a is not None and column in index else None
                    vb = b[index2[column]] if b is not None and column in index2 else None
                    if stat.grid is not None:  # an exact total of fine units: to the grid
                        va, vb = (None if v is None else to_grid(
                            read_units(v), fine_exponent(stat.linf, stat.grid), stat.grid)
                            for v in (va, vb))
                    dist += _distance(va, vb)
                if dist > 0:
                    moved.setdefault(g, []).append(stat.name)
                    total += dist
                limit = linf * (1 + 1e-9) + 1e-9
                if dist > limit:
                    va = [a[index[c]] if a else None for c in stat.columns]
                    vb = [b[index2[c]] if b else None for c in stat.columns]
                    out.violations.append(Violation(
                        "linf", f"{stat.label} ({stat.name}) in group {g} moves by {dist:g} > "
                        f"L∞ {linf:g}{unit}: D {_show(va)} → D′ {_show(vb)}"))
            if total > G * linf * (1 + 1e-9) + 1e-9:
                out.violations.append(Violation(
                    "l1", f"{stat.label} ({stat.name}) moves by {total:g} over groups > "
                    f"G·L∞ = {G}·{linf:g}{unit}"))
        if len(moved) > G:
            sample = sorted(moved, key=repr)[:6]
            out.violations.append(Violation(
                "groups", f"{len(moved)} groups move > max_groups {G}: {sample}"))
        if plan.selection is not None and "__users" in index2:
            for g in d2:
                if g not in d:
                    users = _value(d2[g][index2["__users"]])
                    if users > 1:
                        out.violations.append(Violation(
                            "new-key", f"key {g} only in D′ has {users} users (threshold "
                            "assumes 1)"))


def _copy_to_sqlite(world: World, duckdb_path: Path) -> Path:
    """The tables of a DuckDB file in a SQLite file: the same DDL, the same values.

    Dates become ISO text (dpsql's convention for SQLite), integers beyond 64 bits
    and DECIMALs become REAL (what SQLite itself would store), everything else is bound
    as is.
    """
    import datetime
    import decimal
    import sqlite3

    target = duckdb_path.with_suffix(".sqlite")
    target.unlink(missing_ok=True)
    source = duckdb.connect(str(duckdb_path), read_only=True)
    con = sqlite3.connect(str(target))
    try:
        for statement in world.schema:
            con.execute(statement)
        for (table,) in source.execute("SELECT table_name FROM information_schema.tables "
                                       "ORDER BY table_name").fetchall():
            rows = source.execute(f'SELECT * FROM "{table}"').fetchall()
            if not rows:
                continue
            marks = ", ".join("?" for _ in rows[0])
            converted = [tuple(
                v.isoformat() if isinstance(v, datetime.date)
                else float(v) if isinstance(v, int) and not -(2**63) <= v < 2**63
                else float(v) if isinstance(v, decimal.Decimal)
                else v for v in row) for row in rows]
            con.executemany(f'INSERT INTO "{table}" VALUES ({marks})', converted)
        con.commit()
    finally:
        con.close()
        source.close()
    return target


def _show(values: list) -> str:
    if len(values) == 1:
        return repr(values[0])
    return repr(values) if len(values) <= 8 else repr(values[:8])[:-1] + ", ...]"


def check_world(world: World, query: str, **kwargs) -> Outcome:
    """Builds D and D′ of ``world`` and checks one query (regression tests)."""
    with Neighbours(world) as pair:
        return pair.check(query, **kwargs)
