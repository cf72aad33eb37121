"""Tamper evidence: the hash chain, the checkpoint, the head record, and verification.

Every entry carries the MAC of the one before; its outcome carries its own MAC bound to
the entry's hash. The head record (one ``meta`` row) names the newest entry and the
exact version of every budget, running total, binding and refusal-count row; each
transaction checks it (:meth:`Chain._load_head`) and each write that changes those rows
rewrites it (:meth:`Chain._write_head`). At open the entries since the checkpoint are
verified and summed onto the checkpoint's totals, which must equal the running totals
(:meth:`Chain._verify_since_checkpoint`); :meth:`Chain.verify` checks everything.
"""

from __future__ import annotations

import hmac
import json
import math
from typing import Any

from dpsql.accounting import ACCOUNTANTS
from dpsql.errors import LedgerError
from dpsql.ledger.records import _checkpoint_doc, _head_doc, _hk, _sha, _tag
from dpsql.ledger.schema import _ENTRY_COLUMNS, _OUTCOMES
from dpsql.ledger.settings import ALL


class Chain:
    """The chain's and the head record's checks (a mixin of :class:`dpsql.ledger.Ledger`)."""

    def _checkpoint(self) -> tuple[int, str, dict]:
        raw = self._s.execute(f"SELECT value FROM {self._p}meta WHERE key = 'checkpoint'"
                              ).fetchone()
        try:
            doc = json.loads(raw[0])
            last_id, last_hash, rows = int(doc["id"]), str(doc["hash"]), doc["totals"]
            ok = hmac.compare_digest(str(doc["mac"]),
                                     self._mac("checkpoint", last_id, last_hash, rows))
            totals = {(r[0], r[1]): tuple(r[2:]) for r in rows}
        except (TypeError, ValueError, KeyError, IndexError):
            ok = False
        if not ok:
            raise LedgerError(f"ledger {self.path!r}: its checkpoint was altered")
        return last_id, last_hash, totals

    def _verify_since_checkpoint(self) -> None:
        """Checks the entries after the checkpoint and the running totals; moves the
        checkpoint forward (unless read-only). Raises LedgerError on any mismatch."""
        write = not self._s.readonly
        (self._s.begin_write if write else self._s.begin_read)()
        try:
            self._load_head()
            last_id, last_hash, totals = self._checkpoint()
            if last_id:
                # the checkpointed entry itself is re-hashed: the chain's newest verified link
                row = self._s.execute(f"SELECT {_ENTRY_COLUMNS} FROM {self._p}entries "
                                      "WHERE id = ?", (last_id,)).fetchone()
                if row is None or row[-1] != last_hash:
                    raise LedgerError(f"ledger {self.path!r}: the checkpointed entry "
                                      f"{last_id} was altered or removed")
                self._check_entry(row, row[-2])
            new_id, new_hash, totals, count = self._replay(last_id, last_hash, totals)
            if (new_id, new_hash) != (self._head["id"], self._head["hash"]):
                raise LedgerError(f"ledger {self.path!r}: its entries end at {new_id}, not "
                                  f"where its head record says ({self._head['id']}): "
                                  "entries were removed or rewound")
            self._compare_totals(totals)
            self._check_small_tables()
            self._cp_id = last_id
            if write and count:
                self._s.execute(f"UPDATE {self._p}meta SET value = ? WHERE key = 'checkpoint'",
                                (_checkpoint_doc(self._mac, new_id, new_hash, totals),))
                self._cp_id = new_id
            self._s.execute("COMMIT")
            self._seen = self._head["seq"]
        except BaseException:
            if self._s.in_transaction():
                self._s.execute("ROLLBACK")
            raise

    def _advance_checkpoint(self, db) -> None:
        """Verifies the entries after the checkpoint against the running totals and
        moves the checkpoint to the newest entry (inside the caller's transaction)."""
        last_id, last_hash, totals = self._checkpoint()
        new_id, new_hash, totals, _ = self._replay(last_id, last_hash, totals)
        self._compare_totals(totals)
        db.execute(f"UPDATE {self._p}meta SET value = ? WHERE key = 'checkpoint'",
                   (_checkpoint_doc(self._mac, new_id, new_hash, totals),))
        self._cp_id = new_id

    def _check_entry(self, row: tuple, prev: str) -> None:
        """One entry: its cost, its link to ``prev``, its hash (over the stored text's
        hash too), its stored text against its full-text hash when all of it is kept,
        and its outcome's MAC."""
        (eid, t, ds, an, kind, e, d, r, rd, sql, sql_hash, length, outcome, detail, omac, p,
         h) = row
        parts = (e, d, r, rd)
        if not all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in parts):
            raise LedgerError(f"ledger {self.path!r}: entry {eid} has a cost that is not "
                              "a finite non-negative number (corrupted or altered)")
        if not isinstance(sql, str) or not isinstance(length, int):
            raise LedgerError(f"ledger {self.path!r}: entry {eid} was altered")
        if p != prev or not hmac.compare_digest(
                str(h), self._mac("entry", eid, t, ds, an, kind, *parts, sql_hash, length,
                                  _sha(sql), p)):
            raise LedgerError(f"ledger {self.path!r}: entry {eid} breaks the hash chain "
                              "(corrupted or altered)")
        # text is only ever lengthened when made storable, so a stored text as long as
        # the query is the query itself: it must have the query's hash
        if len(sql) == length and _sha(sql) != sql_hash:
            raise LedgerError(f"ledger {self.path!r}: the text of entry {eid} does not match "
                              "its hash (altered)")
        if kind not in _OUTCOMES:
            raise LedgerError(f"ledger {self.path!r}: entry {eid} has unknown kind")
        if outcome not in _OUTCOMES[kind] or not hmac.compare_digest(
                str(omac), self._mac("outcome", eid, h, outcome, detail)):
            raise LedgerError(f"ledger {self.path!r}: the outcome of entry {eid} was altered")

    def _replay(self, after: int, prev: str, totals: dict) -> tuple[int, str, dict, int]:
        """Verifies the chain after entry ``after`` and adds its charges to ``totals``
        (in id order, the order the running totals were summed in)."""
        totals = dict(totals)
        last_id, count = after, 0
        cur = self._s.execute(f"SELECT {_ENTRY_COLUMNS} FROM {self._p}entries WHERE id > ? "
                              "ORDER BY id", (after,))
        for row in cur:
            self._check_entry(row, prev)
            eid, ds, an, kind, h = row[0], row[2], row[3], row[4], row[-1]
            if kind == "charge":
                e, d, r, rd = row[5:9]
                for key in ((ds, an), (ds, ALL)):
                    old = totals.get(key, (0.0, 0.0, 0.0, 0.0, 0))
                    totals[key] = (old[0] + e, old[1] + d, old[2] + r, old[3] + rd, old[4] + 1)
            prev, last_id, count = h, eid, count + 1
        return last_id, prev, totals, count

    def _compare_totals(self, totals: dict) -> None:
        rows = self._s.execute(
            "SELECT dataset, analyst, epsilon, delta, rho, rho_delta, n, mac FROM "
            f"{self._p}totals").fetchall()
        stored = {}
        for ds, an, *vals, mac in rows:
            self._check_totals_row(ds, an, tuple(vals), mac)
            stored[(ds, an)] = tuple(vals)
        want = {k: v for k, v in totals.items() if v[4]}
        if stored != want:
            bad = sorted(set(stored) ^ set(want) | {k for k in stored if stored[k] !=
                                                    want.get(k)})
            raise LedgerError(f"ledger {self.path!r}: the running totals of {bad[:3]} do not "
                              "match its entries (corrupted or altered)")

    def _checked_once(self, text: str, check) -> None:
        """Runs ``check()`` (a row's value and MAC checks) unless a row of exactly this
        text (``repr`` of its fields: 1, 1.0, True and -0.0 apart) passed it on this
        connection, or was written by it; what a check compares with the ledger's state
        now (the head record) is never skipped, and is not ``check``'s."""
        if text in self._verified:
            return
        check()
        self._remember_checked(text)

    def _remember_checked(self, text: str) -> None:
        if len(self._verified) >= 4096:  # rows of analysts long gone
            self._verified.clear()
        self._verified.add(text)

    def _check_totals_row(self, ds: str, an: str, vals: tuple, mac: str) -> None:
        if not all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in vals[:4]) \
                or not isinstance(vals[4], int) or vals[4] < 0:
            raise LedgerError(f"ledger {self.path!r}: the running total of {ds!r}/{an!r} is "
                              "not a finite non-negative number (corrupted or altered)")
        if not hmac.compare_digest(mac, self._mac("totals", ds, an, *vals)):
            raise LedgerError(f"ledger {self.path!r}: the running total of {ds!r}/{an!r} was "
                              "altered")

    def _check_small_tables(self) -> None:
        """Every row of budgets, totals, bindings and refusal counts: its MAC, and the
        whole set against the head record (no row removed, added or rolled back)."""
        found: dict = {}
        for row in self._s.execute(
                "SELECT dataset, analyst, epsilon, delta, accountant, source, mac FROM "
                f"{self._p}budgets").fetchall():
            self._check_budget_row(row, head=False)
            found[_hk("b", row[0], row[1])] = _tag(row[-1])
        for ds, an, *vals, mac in self._s.execute(
                "SELECT dataset, analyst, epsilon, delta, rho, rho_delta, n, mac FROM "
                f"{self._p}totals").fetchall():
            self._check_totals_row(ds, an, tuple(vals), mac)
            found[_hk("t", ds, an)] = _tag(mac)
        for ds, db, _, mac in self._s.execute(
                f"SELECT dataset, db, updated, mac FROM {self._p}bindings").fetchall():
            self._check_binding_row(ds, db, mac, head=False)
            found[_hk("g", ds)] = _tag(mac)
        for ds, an, stored, dropped in self._s.execute(
                f"SELECT dataset, analyst, stored, dropped FROM {self._p}refusal_counts"
        ).fetchall():
            found[_hk("r", ds, an)] = [stored, dropped]
        want = self._head["rows"]
        if found != want:
            bad = sorted(k for k in set(found) | set(want) if found.get(k) != want.get(k))
            raise LedgerError(
                f"ledger {self.path!r}: its budgets, running totals, bindings or refusal "
                f"counts do not match its head record ({', '.join(bad[:3])}): rows were "
                "removed, added or rolled back")

    def _check_binding_row(self, ds: str, db: str, mac: str, head: bool = True) -> None:
        if not isinstance(mac, str) or not hmac.compare_digest(
                mac, self._mac("binding", ds, db)):
            raise LedgerError(f"ledger {self.path!r}: the database of data set {ds!r} "
                              "was altered")
        if head:
            self._match_head(_hk("g", ds), _tag(mac), f"the binding of {ds!r}")

    # -- the head record ----------------------------------------------------------------

    def _load_head(self) -> None:
        """Reads and checks the head record (inside the caller's transaction): its MAC,
        that it is not older than one this connection saw, and that the newest entry is
        the one it names. One row and one index lookup."""
        raw = self._s.execute(f"SELECT value FROM {self._p}meta WHERE key = 'head'"
                              ).fetchone()
        memo = self._head_memo
        if raw is not None and memo is not None and raw[0] == memo[0]:
            # the very text this connection checked (or wrote) before: the same MAC
            # over the same fields, so the same verdict (the seq and tail checks below
            # still run: they compare it with the ledger's state now)
            _, seq, last_id, last_hash, rows = memo
            rows = dict(rows)
        else:
            seq, last_id, last_hash, rows = self._parse_head(raw)
            self._head_memo = (raw[0], seq, last_id, last_hash, dict(rows))
        if seq < self._seen:
            raise LedgerError(f"ledger {self.path!r} was rewound to an older state while this "
                              "connection had it open; refusing to charge")
        tail = self._s.execute(f"SELECT id, hash FROM {self._p}entries ORDER BY id DESC "
                               "LIMIT 1").fetchone()
        actual = (0, self._mac("genesis")) if tail is None else tuple(tail)
        if actual != (last_id, last_hash):
            raise LedgerError(f"ledger {self.path!r}: its newest entry does not match its head "
                              "record: entries were removed, rewound or added")
        self._head = {"seq": seq, "id": last_id, "hash": last_hash, "rows": rows}
        self._head_dirty = False

    def _parse_head(self, raw) -> tuple[int, int, str, dict]:
        """The head record's (seq, last id, last hash, rows), its MAC checked."""
        try:
            doc = json.loads(raw[0])
            seq, last_id, last_hash = int(doc["seq"]), int(doc["id"]), str(doc["hash"])
            items = doc["rows"]
            ok = hmac.compare_digest(str(doc["mac"]),
                                     self._mac("head", seq, last_id, last_hash, items))
            rows = {str(k): v for k, v in items}
        except (TypeError, ValueError, KeyError, IndexError):
            ok = False
        if not ok:
            raise LedgerError(f"ledger {self.path!r}: its head record is missing or was "
                              "altered")
        return seq, last_id, last_hash, rows

    def _match_head(self, key: str, value: Any, what: str) -> None:
        if self._head["rows"].get(key) != value:
            raise LedgerError(f"ledger {self.path!r}: {what} does not match the ledger's head "
                              "record (removed, rolled back or altered)")

    def _head_set(self, key: str, value: Any) -> None:
        self._head["rows"][key] = value
        self._head_dirty = True

    def _write_head(self, db) -> None:
        h = self._head
        h["seq"] += 1
        doc = _head_doc(self._mac, h["seq"], h["id"], h["hash"], h["rows"])
        db.execute(f"UPDATE {self._p}meta SET value = ? WHERE key = 'head'", (doc,))
        # the record this connection signed: read back as this text, it needs no check
        # (committed or not: the memo is of the text, not of the ledger's state)
        self._head_memo = (doc, h["seq"], h["id"], h["hash"], dict(h["rows"]))

    def _check_budget_row(self, row, head: bool = True) -> tuple[float, float]:
        ds, an, e, d, acc, src, mac = row
        if not (isinstance(e, float) and math.isfinite(e) and e > 0 and isinstance(d, float)
                and 0 <= d < 1) or acc not in ACCOUNTANTS:
            raise LedgerError(f"ledger {self.path!r}: the budget of {ds!r}/{an!r} is not a "
                              "valid (epsilon, delta) (corrupted or altered)")
        if not hmac.compare_digest(mac, self._mac("budget", ds, an, e, d, acc, src)):
            raise LedgerError(f"ledger {self.path!r}: the budget of {ds!r}/{an!r} was altered")
        if head:
            self._match_head(_hk("b", ds, an), _tag(mac), f"the budget of {ds!r}/{an!r}")
        return (e, d)


    def verify(self) -> dict:
        """Checks the whole chain, the checkpoint and the running totals (O(history)).

        Returns:
            {"entries": n, "charges": m, "id": ledger id, "keyed": bool}.

        Raises:
            LedgerError: anything does not match.
        """
        with self._tx(write=False) as db:
            last_id, last_hash, cp_totals = self._checkpoint()
            end_id, end_hash, totals, count = self._replay(0, self._mac("genesis"), {})
            if (end_id, end_hash) != (self._head["id"], self._head["hash"]):
                raise LedgerError(f"ledger {self.path!r}: its entries end at {end_id}, not "
                                  "where its head record says: entries were removed")
            if last_id:
                _, at_cp, totals_cp, _ = self._replay_until(last_id)
                if at_cp != last_hash or {k: v for k, v in totals_cp.items() if v[4]} != \
                        {k: tuple(v) for k, v in cp_totals.items() if v[4]}:
                    raise LedgerError(f"ledger {self.path!r}: the checkpoint does not match "
                                      "the chain (altered)")
            self._compare_totals(totals)
            self._check_small_tables()
            charges = db.execute(f"SELECT count(*) FROM {self._p}entries WHERE "
                                 "kind = 'charge'").fetchone()[0]
        return {"entries": count, "charges": charges, "id": self.id, "keyed": self.keyed}

    def _replay_until(self, last: int) -> tuple[int, str, dict, int]:
        totals: dict = {}
        prev = self._mac("genesis")
        for (_eid, ds, an, kind, e, d, r, rd, h) in self._s.execute(
                "SELECT id, dataset, analyst, kind, epsilon, delta, rho, rho_delta, hash "
                f"FROM {self._p}entries WHERE id <= ? ORDER BY id", (last,)):
            if kind == "charge":
                for key in ((ds, an), (ds, ALL)):
                    old = totals.get(key, (0.0, 0.0, 0.0, 0.0, 0))
                    totals[key] = (old[0] + e, old[1] + d, old[2] + r, old[3] + rd, old[4] + 1)
            prev = h
        return last, prev, totals, 0
