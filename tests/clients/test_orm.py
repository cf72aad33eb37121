"""SQLAlchemy ORM through the dpsql dialect: the derived tables the ORM writes are answered.

``session.query(Person).count()`` wraps the query in ``SELECT count(*) FROM (SELECT
... FROM pums) AS anon_1``; subqueries and CTEs built with ``.subquery()`` / ``.cte()``
are row-level derived tables. Each is answered and charged like the query written
against the table itself (dpsql.analyze.derived.inline_row_derived).
"""

from __future__ import annotations

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.dialects import registry
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dpsql.datasets import catalog_path
from dpsql.ledger import Ledger


class Base(DeclarativeBase):
    pass


class Person(Base):
    __tablename__ = "pums"
    pid: Mapped[int] = mapped_column(primary_key=True)
    age: Mapped[int]
    sex: Mapped[int]
    income: Mapped[float]


@pytest.fixture
def engine(pums_file, tmp_path):
    registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")
    url = sa.engine.URL.create("dpsql+duckdb", database=str(pums_file), query={
        "catalog": str(catalog_path("pums")), "ledger": str(tmp_path / "ledger.sqlite"),
        "epsilon": "0.5", "delta": "1e-6"})
    eng = sa.create_engine(url)
    sent: list[str] = []
    sa.event.listen(eng, "before_cursor_execute",
                    lambda conn, cursor, statement, *args: sent.append(statement))
    eng.sent = sent
    yield eng
    eng.dispose()


def spent(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    try:
        return ledger.spent("pums").basic
    finally:
        ledger.close()


def test_query_count(engine, tmp_path):
    with Session(engine) as session:
        n = session.query(Person).count()
    assert "anon_1" in engine.sent[-1] and "FROM (SELECT" in engine.sent[-1]
    assert 900 < n < 1100  # 1,000 people, noise of scale 2 (ε = 0.5)
    assert spent(tmp_path) == pytest.approx((0.5, 0.0))


def test_filtered_query_count(engine, tmp_path):
    with Session(engine) as session:
        adults = session.query(Person).filter(Person.age >= 18, Person.sex == 1).count()
        everyone = session.query(Person).count()
    assert "WHERE" in engine.sent[-2]
    assert 0 < adults < everyone
    assert spent(tmp_path) == pytest.approx((1.0, 0.0))


def test_subquery_and_cte_grouped(engine):
    adults = select(Person.sex, Person.age).where(Person.age >= 18).subquery()
    cte = select(Person.sex, (Person.income / 1000).label("k")).cte("incomes")
    with Session(engine) as session:
        rows = session.execute(select(adults.c.sex, func.count().label("n"))
                               .group_by(adults.c.sex).order_by(adults.c.sex)).all()
        assert [r.sex for r in rows] == [0, 1] and all(r.n > 300 for r in rows)
        avg = session.execute(select(func.avg(cte.c.k))).scalar_one()
    assert "WITH incomes AS" in engine.sent[-1]
    assert 0 <= avg <= 500


def test_pandas_read_sql_over_an_orm_subquery(engine):
    sub = select(Person).where(Person.age.between(20, 60)).subquery()
    frame = pd.read_sql(select(sub.c.sex, func.sum(sub.c.income).label("total"))
                        .group_by(sub.c.sex), engine)
    assert list(frame.columns) == ["sex", "total"] and sorted(frame.sex) == [0, 1]
