"""The tamper-evidence primitives: the MAC every record carries and the documents it
signs (the checkpoint and the head record), with the text helpers the hashes need.

A MAC is SHA-256 over the ledger's id and a JSON encoding of the record, or, with the
owner's key (:data:`~dpsql.ledger.settings.KEY_ENV`), HMAC-SHA256: without the key
anyone who can write the file can recompute it, so unkeyed it only catches accidents.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from typing import Any


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _storable(text: str) -> str:
    """Text a database can store: a lone surrogate (not UTF-8) becomes a visible escape;
    NUL (which PostgreSQL's text refuses) too."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")

#: The records' one JSON encoding (compact, ASCII): built once, as ``json.dumps`` with
#: these arguments would build it per call (a third of a charge's time went there).
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


class _Mac:
    """SHA-256 of a record bound to the ledger's id; HMAC-SHA256 with the owner's key."""

    def __init__(self, ledger_id: str, key: bytes | None):
        self.prefix = f"dpsql-ledger:{ledger_id}:".encode()
        self.key = key

    def __call__(self, *parts: Any) -> str:
        msg = self.prefix + _ENCODE(parts).encode()
        if self.key is not None:
            return hmac.new(self.key, msg, hashlib.sha256).hexdigest()
        return hashlib.sha256(msg).hexdigest()


def _checkpoint_doc(mac: _Mac, last_id: int, last_hash: str, totals: dict) -> str:
    rows = sorted([*k, *v] for k, v in totals.items())
    return json.dumps({"id": last_id, "hash": last_hash, "totals": rows,
                       "mac": mac("checkpoint", last_id, last_hash, rows)})


def _head_doc(mac: _Mac, seq: int, last_id: int, last_hash: str, rows: dict) -> str:
    items = sorted([k, v] for k, v in rows.items())
    return json.dumps({"seq": seq, "id": last_id, "hash": last_hash, "rows": items,
                       "mac": mac("head", seq, last_id, last_hash, items)})


@functools.lru_cache(maxsize=1024)
def _hk(kind: str, *names: str) -> str:
    """The head's key of one row of a small table (b: budgets, t: totals, g: bindings,
    r: refusal counts)."""
    return kind + json.dumps(list(names), ensure_ascii=True)


def _tag(mac: str) -> str:
    return mac[:32]  # 128 bits of the row's MAC: enough to pin the row's exact version

