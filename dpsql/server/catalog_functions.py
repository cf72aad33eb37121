"""Which functions a catalog probe may call, and with which arguments.

A probe runs in the probe database (:mod:`~dpsql.server.catalog_db`), which holds no
private data; the allow-list keeps a probe from making that database read files, run
SQL from strings, sleep, or build an answer far larger than its SQL (a denial of
service on the one service every analyst shares). A probe may call only the functions
the recorded client probes use (``tests/server/fixtures``), the service's stand-ins, and
plain scalar ones whose answer is no bigger than their arguments; the few allowed
functions that could still grow an answer (``format``, ``replace``,
``generate_series``) take only bounded arguments.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.errors import UnsupportedQueryError

#: Functions a probe may not call: files, SQL from strings, sleeping, settings.
_DENIED_PREFIXES = ("read_", "parquet_", "iceberg", "delta_", "sniff_", "glob", "query",
                    "pg_sleep", "sleep", "duckdb_secrets", "which_secret", "getenv",
                    "load_", "install_", "copy", "export", "import", "attach", "detach",
                    "json_execute", "sqlite_", "postgres_", "mysql_", "http")

#: Functions a probe may call (sqlglot's name for a typed function, the name for any
#: other): those in the recorded client probes (tests/server/fixtures), the stand-ins
#: of :mod:`~dpsql.server.catalog_db`, and plain scalar ones whose answer is no bigger
#: than their arguments. Anything else (generators like ``range``/``repeat``/``lpad``,
#: table functions) is refused.
_ALLOWED_TEXT = """
and or xor not case if cast trycast collate nullif coalesce greatest least array
regexplike regexpilike regexp_like regexp_ilike row_number rank dense_rank
explode unnest exploding_generate_series generate_series group_concat string_agg
array_agg count min max sum avg bool_and bool_or logical_and logical_or
generate_subscripts
current_schema current_schemas current_user session_user current_database
current_catalog current_role current_version version
lower upper length char_length character_length octet_length substring substr
concat concat_ws trim ltrim rtrim btrim position strpos left right starts_with
abs round floor ceil sign mod
array_to_string array_upper array_lower array_length array_contains cardinality
format_type col_description obj_description shobj_description json_build_object
jsonb_build_object quote_ident pg_get_expr pg_get_serial_sequence
pg_get_statisticsobjdef_columns pg_get_userbyid pg_relation_is_publishable
pg_table_is_visible pg_type_is_visible pg_function_is_visible pg_collation_is_visible
pg_encoding_to_char pg_get_constraintdef pg_get_indexdef pg_get_triggerdef
pg_get_viewdef pg_get_partkeydef pg_get_function_result pg_get_function_arguments
pg_get_function_identity_arguments pg_relation_size pg_total_relation_size
pg_table_size pg_indexes_size pg_backend_pid pg_is_in_recovery txid_current
to_regtype to_regclass pg_get_keywords has_table_privilege has_schema_privilege
has_database_privilege current_setting
pg_database_size pg_tablespace_location pg_stat_get_numscans pg_get_ruledef
replace format _pg_expandarray has_any_column_privilege has_column_privilege
"""
_ALLOWED_FUNCS = frozenset(_ALLOWED_TEXT.split())

#: The largest literal bound ``generate_series`` may have in a probe (clients pass
#: array bounds from the catalog, or 0 and 1).
_SERIES_LITERAL_MAX = 64


def check_function(node: exp.Expression) -> None:
    """Refuses a call to a function off the allow-list, or with unbounded arguments.

    Runs on the client's own SQL, before it is rewritten for DuckDB.

    Raises:
        UnsupportedQueryError: the function, or its arguments, are refused here.
    """
    if not isinstance(node, exp.Func):
        return
    name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
    if name.startswith(_DENIED_PREFIXES) or name not in _ALLOWED_FUNCS:
        raise UnsupportedQueryError(f"function {name}() in a catalog query: catalog "
                                    "queries may call only the functions SQL tools "
                                    "use to read the catalog")
    check_arguments = _ARGUMENT_CHECKS.get(name)
    if check_arguments is not None:
        check_arguments(node)


def _check_format(node: exp.Expression) -> None:
    """``format()`` with a literal format only (its ``%s`` count bounds the answer)."""
    if not (isinstance(node.this, exp.Literal) and node.this.is_string):
        raise UnsupportedQueryError("format() in a catalog query takes a literal format")


def _check_replace(node: exp.Expression) -> None:
    """``replace()`` bounded: a short literal replacement, not nested (so an answer is
    at most 16 times longer than its argument)."""
    args = node.expressions if isinstance(node, exp.Anonymous) else [
        node.this, node.expression, node.args.get("replacement")]
    new = args[-1] if len(args) == 3 else None
    if not (isinstance(new, exp.Literal) and new.is_string and len(new.this) <= 16
            and not any(name_of(f) == "replace" or type(f).__name__ == "Replace"
                        for f in args[0].find_all(exp.Func))):
        raise UnsupportedQueryError("replace() in a catalog query takes a short "
                                    "literal replacement")


def _check_series(node: exp.Expression) -> None:
    """``generate_series()`` with no literal bound larger than
    :data:`_SERIES_LITERAL_MAX` (clients take bounds from the catalog)."""
    for lit in node.find_all(exp.Literal):
        if not lit.is_string:
            try:
                big = abs(float(lit.this)) > _SERIES_LITERAL_MAX
            except ValueError:
                big = True
            if big:
                raise UnsupportedQueryError(
                    "generate_series() in a catalog query takes its bounds from "
                    "the catalog")


#: Allowed functions whose arguments are checked too, by name.
_ARGUMENT_CHECKS: dict[str, Callable[[exp.Expression], None]] = {
    "format": _check_format,
    "replace": _check_replace,
    "generate_series": _check_series,
    "exploding_generate_series": _check_series,
}


def name_of(node: exp.Expression) -> str:
    """A node's name, lower case ("" for a node without one)."""
    return node.name.lower() if hasattr(node, "name") else ""
