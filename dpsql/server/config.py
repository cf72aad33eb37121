"""The owner's service config (YAML) and its check.

Example (paths are relative to the config file)::

    database: pums.duckdb          # a DuckDB/SQLite file, or a URL dpsql.connect accepts
    catalog: pums.yaml
    ledger: pums.ledger.sqlite     # must exist: dpsql budget init / budget set make it
    ledger_id: 3f2a...             # optional: the ledger's id (dpsql budget init prints it)
    logins: pums.logins.sqlite     # default: <ledger>.logins.sqlite
    budget: {epsilon: 10, delta: 1.0e-5}   # the data set's total, if the catalog has none
    listen: {host: 127.0.0.1, port: 5433}
    tls: {cert: server.crt, key: server.key}
    # tls: off                     # only with a loopback host: passwords in clear text
    session: {epsilon: 0.5, delta: 0}      # defaults a session starts with (optional)
    limits:
      max_connections: 100
      max_connections_per_login: 10
      max_message_bytes: 1048576
      idle_timeout_seconds: 900
      auth_timeout_seconds: 30
      workers: 16                  # threads that run queries
      probe_timeout_seconds: 5     # catalog probes (pg_catalog...) on the in-memory DuckDB
      probe_max_rows: 10000        # a catalog probe's answer at most...
      probe_max_bytes: 8388608     # ...and its size

The config pins the database, catalog and ledger for every session: a login chooses
none of them, and each session's analyst is its login.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "c.yaml").write_text("database: x.duckdb\\ncatalog: c.yaml\\nledger: l.sqlite\\n"
...                               "tls: off\\n")
>>> cfg = load_config(d / "c.yaml")
>>> cfg.port, cfg.tls, cfg.logins.name, cfg.limits.max_connections
(5433, False, 'l.sqlite.logins.sqlite', 100)
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dpsql.catalog import load_yaml
from dpsql.server import ServerError


@dataclass(frozen=True)
class ServerLimits:
    max_connections: int = 100
    max_connections_per_login: int = 10
    max_message_bytes: int = 1 << 20
    idle_timeout_seconds: float = 900.0
    auth_timeout_seconds: float = 30.0
    workers: int = 16
    probe_timeout_seconds: float = 5.0
    #: A catalog probe's answer at most: rows, and bytes (counted while fetching).
    probe_max_rows: int = 10_000
    probe_max_bytes: int = 8 << 20
    #: Portals of a session that may hold rows not yet sent (suspended by a row limit).
    max_suspended_portals: int = 8
    #: Connections one client address may have authenticating at once.
    max_handshakes_per_address: int = 10
    #: Seconds a failed login waits before its answer (the same for unknown logins).
    failed_login_delay_seconds: float = 0.5


@dataclass(frozen=True)
class ServerConfig:
    """A loaded config; paths are absolute."""

    path: Path | None
    database: str
    catalog: Path
    ledger: Path
    logins: Path
    host: str = "127.0.0.1"
    port: int = 5433
    tls: bool = True
    cert: Path | None = None
    key: Path | None = None
    budget: tuple[float, float] | None = None
    #: The pinned ledger id (``ledger_id:``): another ledger at the path is refused.
    ledger_id: str | None = None
    session: dict = field(default_factory=dict)
    limits: ServerLimits = field(default_factory=ServerLimits)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def with_tls(self, cert: Path, key: Path) -> ServerConfig:
        return dataclasses.replace(self, tls=True, cert=cert, key=key)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_KEYS = {"database", "catalog", "ledger", "ledger_id", "logins", "budget", "listen", "tls",
         "session", "limits"}


def load_config(path: str | Path, *, self_signed: bool = False) -> ServerConfig:
    """Reads and checks a config file.

    Args:
        self_signed: the TLS certificate will be made at start (``serve
            --self-signed``): a config without ``tls`` is fine.

    Raises:
        ServerError: the file is missing or malformed; the error names the key.
    """
    path = Path(path).resolve()
    try:
        doc = load_yaml(path.read_text())
    except OSError as exc:
        raise ServerError(f"cannot read config {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ServerError(f"config {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ServerError(f"config {str(path)!r}: expected a mapping of settings")
    return config_from_mapping(doc, path.parent, path, self_signed=self_signed)


def _path(base: Path, value: Any, key: str) -> Path:
    if not isinstance(value, str) or not value:
        raise ServerError(f"config: '{key}' must be a file path")
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve()


def config_from_mapping(doc: dict, base: Path, path: Path | None = None, *,
                        self_signed: bool = False) -> ServerConfig:
    """Builds a :class:`ServerConfig` from a parsed document; relative paths from
    ``base``.

    Raises:
        ServerError: a missing, unknown or malformed key.
    """
    unknown = set(doc) - _KEYS
    if unknown:
        raise ServerError(f"config: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                          f"known: {', '.join(sorted(_KEYS))}")
    for key in ("database", "catalog", "ledger"):
        if key not in doc:
            raise ServerError(f"config: '{key}' is required")
    database = doc["database"]
    if not isinstance(database, str) or not database:
        raise ServerError("config: 'database' must be a file path or a URL")
    if "://" not in database:
        database = str(_path(base, database, "database"))
    catalog = _path(base, doc["catalog"], "catalog")
    ledger = _path(base, doc["ledger"], "ledger")
    logins = (_path(base, doc["logins"], "logins") if doc.get("logins")
              else ledger.with_name(ledger.name + ".logins.sqlite"))
    ledger_id = doc.get("ledger_id")
    if ledger_id is not None and not (isinstance(ledger_id, str) and ledger_id.isalnum()):
        raise ServerError(f"config: 'ledger_id' must be the ledger's id (dpsql budget "
                          f"show prints it), got {ledger_id!r}")
    listen = doc.get("listen") or {}
    if not isinstance(listen, dict) or set(listen) - {"host", "port"}:
        raise ServerError("config: 'listen' takes 'host' and 'port'")
    host = str(listen.get("host", "127.0.0.1"))
    port = listen.get("port", 5433)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port < 65536:
        raise ServerError(f"config: listen port must be 0..65535, got {port!r}")
    tls_doc = doc.get("tls")
    tls, cert, key = True, None, None
    if tls_doc is False or (isinstance(tls_doc, str) and tls_doc.lower() == "off"):
        tls = False
        if not is_loopback(host):
            raise ServerError(
                "config: 'tls: off' is allowed only when listening on loopback "
                f"(127.0.0.1, ::1, localhost), not {host!r}: passwords would cross the "
                "network in the clear")
    elif isinstance(tls_doc, dict):
        if set(tls_doc) != {"cert", "key"}:
            raise ServerError("config: 'tls' takes 'cert' and 'key' (PEM files), or 'off'")
        cert, key = _path(base, tls_doc["cert"], "tls.cert"), _path(base, tls_doc["key"],
                                                                    "tls.key")
    elif tls_doc is None:
        if not self_signed:
            raise ServerError("config: 'tls' is required: {cert: FILE, key: FILE}, or "
                              "'tls: off' on loopback, or start with --self-signed")
    else:
        raise ServerError("config: 'tls' must be {cert: FILE, key: FILE} or 'off'")
    budget = doc.get("budget")
    if budget is not None:
        if not isinstance(budget, dict) or set(budget) - {"epsilon", "delta"} or \
                "epsilon" not in budget:
            raise ServerError("config: 'budget' is {epsilon: E, delta: D}")
        budget = (float(budget["epsilon"]), float(budget.get("delta", 0.0)))
    session = doc.get("session") or {}
    if not isinstance(session, dict) or set(session) - {"epsilon", "delta", "error_columns"}:
        raise ServerError("config: 'session' takes epsilon, delta, error_columns")
    limits_doc = doc.get("limits") or {}
    names = {f.name: f.type for f in dataclasses.fields(ServerLimits)}
    if not isinstance(limits_doc, dict) or set(limits_doc) - set(names):
        raise ServerError(f"config: 'limits' takes {', '.join(names)}")
    for k, v in limits_doc.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise ServerError(f"config: limits.{k} must be a positive number, got {v!r}")
    limits = ServerLimits(**{k: (int(v) if names[k] == "int" else float(v))
                             for k, v in limits_doc.items()})
    if limits.max_message_bytes < 1024:
        raise ServerError("config: limits.max_message_bytes must be at least 1024")
    return ServerConfig(path=path, database=database, catalog=catalog, ledger=ledger,
                        logins=logins, host=host, port=port, tls=tls, cert=cert, key=key,
                        budget=budget, ledger_id=ledger_id, session=dict(session),
                        limits=limits)


def open_ledger(config: ServerConfig, catalog=None):
    """The service's ledger, opened the way the service and ``dpsql user`` open it:
    never created (a missing, empty or foreign ledger is an error: the owner makes it
    with ``dpsql budget init`` or ``dpsql budget set``), and checked against the
    config's ``ledger_id:`` (or the catalog's, when the config has none).

    Raises:
        ServerError: the ledger is missing, not a dpsql ledger, or not the pinned one;
            or the config and the catalog pin different ids.
    """
    from dpsql.errors import DpsqlError
    from dpsql.ledger import Ledger

    pinned = config.ledger_id
    catalog_id = getattr(catalog, "ledger_id", None)
    if pinned and catalog_id and pinned != catalog_id:
        raise ServerError(f"config: ledger_id {pinned} differs from the catalog's "
                          f"ledger_id {catalog_id}")
    try:
        return Ledger(config.ledger, create=False, expect_id=pinned or catalog_id)
    except DpsqlError as exc:
        raise ServerError(f"ledger: {exc}. The service never creates a ledger: the owner "
                          f"makes it first with 'dpsql budget init --ledger "
                          f"{config.ledger}' (then pin the id it prints with "
                          "'ledger_id:' in the config)") from None
