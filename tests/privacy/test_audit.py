"""Privacy audit: estimate a lower bound on ε from neighbouring databases.

D is a pums_dup-style table; D' adds one user who uses the full contribution bounds
(1,000 rows, every group, extreme values). The exact statistics of the *rewritten* SQL
are computed once per database on DuckDB; then the real release path — each
statistic's calibrated mechanism and the real post-processing (AVG, sums over groups)
— runs many times on both, vectorised. From the two samples of outputs we pick, on
one half, the threshold event {o >= c} or {o <= c} with the largest privacy-loss
ratio, and on the other half bound it with Clopper–Pearson intervals:

    ε_lb = ln((P'_low(E) − δ) / P_high(E))   (and the same with D and D' swapped)

at confidence 1 − 10⁻⁶. A correct mechanism must give ε_lb <= the claimed ε. Each audit
has a twin that breaks the mechanism on purpose (halved noise, or contribution
bounding skipped) and asserts that the same estimator then exceeds the claim. (AVG and
VARIANCE are audited against skipped bounds only: each released number is a lossy function of
several noisy statistics, so even halved noise stays below the claim there.)
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest
from scipy.stats import beta

from dpsql.analyze import analyze
from dpsql.backends import DuckDBBackend
from dpsql.catalog import load_catalog
from dpsql.mechanisms import DiscreteLaplace, GridLaplace
from dpsql.mechanisms.gaussian import DiscreteGaussian, GridGaussian
from dpsql.noise import NoisyGroups
from dpsql.parse import parse
from dpsql.postprocess import cell_values
from dpsql.rewrite import guard_errors, rewrite
from dpsql.validate import validate

#: statistical (many samples per audit): left out by pytest -m "not slow"
pytestmark = pytest.mark.slow

N = 200_000  # draws per database and case
CONFIDENCE = 1 - 1e-6  # a correct mechanism fails a case with probability < 1e-5
ATTACKER = 10_000_000

#: ``age`` keys come from the data here (partition selection is what some cases audit):
#: its bounds are not turned into a public domain.
CATALOG = {"dataset": "audit", "limits": {"max_int_domain": 0}, "tables": {"t": {
    "user_key": "pid", "max_groups": 2, "max_rows": 3, "columns": {
        "pid": "int",
        "age": {"type": "int", "lower": 0, "upper": 100},
        "educ": {"type": "int", "values": list(range(1, 17))},
        "income": {"type": "float", "lower": 0, "upper": 500000}}}}}


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    base = tmp_path_factory.mktemp("audit")
    paths = base / "d.duckdb", base / "d2.duckdb"
    for i, path in enumerate(paths):
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE t AS SELECT i // 2 AS pid, 20 + i % 60 AS age, "
                    "1 + i % 16 AS educ, CAST(1000 * (i % 97) AS DOUBLE) AS income "
                    "FROM range(4000) r(i)")
        if i == 1:  # the added user: every group, many rows, values beyond the bounds
            con.execute(f"INSERT INTO t SELECT {ATTACKER}, 150, 1 + j % 16, 1e12 "
                        "FROM range(1000) r(j)")
        con.close()
    pair = tuple(DuckDBBackend(p) for p in paths)
    yield pair
    for b in pair:
        b.close()


def plan_for(sql, epsilon=1.0, delta=0.0, mechanism="laplace"):
    return analyze(validate(parse(sql)), load_catalog(CATALOG), epsilon, delta, seed=1,
                   mechanism=mechanism)


def exact(backend, plan, bounded=True):
    # the unbounded twin skips every bounding pass but keeps the guards, which the
    # backend's final-SQL check demands (and which bound nothing)
    query = rewrite(plan) if bounded else rewrite(plan, rules=(guard_errors,))
    columns, rows = backend.execute(query)
    nk = len(plan.keys)
    return {tuple(r[:nk]): dict(zip(columns[nk:], r[nk:], strict=True)) for r in rows}


def runs(plan, groups) -> int:
    """How many runs to draw: fewer for many groups, and for OpenDP's slower Gaussian."""
    n = max(60_000, N // max(len(groups), 1))
    return n // 4 if plan.mechanism == "gaussian" else n


def release(plan, groups, output):
    """Runs of the real release path on fixed exact statistics; one value per run.

    ``groups`` maps each group key to its exact statistics; every run noises all groups
    (vectorised as N copies), post-processes the cells, and ``output`` reduces a run's
    per-group cell values to one number.
    """
    keys = sorted(groups)
    n = runs(plan, groups)
    stats = {}
    for s in plan.stats:
        values = [groups[k].get(c) or 0 for k in keys for c in s.columns] * n
        values = [int(v) if s.integer else float(v) for v in values]
        released = s.mechanism.release(values)
        if s.bins is not None:  # a histogram: its bins, group by group
            released = [released[i:i + s.width] for i in range(0, len(released), s.width)]
        stats[s.name] = released
    noisy = NoisyGroups([k for _ in range(n) for k in keys], stats)
    cells = cell_values(plan, noisy)
    per_run = {name: np.asarray(v, dtype=float).reshape(n, len(keys))
               for name, v in cells.items()}
    for s in plan.stats:  # a histogram's noisy bins, as outputs of their own
        if s.bins is not None:
            bins = np.asarray(stats[s.name], dtype=float).reshape(n, len(keys), s.width)
            per_run.update({c: bins[:, :, j] for j, c in enumerate(s.columns)})
    return output(per_run)


def _bound(kx: int, ky: int, n: int, delta: float) -> float:
    """ln((P'_low − δ) / P_high) with Clopper–Pearson bounds at CONFIDENCE."""
    alpha = (1 - CONFIDENCE) / 2
    p_high = beta.ppf(1 - alpha, kx + 1, n - kx) if kx < n else 1.0
    q_low = beta.ppf(alpha, ky, n - ky + 1) if ky > 0 else 0.0
    return math.log((q_low - delta) / p_high) if q_low > delta else -math.inf


def epsilon_lower_bound(a, b, delta=0.0):
    """A lower bound on ε (holding with probability CONFIDENCE) from M(D) = a, M(D') = b.

    The event is chosen on the first half of the samples (by the same bound, so that
    well-populated events win) and evaluated on the second half only.
    """
    best = -math.inf
    half = len(a) // 2
    for x, y in ((a, b), (b, a)):
        xs, ys, xe, ye = x[:half], y[:half], x[half:], y[half:]
        candidates = np.unique(np.quantile(np.concatenate([xs, ys]),
                                           np.linspace(0.0005, 0.9995, 400)))
        chosen, score = None, -math.inf
        for c in candidates:
            for side in (1, -1):
                kx = int(np.sum(xs >= c) if side == 1 else np.sum(xs <= c))
                ky = int(np.sum(ys >= c) if side == 1 else np.sum(ys <= c))
                s = _bound(kx, ky, half, delta)
                if s > score:
                    chosen, score = (c, side), s
        if chosen is None:
            continue
        c, side = chosen
        kx = int(np.sum(xe >= c) if side == 1 else np.sum(xe <= c))
        ky = int(np.sum(ye >= c) if side == 1 else np.sum(ye <= c))
        best = max(best, _bound(kx, ky, len(xe), delta))
    return best


def halve(plan, name):
    s = plan.stat(name)
    m = s.mechanism
    s.mechanism = {
        DiscreteLaplace: lambda: DiscreteLaplace(m.scale / 2),
        GridLaplace: lambda: GridLaplace(m.units.scale / 2, m.k),
        DiscreteGaussian: lambda: DiscreteGaussian(m.sigma / 2),
        GridGaussian: lambda: GridGaussian(m.units.sigma / 2, m.k),
    }[type(m)]()


def single(name):
    return lambda cells: cells[name][:, 0]


# The groups the added user reaches after L0 bounding (seed 1): a test on their sum is
# the natural attack on a grouped release. Found by comparing D and D' (see below).
TOUCHED: dict[str, list[int]] = {}


def touched_total(cells):
    return cells["__a0"][:, TOUCHED["groups"]].sum(axis=1)


CASES = {
    # name: (sql, output reduction, statistic halved in the broken twin)
    "count": ("SELECT COUNT(*) FROM t", single("__a0"), "__s0"),
    "count distinct users": ("SELECT COUNT(DISTINCT pid) FROM t", single("__a0"), "__users"),
    "sum": ("SELECT SUM(income) FROM t", single("__a0"), "__s0"),
    "avg": ("SELECT AVG(age) FROM t", single("__a0"), None),
    "variance": ("SELECT VAR_POP(age) FROM t", single("__a0"), None),
    "grouped counts": ("SELECT educ, COUNT(*) FROM t GROUP BY educ", touched_total, "__s0"),
    # the added user has 16 values of educ + pid nobody else has; R = 3 of them count
    "count distinct values": ("SELECT COUNT(DISTINCT educ + pid) FROM t", single("__a0"),
                              "__s0"),
    # quantiles: the histogram's top bin is where the added user's clamped ages land
    # (width 2: 51 bins, the last one [99.5, 100])
    # (the quantiles themselves are post-processing of these bins)
    "histogram": ("SELECT MEDIAN(age) FROM t", single("__s0_50"), "__s0"),
}


def prepare(backends, plan, bounded=True):
    d, d2 = (exact(b, plan, bounded) for b in backends)
    keys = sorted(set(d) | set(d2))
    TOUCHED["groups"] = [i for i, k in enumerate(keys) if d.get(k) != d2.get(k)]
    return d, d2


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
@pytest.mark.parametrize("case", list(CASES))
def test_audit_within_claim(backends, case, mechanism):
    sql, output, _ = CASES[case]
    delta = 1e-6 if mechanism == "gaussian" else 0.0
    plan = plan_for(sql, epsilon=1.0, delta=delta, mechanism=mechanism)
    d, d2 = prepare(backends, plan)
    bound = epsilon_lower_bound(release(plan, d, output), release(plan, d2, output), delta)
    print(f"AUDIT {case} [{mechanism}]: claimed epsilon=1, measured lower bound={bound:.3f}")
    assert bound <= 1.0


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][2]])
def test_audit_detects_halved_noise(backends, case):
    sql, output, name = CASES[case]
    plan = plan_for(sql, epsilon=1.0)
    d, d2 = prepare(backends, plan)
    halve(plan, name)
    bound = epsilon_lower_bound(release(plan, d, output), release(plan, d2, output))
    print(f"AUDIT halved {case}: {bound:.3f}")
    assert bound > 1.0, f"the audit missed halved noise ({bound:.3f})"


