"""Resource limits: bounded work before the charge.

Everything dpsql does before it charges the budget — reading the text, validating,
analysing, evaluating public-domain images in process, binding the rewritten SQL — must
finish quickly and in little memory whatever the analyst sends, and every refusal is
free. Each limit below is checked before the work it bounds, and a query over a limit
is refused with an :class:`~dpsql.errors.UnsupportedQueryError` naming the limit.

The data owner may change them in the catalog::

    limits:
      max_sql_length: 50000
      statement_timeout_seconds: 60

>>> Limits().max_sql_length
100000
>>> Limits.from_mapping({"max_aggregates": 10}).max_aggregates
10
>>> Limits.from_mapping({"max_sql_lenght": 1})
Traceback (most recent call last):
...
dpsql.errors.CatalogError: limits: unknown limit 'max_sql_lenght'; known: ...
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dpsql.errors import CatalogError


@dataclass(frozen=True)
class Limits:
    """The owner-configurable limits (defaults are generous for real analytics)."""

    #: Longest SQL text accepted (characters), checked before tokenizing.
    max_sql_length: int = 100_000
    #: Longest string literal, quoted identifier or number literal (characters).
    max_literal_length: int = 1_000
    #: Most syntax nodes in one query.
    max_nodes: int = 5_000
    #: Deepest nesting of one query's expression tree.
    max_depth: int = 100
    #: Most aggregate calls in one query (each becomes one or more statistics).
    max_aggregates: int = 100
    #: Most different expressions one query asks quantiles of (MEDIAN, PERCENTILE_CONT,
    #: MIN, MAX...): each is a histogram of up to 64 noisy bins; quantiles of the same
    #: expression share one.
    max_quantiles: int = 10
    #: Most noisy statistics in one query.
    max_statistics: int = 200
    #: Most group-key combinations released from public domains in one query.
    max_domain_cells: int = 1_000_000
    #: Most input combinations evaluated in process for one public-domain image.
    max_domain_inputs: int = 100_000
    #: Widest ``int`` column whose ``lower``/``upper`` bounds make a public domain
    #: (``upper - lower + 1`` keys): ``GROUP BY age`` over ``[0, 100]`` releases all 101
    #: ages, empty ones included, without partition selection or δ. A wider column's
    #: keys come from the data (partition selection); 0 turns this off.
    max_int_domain: int = 5_000
    #: Longest string any value of a query may reach (characters), bounded a priori
    #: from the query: REPLACE multiplies lengths, || adds them. Data strings without a
    #: ``values`` list count as length 1, so for them it bounds the growth factor.
    max_value_length: int = 10_000
    #: Most work of evaluating public-domain images in process for one query: per
    #: image, input combinations times the summed length bounds of the expression's
    #: nodes (at least 8 per node), plus 4 million for each scratch database opened
    #: (50 million is about half a second). Over it, a key is not enumerated and comes
    #: from the data instead.
    max_domain_work: int = 50_000_000
    #: Most characters of one public-domain image (its keys are inlined into the SQL as
    #: literals); over it, the key comes from the data instead.
    max_domain_chars: int = 1_000_000
    #: Seconds a backend may spend on one statement (DuckDB, PostgreSQL, SQLite; Spark
    #: has no way to stop one), 0 for none.
    statement_timeout_seconds: float = 600.0

    @classmethod
    def from_mapping(cls, mapping: dict | None) -> Limits:
        """Limits from the catalog's ``limits:`` mapping (unknown keys are refused)."""
        if not mapping:
            return cls()
        if not isinstance(mapping, dict):
            raise CatalogError("limits: must be a mapping of limit name to number")
        known = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, value in mapping.items():
            if key not in known:
                raise CatalogError(
                    f"limits: unknown limit {key!r}; known: {', '.join(sorted(known))}")
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (
                    known[key].type == "int" and not float(value).is_integer()):
                raise CatalogError(f"limits: {key} must be a non-negative number, got {value!r}")
            values[key] = int(value) if known[key].type == "int" else float(value)
        return cls(**values)


#: The defaults, for code paths that have no catalog at hand.
DEFAULT = Limits()
