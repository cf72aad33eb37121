"""``dpsql serve``: the PostgreSQL wire protocol in front of dpsql.

Analysts reach dpsql with their own tools (psql, JDBC, psycopg, SQLAlchemy, pandas)
over the PostgreSQL v3 protocol; the service holds the database, the catalog and the
ledger, and each login is an analyst with its own budget in the one ledger.

Modules:

* :mod:`~dpsql.server.protocol`: framing, messages, type OIDs and value codecs;
* :mod:`~dpsql.server.auth`: SCRAM-SHA-256 verifiers (never passwords), the login
  store, failed-login throttling, a self-signed certificate for a local trial;
* :mod:`~dpsql.server.config`: the owner's YAML config and its check;
* :mod:`~dpsql.server.catalog_sql`: answers to ``pg_catalog`` / ``information_schema``
  probes from an in-memory DuckDB that holds only the catalog's empty tables
  (:mod:`~dpsql.server.catalog_db` builds it, :mod:`~dpsql.server.catalog_rewrite`
  turns a probe into its SQL, :mod:`~dpsql.server.catalog_functions` allow-lists calls);
* :mod:`~dpsql.server.session`: one connection's state and how each statement is
  answered (:mod:`~dpsql.server.commands`: SET, SHOW, BEGIN...;
  :mod:`~dpsql.server.settings`, :mod:`~dpsql.server.parameters`,
  :mod:`~dpsql.server.statements`, :mod:`~dpsql.server.sqlstate`: errors as SQLSTATEs);
* :mod:`~dpsql.server.server`: the asyncio accept loop, login, limits and cancellation
  (:mod:`~dpsql.server.extended`: Parse/Bind/Describe/Execute/Close;
  :mod:`~dpsql.server.replies`: outcomes as messages);
* :mod:`~dpsql.server.cli`: ``dpsql serve`` and ``dpsql user``.
"""

from dpsql.errors import DpsqlError


class ServerError(DpsqlError):
    """A problem of the service itself: its config, its login store, its listener."""

    stage = "serve"


class ProtocolError(ServerError):
    """A client broke the wire protocol (malformed or oversize frame): its connection
    is closed; nothing else is affected."""


__all__ = ["ProtocolError", "ServerError"]
