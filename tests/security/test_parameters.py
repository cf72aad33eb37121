"""Issue 13, class 6: every failure before the charge is a DpsqlError naming the parameter.

Privacy parameters out of range (huge integers, subnormal δ, tiny or huge ε, ε times a
huge sensitivity) used to escape as ``OverflowError``, ``ZeroDivisionError`` or
``ValueError`` from the mechanisms. Each must now be refused, for free and fast, with a
:class:`~dpsql.errors.PrivacyParameterError` whose message names what is wrong; and the
mechanisms must never build a noise scale, threshold or error bar that is not finite.
"""

from __future__ import annotations

import math
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsql.accounting import Cost, zcdp_to_dp
from dpsql.analyze import analyze
from dpsql.datasets import pums_catalog
from dpsql.errors import DpsqlError, PrivacyParameterError, UnboundedExpressionError
from dpsql.mechanisms import DiscreteLaplace, GridLaplace, LaplaceThreshold, laplace
from dpsql.mechanisms.gaussian import DiscreteGaussian, gaussian, rho_for
from dpsql.mechanisms.quantile import Bins, edge_errors
from dpsql.parse import parse
from dpsql.validate import validate
from tests.support import ledger_of

Q = "SELECT COUNT(*) FROM pums"
KEYS = "SELECT age, COUNT(*) FROM pums GROUP BY age"
HUGE = 10**400


def refused(sec, conn, sql, name, kind=PrivacyParameterError, **kwargs):
    start = time.perf_counter()
    out = sec.outcome(conn, sql, **{"epsilon": 1.0, **kwargs})
    assert time.perf_counter() - start < 2.0, out.describe()
    assert out.kind == sec.REFUSED and out.charged_nothing, out.describe()
    assert isinstance(out.value, kind), out.describe()
    message = str(out.value)
    assert name in message, message
    assert len(message) < 400, message  # no 400-digit number echoed back
    return out.value


@pytest.mark.parametrize(("kwargs", "name"), [
    # the examples
    ({"max_rows": HUGE}, "max_rows"),
    ({"max_groups": HUGE}, "max_groups"),
    ({"max_groups": 10**30}, "max_groups"),
    ({"delta": 5e-324, "mechanism": "gaussian"}, "delta"),
    # epsilon
    ({"epsilon": HUGE}, "epsilon"),
    ({"epsilon": -HUGE}, "epsilon"),
    ({"epsilon": 5e-324}, "epsilon"),
    ({"epsilon": 1e-10}, "epsilon"),
    ({"epsilon": 1e10}, "epsilon"),
    ({"epsilon": 1e308}, "epsilon"),
    ({"epsilon": math.nan}, "epsilon"),
    ({"epsilon": math.inf}, "epsilon"),
    ({"epsilon": 0}, "epsilon"),
    ({"epsilon": True}, "epsilon"),
    ({"epsilon": "1"}, "epsilon"),
    # delta
    ({"delta": HUGE}, "delta"),
    ({"delta": 5e-324}, "delta"),
    ({"delta": 1e-300}, "delta"),
    ({"delta": 1e-101}, "delta"),
    ({"delta": 1.0}, "delta"),
    ({"delta": -1e-300}, "delta"),
    ({"delta": math.nan}, "delta"),
    # contribution bounds
    ({"max_rows": 10**6 + 1}, "max_rows"),
    ({"max_rows": -(10**5000)}, "max_rows"),  # str() of it would raise ValueError
    ({"max_rows": 2**63}, "max_rows"),
    ({"max_groups": 0}, "max_groups"),
    ({"max_groups": 2.0}, "max_groups"),
    ({"max_groups": True}, "max_groups"),
])
def test_out_of_range_parameters_are_refused_naming_them(refusal_conn, sec, kwargs, name):
    refused(sec, refusal_conn, KEYS if "delta" not in kwargs else Q, name,
            **{"delta": 1e-6, **kwargs} if "delta" not in kwargs else kwargs)


@pytest.mark.parametrize(("options", "name"), [
    ("max_groups_contributed = " + "9" * 400, "max_groups"),
    ("max_rows_contributed = " + "9" * 400, "max_rows"),
    ("max_groups_contributed = 1" + "0" * 30, "max_groups"),
    ("epsilon = " + "9" * 400, "epsilon"),
    ("epsilon = 1e-400", "epsilon"),      # underflows to 0
    ("delta = 1e-320", "delta"),          # subnormal
    ("epsilon = 1, delta = 4.9e-324", "delta"),
])
def test_out_of_range_options_are_refused_naming_them(refusal_conn, sec, options, name):
    sql = f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS ({options}) COUNT(*) FROM pums"
    refused(sec, refusal_conn, sql, name, delta=1e-6)


