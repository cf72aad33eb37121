"""SmartNoise SQL as a peer: its own virtual environment, run in a subprocess.

SmartNoise SQL pins ``opendp<0.15`` and so cannot share dpsql's environment (opendp
0.16). :func:`ensure_environment` creates ``benchmarks/.peers/smartnoise`` with
``python -m venv`` and ``pip install smartnoise-sql`` once, and
:func:`run` sends a JSON job to :mod:`benchmarks.peers.smartnoise_runner` in it.

Adaptation: SmartNoise's DuckDB route rewrites queries with ``sample_max_ids``
(a ``ROW_NUMBER() OVER (PARTITION BY pid ORDER BY random())`` sample of each user's
rows), which DuckDB 2.x refuses ("ORDER BY window expressions cannot be volatile"), so
the benchmark runs SmartNoise on its SQLite route over an SQLite copy of the same
generated table. Its metadata mirrors catalog/pums_dup.yaml: ``max_ids: 3`` (dpsql's
``max_rows``), the same value bounds, and the user key as ``private_id``. SmartNoise
has no public key domains: it thresholds every GROUP BY (``censor_dims``), so it needs
δ on every grouped query and spends ε on the key count too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV_DIR = HERE.parent / ".peers" / "smartnoise"
RUNNER = HERE / "smartnoise_runner.py"
PACKAGE = "smartnoise-sql"


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_environment(env_dir: Path = ENV_DIR, timeout: float = 900) -> tuple[Path | None, str]:
    """The peer's Python, installing it when needed; (None, reason) when it cannot be had."""
    python = _python(env_dir)
    check = [str(python), "-c", "import snsql"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, "ready"
    steps = [[sys.executable, "-m", "venv", "--clear", str(env_dir)],
             [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              PACKAGE]]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{' '.join(step[:4])}: {type(exc).__name__}: {exc}"
        if done.returncode != 0:
            lines = [x for x in (done.stderr or done.stdout).splitlines() if x.strip()]
            errors = [x for x in lines if "ERROR" in x or "rror:" in x]
            reason = (errors or lines or [f"exit code {done.returncode}"])[-1].strip()
            return None, f"{' '.join(step[2:5])} failed: {reason[:300]}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return None, f"{PACKAGE} installed but `import snsql` fails"
    return python, "installed"


def metadata(table: str, catalog: dict) -> dict:
    """SmartNoise metadata for one table of a dpsql catalog (same bounds)."""
    spec = catalog["tables"][table]
    meta: dict = {"max_ids": spec.get("max_rows", 1), "row_privacy": False}
    for name, col in spec["columns"].items():
        entry: dict = {"type": col["type"]}
        if name == spec.get("user_key"):
            entry["private_id"] = True
        elif "lower" in col and "values" not in col:
            entry["lower"], entry["upper"] = col["lower"], col["upper"]
        meta[name] = entry
    return {"": {"": {table: meta}}}


def run(job: dict, python: Path, timeout: float = 1800) -> dict:
    """Runs a job in the peer's environment; raises RuntimeError on failure."""
    try:
        done = subprocess.run([str(python), str(RUNNER)], input=json.dumps(job),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"the SmartNoise runner timed out after {timeout:g} s") from exc
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-3:]
        raise RuntimeError(f"the SmartNoise runner failed: {' | '.join(tail)}")
    return json.loads(done.stdout)
