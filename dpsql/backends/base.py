"""The backend abstraction: where the rewritten SQL runs.

A backend is described by data — its sqlglot dialect and ``supports_*`` flags — and
does three things: open a least-privilege connection, report a table's column types
(metadata only, read before any charge), and run one rewritten query returning the
exact per-group statistics. It is dpsql's own connection and never handed to analysts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Hashable

from sqlglot import exp


def _refusal(node: exp.Expression, reason: str) -> Exception:
    from dpsql.errors import UnsupportedQueryError

    return UnsupportedQueryError(
        f"{reason} in {node.sql(dialect='duckdb')[:80]!r} could fail on some rows, and "
        "no guard can catch it there; dpsql refuses the query because whether it fails "
        "would depend on the data (nothing was charged)")


#: Checked trees whose SQL :meth:`Backend.to_sql` remembers by identity: the plan
#: cache's capacity (:data:`dpsql.plan_cache.CAPACITY`).
_TREES_KEPT = 256
#: Characters of final texts (and their trees' texts) :meth:`Backend._total_sql` keeps.
_FINALS_CHARS = 16 * 2**20


class Backend(ABC):
    """One engine that runs rewritten queries."""

    #: sqlglot dialect the SQL is written in.
    dialect: str = ""
    #: The engine has a keyed hash usable in a window ORDER BY (L0 sampling).
    #: a key filter may go in the per-user step's HAVING (dpsql.rewrite.traits)
    supports_key_filter_after_grouping: bool = True
    supports_hash: bool = True
    #: The engine can refuse file and network access for the session.
    supports_no_external_access: bool = False
    #: The engine has GREATEST/LEAST that skip NULL arguments.
    supports_greatest_least: bool = True
    #: The engine has TRY(...) (an error becomes NULL); without it the dialect layer makes
    #: every guarded expression error-free in the engine's own terms.
    supports_try: bool = True
    #: Integer sums are exact whatever their size (HUGEINT or NUMERIC accumulators).
    supports_exact_integer_sums: bool = True
    #: A sum adds its summands as the engine computed them. PostgreSQL casts each to
    #: NUMERIC first, rounding a float (:mod:`dpsql.rewrite.bound_summands`).
    supports_exact_summands: bool = True
    #: A real statistic's summands may be rounded to the noise's grid in SQL and summed
    #: exactly as BIGINT grid units (:mod:`dpsql.grid_units`). Off: its sum is read in
    #: value units (PostgreSQL's exact NUMERIC).
    supports_grid_sums: bool = False
    #: A sum of DECIMALs is added as DECIMALs, exactly, and the rewrite may write a
    #: summand the engine types as a DECIMAL in one DECIMAL type
    #: (:mod:`dpsql.decimal_sums`). Needs :meth:`engine_types`.
    supports_decimal_sums: bool = False
    #: The engine enforces PRIMARY KEY/UNIQUE constraints (needed to join along foreign
    #: keys to the user: see :meth:`unique_columns`).
    supports_unique_constraints: bool = True
    #: A CTE referenced several times is computed once (DuckDB, PostgreSQL 12+, SQLite
    #: 3.35+); the L0 step then reads the per-user table three times at no extra cost
    #: (:mod:`dpsql.rewrite.bound_groups`). Spark inlines CTEs, so it gets one window.
    supports_materialized_ctes: bool = True
    #: The dialect layer: AST transforms ``(expression, Context) -> expression`` that turn
    #: the rewritten (DuckDB-flavoured) AST into one this engine runs error-free
    #: (:mod:`dpsql.backends.dialects`). Applied in order by :meth:`to_sql`.
    transforms: tuple = ()
    #: Transforms applied before the guards are placed (with :attr:`allow`): those that
    #: only translate DuckDB's spellings, so that the engine can type the tree.
    pre_transforms: tuple = ()
    #: Functions sqlglot does not model that :attr:`transforms` write (each must be on
    #: :data:`dpsql.output_check.FUNCTIONS`, which every engine's SQL is checked against).
    functions: frozenset[str] = frozenset()
    #: The last (rewritten AST, its SQL) that :meth:`to_sql` produced.
    _last_sql: tuple | None = None
    #: Tables the SQL may read (the catalog's; set by the connection), and names that
    #: need quoting but are the catalog's own; None: tables are not checked (tests).
    catalog_tables: frozenset[str] | None = None
    catalog_names: frozenset[str] = frozenset()
    #: The engine's operations that cannot fail (:mod:`dpsql.backends.total`): with it,
    #: :meth:`to_sql` guards everything else and proves the result total, typing every
    #: node with :meth:`bind_types`. Every backend has one.
    allow = None
    #: :meth:`check` reports the types the engine bound (SQLite reports none: dpsql's
    #: inference stands in, and nothing that matters after the charge may rest on it).
    reports_types: bool = True

    def bind_types(self, sql: str) -> list[str]:
        """The output types of one SELECT over no data (needed with :attr:`allow`)."""
        raise NotImplementedError

    def _probe_types(self, sql: str) -> list[str]:
        """:meth:`bind_types`, remembered: a probe reads only typed NULLs and constants
        (no table), so its answer depends on its text alone."""
        cache = self.__dict__.setdefault("_probe_cache", {})
        if sql not in cache:
            if len(cache) >= 4096:
                cache.pop(next(iter(cache)))
            cache[sql] = self.bind_types(sql)
        return cache[sql]

    def to_sql(self, expression: exp.Expression) -> str:
        """Transpiles a rewritten AST to this backend's SQL (dialect transforms, then sqlglot).

        Raises:
            BackendError: (not charged) a construct this backend cannot run error-free.
        """
        # check, execute and the Result each want the SQL of the same rewritten AST,
        # which is never changed after the rewrite: the last one is kept (by identity)
        last = self._last_sql
        if last is not None and last[0] is expression:
            return last[1]
        # the plan cache keeps several checked trees alive: their SQL is remembered by
        # the tree's identity (the entry holds the tree, so its id is not reused)
        memo = self.__dict__.setdefault("_sql_memo", OrderedDict())
        known = memo.get(id(expression))
        if known is not None and known[0] is expression:
            memo.move_to_end(id(expression))
            return known[1]
        if self.allow is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no allow-list of total operations "
                "(dpsql.backends.total), so nothing can be proved total on it")
        return self._remember(expression, self._total_sql(expression))

    def _remember(self, expression: exp.Expression, sql: str) -> str:
        """Keeps the checked SQL of a tree for :meth:`to_sql` (at most
        :data:`_TREES_KEPT` trees)."""
        memo = self.__dict__.setdefault("_sql_memo", OrderedDict())
        memo[id(expression)] = (expression, sql)
        # as many trees as the plan cache keeps (its trees are the ones asked again);
        # more would only hold dead trees alive with the plan cache off
        while len(memo) > _TREES_KEPT:
            memo.popitem(last=False)
        return sql

    def schema_version(self) -> Hashable | None:
        """A value that changes whenever the database's schema (tables, column types,
        keys, collations) may have changed; None when the backend cannot tell, which
        turns the plan cache off. Metadata only, read before any charge."""
        return None

    def _finals_version(self) -> Hashable | None:
        """The schema version under which :meth:`_total_sql` may remember final texts
        (see there); None, the default, remembers nothing: the schema may change
        between the engine's reading of the version and the typing of a tree."""
        return None

    def _total_sql(self, original: exp.Expression) -> str:
        """:meth:`to_sql` by the allow-list: type, guard, transform, check (see
        :mod:`dpsql.backends.total`).

        The final text is remembered (at most 512, of at most :data:`_FINALS_CHARS`
        characters with their keys' texts) by the text of the tree it came
        from, the schema version (:meth:`_finals_version`; nothing is remembered without
        one) and the catalog's tables and names, and only after every check passed.
        A tree whose own text is such a text (written and checked here, its walk
        included, every time) gets the remembered final text without being typed and
        guarded again. Why that is the text the checks would pass for it: everything
        after the first check is a function of the tree, the schema (the column types
        the probes read; fixed by the version), this backend's allow-list, transforms
        and dialect, and the catalog's names (fixed per connection or in the key). Two
        trees may write the same text, so the final text may be the one another tree
        of that text was guarded into; the engine reads only text, though, so it reads
        both trees as the one query it reads from that text, and the remembered final
        text is that query with the guards its checks proved total: it passed the
        totality check (on the tree that wrote it, typed by the engine under the same
        schema) and the output check (on that tree and on its own text, under the same
        tables and names) as it stands. Guards change no value but one that would
        fail, so it answers what the text asks. A refusal is never remembered.
        """
        from dpsql.backends import total
        from dpsql.output_check import checked_sql

        # the output language first: nothing of a query reaches the engine, not even a
        # probe that binds over no data, before its tree is known to be dpsql's own (an
        # engine that binds no types gets no probe: its check is the one at the end)
        key = None
        if self.reports_types:
            text = checked_sql(original, self.dialect, tables=self.catalog_tables,
                               names=self.catalog_names)
            version = self._finals_version()
            if version is not None:
                key = (text, version, self.catalog_tables, self.catalog_names)
                finals = self.__dict__.setdefault("_finals", OrderedDict())
                known = finals.get(key)
                if known is not None:
                    finals.move_to_end(key)
                    self._last_sql = (original, known)
                    return known
        expression = original.copy()
        if self.pre_transforms:
            from dpsql.backends import dialects

            ctx = dialects.context(expression, self.columns, self.dialect,
                                   **self.dialect_options())
            expression = dialects.apply(expression, self.pre_transforms, ctx)
        types = self.engine_types(expression)
        total.place_guards(expression, self.allow, types, _refusal)
        if self.transforms:
            from dpsql.backends import dialects

            ctx = dialects.context(expression, self.columns, self.dialect,
                                   **self.dialect_options())
            expression = dialects.apply(expression, self.transforms, ctx)
            types = self.engine_types(expression)
        total.check_total(expression, self.allow, types)
        # the guarded tree is this call's own copy, read no more: written without one
        sql = checked_sql(expression, self.dialect, tables=self.catalog_tables,
                          names=self.catalog_names, consume=True)
        if key is not None:
            finals = self.__dict__.setdefault("_finals", OrderedDict())
            size = self.__dict__.get("_finals_chars", 0)
            old = finals.pop(key, None)
            size -= 0 if old is None else len(key[0]) + len(old)
            finals[key] = sql
            size += len(text) + len(sql)
            # at most 512 texts and _FINALS_CHARS characters: an analyst's stream of
            # long distinct queries keeps megabytes, not hundreds of them
            while finals and (len(finals) > 512 or size > _FINALS_CHARS):
                (dropped, *_), final = finals.popitem(last=False)
                size -= len(dropped) + len(final)
            self.__dict__["_finals_chars"] = size
        self._last_sql = (original, sql)
        return sql

    def engine_types(self, expression: exp.Expression):
        """The engine's type of every node (:mod:`dpsql.backends.probe_types`),
        or :class:`~dpsql.backends.total.Untyped` where the engine binds no types."""
        from dpsql.backends import probe_types, total

        if not self.reports_types:
            return total.Untyped()
        return probe_types.expression_types(expression, self.columns, self._probe_types,
                                            self.dialect)

    def dialect_options(self) -> dict:
        """Facts about the connected engine the transforms need (e.g. its version)."""
        return {}

    @abstractmethod
    def columns(self, table: str) -> dict[str, str] | None:
        """Column name → type name of ``table`` (lower-case), or None if absent."""

    @abstractmethod
    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        """Binds a rewritten query without reading data; returns its (name, type) columns.

        Raises BackendError (not charged) if the backend refuses it: a failure at this
        point depends on the schema only, so the query can be refused for free.
        """

    @abstractmethod
    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        """Column sets of ``table`` that the database keeps unique and NOT NULL (lower-case).

        A PRIMARY KEY, or a UNIQUE constraint whose columns are all NOT NULL: UNIQUE
        alone admits any number of NULLs, which would be many rows with one "key".
        """

    def nonbinary_collation_columns(self, table: str) -> set[str]:
        """String columns of ``table`` whose equality is not byte-exact (lower-case)."""
        return set()

    def frozen_row(self, expression: exp.Expression) -> tuple | None:
        """The one row a query of counts returns, read only where the backend's data
        cannot change while dpsql holds it and from base tables only (None otherwise;
        :mod:`dpsql.frozen_facts`, :mod:`dpsql.one_per_user`)."""
        return None

    def ready(self) -> None:
        """Acquires what running a query needs, before the query is charged.

        Called just before the charge: what fails here refuses the query for free, so
        :meth:`execute` after the charge does not fail for want of it (the DuckDB
        backend starts the thread its statements run on). Nothing by default.
        """
        return None

    @abstractmethod
    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        """Runs one rewritten query; returns its column names and rows."""

    @abstractmethod
    def close(self) -> None:
        """Releases the connection."""