@pytest.mark.parametrize(("sql", "kwargs"), [
    # ε · sensitivity: noise scales beyond the range of a double (the bounds analysis
    # may refuse the value bounds first)
    ("SELECT SUM(income * 1e300) FROM pums", {"epsilon": 1e-9}),
    ("SELECT AVG(income * 1e300) FROM pums", {"epsilon": 1e-9}),
    ("SELECT SUM(income * 1e300) FROM pums", {"epsilon": 1e-9, "delta": 1e-6,
                                             "mechanism": "gaussian"}),
    ("SELECT SUM(income * 1e-300) FROM pums", {"epsilon": 1e9}),
    # squared for VARIANCE: the bound of the squares would overflow a double
    ("SELECT VARIANCE(income * 1e200) FROM pums", {"epsilon": 1.0}),
    # partition selection and histograms whose noise leaves the exact samplers' range
    # (pums_dup: users with several rows, so max_groups applies)
    ("SELECT income, COUNT(*) FROM pums_dup GROUP BY income",
     {"epsilon": 1e-9, "delta": 1e-6, "max_groups": 10**6}),
    ("SELECT income, MEDIAN(income) FROM pums_dup GROUP BY income",
     {"epsilon": 1e-9, "delta": 1e-6, "max_groups": 10**6}),
    ("SELECT income, SUM(income) FROM pums_dup GROUP BY income",
     {"epsilon": 1e-9, "delta": 1e-30, "max_groups": 10**6, "mechanism": "gaussian"}),
])
def test_noise_scales_out_of_range_are_refused_before_the_charge(refusal_conn, sec, sql,
                                                                kwargs):
    error = refused(sec, refusal_conn, sql, "",
                    kind=(PrivacyParameterError, UnboundedExpressionError), **kwargs)
    assert any(w in str(error) for w in ("scale", "sigma", "sensitivity", "bounds")), \
        str(error)


@pytest.mark.parametrize(("sql", "kwargs"), [
    ("SELECT SUM(ROUND(income, 400)) FROM pums", {}),
    ("SELECT VARIANCE(income * 1e200) FROM pums", {}),
    ("SELECT SUM(income * 1e300 * 1e300) FROM pums", {}),
    ("SELECT MEDIAN(income * 1e300) FROM pums", {}),
    ("SELECT MEDIAN(CAST(income AS BIGINT) * 100000000000000000000) FROM pums", {}),
    (Q, {"epsilon": 1e-9, "delta": 1e-100, "mechanism": "gaussian"}),
    (Q, {"alpha": 1e-300}),
    ("SELECT AVG(age) FROM pums", {"alpha": 5e-324}),
])
def test_extreme_but_valid_queries_never_raise_foreign_errors(rich_conn, sec, sql, kwargs):
    out = sec.outcome(rich_conn, sql, **{"epsilon": 1.0, **kwargs})
    sec.assert_safe(out)
    if out.kind == sec.RESULT:
        for row in out.value.accuracy:
            assert all(a is None or not math.isnan(a) for a in row)


def test_gaussian_at_tiny_epsilon_is_calibrated(rich_conn):
    # rho_for used to bisect [0, 1] to 2^-60 and return 0 ("rho must be positive")
    res = rich_conn.execute(Q, epsilon=1e-9, delta=1e-100, mechanism="gaussian")
    assert res.split[0]["rho"] > 0 and math.isfinite(res.split[0]["scale"])


# -- the mechanisms on their own -------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: laplace(math.inf, 1, 1.0, False),
    lambda: laplace(math.nan, 1, 1.0, True),
    lambda: laplace(10**400, 1, 1.0, True),
    lambda: laplace(1e300, 1, 1e-9, False),
    lambda: laplace(1e-300, 1, 1e9, False),
    lambda: laplace(1.0, 10**30, 1.0, True),
    lambda: laplace(1.0, 1, 0.0, True),
    lambda: laplace(1.0, 1, 5e-324, True),
    lambda: laplace(1.0, 10**6, 1e-12, False, width=64),
    lambda: gaussian(1e300, 1, 1e-30, False),
    lambda: gaussian(1.0, 1, 1e-300, True),
    lambda: gaussian(1.0, 1, math.inf, True),
    lambda: DiscreteLaplace(0.0),
    lambda: DiscreteLaplace(2.0**60),
    lambda: DiscreteLaplace(math.nan),
    lambda: DiscreteGaussian(2.0**60),
    lambda: GridLaplace(8192.0, 2000),
    lambda: LaplaceThreshold(1e-12, 1e-6, 10**6),
    lambda: LaplaceThreshold(1.0, 0.0, 1),
    lambda: LaplaceThreshold(1.0, 1e-6, 10**400),
    lambda: rho_for(1.0, 0.0),
    lambda: rho_for(math.inf, 1e-6),
    lambda: Bins.for_interval(-math.inf, 0.0, False),
    lambda: Bins.for_interval(0, 10**400, True),
    lambda: DiscreteLaplace(1.0).accuracy(1.0),
    lambda: edge_errors(DiscreteLaplace(1.0), 0.5, 4, -0.1),
])
def test_mechanisms_refuse_what_they_cannot_calibrate(make):
    with pytest.raises(DpsqlError):
        make()


