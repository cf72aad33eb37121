"""Random worlds (catalog, D, one adversarial user) and random queries, as hypothesis strategies.

The schema is drawn from a fixed cast of tables whose column names overlap on purpose
(``uid``, ``region``, ``place``, ``oid``), so joins, name resolution and correlated
subqueries have something to get wrong:

* ``people``  user-keyed; ``uid`` is PRIMARY KEY, UNIQUE (NULL-able) or repeated;
* ``visits``  user-keyed, many rows per user;
* ``orders``  user-keyed, ``oid`` PRIMARY KEY (or not: then the path below is refused);
* ``items``   reaches its user through ``oid → orders.oid``, ``uid → people.uid``;
* ``events``  ``row_privacy``;
* ``places``, ``brackets``  public, with unique or repeated keys.

Every user key's SQL type is drawn per table (SMALLINT … HUGEINT or VARCHAR), so equal
users can be spelled ``1`` in one table and ``'1'`` in another; integer columns range over
TINYINT … HUGEINT, text columns may be ``COLLATE NOCASE``.

The added user obeys nothing: many rows in many groups, the extremes of every type
(HUGEINT's largest, ±inf, NaN, NULL in columns the catalog calls non-nullable, dates
far outside the bounds), spellings that collide with other users' values (``'01'`` for
user ``1``, ``'A'`` for ``'a'``), and, when the schema lets it, a NULL user key.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from hypothesis import strategies as st

from tests.privacy.oracle import World

INT_RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "HUGEINT": (-(2**127), 2**127 - 1),
}
KEY_TYPES = ("INTEGER", "BIGINT", "HUGEINT", "SMALLINT", "VARCHAR")
ATTACKER = 1000
TEXT_POOL = ("A", "a", "B", "b", "x", "X", "", " ", "%", "_", "\\", "abc\\", "é", "z" * 120,
             "1", "01", "n", "N")
DATE_POOL = ("0001-01-01", "1899-12-31", "1999-12-31", "2000-06-15", "2021-02-14",
             "2400-02-29", "9999-12-31")
FLOAT_POOL = ("inf", "-inf", "nan", 1e308, -1e308, 0.0, 5e-324, -0.0, 1e15)


@dataclass
class Col:
    name: str
    sqltype: str
    lower: object = None
    upper: object = None
    values: tuple | None = None
    nullable: bool = False
    collate: bool = False
    constraint: str = ""  # "PRIMARY KEY", "UNIQUE" or ""
    per_user: bool = False  # declared one_per_user (dpsql.one_per_user)
    #: declared values_only (dpsql.values_only): every row of D holds one of the values;
    #: the attacker's rows keep it true or break it
    values_only: bool = False
    #: declared in_bounds (dpsql.in_bounds): every value of D lies within the bounds;
    #: the attacker's rows keep it true or break it
    in_bounds: bool = False

    @property
    def kind(self) -> str:
        if self.sqltype in INT_RANGES:
            return "int"
        if self.sqltype.startswith("DECIMAL"):  # summed as DECIMALs (dpsql.decimal_sums)
            return "float"
        return {"DOUBLE": "float", "VARCHAR": "str", "DATE": "date"}[self.sqltype]

    @property
    def ctype(self) -> str:
        return {"int": "int", "float": "float", "str": "string", "date": "date"}[self.kind]

    @property
    def bounded(self) -> bool:
        return self.lower is not None and self.kind in ("int", "float")

    def catalog(self) -> dict:
        out: dict = {"type": self.ctype}
        if self.lower is not None:
            out["lower"], out["upper"] = self.lower, self.upper
        if self.values is not None:
            out["values"] = list(self.values)
        if self.nullable:
            out["nullable"] = True
        if self.per_user:
            out["one_per_user"] = True
        if self.values_only and self.values is not None:
            out["values_only"] = True
        if self.in_bounds and self.bounded:
            out["in_bounds"] = True
        return out

    def ddl(self) -> str:
        text = f"{self.name} {self.sqltype}"
        if self.collate:
            text += " COLLATE NOCASE"
        if self.constraint:
            text += " " + self.constraint
        return text


@dataclass
class TableMeta:
    name: str
    kind: str  # "user", "path", "row" or "public"
    cols: list[Col]
    user_key: str | None = None
    max_groups: int = 1
    max_rows: int = 1
    path: list | None = None

    def col(self, name: str) -> Col:
        return next(c for c in self.cols if c.name == name)

    @property
    def private(self) -> bool:
        return self.kind != "public"

    def catalog(self) -> dict:
        out: dict = {"columns": {c.name: c.catalog() for c in self.cols}}
        if self.kind == "user":
            out["user_key"] = self.user_key
        elif self.kind == "path":
            out["user_key"] = {"path": self.path}
        elif self.kind == "row":
            out["row_privacy"] = True
        else:
            out["public"] = True
        if self.kind != "public":
            out["max_groups"], out["max_rows"] = self.max_groups, self.max_rows
        return out


@dataclass
class Meta:
    """What the query grammar needs to know about a world."""

    tables: dict[str, TableMeta]
    #: the added user's key as a literal, per user-keyed table where it has a non-NULL key
    attacker_literal: dict[str, str] = field(default_factory=dict)
    #: how the added user's key is spelled: "fresh", "collide" (``'01'`` for user 1, in
    #: text-keyed tables only) or "null"
    mode: str = "fresh"


@dataclass
class Generated:
    world: World
    meta: Meta


def literal(value, col: Col) -> str:
    if value is None:
        return "NULL"
    kind = col.kind
    if kind == "int":
        return str(int(value))
    if kind == "float":
        if isinstance(value, str):
            return f"CAST('{value}' AS DOUBLE)"
        return repr(float(value))
    if kind == "date":
        return f"DATE '{value}'"
    return "'" + str(value).replace("'", "''") + "'"


def _insert(table: TableMeta, rows: list[tuple]) -> list[str]:
    """One INSERT per row, so that the reducer can drop rows one by one."""
    return [f"INSERT INTO {table.name} VALUES ("
            + ", ".join(literal(v, c) for v, c in zip(r, table.cols, strict=True)) + ")"
            for r in rows]


def _key_value(user: int, col: Col):
    return str(user) if col.kind == "str" else user


def _date(day: int, start: str) -> str:
    return (datetime.date.fromisoformat(start) + datetime.timedelta(days=day)).isoformat()


# ---------------------------------------------------------------------------------------
# worlds


@st.composite
def worlds(draw) -> Generated:
    # most tables in most worlds (queries pick among them; a world costs the same), but
    # each can shrink away: hypothesis shrinks the draw to 0, which leaves it out
    names = {n for n in ("people", "visits", "orders", "items", "events")
             if draw(st.integers(0, 9)) >= 2}
    if "items" in names:
        names |= {"people", "orders"}
    if not names:
        names = {"visits"}
    publics = {n for n in ("places", "brackets") if draw(st.integers(0, 9)) >= 2}
    tables: dict[str, TableMeta] = {}

    def bounds_for(sqltype):
        return draw(st.sampled_from([(0, 100), (-50, 120), (1, 10)]))

    def int_type(choices=tuple(INT_RANGES)):
        return draw(st.sampled_from(choices))

    def key_col():
        return Col("uid", draw(st.sampled_from(KEY_TYPES)))

    def text_col(name, pool):
        values = draw(st.sampled_from([None, pool, pool + (pool[0].upper(),)]))
        # rarely: a collated column makes the whole table refused on engines that
        # refuse non-binary collations, which would hide everything else
        return Col(name, "VARCHAR", values=values, collate=draw(st.integers(0, 9)) == 0,
                   nullable=draw(st.booleans()), values_only=draw(st.booleans()))

    def groups_rows():
        return draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2, 5]))

    if "people" in names:
        uid = key_col()
        uid.constraint = draw(st.sampled_from(["PRIMARY KEY", "PRIMARY KEY", "UNIQUE", ""]))
        age_type = int_type()
        lo, hi = bounds_for(age_type)
        g, r = groups_rows()
        per = draw(st.booleans())  # region and born declared one per user, true in D
        tables["people"] = TableMeta("people", "user", [
            uid,
            Col("region", "INTEGER", values=draw(st.sampled_from([None, (1, 2, 3)])),
                nullable=draw(st.booleans()), per_user=per, values_only=draw(st.booleans())),
            Col("age", age_type, lo, hi, nullable=draw(st.booleans()),
                in_bounds=draw(st.booleans())),
            text_col("name", ("a", "b", "c")),
            Col("born", "DATE", "2000-01-01", "2000-12-31", per_user=per),
            Col("score", draw(st.sampled_from(["DOUBLE", "DECIMAL(6,2)"])),
                *draw(st.sampled_from([(0, 10), (-5, 5)])),
                nullable=draw(st.booleans()), in_bounds=draw(st.booleans())),
        ], user_key="uid", max_groups=g, max_rows=r)
    if "visits" in names:
        g, r = groups_rows()
        per = draw(st.booleans())  # day and place declared one per user, true in D
        tables["visits"] = TableMeta("visits", "user", [
            key_col(),
            Col("vid", "INTEGER", constraint=draw(st.sampled_from(["UNIQUE", ""]))),
            Col("day", "DATE", "2021-01-01", "2021-03-31", per_user=per),
            Col("place", "INTEGER", values=draw(st.sampled_from([None, (1, 2, 3, 4)])),
                per_user=per, values_only=draw(st.booleans())),
            Col("amount", draw(st.sampled_from(["DOUBLE", "DECIMAL(12,2)"])), 0, 100,
                nullable=draw(st.booleans()), in_bounds=draw(st.booleans())),
            text_col("cat", ("x", "y")),
        ], user_key="uid", max_groups=g, max_rows=r)
    if "orders" in names:
        g, r = groups_rows()
        qty_type = int_type(("TINYINT", "SMALLINT", "INTEGER"))
        tables["orders"] = TableMeta("orders", "user", [
            Col("oid", "INTEGER", constraint=draw(st.sampled_from(
                ["PRIMARY KEY", "PRIMARY KEY", "UNIQUE", ""]))),
            key_col(),
            Col("total", draw(st.sampled_from(["DOUBLE", "DECIMAL(15,2)"])), 0, 1000,
                in_bounds=draw(st.booleans())),
            Col("status", "VARCHAR", values=("F", "O", "P")),
            Col("qty", qty_type, 0, 50, in_bounds=draw(st.booleans())),
        ], user_key="uid", max_groups=g, max_rows=r)
    if "items" in names:
        g, r = groups_rows()
        tables["items"] = TableMeta("items", "path", [
            Col("iid", "INTEGER"),
            Col("oid", "INTEGER"),
            Col("qty", int_type(("TINYINT", "SMALLINT", "BIGINT")), 0, 20,
                in_bounds=draw(st.booleans())),
            Col("price", draw(st.sampled_from(["DOUBLE", "DECIMAL(9,2)"])), 0, 100,
                in_bounds=draw(st.booleans())),
            Col("flag", "VARCHAR", values=("A", "N", "R")),
        ], max_groups=g, max_rows=r, path=[
            {"column": "oid", "references": "orders.oid"},
            {"column": "uid", "references": "people.uid"}])
    if "events" in names:
        val_type = int_type()
        lo, hi = bounds_for(val_type)
        tables["events"] = TableMeta("events", "row", [
            Col("eid", "INTEGER"),
            text_col("kind", ("k", "m")),
            Col("val", val_type, lo, hi, in_bounds=draw(st.booleans())),
            Col("region", "INTEGER", values=draw(st.sampled_from([None, (1, 2, 3)]))),
            Col("place", "INTEGER"),
            Col("w", draw(st.sampled_from(["DOUBLE", "DECIMAL(4,3)"])), 0, 1,
                in_bounds=draw(st.booleans())),
        ], max_groups=draw(st.sampled_from([1, 2])), max_rows=1)
    if "places" in publics:
        tables["places"] = TableMeta("places", "public", [
            Col("place", "INTEGER", constraint=draw(st.sampled_from(
                ["PRIMARY KEY", "PRIMARY KEY", ""]))),
            Col("region", "INTEGER"),
            Col("label", "VARCHAR", values=draw(st.sampled_from([None, ("n", "s", "e")])),
                collate=draw(st.integers(0, 9)) == 0),
        ])
    if "brackets" in publics:
        tables["brackets"] = TableMeta("brackets", "public", [
            Col("lo", "INTEGER"),
            Col("tag", "VARCHAR", values=draw(st.sampled_from([None, ("low", "mid", "high")]))),
        ])

    # -- D ------------------------------------------------------------------------------
    n_users = draw(st.integers(2, 7))
    users = list(range(1, n_users + 1))
    rows: dict[str, list[tuple]] = {t: [] for t in tables}
    small = st.integers(0, 1_000_000)
    if "people" in tables:
        t = tables["people"]
        for u in users:
            copies = draw(st.sampled_from([0, 1, 1, 1] + ([2] if not t.cols[0].constraint
                                                           else [])))
            for _ in range(copies):
                x = draw(small)
                lo, hi = t.col("age").lower, t.col("age").upper
                y = 7 * u if t.col("region").per_user else x  # the user's own values
                rows["people"].append((
                    _key_value(u, t.cols[0]),
                    (None if t.col("region").nullable and y % 7 == 0 else 1 + y % 3),
                    lo + x % (hi - lo + 1),
                    ["a", "b", "c"][x % 3],
                    _date(y % 366, "2000-01-01"),
                    t.col("score").lower + (x % 100) / 10,
                ))
    if "visits" in tables:
        t = tables["visits"]
        vid = 0
        for u in users:
            for x in draw(st.lists(small, max_size=4)):
                vid += 1
                y = u if t.col("place").per_user else x  # the user's own values
                rows["visits"].append((_key_value(u, t.cols[0]), vid, _date(y % 4, "2021-01-01"),
                                       1 + y % 4, float(x % 101), ["x", "y"][x % 2]))
    if "orders" in tables:
        t = tables["orders"]
        oid = 0
        for u in users:
            for x in draw(st.lists(small, max_size=3)):
                oid += 1
                rows["orders"].append((oid, _key_value(u, t.cols[1]), float(x % 1000),
                                       "FOP"[x % 3], x % 51))
    if "items" in tables:
        iid = 0
        for order in list(rows["orders"]):
            for x in draw(st.lists(small, max_size=3)):
                iid += 1
                rows["items"].append((iid, order[0], x % 21, float(x % 100), "ANR"[x % 3]))
    if "events" in tables:
        t = tables["events"]
        lo, hi = t.col("val").lower, t.col("val").upper
        for i, x in enumerate(draw(st.lists(small, min_size=1, max_size=10))):
            rows["events"].append((i + 1, ["k", "m"][x % 2], lo + x % (hi - lo + 1),
                                   1 + x % 3, 1 + x % 4, (x % 10) / 10))
    if "places" in tables:
        t = tables["places"]
        keys = [1, 2, 3, 4]
        if not t.cols[0].constraint:
            keys += draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3))
        for i, k in enumerate(keys):
            rows["places"].append((k, 1 + (k + i) % 3, ["n", "s", "e"][(k + i) % 3]))
    if "brackets" in tables:
        rows["brackets"] = [(0, "low"), (30, "mid"), (60, "high")]
        rows["brackets"] += draw(st.lists(st.sampled_from([(30, "mid"), (0, "high")]),
                                          max_size=2))

    # -- the added user ------------------------------------------------------------------
    mode = draw(st.sampled_from(["fresh", "fresh", "collide", "null"]))
    if mode == "collide" and not any(t.kind == "user" and t.col(t.user_key).kind == "str"
                                     for t in tables.values()):
        mode = "fresh"  # nothing to collide with: the added user would have no rows
    # the added user skips some tables (a user missing from a LEFT JOIN's right side)
    absent = draw(st.sets(st.sampled_from(sorted(tables)), max_size=2))
    spelling = draw(st.sampled_from(["01", " 1", "1.0", "+1", "1 "]))
    attack: dict[str, list[tuple]] = {t: [] for t in tables}
    literals: dict[str, str] = {}

    def attacker_key(col: Col):
        """The added user's key in a table, or ``...`` when it has no rows there."""
        if mode == "null":
            return ... if col.constraint == "PRIMARY KEY" else None
        if mode == "collide":
            return spelling if col.kind == "str" else ...
        return str(ATTACKER) if col.kind == "str" else ATTACKER

    def extreme(col: Col):
        """Often an ordinary value (to land in others' groups), else an extreme."""
        if draw(st.integers(0, 3)) < (3 if col.name in ("region", "place", "day") else 2):
            return ordinary(col)
        if col.kind == "int":
            lo, hi = INT_RANGES[col.sqltype]
            pool = [lo, hi, 0, 1, 2, 3, 4, 99, -1]
            if col.lower is not None:
                pool += [col.lower, col.upper, col.upper + 1, col.lower - 1]
            pool = [p for p in pool if lo <= p <= hi]
            return draw(st.sampled_from(pool + [None]))
        if col.sqltype.startswith("DECIMAL"):  # what the type can hold, at its ends
            p, s = (int(x) for x in col.sqltype[8:-1].split(","))
            big = 10.0 ** (p - s) - 1
            pool = [big, -big, 0.0, 10.0 ** -s, -(10.0 ** -s)]
            if col.lower is not None:
                pool += [col.lower, col.upper, min(big, col.upper + 1), max(-big, col.lower - 1)]
            return draw(st.sampled_from(pool + [None]))
        if col.kind == "float":
            pool = list(FLOAT_POOL) + ([col.lower, col.upper] if col.lower is not None else [])
            return draw(st.sampled_from(pool + [None]))
        if col.kind == "date":
            return draw(st.sampled_from(DATE_POOL + (None,)))
        return draw(st.sampled_from(TEXT_POOL + (None,)))

    def ordinary(col: Col):
        if col.values is not None:
            return draw(st.sampled_from(col.values))
        if col.kind == "int":
            if col.lower is not None:  # few distinct values: rows meet others' rows
                return draw(st.sampled_from([col.lower, col.lower + 1,
                                             (col.lower + col.upper) // 2, col.upper]))
            return draw(st.integers(1, 4))
        if col.kind == "float":
            return col.lower + draw(st.integers(0, 10)) * (col.upper - col.lower) / 10
        if col.kind == "date":
            return _date(draw(st.integers(0, 3)), col.lower or "2000-01-01")
        return draw(st.sampled_from(("a", "b", "c", "x", "y", "k", "m", "n", "s")))

    def attacker_rows(table: TableMeta, key_index: int | None, many: bool,
                      fixed: dict | None = None) -> list[tuple]:
        key = attacker_key(table.cols[key_index]) if key_index is not None else None
        if key is ... or table.name in absent:
            return []
        count = draw(st.integers(1, 12)) if many else 1
        out = []
        for _ in range(count):
            row = []
            for i, col in enumerate(table.cols):
                if i == key_index:
                    row.append(key)
                elif fixed and col.name in fixed:
                    row.append(fixed[col.name]())
                else:
                    row.append(extreme(col))
            out.append(tuple(row))
        return out

    if "people" in tables:
        t = tables["people"]
        key = attacker_key(t.cols[0])
        many = not t.cols[0].constraint or (key is None and t.cols[0].constraint == "UNIQUE")
        fixed = {}
        if t.col("region").per_user and draw(st.booleans()):  # the declaration stays true
            region, born = ordinary(t.col("region")), ordinary(t.col("born"))
            fixed = {"region": lambda: region, "born": lambda: born}
        attack["people"] = attacker_rows(t, 0, many, fixed)
    if "visits" in tables:
        t = tables["visits"]
        fresh_vid = iter(range(10_000, 20_000))
        fixed = {"vid": lambda: next(fresh_vid)} if t.col("vid").constraint else {}
        if t.col("place").per_user and draw(st.booleans()):  # the declaration stays true
            place, day = ordinary(t.col("place")), ordinary(t.col("day"))
            fixed |= {"place": lambda: place, "day": lambda: day}
        attack["visits"] = attacker_rows(t, 0, True, fixed)
    if "orders" in tables:
        t = tables["orders"]
        fresh_oid = iter(range(10_000, 20_000))
        attack["orders"] = attacker_rows(t, 1, True, {"oid": lambda: next(fresh_oid)})
    if "items" in tables and attack.get("orders"):
        t = tables["items"]
        oids = [r[0] for r in attack["orders"]]
        fresh_iid = iter(range(10_000, 20_000))
        attack["items"] = attacker_rows(t, None, True, {
            "iid": lambda: next(fresh_iid), "oid": lambda: draw(st.sampled_from(oids))})
    if "events" in tables and "events" not in absent:  # row privacy: one row is one user
        t = tables["events"]
        attack["events"] = [tuple(extreme(c) for c in t.cols)]
    for name, t in tables.items():
        if t.kind != "user":
            continue
        key = attacker_key(t.col(t.user_key))
        if key is not ... and key is not None:
            literals[name] = literal(key, t.col(t.user_key))

    catalog = {"dataset": "fuzz", "tables": {n: t.catalog() for n, t in tables.items()}}
    schema = [f"CREATE TABLE {t.name} ({', '.join(c.ddl() for c in t.cols)})"
              for t in tables.values()]
    data = [s for t in tables.values() for s in _insert(t, rows[t.name])]
    attacker = [s for t in tables.values() for s in _insert(t, attack[t.name])]
    world = World(catalog, schema, data, attacker, draw(st.booleans()))
    return Generated(world, Meta(tables, literals, mode))


# ---------------------------------------------------------------------------------------
# queries


@dataclass
class Src:
    """A FROM item as the outer query sees it: alias and columns."""

    alias: str
    cols: list[Col]
    uid: str | None  # its user-key column, if any
    table: TableMeta | None = None  # the catalog table (None for a derived table)


class _Query:
    def __init__(self, draw, meta: Meta):
        self.draw = draw
        self.meta = meta
        self.tables = meta.tables

    # -- helpers -------------------------------------------------------------------------

    def pick(self, options):
        return self.draw(st.sampled_from(list(options)))

    def chance(self, p: float) -> bool:
        return self.draw(st.integers(0, 99)) < int(p * 100)

    def private(self, kinds=("user", "path", "row")) -> list[TableMeta]:
        return [t for t in self.tables.values() if t.kind in kinds]

    def publics(self) -> list[TableMeta]:
        return [t for t in self.tables.values() if t.kind == "public"]

    def src(self, t: TableMeta, alias: str) -> Src:
        uid = t.user_key if t.kind == "user" else None
        return Src(alias, list(t.cols), uid, t)

    def uid_literal(self, s: Src) -> str:
        """A user's key as a literal of the source's key type (often the added user's)."""
        col = next(c for c in s.cols if c.name == s.uid)
        if s.table is not None and s.table.name in self.meta.attacker_literal \
                and self.chance(0.7):
            return self.meta.attacker_literal[s.table.name]
        return "'1'" if col.kind == "str" else "1"

    @staticmethod
    def ref(s: Src, c: Col | str, qualify: bool) -> str:
        name = c if isinstance(c, str) else c.name
        return f"{s.alias}.{name}" if qualify else name

    # -- FROM ----------------------------------------------------------------------------

    def from_clause(self) -> tuple[str, list[Src], list[str]]:
        """The FROM text, the visible sources, and WHERE conjuncts it needs (comma joins)."""
        # weights: where the analysis reasons about names, joins and facts
        shapes = ["single", "single", "public", "derived", "derived", "cte"]
        users = self.private(("user",))
        if users:
            shapes += ["users", "left3", "derived_left", "multi_left", "multi_left",
                       "rowderived"]
        if "items" in self.tables:
            shapes += ["path"]
        if self.publics():
            shapes += ["public", "public", "comma"]
            if "events" in self.tables:
                shapes += ["row_public"]
        shape = self.pick(shapes)
        return getattr(self, "_from_" + shape)()

    def _from_single(self):
        t = self.pick(self.private())
        alias = self.pick([t.name, t.name[0]])
        text = t.name if alias == t.name else f"{t.name} {alias}"
        return text, [self.src(t, alias)], []

    def _on_public(self, s: Src, p: TableMeta, palias: str) -> str | None:
        """A join condition between a private source and a public table."""
        pairs = [(c, pc) for c in s.cols for pc in p.cols
                 if c.kind == pc.kind == "int" and (c.name == pc.name or self.chance(0.3))]
        kind = self.pick(["eq", "eq", "eq", "eq_extra", "true", "ineq"])
        if kind == "true":
            return "TRUE"
        if not pairs:
            return None
        c, pc = self.pick(pairs)
        if kind == "ineq":
            return f"{s.alias}.{c.name} >= {palias}.{pc.name}"
        cond = f"{palias}.{pc.name} = {s.alias}.{c.name}"
        if kind == "eq_extra":
            cond += " AND " + self.row_condition(s, True)
        return cond

    def _from_public(self):
        t = self.pick(self.private())
        p = self.pick(self.publics()) if self.publics() else None
        s = self.src(t, t.name[0])
        if p is None:
            return f"{t.name} {s.alias}", [s], []
        ps = self.src(p, p.name[0] + "p")
        on = self._on_public(s, p, ps.alias)
        if on is None:
            return f"{t.name} {s.alias}", [s], []
        self.focus = [ps]
        join = self.pick(["JOIN", "LEFT JOIN", "INNER JOIN"])
        return f"{t.name} {s.alias} {join} {p.name} {ps.alias} ON {on}", [s, ps], []

    def _from_row_public(self):
        """The row_privacy table joined to a public one (issue class 2): a repeated key,
        ``ON TRUE`` or an inequality must not repeat one person's row."""
        t = self.tables["events"]
        p = self.pick(self.publics())
        s, ps = self.src(t, "e"), self.src(p, p.name[0] + "p")
        on = self._on_public(s, p, ps.alias) or "TRUE"
        self.focus = [ps]
        join = self.pick(["JOIN", "LEFT JOIN"])
        return f"{t.name} e {join} {p.name} {ps.alias} ON {on}", [s, ps], []

    def _from_comma(self):
        t = self.pick(self.private())
        p = self.pick(self.publics())
        s, ps = self.src(t, t.name[0]), self.src(p, p.name[0] + "p")
        pairs = [(c, pc) for c in s.cols for pc in p.cols if c.kind == pc.kind == "int"]
        if not pairs:
            return f"{t.name} {s.alias}", [s], []
        c, pc = self.pick(pairs)
        return (f"{t.name} {s.alias}, {p.name} {ps.alias}", [s, ps],
                [f"{s.alias}.{c.name} = {ps.alias}.{pc.name}"])

    def _from_users(self):
        users = self.private(("user",))
        a = self.pick(users)
        b = self.pick(users)
        sa, sb = self.src(a, "a"), self.src(b, "b")
        on = f"a.{a.user_key} = b.{b.user_key}"
        shared = [c.name for c in a.cols for d in b.cols
                  if c.name == d.name and c.kind == d.kind and c.name != "uid"]
        if shared and self.chance(0.3):
            on += f" AND a.{self.pick(shared)} = b.{self.pick(shared)}"
        if self.chance(0.15) and shared:
            on = f"a.{self.pick(shared)} = b.{self.pick(shared)}"
        join = self.pick(["JOIN", "JOIN", "LEFT JOIN"])
        if self.chance(0.3):  # comma join with the equality in WHERE
            return f"{a.name} a, {b.name} b", [sa, sb], [on]
        text = f"{a.name} a {join} {b.name} b ON {on}"
        srcs = [sa, sb]
        if self.publics() and self.chance(0.4):
            p = self.pick(self.publics())
            ps = self.src(p, "p")
            cond = self._on_public(self.pick([sa, sb]), p, "p")
            if cond is not None:
                text += f" {self.pick(['JOIN', 'LEFT JOIN'])} {p.name} p ON {cond}"
                srcs.append(ps)
        return text, srcs, []

    def _from_left3(self):
        """``a JOIN b ON a.x = b.x LEFT JOIN pub ON ... AND a.uid = b.uid`` (issue class 3)."""
        users = self.private(("user",))
        a = self.pick(users)
        sa, sb = self.src(a, "a"), self.src(a, "b")
        shared = [c.name for c in a.cols if c.name != a.user_key and c.kind in ("int", "date")]
        x = self.pick(shared)
        if not self.publics():
            return (f"{a.name} a JOIN {a.name} b ON a.{x} = b.{x}", [sa, sb], [])
        p = self.pick(self.publics())
        pk = self.pick([c.name for c in p.cols if c.kind == "int"])
        ints = [c.name for c in a.cols if c.kind == "int" and c.name != a.user_key] or [x]
        return (f"{a.name} a JOIN {a.name} b ON a.{x} = b.{x} LEFT JOIN {p.name} p "
                f"ON p.{pk} = a.{self.pick(ints)} AND a.{a.user_key} = b.{a.user_key}",
                [sa, sb, self.src(p, "p")], [])

    def _from_multi_left(self):
        """Several LEFT JOINs to a public table with extra ON conditions (issue class 4).

        Targeted: the user's own row (``people``, often a PRIMARY KEY), many rows of the
        same user beside it, and public rows joined on a unique key under conditions on
        those many rows, so one user's rows spread over many key combinations.
        """
        users = self.private(("user",))
        base = self.tables["people"] if "people" in self.tables and self.chance(0.9) \
            else self.pick(users)
        s = self.src(base, "u")
        srcs = [s]
        text = f"{base.name} u"
        other = [t for t in users if t is not base]
        if "visits" in self.tables and base.name != "visits" and self.chance(0.8):
            other = [self.tables["visits"]]
        row_src = s
        if other and self.chance(0.9):
            o = self.pick(other)
            row_src = self.src(o, "v")
            text += f" JOIN {o.name} v ON v.{o.user_key} = u.{base.user_key}"
            srcs.append(row_src)
        if not self.publics():
            return text, srcs, []
        p = self.tables["places"] if "places" in self.tables and self.chance(0.9) \
            else self.pick(self.publics())
        pk = p.cols[0].name if self.chance(0.8) else self.pick(
            [c.name for c in p.cols if c.kind == "int"])
        ints = [c for c in s.cols if c.kind == "int" and c.name != s.uid]
        ints = [c for c in ints if c.name in ("region", "place")] or ints  # keys that match
        if not ints:
            return text, srcs, []
        splits = [c for c in row_src.cols if c.kind in ("int", "float", "date")
                  and c.name != row_src.uid]
        for i in range(self.draw(st.integers(1, 4))):
            alias = f"l{i}"
            c = self.pick(ints)
            if splits and self.chance(0.7):  # a condition that splits one user's rows
                d = self.pick(splits)
                x = f"v.{d.name}" if row_src is not s else f"u.{d.name}"
                threshold = ("DATE '2021-01-02'" if d.kind == "date" else
                             str((d.lower + d.upper) // 2) if d.lower is not None else "2")
                cond = f"{x} {self.pick(['>', '<=', '<>'])} {threshold}"
            else:
                cond = self.row_condition(row_src, True)
            text += f" LEFT JOIN {p.name} {alias} ON {alias}.{pk} = u.{c.name} AND {cond}"
            srcs.append(self.src(p, alias))
            self.focus.append(srcs[-1])
        return text, srcs, []

    def _from_path(self):
        kind = self.pick(["alone", "orders", "public"])
        i = self.src(self.tables["items"], "i")
        if kind == "alone":
            return "items i", [i], []
        if kind == "orders":
            o = self.src(self.tables["orders"], "o")
            join = self.pick(["JOIN", "LEFT JOIN"])
            return f"orders o {join} items i ON i.oid = o.oid", [o, i], []
        if not self.publics():
            return "items i", [i], []
        p = self.pick(self.publics())
        on = self._on_public(i, p, "p")
        if on is None:
            return "items i", [i], []
        return f"items i JOIN {p.name} p ON {on}", [i, self.src(p, "p")], []

    def derived_body(self) -> tuple[str, list[Col]] | None:
        """``SELECT uid, ... FROM t GROUP BY uid[, key]``: a per-user derived table."""
        users = self.private(("user",))
        if not users:
            return None
        many = [t for t in users if t.name != "people"]  # several rows per user
        t = self.pick(many + many + users)
        s = self.src(t, t.name)
        R = t.max_rows
        uid = t.col(t.user_key)
        items = [f"{t.user_key}"]
        cols = [Col("uid", uid.sqltype)]
        group = [t.user_key]
        if self.chance(0.7):  # several rows per user
            key = self.pick([c for c in t.cols if c.name != t.user_key])
            if self.chance(0.3) and key.kind in ("int", "float"):
                expr = self.pick([f"{key.name} * 100000000000000000", f"{key.name} % 3",
                                  f"CAST({key.name} AS VARCHAR)"])
                items.append(f"{expr} AS k")
                cols.append(Col("k", "VARCHAR"))
                group.append(expr)
            else:
                name = self.pick([key.name, key.name, "oid", "place", "region"])
                items.append(f"{key.name} AS {name}" if name != key.name else key.name)
                cols.append(Col(name, key.sqltype, key.lower, key.upper, key.values,
                                key.nullable, key.collate))
                group.append(key.name)
        aggs = self.draw(st.integers(1, 2))
        numeric = [c for c in t.cols if c.bounded]
        for j in range(aggs):
            f = self.pick(["COUNT(*)", "COUNT(*)", "SUM", "AVG", "MIN", "MAX"])
            if f == "COUNT(*)" or not numeric:
                items.append(f"COUNT(*) AS c{j}")
                cols.append(Col(f"c{j}", "BIGINT", 0, R))
            else:
                c = self.pick(numeric)
                items.append(f"{f}({c.name}) AS c{j}")
                lo, hi = c.lower, c.upper
                if f == "SUM":
                    lo, hi = R * min(lo, 0), R * max(hi, 0)
                cols.append(Col(f"c{j}", "DOUBLE" if c.kind == "float" or f == "AVG"
                                else "BIGINT", lo, hi, nullable=f != "SUM"))
        where = ""
        if self.chance(0.3):
            where = " WHERE " + self.condition([s], False)
        return (f"SELECT {', '.join(items)} FROM {t.name}{where} GROUP BY {', '.join(group)}",
                cols)

    def _derived_alias(self) -> str:
        # catalog names above all: a derived table must not inherit the table's facts
        return self.pick(["t", "people", "orders", *self.tables])

    def _wrap_derived(self, srcs: list[Src], text: str, alias: str):
        s = srcs[0]
        users = self.private(("user",))
        if users and self.chance(0.35):
            o = self.pick(users)
            oalias = "o" if alias != "o" else "o2"
            join = self.pick(["JOIN", "LEFT JOIN"])
            text += f" {join} {o.name} {oalias} ON {oalias}.{o.user_key} = {alias}.uid"
            srcs.append(self.src(o, oalias))
        elif self.publics() and self.chance(0.3):
            p = self.pick(self.publics())
            on = self._on_public(s, p, "p")
            if on is not None:
                text += f" JOIN {p.name} p ON {on}"
                srcs.append(self.src(p, "p"))
        return text, srcs

    def _from_derived(self):
        body = self.derived_body()
        if body is None:
            return self._from_single()
        sql, cols = body
        alias = self._derived_alias()
        s = Src(alias, cols, "uid")
        text, srcs = self._wrap_derived([s], f"({sql}) {alias}", alias)
        return text, srcs, []

    def _from_cte(self):
        body = self.derived_body()
        if body is None:
            return self._from_single()
        sql, cols = body
        alias = self._derived_alias()
        self.with_ = f"WITH {alias} AS ({sql}) "
        s = Src(alias, cols, "uid")
        text, srcs = self._wrap_derived([s], alias, alias)
        return text, srcs, []

    def _from_rowderived(self):
        """A derived table that only filters and projects rows (written out by the
        analysis): an expression named like the user key or a column must not keep its
        facts, so ``uid % 2 AS uid`` joined on ``uid`` must be refused."""
        t = self.pick(self.private(("user",)))
        inner = self.src(t, t.name)
        uid = t.col(t.user_key)
        forms = [t.user_key, t.user_key]
        forms += ([f"{t.user_key} + 0", f"{t.user_key} % 2",
                   f"CASE WHEN {t.user_key} > 2 THEN {t.user_key} ELSE 0 END"]
                  if uid.kind == "int" else [f"LOWER({t.user_key})", f"LEFT({t.user_key}, 1)"])
        uexpr = self.pick(forms)
        items = [f"{uexpr} AS uid"]
        cols = [Col("uid", uid.sqltype)]
        for c in t.cols:
            if c.name == t.user_key or not self.chance(0.6):
                continue
            if c.bounded and c.kind == "int" and self.chance(0.3):
                # named like the column, bounded like the expression
                items.append(f"{c.name} * 1000 AS {c.name}")
                cols.append(Col(c.name, "BIGINT",
                                c.lower * 1000, c.upper * 1000, nullable=c.nullable))
            else:
                items.append(c.name)
                cols.append(c)
        where = f" WHERE {self.row_condition(inner, False)}" if self.chance(0.4) else ""
        alias = self._derived_alias()
        s = Src(alias, cols, "uid" if uexpr == t.user_key else None)
        sql = f"SELECT {', '.join(items)} FROM {t.name}{where}"
        if self.chance(0.3):
            self.with_ = f"WITH {alias} AS ({sql}) "
            text = alias
        else:
            text = f"({sql}) {alias}"
        text, srcs = self._wrap_derived([s], text, alias)
        return text, srcs, []

    def _from_derived_left(self):
        """A per-user derived table grouped by a LEFT-joined key (issue class 6)."""
        users = self.private(("user",))
        a = self.pick(users)
        b = self.pick([t for t in users if t is not a] or users)
        alias = self._derived_alias()
        uid = b.col(b.user_key)
        sql = (f"SELECT y.{b.user_key}, COUNT(*) AS c0 FROM {a.name} x LEFT JOIN {b.name} y "
               f"ON x.{a.user_key} = y.{b.user_key} GROUP BY y.{b.user_key}")
        R = max(a.max_rows, b.max_rows)
        cols = [Col("uid", uid.sqltype), Col("c0", "BIGINT", 0, R)]
        self.focus = [Src(alias, cols, "uid")]
        return f"({sql}) {alias}", list(self.focus), []

    # -- expressions ---------------------------------------------------------------------

    def columns(self, srcs: list[Src], kinds=None, bounded=False):
        out = []
        for s in srcs:
            for c in s.cols:
                if kinds and c.kind not in kinds:
                    continue
                if bounded and not c.bounded:
                    continue
                out.append((s, c))
        return out

    def num(self, srcs: list[Src], q: bool) -> str | None:
        """A bounded numeric expression (for SUM, AVG, quantiles, VARIANCE)."""
        cands = self.columns(srcs, ("int", "float"), bounded=True)
        if not cands:
            return None
        s, c = self.pick(cands)
        x = self.ref(s, c, q)
        forms = [x, x, f"{x} * 2", f"{x} + 1", f"{x} % 3", f"{x} % 2.5", f"{x} // 10",
                 f"{x} // 2.5", f"ABS({x})", f"CAST({x} AS DOUBLE)", f"LEAST({x}, 50)",
                 f"CASE WHEN {x} > 50 THEN {x} ELSE 0 END", f"{x} * {x}", f"ROUND({x})",
                 f"COALESCE({x}, 0)", f"{x} / 2", f"{x} + 2147483647",
                 f"{x} * 1000000000000000000"]
        if s.uid is not None:
            forms.append(f"CASE WHEN {self.ref(s, s.uid, q)} = {self.uid_literal(s)} "
                         f"THEN {x} * 100000000000000000 ELSE 0 END")
        return self.pick(forms)

    def key(self, srcs: list[Src], q: bool) -> str | None:
        if self.focus and self.chance(0.8):  # the sources the FROM shape is about
            srcs = self.focus
        cands = [(s, c) for s, c in self.columns(srcs) if c.name != s.uid or self.chance(0.2)]
        if not cands:
            return None
        declared = [(s, c) for s, c in cands if c.per_user]
        if declared and self.chance(0.5):  # keys checked one per user (dpsql.one_per_user)
            cands = declared
        only = [(s, c) for s, c in cands if c.values_only and c.values is not None]
        if only and self.chance(0.4):  # bare keys checked in their values (values_only)
            s, c = self.pick(only)
            return self.ref(s, c, q)
        s, c = self.pick(cands)
        x = self.ref(s, c, q)
        if c.kind == "int":
            forms = [x, x, x, f"{x} % 3", f"{x} // 10", f"{x} % 2.5", f"{x} // 2.5",
                     f"CASE WHEN {x} > 50 THEN 'hi' ELSE 'lo' END", f"CAST({x} AS VARCHAR)",
                     f"CASE WHEN {x} * 100000000000000000 > 5 THEN 'a' ELSE 'b' END",
                     f"CASE WHEN {x} > 30 THEN {x} * 100000000000000 ELSE 0 END", f"{x} + 1"]
        elif c.kind == "float":
            forms = [f"ROUND({x})", f"FLOOR({x} / 10)", f"{x} % 2.5",
                     f"CAST({x} AS INTEGER)", f"CASE WHEN {x} > 5 THEN 1 ELSE 0 END"]
        elif c.kind == "str":
            forms = [x, x, x, f"LOWER({x})", f"UPPER({x})", f"SUBSTRING({x}, 1, 1)",
                     f"LENGTH({x})", f"CAST({x} AS INTEGER)", f"{x} || 'x'", f"LEFT({x}, 1)"]
        else:
            forms = [f"YEAR({x})", f"MONTH({x})", f"EXTRACT(DOW FROM {x})",
                     f"date_trunc('month', {x})", x, f"DAY({x})", f"dayname({x})",
                     f"monthname({x})", f"strftime({x}, '%Y-%m')"]
        return self.pick(forms)

    def row_condition(self, s: Src, q: bool) -> str:
        """A condition over one source's own row."""
        return self.condition([s], q, subqueries=False)

    def condition(self, srcs: list[Src], q: bool, subqueries: bool = True) -> str:
        cands = self.columns(srcs) or [(srcs[0], Col("uid", "INTEGER"))]
        s, c = self.pick(cands)
        x = self.ref(s, c, q)
        if c.kind in ("int", "float"):
            forms = [f"{x} > {self.pick([0, 1, 30, 50])}", f"{x} BETWEEN 1 AND 50",
                     f"{x} IN (1, 2, 3)", f"{x} IS NULL", f"{x} <> 0",
                     f"{x} * 100000000000000000 > 0", f"{x} + 127 > 0",
                     f"CAST({x} AS TINYINT) > 0"]
        elif c.kind == "str":
            forms = [f"{x} = 'a'", f"{x} LIKE 'a%'", f"{x} LIKE 'abc\\'", f"{x} ILIKE 'A%'",
                     f"{x} IN ('a', 'x', 'A')", f"CAST({x} AS INTEGER) > 0", f"{x} <> 'b'"]
            others = [(t, d) for t, d in self.columns(srcs, ("str",)) if d is not c]
            if others:
                t, d = self.pick(others)
                forms.append(f"{x} LIKE {self.ref(t, d, q)}")
            if s.uid is not None:
                forms.append(f"{x} LIKE CONCAT(CASE WHEN {self.ref(s, s.uid, q)} = "
                             f"{self.uid_literal(s)} THEN '\\' ELSE '' END, 'a')")
        else:
            forms = [f"{x} >= DATE '2000-06-01'", f"YEAR({x}) = 2000", f"{x} IS NOT NULL",
                     f"dayname({x}) = 'Monday'", f"{x} < CURRENT_DATE"]
        if s.uid is not None:
            forms.append(f"{self.ref(s, s.uid, q)} <> {self.uid_literal(s)}")
        if subqueries and self.publics() and c.kind == "int":
            p = self.pick(self.publics())
            pcol = self.pick([pc.name for pc in p.cols if pc.kind == "int"])
            forms.append(f"{x} IN (SELECT {pcol} FROM {p.name})")
            shared = [d for d in s.cols if any(d.name == pc.name for pc in p.cols)
                      and d.kind == "int"]
            if shared:  # a correlated reference to the outer private row (class 13)
                d = self.pick(shared)
                forms.append(f"{x} IN (SELECT {pcol} FROM {p.name} WHERE "
                             f"{s.alias}.{d.name} * 100000000000000000 > {p.name}.{d.name})")
        return self.pick(forms)

    def aggregate(self, srcs: list[Src], q: bool) -> str:
        f = self.pick(["COUNT(*)", "COUNT(*)", "COUNT", "COUNT_UID", "COUNT_DISTINCT", "SUM",
                       "SUM", "AVG", "VARIANCE", "STDDEV", "VAR_POP", "MEDIAN", "QUANTILE",
                       "MIN", "MAX", "WITHIN"])
        if f == "COUNT(*)":
            return f
        if f == "COUNT":
            s, c = self.pick(self.columns(srcs))
            return f"COUNT({self.ref(s, c, q)})"
        if f == "COUNT_UID":
            with_uid = [s for s in srcs if s.uid is not None]
            if not with_uid:
                return "COUNT(*)"
            s = self.pick(with_uid)
            return f"COUNT(DISTINCT {self.ref(s, s.uid, q)})"
        if f == "COUNT_DISTINCT":
            k = self.key(srcs, q)
            return f"COUNT(DISTINCT {k})" if k else "COUNT(*)"
        x = self.num(srcs, q)
        if x is None:
            return "COUNT(*)"
        if f == "QUANTILE":
            return f"QUANTILE_CONT({x}, {self.pick(['0.25', '0.5', '0.9'])})"
        if f == "WITHIN":
            return f"PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY {x})"
        return f"{f}({x})"

    def build(self) -> str:
        self.with_ = ""
        self.focus: list[Src] = []
        text, srcs, conjuncts = self.from_clause()
        q = len(srcs) > 1 or self.chance(0.3)
        keys = [k for k in (self.key(srcs, q) for _ in range(self.draw(st.integers(0, 2))))
                if k is not None]
        keys = list(dict.fromkeys(keys))
        aggs = [self.aggregate(srcs, q) for _ in range(self.draw(st.integers(1, 3)))]
        conjuncts = conjuncts + [self.condition(srcs, q)
                                 for _ in range(self.draw(st.integers(0, 2)))]
        items = [f"{k} AS k{i}" for i, k in enumerate(keys)]
        items += [f"{a} AS a{i}" for i, a in enumerate(aggs)]
        sql = f"{self.with_}SELECT {', '.join(items)} FROM {text}"
        if conjuncts:
            sql += " WHERE " + " AND ".join(conjuncts)
        if keys:
            sql += " GROUP BY " + ", ".join(keys)
            tail = self.pick(["", "", "", " HAVING a0 > 2", " ORDER BY a0 DESC LIMIT 3",
                              " ORDER BY 1"])
            sql += tail
        if self.chance(0.15) and "LIMIT" not in sql:
            # what BI tools send: the released rows filtered, ordered and limited outside
            # (written out as HAVING/ORDER BY/LIMIT: dpsql.client_sql.released_rows)
            sql = (f"SELECT * FROM ({sql}) AS virtual_table"
                   + self.pick(["", " WHERE a0 > 1", " ORDER BY a0 DESC"]) + " LIMIT 1000")
        return sql


@st.composite
def queries(draw, meta: Meta) -> str:
    return _Query(draw, meta).build()


@st.composite
def query_params(draw) -> dict:
    """ε, δ and the mechanism of one query (the exact statistics do not depend on them)."""
    return {"epsilon": draw(st.sampled_from([1.0, 1.0, 50.0])),
            "delta": 1e-6,
            "mechanism": draw(st.sampled_from(["laplace", "laplace", "gaussian"]))}
