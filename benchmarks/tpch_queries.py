"""TPC-H queries (customer as the privacy unit) and their hand-written floors.

Queries 1, 3, 5, 6, 10, 12, 13 and 14 as dpsql answers them in ``tests/test_tpch.py``,
adapted only as far as DP requires: no per-order or per-customer output rows (Q3 groups
by order priority instead of by order, Q10 by nation instead of by customer, with the
number of customers), and Q13's per-customer order count is capped at ``orders``'
``max_rows``. One extra query, ``segment_balance``, reads ``customer`` alone, whose user
key is its PRIMARY KEY: there dpsql skips the per-user aggregate, and the floor is the
clamped plain query.

The floors find the user as dpsql does: ``lineitem → orders`` (``o_custkey``) where the
query does not join ``customer``, ``customer.c_custkey`` where it does. Joined private
tables take the largest bounds of the tables involved (``max_rows`` 40 and
``max_groups`` 4 from ``lineitem``), as dpsql's analysis does.
"""

from __future__ import annotations

from benchmarks.queries import (
    Query,
    avg,
    clamp,
    count,
    floor_query,
    lit,
    user_centered_sum,
    user_sum,
)

#: Bounds of catalog/tpch.yaml that the floors spell out (checked against the catalog
#: by tests/test_benchmarks.py).
LINEITEM_ROWS = 40
ORDERS_ROWS = 10
QUANTITY = (0, 50)
PRICE = (0, 105_000)
DISCOUNT = (0, 0.1)
TAX = (0, 0.08)
ACCTBAL = (-1000, 10_000)
#: Interval arithmetic over those bounds (as dpsql's analysis derives them).
DISC_PRICE_EXPR = "l_extendedprice * (1 - l_discount)"
DISC_PRICE = (0, PRICE[1] * (1 - DISCOUNT[0]))
CHARGE = (0, PRICE[1] * (1 - DISCOUNT[0]) * (1 + TAX[1]))
PRICE_X_DISCOUNT = (0, PRICE[1] * DISCOUNT[1])

_TO_USER = "FROM lineitem JOIN orders ON l_orderkey = o_orderkey"
R = LINEITEM_ROWS
_MID_ACCTBAL = (ACCTBAL[0] + ACCTBAL[1]) / 2


def _sum(expr: str, bounds: tuple[float, float]) -> str:
    return user_sum(expr, bounds, R)