def test_mechanisms_stay_finite_at_the_edges_of_their_range():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from numpy either
        for scale in (2.0**-40, 1e-9, 1.0, 2.0**40, 2.0**48):
            m = DiscreteLaplace(scale)
            for alpha in (0.5, 1e-12, 1e-300):
                assert 0 <= m.accuracy(alpha) < math.inf
            assert math.isfinite(m.privacy_map(1.0))
        sel = LaplaceThreshold(1e-9, 1e-100, 1000)  # scale 10^12
        assert 1 < sel.threshold < 2**63 and sel.leak_probability() <= 1e-100 * 1.0001
        for sigma in (2.0**-40, 3.0, 1e6, 2.0**48):
            g = DiscreteGaussian(sigma)
            assert 0 <= g.accuracy(1e-300) < math.inf
        assert math.isfinite(zcdp_to_dp(1.0, 5e-324))
        assert zcdp_to_dp(math.inf, 0.5) == math.inf and zcdp_to_dp(math.nan, 0.5) == math.inf
        assert Cost(1e200).zcdp[0] == math.inf  # not OverflowError
        for eps in (1e-9, 1.0, 1e9):
            assert rho_for(eps, 1e-100) > 0


def test_threshold_uses_the_exact_log_of_q():
    # scale 2^47: exp(-1/scale) rounds, its log is off by ~2% (the threshold was too low)
    sel = LaplaceThreshold(1.0, 1e-6, 2**47)
    log_q = -sel.noise.s / sel.noise.t
    exact = math.ceil(math.log(1e-6 * (1 + math.exp(log_q)) / 2**47) / log_q) + 1
    assert sel.threshold == exact


# -- hypothesis: analysis of any parameters fails only with a DpsqlError ----------------

def _plan(sql, epsilon, delta, max_groups, max_rows, mechanism):
    return analyze(validate(parse(sql)), pums_catalog(), epsilon, delta, max_groups, max_rows,
                   seed=0, mechanism=mechanism)


SQLS = [Q, KEYS, "SELECT sex, SUM(income) FROM pums GROUP BY sex",
        "SELECT AVG(income * 1e200), VARIANCE(age) FROM pums_dup",
        "SELECT age, MEDIAN(income), MAX(age * 1e150) FROM pums GROUP BY age"]
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(min_value=-(10**400), max_value=10**400),
                    st.sampled_from([5e-324, 1e-300, 1e-100, 1e-9, 1e9, 2.0**48]))
bounds = st.one_of(st.none(), st.integers(min_value=-(10**30), max_value=10**30),
                   st.sampled_from([1, 2, 10**6, 10**6 + 1, 2**53, 10**400]))


@pytest.mark.slow  # fuzzing (hypothesis)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(sql=st.sampled_from(SQLS), epsilon=numbers, delta=numbers, max_groups=bounds,
       max_rows=bounds, mechanism=st.sampled_from(["laplace", "gaussian"]))
def test_fuzz_parameters_fail_only_as_dpsql_errors(sql, epsilon, delta, max_groups,
                                                   max_rows, mechanism):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            plan = _plan(sql, epsilon, delta, max_groups, max_rows, mechanism)
            for stat in plan.stats:
                assert math.isfinite(stat.mechanism.scale)
                assert math.isfinite(stat.mechanism.accuracy(0.05 / 65))
            if plan.selection is not None:
                assert 1 <= plan.selection.threshold < 2**63
    except DpsqlError:
        pass


def test_refusals_before_the_charge_are_logged_as_refusals(refusal_conn):
    with pytest.raises(PrivacyParameterError):
        refusal_conn.execute(Q, epsilon=1.0, max_rows=HUGE)
    assert refusal_conn.budget.spent == (0.0, 0.0)
    last = ledger_of(refusal_conn).log(refusal_conn.catalog.dataset, limit=1)[0]
    assert last["outcome"] == "refused" and "PrivacyParameterError" in last["detail"]
    assert "max_rows" in last["detail"]


def test_a_dbapi_caller_gets_a_programming_error_not_an_internal_error(security_db):
    from dpsql import dbapi

    conn = dbapi.connect(str(security_db), catalog=pums_catalog(), ledger=":memory:",
                         epsilon=1.0)
    try:
        cur = conn.cursor()
        for sql in ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (max_groups_contributed = "
                    + "9" * 400 + ") COUNT(*) FROM pums",
                    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (delta = 1e-320) "
                    "COUNT(*) FROM pums"):
            with pytest.raises(dbapi.DatabaseError) as info:
                cur.execute(sql)
            assert not isinstance(info.value, dbapi.InternalError)
    finally:
        conn.close()
