"""dpsql.types: engine type names are read whole, not cut at their first bracket."""

import pytest

from dpsql import types
from dpsql.keys import float_key_type, scalar_key_type, temporal_key_type


@pytest.mark.parametrize("name, base, params, array", [
    ("DECIMAL(18,3)", "DECIMAL", ("18", "3"), False),
    ("decimal( 18 , 3 )", "DECIMAL", ("18", "3"), False),
    ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP WITH TIME ZONE", (), False),
    ("TIMESTAMP(3) WITH TIME ZONE", "TIMESTAMP WITH TIME ZONE", ("3",), False),
    ("Nullable(String)", "STRING", (), False),
    ("LowCardinality(Nullable(String))", "STRING", (), False),
    ("Nullable(Decimal(10, 2))", "DECIMAL", ("10", "2"), False),
    ("INTEGER[]", "INTEGER", (), True),
    ("DECIMAL(5,2)[3]", "DECIMAL", ("5", "2"), True),
    ("MAP(VARCHAR, INTEGER[])", "MAP", ("VARCHAR", "INTEGER[]"), False),
    ("STRUCT(a INT, b STRUCT(c INT))", "STRUCT", ("A INT", "B STRUCT(C INT)"), False),
    ("VARCHAR COLLATE UTF8_LCASE", "VARCHAR COLLATE UTF8_LCASE", (), False),
])
def test_parse_reads_parameterised_and_nested_names(name, base, params, array):
    assert types.parse(name) == types.TypeName(base, params, array)


def test_lists_and_structures_are_never_scalars():
    """A list of decimals is not a decimal (cutting ``DECIMAL(5,2)[]`` at its first
    bracket read it as one), and a structure is nothing the catalog declares."""
    for name in ("DECIMAL(5,2)[]", "VARCHAR(3)[]", "TIMESTAMP[]", "STRUCT(a INT)",
                 "MAP(INT, INT)", "Nullable(Array(String))"):
        assert types.family(name) is None
        assert types.catalog_type(name) is None
        assert not any(types.catalog_accepts(t, name) for t in types.CATALOG_COMPATIBLE)
        assert not scalar_key_type(name)


def test_wrapped_names_check_against_the_catalog():
    """``engine._check_schema`` accepts a wrapped column of the declared type and
    refuses it for any other."""
    assert types.catalog_accepts("string", "Nullable(String)")
    assert not types.catalog_accepts("int", "Nullable(String)")
    assert types.catalog_accepts("timestamp", "TIMESTAMP WITH TIME ZONE")
    assert not types.catalog_accepts("string", "VARCHAR COLLATE UTF8_LCASE")


def test_the_narrower_lists_keep_their_members():
    """The lists built from the shared sets are the ones the modules wrote out before."""
    ints = {"TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT",
            "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"}
    keys = ints | {"FLOAT", "DOUBLE", "REAL", "DECIMAL", "NUMERIC", "VARCHAR", "TEXT",
                   "STRING", "CHAR", "BOOLEAN", "BOOL", "DATE", "TIMESTAMP"}
    floats = (ints - {"INT", "UHUGEINT"}) | {"FLOAT", "DOUBLE", "REAL", "DECIMAL", "NUMERIC"}
    numbers = ints | {"FLOAT", "DOUBLE", "REAL", "DECIMAL", "NUMERIC", "BOOLEAN"}
    assert set(types.SCALAR_KEY_NAMES) == keys
    assert set(types.CATALOG_COMPATIBLE["float"]) == floats
    assert set(types.NUMBER_NAMES) == numbers
    assert temporal_key_type("DATE") and not temporal_key_type("DATE[]")
    assert float_key_type("NUMERIC(10,2)") and not float_key_type("BIGINT")


def test_postgresql_arrays_are_not_read_as_scalars():
    """``text[]`` was mapped to VARCHAR: an array column passed the schema check as a
    string column (engine review). It stays an array, which no catalog type accepts."""
    from dpsql.backends.postgres import duckdb_type

    for pg in ("text[]", "character varying(3)[]", "timestamp without time zone[]",
               "integer[]", "numeric(5,2)[]"):
        name = duckdb_type(pg)
        assert name.endswith("]")
        assert not any(types.catalog_accepts(c, name)
                       for c in ("string", "int", "float", "timestamp", "date", "boolean"))
    assert duckdb_type("text") == "VARCHAR"
