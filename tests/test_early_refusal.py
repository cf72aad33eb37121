"""The early refusal (dpsql.ledger.reports.BudgetView.refusal) reads the ledger only
for a query that the limits, as this connection's last charge left them, would not fit
(dpsql.ledger.charging.Charging.fits); the charge decides, atomically, either way.

Each test fails when ``fits`` is forced: always True, and a query over the budget is
bound before it is refused; always False, and every new query reads the ledger first.
"""

from __future__ import annotations

import pytest

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.ledger import Ledger

SQL = "SELECT COUNT(*) FROM pums"


def _spy(monkeypatch, cls, name) -> list:
    calls: list = []
    real = getattr(cls, name)

    def spy(*args, **kwargs):
        calls.append(args[1:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(cls, name, spy)
    return calls


def test_a_query_within_the_last_charges_limits_is_not_read_for_early(connect, monkeypatch):
    conn = connect(budget=(1.0, 1e-6), plan_cache=False)
    reads = _spy(monkeypatch, Ledger, "_admission")
    conn.execute(SQL, epsilon=0.25)
    assert len(reads) == 1  # nothing remembered yet: the early read runs
    conn.execute(SQL + " WHERE age > 30", epsilon=0.25)
    conn.execute(SQL, epsilon=0.25)
    assert len(reads) == 1
    assert conn.budget.spent == (0.75, 0.0)


def test_a_query_over_the_remembered_limits_is_refused_before_binding(connect,
                                                                      monkeypatch):
    conn = connect(budget=(1.0, 1e-6), plan_cache=False)
    conn.execute(SQL, epsilon=0.75)
    binds = _spy(monkeypatch, DuckDBBackend, "check")
    with pytest.raises(dpsql.BudgetExhaustedError, match="has only epsilon=0.25"):
        conn.execute(SQL + " WHERE age > 30", epsilon=0.5)
    assert binds == []
    assert conn.budget.spent == (0.75, 0.0)


def test_a_spend_elsewhere_is_refused_by_the_charge(connect, tmp_path, monkeypatch):
    # another connection spends after this one's last charge: the remembered limits
    # say the query fits, so there is no early read, and the charge refuses it (and
    # forgets them: the next query reads first)
    ledger = str(tmp_path / "ledger.sqlite")
    mine = connect(budget=(1.0, 1e-6), ledger=ledger, analyst="a")
    other = connect(budget=(1.0, 1e-6), ledger=ledger, analyst="b")
    mine.execute(SQL, epsilon=0.25)
    other.execute(SQL, epsilon=0.7)
    reads = _spy(monkeypatch, Ledger, "_admission")
    with pytest.raises(dpsql.BudgetExhaustedError, match="has only epsilon=0.05"):
        mine.execute(SQL + " WHERE age > 30", epsilon=0.25)
    assert reads == []
    assert mine.budget.remaining[0] == pytest.approx(0.05)
    mine.execute(SQL + " WHERE age > 40", epsilon=0.05)
    assert len(reads) == 1
    assert mine.budget.remaining[0] == pytest.approx(0.0, abs=1e-12)


def test_a_hint_serves_one_query(connect, monkeypatch):
    # attack review: a query refused after the early refusal and before its charge (here
    # the engine's bind refuses it) must not leave the hint for every later query
    conn = connect(budget=(1.0, 1e-6), plan_cache=False)
    conn.execute(SQL, epsilon=0.25)
    reads = _spy(monkeypatch, Ledger, "_admission")

    def refused(self, expression):
        raise dpsql.BackendError("refused by the bind")

    with monkeypatch.context() as patch:
        patch.setattr(DuckDBBackend, "check", refused)
        with pytest.raises(dpsql.BackendError):
            conn.execute(SQL + " WHERE age > 30", epsilon=0.25)
    assert reads == []  # the hint of the last charge served it
    conn.execute(SQL, epsilon=0.25)
    assert len(reads) == 1  # no hint left: read first
    conn.execute(SQL, epsilon=0.25)
    assert len(reads) == 1  # the charge's new hint
    assert conn.budget.spent == (0.75, 0.0)  # the refused query charged nothing
