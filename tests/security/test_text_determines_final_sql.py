"""The final SQL is a function of the tree's text: the memo of final texts is keyed by it.

:meth:`dpsql.backends.base.Backend._total_sql` remembers the final text by the text of
the tree it came from. That is exactly what a fresh run gives only if a tree and the
parse of its own text are typed and guarded alike. dpsql's rewrite once built date
constants as ``DateStrToDate`` nodes, written ``CAST('…' AS DATE)``: guarded as an
unknown operation (``TRY(CAST(…))``) where the parse of the same text holds a Cast
(``TRY_CAST(…)``), so whichever tree came first decided the text the other one ran
(attack review). Here every ``to_sql`` of the totality fuzzer's queries, with the memo
off, is compared with a fresh ``to_sql`` of the parse of its tree's text.
"""

from __future__ import annotations

import pytest
from sqlglot import parse_one

from dpsql.backends import base
from tests.privacy import totality


def _outcome(run):
    try:
        return "ok", run()
    except Exception as exc:  # noqa: BLE001 - compared, not raised
        return "error", type(exc).__name__


@pytest.mark.slow
def test_a_tree_and_the_parse_of_its_text_give_the_same_final_sql(monkeypatch):
    original = base.Backend._total_sql
    seen, differ = [], []

    def both(self, tree):
        monkeypatch.setattr(self, "_finals_version", lambda: None, raising=False)
        text = tree.sql(dialect=self.dialect)
        a = _outcome(lambda: original(self, tree.copy()))
        b = _outcome(lambda: original(self, parse_one(text, read=self.dialect)))
        seen.append(text)
        if a != b:
            differ.append((text, a, b))
        return original(self, tree)

    monkeypatch.setattr(base.Backend, "_total_sql", both)
    totality.fuzz("duckdb", 2731, queries=120, reduce_seconds=1)
    assert len(seen) > 50
    assert not differ, differ[:3]
