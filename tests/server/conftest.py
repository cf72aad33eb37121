"""A real ``dpsql serve`` process on a free port, with two logins, for the client tests.

The server runs the way an owner runs it (``python -m dpsql.cli serve --config ...
--self-signed``); tests talk to it with real clients over TLS and SCRAM.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dpsql.datasets import catalog_path, load_pums

ROOT = Path(__file__).resolve().parents[2]
PASSWORDS = {"alice": "alice-pw-1", "bob": "bob-pw-2", "carol": "carol-pw-3"}
BUDGETS = {"alice": "5,1e-5", "bob": "3,1e-5", "carol": "0.2,0"}


@dataclass
class Service:
    host: str
    port: int
    config: Path
    ledger: Path
    proc: subprocess.Popen
    tmp: Path

    def dsn(self, user: str = "alice", password: str | None = None, **extra) -> str:
        password = PASSWORDS[user] if password is None else password
        parts = {"host": self.host, "port": self.port, "user": user, "password": password,
                 "dbname": "pums", "sslmode": "require", **extra}
        return " ".join(f"{k}={v}" for k, v in parts.items())


def cli(*args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpsql.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=120, **kw)


def init_ledger(path: Path) -> str:
    """What the owner's ``dpsql budget init`` does: the service never creates a ledger."""
    from dpsql.ledger import Ledger

    ledger = Ledger(path, create=True)
    ledger.close()
    return ledger.id


def write_config(tmp: Path, extra: str = "", tls: str | None = None,
                 ledger: bool = True) -> Path:
    db = tmp / "pums.duckdb"
    if not db.exists():
        load_pums(db)
    if ledger and not (tmp / "ledger.sqlite").exists():
        init_ledger(tmp / "ledger.sqlite")
    config = tmp / "serve.yaml"
    config.write_text(
        f"database: {db}\n"
        f"catalog: {catalog_path('pums')}\n"
        f"ledger: {tmp / 'ledger.sqlite'}\n"
        "listen: {host: 127.0.0.1, port: 0}\n"
        + (f"tls: {tls}\n" if tls else "")
        + extra)
    return config


def add_users(config: Path, users=("alice", "bob", "carol")) -> None:
    for name in users:
        env = {**os.environ, "DPSQL_TEST_PW": PASSWORDS[name]}
        out = cli("user", "add", name, "--config", str(config), "--budget", BUDGETS[name],
                  "--password-env", "DPSQL_TEST_PW", env=env)
        assert out.returncode == 0, out.stderr


def start(config: Path, *extra: str, env=None) -> tuple[subprocess.Popen, str, int]:
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.cli", "serve", "--config",
                             str(config), *extra], cwd=ROOT, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        if m:
            # keep draining stderr so the server never blocks on a full pipe
            import threading

            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1), int(m.group(2))
    proc.kill()
    raise RuntimeError("server did not start:\n" + "".join(seen))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def service(tmp_path_factory) -> Service:
    tmp = tmp_path_factory.mktemp("serve")
    config = write_config(tmp)
    add_users(config)
    proc, host, port = start(config, "--self-signed")
    yield Service(host, port, config, tmp / "ledger.sqlite", proc, tmp)
    stop(proc)