TPCH: tuple[Query, ...] = (
    Query(
        "q1",
        "SELECT l_returnflag, l_linestatus, SUM(l_quantity) AS sum_qty, "
        "SUM(l_extendedprice) AS sum_base_price, "
        "SUM(l_extendedprice * (1 - l_discount)) AS sum_disc_price, "
        "SUM(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, "
        "AVG(l_quantity) AS avg_qty, AVG(l_extendedprice) AS avg_price, "
        "AVG(l_discount) AS avg_disc, COUNT(*) AS count_order FROM lineitem "
        "WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY "
        "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
        ("l_returnflag", "l_linestatus"),
        floor_query(
            f"{_TO_USER} WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY",
            "o_custkey", ["l_returnflag", "l_linestatus"],
            {"sum_qty": _sum("l_quantity", QUANTITY),
             "sum_base_price": _sum("l_extendedprice", PRICE),
             "sum_disc_price": _sum(DISC_PRICE_EXPR, DISC_PRICE),
             "sum_charge": _sum(f"{DISC_PRICE_EXPR} * (1 + l_tax)", CHARGE),
             "n": count(max_rows=R),
             "d_qty": user_centered_sum("l_quantity", QUANTITY, R),
             "d_price": user_centered_sum("l_extendedprice", PRICE, R),
             "d_disc": user_centered_sum("l_discount", DISCOUNT, R)},
            ["SUM(sum_qty) AS sum_qty", "SUM(sum_base_price) AS sum_base_price",
             "SUM(sum_disc_price) AS sum_disc_price", "SUM(sum_charge) AS sum_charge",
             avg("avg_qty", QUANTITY, "d_qty", "n"), avg("avg_price", PRICE, "d_price", "n"),
             avg("avg_disc", DISCOUNT, "d_disc", "n"), "SUM(n) AS count_order"]),
        note="lineitem → orders → customer; public keys (3 × 2); 4 SUM, 3 AVG, COUNT",
    ),
    Query(
        "q3",
        "SELECT o_orderpriority, SUM(l_extendedprice * (1 - l_discount)) AS revenue "
        "FROM customer, orders, lineitem "
        "WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey "
        "AND l_orderkey = o_orderkey AND o_orderdate < DATE '1995-03-15' "
        "AND l_shipdate > DATE '1995-03-15' "
        "GROUP BY o_orderpriority ORDER BY revenue DESC",
        ("o_orderpriority",),
        floor_query(
            "FROM customer, orders, lineitem WHERE c_mktsegment = 'BUILDING' "
            "AND c_custkey = o_custkey AND l_orderkey = o_orderkey "
            "AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'",
            "c_custkey", ["o_orderpriority"], {"revenue": _sum(DISC_PRICE_EXPR, DISC_PRICE)},
            ["SUM(revenue) AS revenue"]),
        note="3-way comma join on the user; grouped by order priority (5, public)",
    ),
    Query(
        "q5",
        "SELECT n_name, SUM(l_extendedprice * (1 - l_discount)) AS revenue "
        "FROM customer, orders, lineitem, supplier, nation, region "
        "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey "
        "AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey "
        "AND n_regionkey = r_regionkey AND r_name = 'ASIA' "
        "AND o_orderdate >= DATE '1994-01-01' "
        "AND o_orderdate < DATE '1994-01-01' + INTERVAL '1' YEAR "
        "GROUP BY n_name ORDER BY revenue DESC",
        ("n_name",),
        floor_query(
            "FROM customer, orders, lineitem, supplier, nation, region "
            "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey "
            "AND l_suppkey = s_suppkey AND c_nationkey = s_nationkey "
            "AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey AND r_name = 'ASIA' "
            "AND o_orderdate >= DATE '1994-01-01' "
            "AND o_orderdate < DATE '1994-01-01' + INTERVAL '1' YEAR",
            "c_custkey", ["n_name"], {"revenue": _sum(DISC_PRICE_EXPR, DISC_PRICE)},
            ["SUM(revenue) AS revenue"]),
        note="6-way join, 3 public tables; nations (25, public)",
    ),
    Query(
        "q6",
        "SELECT SUM(l_extendedprice * l_discount) AS revenue FROM lineitem "
        "WHERE l_shipdate >= DATE '1994-01-01' "
        "AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR "
        "AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 AND l_quantity < 24",
        (),
        floor_query(
            f"{_TO_USER} WHERE l_shipdate >= DATE '1994-01-01' "
            "AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR "
            "AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 AND l_quantity < 24",
            "o_custkey", [], {"revenue": _sum("l_extendedprice * l_discount", PRICE_X_DISCOUNT)},
            ["SUM(revenue) AS revenue"]),
        note="lineitem → orders → customer; no GROUP BY",
    ),
    Query(
        "q10",
        "SELECT n_name, SUM(l_extendedprice * (1 - l_discount)) AS revenue, "
        "COUNT(DISTINCT c_custkey) AS customers "
        "FROM customer JOIN orders ON c_custkey = o_custkey "
        "JOIN lineitem ON l_orderkey = o_orderkey JOIN nation ON c_nationkey = n_nationkey "
        "WHERE o_orderdate >= DATE '1993-10-01' "
        "AND o_orderdate < DATE '1993-10-01' + INTERVAL '3' MONTH AND l_returnflag = 'R' "
        "GROUP BY n_name ORDER BY revenue DESC LIMIT 20",
        ("n_name",),
        floor_query(
            "FROM customer JOIN orders ON c_custkey = o_custkey "
            "JOIN lineitem ON l_orderkey = o_orderkey "
            "JOIN nation ON c_nationkey = n_nationkey "
            "WHERE o_orderdate >= DATE '1993-10-01' "
            "AND o_orderdate < DATE '1993-10-01' + INTERVAL '3' MONTH AND l_returnflag = 'R'",
            "c_custkey", ["n_name"], {"revenue": _sum(DISC_PRICE_EXPR, DISC_PRICE)},
            ["SUM(revenue) AS revenue", "COUNT(*) AS customers"]),
        note="4-way JOIN … ON; SUM and COUNT(DISTINCT user); top 20 of 25 nations by "
             "noisy revenue",
    ),
    Query(
        "q12",
        "SELECT l_shipmode, "
        "SUM(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = '2-HIGH' "
        "THEN 1 ELSE 0 END) AS high_line_count, "
        "SUM(CASE WHEN o_orderpriority <> '1-URGENT' AND o_orderpriority <> '2-HIGH' "
        "THEN 1 ELSE 0 END) AS low_line_count "
        "FROM orders, lineitem "
        "WHERE o_orderkey = l_orderkey AND l_shipmode IN ('MAIL', 'SHIP') "
        "AND l_commitdate < l_receiptdate AND l_shipdate < l_commitdate "
        "AND l_receiptdate >= DATE '1994-01-01' "
        "AND l_receiptdate < DATE '1994-01-01' + INTERVAL '1' YEAR "
        "GROUP BY l_shipmode ORDER BY l_shipmode",
        ("l_shipmode",),
        floor_query(
            "FROM orders, lineitem WHERE o_orderkey = l_orderkey "
            "AND l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate "
            "AND l_shipdate < l_commitdate AND l_receiptdate >= DATE '1994-01-01' "
            "AND l_receiptdate < DATE '1994-01-01' + INTERVAL '1' YEAR",
            "o_custkey", ["l_shipmode"],
            {"high": _sum("CASE WHEN o_orderpriority = '1-URGENT' "
                          "OR o_orderpriority = '2-HIGH' THEN 1 ELSE 0 END", (0, 1)),
             "low": _sum("CASE WHEN o_orderpriority <> '1-URGENT' "
                         "AND o_orderpriority <> '2-HIGH' THEN 1 ELSE 0 END", (0, 1))},
            ["SUM(high) AS high_line_count", "SUM(low) AS low_line_count"]),
        note="orders ⋈ lineitem (user in orders); SUM(CASE …) counts; ship modes (public)",
    ),
    Query(
        "q13",
        "SELECT c_count, COUNT(*) AS custdist "
        "FROM (SELECT c_custkey, COUNT(o_orderkey) AS c_count "
        "FROM customer LEFT OUTER JOIN orders "
        "ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%' "
        "GROUP BY c_custkey) AS c_orders "
        "GROUP BY c_count ORDER BY custdist DESC, c_count DESC",
        ("c_count",),
        # the subquery is the per-user aggregate; dpsql caps its count at orders' max_rows
        f"SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, "
        f"{count('o_orderkey', ORDERS_ROWS)} AS c_count FROM customer LEFT OUTER JOIN orders "
        "ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%' "
        "GROUP BY c_custkey) AS c_orders GROUP BY c_count",
        note=f"per-user subquery (LEFT JOIN); keys = the capped count 0–{ORDERS_ROWS} "
             "(public)",
    ),
    Query(
        "q14",
        "SELECT 100.00 * SUM(CASE WHEN p_type LIKE 'PROMO%' "
        "THEN l_extendedprice * (1 - l_discount) ELSE 0 END) "
        "/ SUM(l_extendedprice * (1 - l_discount)) AS promo_revenue "
        "FROM lineitem, part "
        "WHERE l_partkey = p_partkey AND l_shipdate >= DATE '1995-09-01' "
        "AND l_shipdate < DATE '1995-09-01' + INTERVAL '1' MONTH",
        (),
        floor_query(
            f"{_TO_USER} JOIN part ON l_partkey = p_partkey "
            "WHERE l_shipdate >= DATE '1995-09-01' "
            "AND l_shipdate < DATE '1995-09-01' + INTERVAL '1' MONTH",
            "o_custkey", [],
            {"promo": _sum(f"CASE WHEN p_type LIKE 'PROMO%' THEN {DISC_PRICE_EXPR} ELSE 0 END",
                           DISC_PRICE),
             "total": _sum(DISC_PRICE_EXPR, DISC_PRICE)},
            ["100.00 * SUM(promo) / SUM(total) AS promo_revenue"]),
        note="lineitem ⋈ part (public); ratio of two noisy sums",
    ),
    Query(
        "segment_balance",
        "SELECT c_mktsegment, COUNT(*) AS customers, AVG(c_acctbal) AS avg_acctbal "
        "FROM customer GROUP BY c_mktsegment",
        ("c_mktsegment",),
        # c_custkey is customer's PRIMARY KEY: one row per user, nothing to aggregate
        "SELECT c_mktsegment, COUNT(*) AS customers, "
        + avg("avg_acctbal", ACCTBAL, f"{clamp('c_acctbal', ACCTBAL)} - {lit(_MID_ACCTBAL)}", "1")
        + " FROM customer GROUP BY c_mktsegment",
        note="not TPC-H: customer alone, user key = PRIMARY KEY (no per-user aggregate); "
             "segments (5, public)",
        tags=("unique_user",),
    ),
)
