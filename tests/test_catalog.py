"""Catalog loading: the bundled catalogs load; every mistake is named precisely."""

from __future__ import annotations

import pytest

from dpsql import CatalogError, load_catalog
from dpsql.datasets import catalog_path


def table(**overrides):
    doc = {"user_key": "uid", "columns": {"uid": {"type": "int"},
                                          "x": {"type": "float", "lower": 0, "upper": 1}}}
    doc.update(overrides)
    return {"tables": {"t": doc}}


@pytest.mark.parametrize("name", ["pums", "pums_dup"])
def test_bundled_catalogs_load(name):
    cat = load_catalog(catalog_path(name))
    t = cat.table(name)
    assert t.user_key == "pid"
    assert t.column("income").upper == 500000
    assert t.column("sex").values == (0, 1)


def test_yaml_file_and_dict_agree(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tables:\n  T:\n    row_privacy: true\n    columns:\n"
                    "      X: {type: int, lower: -1, upper: 1}\n")
    from_file = load_catalog(path)
    from_dict = load_catalog({"tables": {"t": {"row_privacy": True, "columns": {
        "x": {"type": "int", "lower": -1, "upper": 1}}}}})
    assert from_file.tables == from_dict.tables
    assert from_file.table("t").column("x").lower == -1


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"tables": {}}, "'tables' must be a non-empty mapping"),
        ({"tables": {"t": {"columns": {"x": "int"}}, }, "extra": 1}, "unknown key 'extra'"),
        (table(user_key="nope"), "table 't': user_key 'nope' is not one of its columns"),
        (table(row_privacy=True), "declare exactly one of user_key, row_privacy"),
        (table(max_rows=0), "table 't': max_rows must be a positive integer"),
        (table(max_groups="2"), "table 't': max_groups must be a positive integer"),
        (table(colour="red"), "table 't': unknown key 'colour'"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "float", "lower": 2, "upper": 1}}),
         "table 't', column 'x': lower (2) is greater than upper (1)"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "float", "lower": 0}}),
         "table 't', column 'x': give both lower and upper"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "decimal"}}),
         "table 't', column 'x': type must be one of"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "string", "lower": 0,
                                                      "upper": 1}}),
         "table 't', column 'x': lower/upper are only for int, float and date columns"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "int", "lower": 0.5,
                                                      "upper": 1}}),
         "bounds of an int column must be integers"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "int", "values": [1, "a"]}}),
         "table 't', column 'x': value 'a' in values is not of type int"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "int", "values": [1, 1]}}),
         "values lists a value twice"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "int", "nullable": "yes"}}),
         "nullable must be true or false"),
        (table(columns={"uid": {"type": "int"}, "x": {"type": "int", "lower": 0,
                                                      "upper": float("inf")}}),
         "expected a finite number"),
        ({"tables": {"t": {"user_key": "uid", "columns": {"uid": "int"}},
                     "T": {"public": True, "columns": {"a": "int"}}}}, "declared twice"),
        ({"budget": {"epsilon": -1}, **table()}, "catalog budget"),
    ],
)
def test_mistakes_are_named(doc, message):
    with pytest.raises(CatalogError) as info:
        load_catalog(doc)
    assert message in str(info.value)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(CatalogError, match="cannot read catalog file"):
        load_catalog(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables: [unclosed")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(bad)


def test_float_user_keys_are_refused():
    # every NaN is one group: people keyed NaN would be one pseudo-user
    doc = {"tables": {"t": {"user_key": "uid", "columns": {"uid": {"type": "float"}}}}}
    with pytest.raises(CatalogError, match="user_key 'uid' is a float column"):
        load_catalog(doc)


def test_yaml_numbers_written_without_a_dot_are_numbers(tmp_path):
    """``delta: 1e-5`` (as the README and ``catalog draft`` write it) is a number, not the
    text PyYAML's YAML 1.1 reads."""
    from dpsql.catalog import load_catalog

    path = tmp_path / "c.yaml"
    path.write_text("dataset: t\nbudget: {epsilon: 1, delta: 1e-5}\n"
                    "tables:\n  t:\n    user_key: id\n    columns:\n"
                    "      id: {type: int}\n      x: {type: float, lower: 0, upper: 1e3}\n")
    cat = load_catalog(path)
    assert cat.budget == (1.0, 1e-5)
    assert cat.table("t").columns["x"].upper == 1000.0


def test_date_and_timestamp_values_are_read_as_such():
    # kept as text, a date key's groups matched none the engine returned: every one 0
    # (attack review)
    import datetime

    cat = load_catalog({"tables": {"t": {"user_key": "u", "columns": {
        "u": {"type": "int"},
        "d": {"type": "date", "values": ["2024-01-01", datetime.date(2024, 1, 2)]},
        "ts": {"type": "timestamp", "values": ["2024-01-01 12:00:00"]}}}}})
    assert cat.table("t").column("d").values == (datetime.date(2024, 1, 1),
                                                 datetime.date(2024, 1, 2))
    assert cat.table("t").column("ts").values == (datetime.datetime(2024, 1, 1, 12),)
    with pytest.raises(CatalogError, match="expected a date"):
        load_catalog({"tables": {"t": {"user_key": "u", "columns": {
            "u": {"type": "int"}, "d": {"type": "date", "values": ["soon"]}}}}})


@pytest.mark.parametrize("stamp", ["2024-01-01 11:00:00+00:00", "2024-01-01T11:00:00Z"])
def test_timestamp_values_with_a_time_zone_are_refused(stamp):
    # a TIMESTAMP key comes back without a zone: an aware value matched none of them,
    # and its group came out 0 (attack review)
    with pytest.raises(CatalogError, match="time zone"):
        load_catalog({"tables": {"t": {"user_key": "u", "columns": {
            "u": {"type": "int"}, "ts": {"type": "timestamp", "values": [stamp]}}}}})
