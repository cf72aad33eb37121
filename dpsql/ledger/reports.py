"""Reading the ledger: what was spent, by whom, the audit log, and one analyst's budget
as a :class:`BudgetView` (a mixin of :class:`dpsql.ledger.Ledger`).

Every read is one read transaction under the head record's checks
(:meth:`dpsql.ledger.core.LedgerBase._tx`); nothing here writes, but a read that shows
outcomes first lets this connection's queued ones be written
(:mod:`dpsql.ledger.outcomes`); the budget's numbers do not wait for them.
"""

from __future__ import annotations

from dpsql.accounting import Accounting, Cost, Spent
from dpsql.ledger.settings import ALL


class Reports:
    """Spend, spenders, refusal counts and the log (a mixin of
    :class:`dpsql.ledger.Ledger`)."""

    def spent(self, dataset: str, analyst: str | None = None) -> Spent:
        with self._tx(write=False, settle=False) as db:  # totals: the charges wrote them
            return self._spent(db, dataset, ALL if analyst is None else analyst)

    def view(self, dataset: str, analyst: str, cap=None) -> BudgetView:
        return BudgetView(self, dataset, analyst, cap)

    def spenders(self) -> list[tuple[str, str]]:
        """(dataset, analyst) of everyone who was charged, sorted."""
        with self._tx(write=False, settle=False) as db:
            self._check_small_tables()
            return sorted(tuple(r) for r in db.execute(
                f"SELECT dataset, analyst FROM {self._p}totals WHERE analyst <> ?", (ALL,)))

    def refusal_counts(self, dataset: str | None = None) -> list[tuple[str, str, int, int]]:
        """(dataset, analyst, stored, only counted) per analyst with refusals."""
        where, args = ("WHERE dataset = ?", (dataset,)) if dataset else ("", ())
        with self._tx(write=False, settle=False) as db:
            self._check_small_tables()
            return [tuple(r) for r in db.execute(
                f"SELECT dataset, analyst, stored, dropped FROM {self._p}refusal_counts "
                f"{where} ORDER BY dataset, analyst", args)]

    def log(self, dataset: str | None = None, limit: int = 100) -> list[dict]:
        """The audit log, newest first by insertion (never by wall-clock time)."""
        where, args = ("WHERE dataset = ?", (dataset,)) if dataset else ("", ())
        keys = ("id", "time", "dataset", "analyst", "sql", "sql_hash", "sql_length",
                "epsilon", "delta", "outcome", "detail")
        with self._tx(write=False) as db:
            rows = db.execute(f"SELECT {', '.join(keys)} FROM {self._p}entries {where} "
                              "ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
        return [dict(zip(keys, r, strict=True)) for r in rows]


class BudgetView:
    """One analyst's budget on one data set: ``spent``, ``remaining``, ``total``.

    ``spent`` is by basic composition (Σε, Σδ); ``remaining`` is the least of what the
    data set's total, the analyst's own total and the connection's cap leave under the
    data set's accountant; ``zcdp`` reports the zCDP view.
    """

    def __init__(self, ledger, dataset: str, analyst: str, cap=None):
        self.ledger, self.dataset, self.analyst = ledger, dataset, analyst
        self._cap = cap  # (total, this connection's running spend) or None

    def _limits(self) -> tuple[str, list[tuple[tuple[float, float], Spent]]]:
        out = []
        led = self.ledger
        with led._tx(write=False, settle=False) as db:
            base = led._budget_row(db, self.dataset, ALL)
            accountant = base[1] if base else "basic"
            if base is not None:
                out.append((base[0], led._spent(db, self.dataset, ALL)))
            own = led._budget_row(db, self.dataset, self.analyst) \
                if self.analyst != ALL else None
            if own is not None:
                out.append((own[0], led._spent(db, self.dataset, self.analyst)))
        if self._cap is not None:
            out.append((self._cap[0], self._cap[1].spent))
        return accountant, out

    def refusal(self, cost: Cost) -> str | None:
        """Why ``cost`` would not fit now (None if it would): one read, for refusing a
        query early and cheaply, by the charge's own rule
        (:meth:`~dpsql.ledger.charging.Charging._admission`); :meth:`Ledger.charge`
        decides, atomically.

        No read where the limits as this connection's last charge left them still fit
        it (:meth:`~dpsql.ledger.charging.Charging.fits`): spending since can only
        have come from elsewhere, which the charge reads; the read is for the query
        that would not fit, so that it is refused before the engine binds it.
        """
        led = self.ledger
        if led.fits(self.dataset, self.analyst, cost, self._cap):
            return None
        with led._tx(write=False, settle=False) as db:
            if led._budget_row(db, self.dataset, ALL) is None:
                return None  # no total yet: the charge refuses it, and logs why
            return led._admission(db, self.dataset, self.analyst, cost, self._cap)

    @property
    def total(self) -> tuple[float, float]:
        _, limits = self._limits()
        return (min(t[0] for t, _ in limits), min(t[1] for t, _ in limits))

    @property
    def spent(self) -> tuple[float, float]:
        """What this analyst has spent on the data set (all connections, all time)."""
        return self.ledger.spent(self.dataset, self.analyst).basic

    @property
    def remaining(self) -> tuple[float, float]:
        accountant, limits = self._limits()
        left = [Accounting(t, accountant).remaining(s) for t, s in limits]
        return (min(x[0] for x in left), min(x[1] for x in left))

    @property
    def accountant(self) -> str:
        return self._limits()[0]

    @property
    def zcdp(self) -> dict:
        """The analyst's spend as zCDP: ρ, the δ it does not cover, and ε at the total δ."""
        s = self.ledger.spent(self.dataset, self.analyst)
        return {"rho": s.rho, "delta": s.rho_delta,
                "epsilon": s.zcdp_epsilon(self.total[1])}

    def __repr__(self) -> str:
        (se, sd), (re_, rd) = self.spent, self.remaining
        return (f"Budget(dataset={self.dataset!r}, analyst={self.analyst!r}, "
                f"spent=({se:g}, {sd:g}), remaining=({re_:g}, {rd:g}))")
