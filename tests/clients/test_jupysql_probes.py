"""jupysql's probes (``%sqlcmd tables``, ``%sqlcmd columns``) in IPython, over dpsql.

Reflection comes from the catalog alone: it reads no row and costs nothing.
"""

from __future__ import annotations

import pytest

from dpsql.datasets import catalog_path
from tests.clients.conftest import import_jupysql as _import_jupysql  # noqa: F401 - test_docs

pytest.importorskip("IPython")
sa = pytest.importorskip("sqlalchemy")


def _spent(ledger):
    from dpsql.ledger import Ledger

    led = Ledger(ledger)
    try:
        return led.spent("pums").basic, led.log()
    finally:
        led.close()


def test_sqlcmd_tables_lists_the_catalog_tables_free(ipython):
    ip, _, ledger = ipython
    assert "pums" in str(ip.run_line_magic("sqlcmd", "tables"))
    assert "pums" in str(ip.run_line_magic("sqlcmd", "tables --schema main"))
    spent, log = _spent(ledger)
    assert spent == (0.0, 0.0) and log == []


def test_sqlcmd_columns_shows_catalog_columns_and_types(ipython):
    ip, url, ledger = ipython
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        probe_answered = True
        try:
            conn.exec_driver_sql('SELECT * FROM "pums" WHERE 1=0')
        except sa.exc.DBAPIError:
            probe_answered = False
    engine.dispose()
    if not probe_answered:
        # jupysql checks a table exists with this probe before it reflects; answering
        # it is issue #15 item 5 (another branch). Until then, reflection alone:
        pytest.xfail("the schema probe SELECT * ... WHERE 1=0 is not answered yet")
    text = str(ip.run_line_magic("sqlcmd", "columns -t pums"))
    for name, kind in (("pid", "BIGINT"), ("age", "BIGINT"), ("income", "DOUBLE")):
        assert name in text and kind in text
    assert "bounds [0, 100]" in text  # age's bounds, from the catalog's comment
    assert _spent(ledger)[0] == (0.0, 0.0)


def test_inspector_methods_jupysql_uses(pums_file, tmp_path):
    engine = sa.create_engine(f"dpsql+duckdb:///{pums_file}?catalog={catalog_path('pums')}"
                              f"&epsilon=0.5&ledger={tmp_path / 'l.sqlite'}&budget_epsilon=5")
    insp = sa.inspect(engine)
    assert insp.get_schema_names() == ["main"]
    assert insp.default_schema_name == "main"
    assert insp.has_schema("main") and not insp.has_schema("information_schema")
    for schema in (None, "main"):
        assert insp.get_table_names(schema=schema) == ["pums"]
        assert insp.has_table("pums", schema=schema)
        columns = {c["name"]: c for c in insp.get_columns("pums", schema=schema)}
        assert isinstance(columns["age"]["type"], sa.BigInteger)
        assert isinstance(columns["income"]["type"], sa.Double)
        assert columns["sex"]["comment"] == "public values [0, 1]"
    assert insp.get_table_names(schema="other") == []
    assert not insp.has_table("pums", schema="other")
    with pytest.raises(sa.exc.NoSuchTableError):
        insp.get_columns("pums", schema="other")
    assert not insp.has_table("nowhere")
    assert insp.get_view_names() == [] and insp.get_view_names(schema="main") == []
    # everything at once (SQLAlchemy 2's multi-table reflection) and a reflected Table
    assert set(insp.get_multi_columns(schema="main")) == {("main", "pums")}
    table = sa.Table("pums", sa.MetaData(), autoload_with=engine)
    assert "income" in table.c
    engine.dispose()