@pytest.mark.parametrize("case", ["count", "sum", "avg", "variance", "grouped counts",
                                  "histogram", "count distinct values"])
def test_audit_detects_skipped_contribution_bounds(backends, case):
    sql, output, _ = CASES[case]
    plan = plan_for(sql, epsilon=1.0)
    d, d2 = prepare(backends, plan, bounded=False)
    bound = epsilon_lower_bound(release(plan, d, output), release(plan, d2, output))
    assert bound > 1.0, f"the audit missed unbounded contributions ({bound:.3f})"


def test_audit_partition_selection(backends):
    """A key held only by the added user appears with probability <= δ."""
    delta = 1e-2  # large enough to measure
    plan = plan_for("SELECT age, COUNT(*) FROM t GROUP BY age", epsilon=1.0, delta=delta)
    d2 = exact(backends[1], plan)
    assert (150,) in d2 and d2[(150,)]["__users"] == 1
    _, keep = plan.selection.release([d2[(150,)]["__users"]] * N)
    k = sum(keep)
    low = beta.ppf((1 - CONFIDENCE) / 2, k, N - k + 1) if k else 0.0
    print(f"AUDIT partition selection: claimed delta={delta}, released rate={k / N:.5f}")
    assert low <= delta
    # a key present in both: its selection probability moves by at most e^ε (+δ)
    shared = (21,)
    d = exact(backends[0], plan)
    a = np.asarray(plan.selection.release([d[shared]["__users"]] * N)[0], dtype=float)
    b = np.asarray(plan.selection.release([d2[shared]["__users"]] * N)[0], dtype=float)
    bound = epsilon_lower_bound(a, b, delta)
    print(f"AUDIT partition selection counts: claimed epsilon={plan.selection.epsilon:.3f}, "
          f"measured lower bound={bound:.3f}")
    assert bound <= plan.selection.epsilon


def test_audit_detects_a_wrong_threshold(backends):
    plan = plan_for("SELECT age, COUNT(*) FROM t GROUP BY age", epsilon=1.0, delta=1e-2)
    plan.selection.threshold = 2  # releases any key whose noisy count reaches 2
    d2 = exact(backends[1], plan)
    _, keep = plan.selection.release([d2[(150,)]["__users"]] * N)
    k = sum(keep)
    low = beta.ppf((1 - CONFIDENCE) / 2, k, N - k + 1)
    assert low > 1e-2
