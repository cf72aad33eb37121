"""SmartNoise SQL metadata converted into a dpsql catalog.

SmartNoise SQL describes a database in a YAML "metadata" file: one collection, its
schemas, their tables, and per column a type, optional bounds and whether it is the
``private_id``. :func:`smartnoise_catalog` converts such a document into catalog YAML
(``dpsql catalog import-smartnoise`` on the command line; :func:`import_smartnoise`
reads a file and checks that the result loads). ``private_id`` becomes ``user_key``,
``row_privacy: true`` stays, ``max_ids`` becomes ``max_rows``; bounds and types are
carried over, int bounds widened to integers so that every promised value stays inside;
options dpsql has no use for are named in comments so the owner sees what was dropped.

>>> meta = {"": {"PUMS": {"PUMS": {
...     "max_ids": 1, "rows": 1000,
...     "pid": {"type": "int", "private_id": True},
...     "age": {"type": "int", "lower": 0, "upper": 100.5},
...     "sex": {"type": "string"}}}}}
>>> print(smartnoise_catalog(meta, "pums.yaml"))
# dpsql catalog converted from SmartNoise SQL metadata pums.yaml.
# Check it: bounds and privacy units are the data owner's promises.
dataset: pums
tables:
  PUMS:    # SmartNoise PUMS.PUMS
    user_key: pid    # SmartNoise private_id
    max_rows: 1    # SmartNoise max_ids; max_groups stays 1
    # SmartNoise options not carried over: rows: 1000
    columns:
      pid: {type: int, nullable: true}
      age: {type: int, lower: 0, upper: 101, nullable: true}
      sex: {type: string, nullable: true}
<BLANKLINE>
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import yaml

from dpsql.catalog import load_catalog, load_yaml
from dpsql.catalog_draft import yaml_flow, yaml_scalar
from dpsql.errors import CatalogError

#: SmartNoise column types and their catalog types.
SMARTNOISE_TYPES = {"int": "int", "float": "float", "string": "string", "boolean": "bool",
                    "datetime": "timestamp"}
_SMARTNOISE_TABLE_KEYS = ("rows", "rows_exact", "row_privacy", "max_ids", "sample_max_ids",
                          "clamp_counts", "clamp_columns", "use_dpsu", "censor_dims")


def import_smartnoise(path: str | Path, dataset: str | None = None) -> str:
    """The catalog YAML converted from the SmartNoise metadata file at ``path``.

    The text returned is checked to load as a catalog (:func:`dpsql.load_catalog`).

    Raises:
        CatalogError: the file is not valid YAML, is not SmartNoise metadata, or its
            conversion does not load (bounds with lower above upper, say).
    """
    path = Path(path)
    try:
        doc = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path} is not valid YAML: {exc}") from None
    text = smartnoise_catalog(doc, path.name, dataset)
    load_catalog(load_yaml(text))  # what is returned must load
    return text


def smartnoise_catalog(doc, source: str = "<metadata>", dataset: str | None = None) -> str:
    """Converts SmartNoise SQL metadata (a parsed YAML document) into catalog YAML.

    ``private_id`` becomes ``user_key``, ``row_privacy: true`` stays, ``max_ids``
    becomes ``max_rows``, bounds and types are carried over (int bounds widened to
    integers); options dpsql has no use for are listed in comments.

    Args:
        doc: the metadata, as ``yaml.safe_load`` returns it.
        source: how messages and the header comment name the metadata.
        dataset: the data set's name (default: the collection's, or its single
            schema's, lower-cased).

    Raises:
        CatalogError: the metadata is not in SmartNoise's format, or a table cannot be
            expressed (several private_id columns, or no privacy unit at all).
    """
    def bad(message: str) -> CatalogError:
        return CatalogError(f"SmartNoise metadata {source}: {message}")

    if not isinstance(doc, Mapping) or not doc:
        raise bad("expected a mapping with one collection")
    collections = [k for k in doc if k != "engine"]
    if len(collections) != 1:
        raise bad(f"expected exactly one collection, got {len(collections)}")
    collection = collections[0]
    schemas = doc[collection]
    if not isinstance(schemas, Mapping) or not schemas:
        raise bad(f"collection {collection!r} must map schema names to tables")
    if dataset is None:
        dataset = (str(collection) if collection else
                   str(next(iter(schemas))) if len(schemas) == 1 else "default").lower()
    out = [f"# dpsql catalog converted from SmartNoise SQL metadata {source}.",
           "# Check it: bounds and privacy units are the data owner's promises.",
           f"dataset: {yaml_scalar(dataset)}",
           "tables:"]
    seen: dict[str, str] = {}
    for schema, tables in schemas.items():
        if not isinstance(tables, Mapping):
            raise bad(f"schema {schema!r} must map table names to their metadata")
        for table, tdoc in tables.items():
            qualified = f"{schema}.{table}" if schema else str(table)
            where = f"table {qualified}"
            if not isinstance(tdoc, Mapping):
                raise bad(f"{where}: expected a mapping of options and columns")
            if str(table).lower() in seen:
                raise bad(f"{where}: the same table name as {seen[str(table).lower()]} "
                          "(dpsql catalogs have no schemas)")
            seen[str(table).lower()] = qualified
            out += _smartnoise_table(str(table), qualified, tdoc, bad)
    return "\n".join(out) + "\n"


def _smartnoise_table(table: str, qualified: str, tdoc: Mapping, bad) -> list[str]:
    where = f"table {qualified}"
    options = {k: tdoc[k] for k in _SMARTNOISE_TABLE_KEYS if k in tdoc}
    columns = {k: v for k, v in tdoc.items() if k not in _SMARTNOISE_TABLE_KEYS}
    if not columns:
        raise bad(f"{where}: no columns")
    keys = [name for name, c in columns.items()
            if isinstance(c, Mapping) and c.get("private_id")]
    if len(keys) > 1:
        raise bad(f"{where}: several private_id columns ({', '.join(map(str, keys))}); "
                  "dpsql takes one user key column")
    row_privacy = bool(options.pop("row_privacy", False))
    lines = [f"  {yaml_scalar(table)}:    # SmartNoise {qualified}"]
    if keys:
        lines.append(f"    user_key: {yaml_scalar(str(keys[0]))}    # SmartNoise private_id")
        max_ids = options.pop("max_ids", 1)
        if isinstance(max_ids, bool) or not isinstance(max_ids, int) or max_ids < 1:
            raise bad(f"{where}: max_ids must be a positive integer, got {max_ids!r}")
        lines.append(f"    max_rows: {max_ids}    # SmartNoise max_ids; max_groups stays 1")
    elif row_privacy:
        lines.append("    row_privacy: true")
    else:
        raise bad(f"{where}: no private_id column and row_privacy is not true, so nothing "
                  "says who a row belongs to")
    if options:
        lines.append("    # SmartNoise options not carried over: "
                     + ", ".join(f"{k}: {yaml_scalar(v)}" for k, v in options.items()))
    lines.append("    columns:")
    for name, cdoc in columns.items():
        lines.append(_smartnoise_column(str(name), cdoc, where, bad))
    return lines


def _smartnoise_column(name: str, cdoc, where: str, bad) -> str:
    if not isinstance(cdoc, Mapping) or "type" not in cdoc:
        raise bad(f"{where}, column {name!r}: expected a mapping with a type")
    sn_type = str(cdoc["type"])
    ctype = SMARTNOISE_TYPES.get(sn_type)
    if ctype is None:
        return (f"      # {yaml_scalar(name)}: SmartNoise type {sn_type!r} has no dpsql type; "
                "left out")
    entries: list[tuple[str, object]] = [("type", ctype)]
    notes = []
    lower, upper = cdoc.get("lower"), cdoc.get("upper")
    if ctype in ("int", "float") and lower is not None and upper is not None:
        try:
            lower, upper = float(lower), float(upper)
        except (TypeError, ValueError):
            raise bad(f"{where}, column {name!r}: bounds must be numbers") from None
        if ctype == "int":  # widening keeps every promised value inside
            lower, upper = math.floor(lower), math.ceil(upper)
        elif lower.is_integer() and upper.is_integer():
            lower, upper = int(lower), int(upper)
        entries += [("lower", lower), ("upper", upper)]
    elif lower is not None or upper is not None:
        notes.append("only one bound given (dpsql needs both): bounds left out")
    # SmartNoise columns are nullable unless declared otherwise; a missing_value is a
    # substitution dpsql does not make, so NULLs stay possible
    if cdoc.get("nullable", True) or cdoc.get("missing_value") is not None:
        entries.append(("nullable", True))
    dropped = [k for k in ("sensitivity", "missing_value", "card") if k in cdoc]
    if dropped:
        notes.append("not carried over: " + ", ".join(f"{k}: {yaml_scalar(cdoc[k])}"
                                                       for k in dropped))
    note = f"    # {'; '.join(notes)}" if notes else ""
    return f"      {yaml_scalar(name)}: {yaml_flow(entries)}{note}"
