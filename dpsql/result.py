"""What a query returns (:class:`Result`) and what ``explain`` shows (:class:`Explanation`).

Their text and HTML renderings escape control characters (:func:`dpsql.text.escape`)
in column names, values, SQL and notes: an analyst's alias or a string key cannot move
the cursor, erase a line or reorder text on the terminal that shows it. The values
themselves (``rows``, ``df``, ``arrow``) are left as they are.

:class:`Result` also answers DuckDB's method names: ``fetchall()`` (the rows),
``fetchdf()`` (pandas), ``pl()`` (polars) and ``fetch_arrow_table()`` (pyarrow); the
three table forms carry the error columns of ``df`` unless ``error_columns=False``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from dpsql.mechanisms import DEFAULT_MECHANISM, MECHANISMS
from dpsql.text import escape


def _fmt(value: Any, width: float | None = None,
         interval: tuple[float, float] | None = None) -> str:
    """A cell as shown: the value rounded to what its error bar supports, with the bar.

    With a finite, positive half-width ``w`` the value is rounded to the unit of the
    second significant digit of ``w`` (``49391.03 ± 6834.9`` shows as
    ``49,400 ± 6,900``); ``w`` itself is rounded up to two significant digits, so the
    bar shown is never narrower than the one computed. When the interval is not
    ``value ± w`` at the precision shown (bounds cut it, or interval arithmetic made
    it asymmetric, as for an AVG), it is shown as ``[low, high]`` instead, its ends
    rounded outwards (``0 [0, 6]`` for a count released as 0). Without an error
    bar, or with ``w`` 0 or infinite, the value is shown as before (two decimals).
    """
    if isinstance(value, Decimal):  # DuckDB's answer to e.g. COUNT(*) * 1.5
        value = float(value)
    if width is None or isinstance(value, bool) or not isinstance(value, int | float):
        return _plain(value)
    if not (isinstance(width, int | float) and math.isfinite(width) and width > 0
            and math.isfinite(value) and abs(value) < 1e15):
        text = _plain(value)
        if isinstance(width, int | float) and math.isinf(width):
            return f"{text} ± inf"
        if isinstance(value, int) and float(width).is_integer():
            width = int(width)
        return f"{text} ± {width:,.2f}" if isinstance(width, float) else f"{text} ± {width:,}"
    exponent = math.floor(math.log10(width)) - 1  # the unit of w's second digit
    if isinstance(value, int) and isinstance(width, int) and exponent < 0:
        exponent = 0
    unit = 10.0 ** exponent
    shown_width = math.ceil(width / unit - 1e-9) * unit
    if math.floor(math.log10(shown_width)) - 1 > exponent:  # 9.95 rounds up to 10
        exponent += 1
        unit = 10.0 ** exponent
    decimals = max(0, -exponent)

    def num(x: float, how=_round) -> str:
        return f"{how(x / unit) * unit:,.{decimals}f}"

    text = num(value)
    if interval is not None and all(isinstance(e, int | float) for e in interval):
        low, high = interval
        cut_low = num(low, math.floor) != num(value - width, math.floor)
        cut_high = num(high, math.ceil) != num(value + width, math.ceil)
        if (cut_low or cut_high) and math.isfinite(low) and math.isfinite(high):
            return f"{text} [{num(low, math.floor)}, {num(high, math.ceil)}]"
    return f"{text} ± {num(width, math.ceil)}"


def _round(x: float) -> int:
    """Rounds half away from zero (``round`` rounds 1234.5 to the even 1234)."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1e15 else f"{value:.6g}"
    return "NULL" if value is None else str(value)


def _table(header: list[str], body: list[list[str]]) -> str:
    """A plain-text table; every cell is escaped here, so widths count what is shown."""
    header = [escape(h) for h in header]
    body = [[escape(c) for c in row] for row in body]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    rows = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join([line, rule, *rows])


def _html_table(header: list[str], body: list[list[str]], caption: str | None = None) -> str:
    """An HTML table of already-formatted text cells; every string is escaped here."""
    def esc(text: str) -> str:
        return html.escape(escape(text))

    parts = ['<table class="dpsql">']
    if caption:
        parts.append(f"<caption>{esc(caption)}</caption>")
    parts.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header)
                 + "</tr></thead>")
    parts.append("<tbody>")
    for row in body:
        parts.append("<tr>" + "".join(f'<td style="text-align:right">{esc(c)}</td>'
                                      for c in row) + "</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def _arrow_column(values: list):
    import pyarrow as pa

    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed kinds: keep them as text
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


#: Suffix of the column holding an output's error bar (its half-width).
ERROR_SUFFIX = "_error"
#: Suffixes of the columns holding the ends of an output's interval (``intervals``).
LOW_SUFFIX, HIGH_SUFFIX = "_low", "_high"
#: Name of the column holding the confidence level (``1 − alpha``, e.g. 0.95).
LEVEL_COLUMN = "confidence"


def error_layout(columns: list[str], noisy: list[bool],
                 extra: tuple[str, ...] = (LEVEL_COLUMN,),
                 intervals: bool = False) -> list[tuple[str, str, Any]]:
    """Where the error columns go and what they are called.

    Each output column that carries an error bar is followed by ``<name>_error``, and
    with ``intervals`` by ``<name>_low`` and ``<name>_high``, the ends of its interval;
    the ``extra`` columns (the level, and for CSV the cost) come last. A name already taken
    by an output column or an earlier error column, compared case-insensitively (SQL
    clients often fold case), gets ``_2``, ``_3``, ... appended; outputs are taken in
    order, so the names depend only on the column names.

    Returns:
        ``(kind, name, what)`` per column: ``("value", name, i)`` for output ``i``,
        ``("error", name, i)`` for its half-width, ``("low", name, i)`` and
        ``("high", name, i)`` for its interval's ends, ``("extra", name, key)``.

    >>> [n for _, n, _ in error_layout(["sex", "n", "n_error"], [False, True, True])]
    ['sex', 'n', 'n_error_2', 'n_error', 'n_error_error', 'confidence']
    >>> [n for _, n, _ in error_layout(["sex", "n"], [False, True], intervals=True)]
    ['sex', 'n', 'n_error', 'n_low', 'n_high', 'confidence']
    """
    taken = {c.casefold() for c in columns}

    def fresh(base: str) -> str:
        name, i = base, 2
        while name.casefold() in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name.casefold())
        return name

    layout: list[tuple[str, str, Any]] = []
    for i, name in enumerate(columns):
        layout.append(("value", name, i))
        if noisy[i]:
            layout.append(("error", fresh(name + ERROR_SUFFIX), i))
            if intervals:
                layout.append(("low", fresh(name + LOW_SUFFIX), i))
                layout.append(("high", fresh(name + HIGH_SUFFIX), i))
    layout += [("extra", fresh(key), key) for key in extra]
    return layout


@dataclass(frozen=True)
class Result:
    """A private answer.

    Attributes:
        columns: output column names.
        rows: one tuple per released group, in ``columns`` order; full-precision values
            (only the text and HTML displays round them).
        accuracy: parallel to ``rows``: per cell the half-width of its ``1 − alpha``
            confidence interval, None for group keys and other exact columns. Where
            public bounds cut the interval (see ``intervals``), the half-width is the
            larger distance from the value to an end, so ``value ± half-width`` still
            covers the interval.
        cost: the (epsilon, delta) this query spent.
        sql: the rewritten SQL that ran on the backend.
        alpha: the confidence level's complement (0.05 for 95% intervals).
        split: how the cost was split across the query's noisy statistics.
        notes: caveats, e.g. that clamping may bias sums.
        intervals: parallel to ``rows``: per cell its ``1 − alpha`` interval
            ``(low, high)`` intersected with what the bounds allow (a count's starts at
            0), None for exact cells; ``low <= value <= high``. Empty when the result
            was built without them: then ``value ± half-width``.
        noisy: per column whether it carries an error bar; empty: read off
            ``accuracy``.
        interval_columns: whether :meth:`error_table` and :attr:`df` carry each
            interval's ends as columns ``<name>_low`` and ``<name>_high`` by default
            (``OPTIONS (intervals = 1)``, or ``connect(..., intervals=True)``).
        bias: with ``OPTIONS (bias_check = 1)``, the bias check's noisy counts and
            shares of users cut by the bounds (:func:`dpsql.bias.release`); else None.
    """

    columns: list[str]
    rows: list[tuple]
    accuracy: list[tuple]
    cost: tuple[float, float]
    sql: str
    alpha: float = 0.05
    split: list[dict] = field(default_factory=list)
    notes: tuple[str, ...] = ()
    intervals: list[tuple] = field(default_factory=list)
    noisy: tuple[bool, ...] = ()
    interval_columns: bool = False
    bias: dict | None = None

    @property
    def confidence(self) -> float:
        """The confidence level of the error bars, ``1 − alpha`` (e.g. 0.95)."""
        return round(1 - self.alpha, 12)

    @property
    def noisy_columns(self) -> list[bool]:
        """Per column whether it carries an error bar (gets an ``_error`` column)."""
        if len(self.noisy) == len(self.columns):
            return list(self.noisy)
        return [any(acc[i] is not None for acc in self.accuracy)
                for i in range(len(self.columns))]

    def _interval(self, r: int, i: int):
        if self.intervals:
            return self.intervals[r][i]
        value, width = self.rows[r][i], self.accuracy[r][i]
        if width is None or not isinstance(value, int | float):
            return None
        return (value - width, value + width)

    def layout(self, cost: bool = False,
               intervals: bool | None = None) -> list[tuple[str, str, Any]]:
        """The columns of :meth:`error_table` (see :func:`error_layout`).

        The level column comes only when some column carries an error bar (a schema
        probe answered from the catalog gets none); the cost columns with ``cost``;
        the interval columns with ``intervals`` (None: :attr:`interval_columns`).
        """
        noisy = self.noisy_columns
        extra = ((LEVEL_COLUMN,) if any(noisy) else ()) + (("epsilon", "delta") if cost
                                                          else ())
        if intervals is None:
            intervals = self.interval_columns
        return error_layout(list(self.columns), noisy, extra, intervals)

    def error_table(self, cost: bool = False,
                    intervals: bool | None = None) -> tuple[list[str], list[tuple]]:
        """The answer with its error bars as ordinary columns.

        Each output column with an error bar is followed by ``<name>_error``, the
        half-width of its ``1 − alpha`` interval (as in :attr:`accuracy`; None where
        the value is NULL or exact), and a last column ``confidence`` holds
        ``1 − alpha`` (0.95) when there is at least one such column. With ``cost``,
        two more columns ``epsilon`` and ``delta`` repeat the query's total cost on
        every row. With ``intervals`` (default: :attr:`interval_columns`), each
        ``<name>_error`` is followed by ``<name>_low`` and ``<name>_high``, the ends
        of the interval (:attr:`intervals`). They are the honest statement where the
        interval is not symmetric: a sum of incomes bounded below by 0 released as
        137,943 has the interval [0, 500,000], which the half-width alone (362,057)
        overstates below. Names already used by an output column get ``_2``, ``_3``,
        ... (:func:`error_layout`).

        Returns:
            ``(columns, rows)``.

        >>> r = Result(["sex", "n"], [(0, 486), (1, 2)], [(None, 6), (None, 6)],
        ...            (0.5, 0.0), "", intervals=[(None, (480, 492)), (None, (0, 8))])
        >>> r.error_table()
        (['sex', 'n', 'n_error', 'confidence'], [(0, 486, 6, 0.95), (1, 2, 6, 0.95)])
        >>> r.error_table(intervals=True)[1]
        [(0, 486, 6, 480, 492, 0.95), (1, 2, 6, 0, 8, 0.95)]
        """
        layout = self.layout(cost, intervals)
        consts = {LEVEL_COLUMN: self.confidence, "epsilon": float(self.cost[0]),
                  "delta": float(self.cost[1])}
        rows = []
        for r, (row, acc) in enumerate(zip(self.rows, self.accuracy, strict=True)):
            cells = []
            for kind, _, what in layout:
                if kind == "value":
                    cells.append(row[what])
                elif kind == "error":
                    cells.append(acc[what])
                elif kind in ("low", "high"):
                    ends = self._interval(r, what)
                    cells.append(None if ends is None else ends[kind == "high"])
                else:
                    cells.append(consts[what])
            rows.append(tuple(cells))
        return [name for _, name, _ in layout], rows

    @property
    def df(self):
        """The answer as a pandas DataFrame, with its error bars as columns.

        The columns of :meth:`error_table`: each output column, followed by
        ``<name>_error`` (the half-width of its ``1 − alpha`` interval) where it has an
        error bar (and ``<name>_low``, ``<name>_high``, the interval's ends, when the
        query asked ``OPTIONS (intervals = 1)`` or the connection ``intervals=True``),
        and a last column ``confidence`` (``1 − alpha``). Values are not rounded.
        ``df.attrs`` holds ``epsilon``, ``delta`` and ``confidence``.

        A property, as it always was: DuckDB's method spelling is :meth:`fetchdf`
        (``res.df()`` fails with pandas' "'DataFrame' object is not callable"). The
        value is a plain ``pandas.DataFrame`` on purpose: a subclass whose call says
        "a property" (or returns itself) would fail ``assert_frame_equal(expected,
        res.df)``, tools that test for the exact type (Streamlit's ``st.write``), and
        would lose ``attrs`` when pickled.
        """
        return self.fetchdf()

    def fetchdf(self, error_columns: bool = True):
        """The answer as a pandas DataFrame (DuckDB's method name); see :attr:`df`.

        Args:
            error_columns: keep each ``<name>_error`` column and ``confidence`` (as
                :attr:`df` does); False: the output columns only, values as in
                :attr:`rows`.
        """
        import pandas as pd

        columns, rows = self._table(error_columns)
        frame = pd.DataFrame.from_records(rows, columns=columns)
        frame.attrs.update(epsilon=float(self.cost[0]), delta=float(self.cost[1]),
                           confidence=self.confidence)
        return frame

    def fetchall(self) -> list[tuple]:
        """The rows, one tuple per released group (DuckDB's and the DB-API's method name).

        The same tuples as :attr:`rows`, values only; the error bars are in
        :attr:`accuracy` (or as columns in :meth:`fetchdf`, :meth:`pl`,
        :meth:`fetch_arrow_table`).
        """
        return list(self.rows)

    @property
    def arrow(self):
        """The answer as a pyarrow Table with the columns of :attr:`df` (error columns
        included): ``res.fetch_arrow_table(error_columns=False)`` has the output columns
        only. The schema metadata records the cost and confidence level
        (``dpsql.epsilon``, ``dpsql.delta``, ``dpsql.confidence``).
        """
        return self.fetch_arrow_table()

    def fetch_arrow_table(self, error_columns: bool = True):
        """The answer as a pyarrow Table (DuckDB's method name); see :attr:`arrow`.

        Args:
            error_columns: keep each ``<name>_error`` column and ``confidence`` (as
                :attr:`df` does); False: the output columns only.
        """
        import pyarrow as pa

        columns, rows = self._table(error_columns)
        arrays = [_arrow_column([row[i] for row in rows]) for i in range(len(columns))]
        metadata = {"dpsql.epsilon": repr(float(self.cost[0])),
                    "dpsql.delta": repr(float(self.cost[1])),
                    "dpsql.confidence": repr(self.confidence)}
        return pa.Table.from_arrays(arrays, names=columns, metadata=metadata)

    def pl(self, error_columns: bool = True):
        """The answer as a polars DataFrame (DuckDB's method name), with the columns of
        :attr:`df` (``error_columns=False``: the output columns only). Needs polars.
        """
        try:
            import polars
        except ImportError:
            raise ImportError("Result.pl() needs polars: pip install polars") from None
        return polars.from_arrow(self.fetch_arrow_table(error_columns))

    def _table(self, error_columns: bool) -> tuple[list[str], list[tuple]]:
        if error_columns:
            return self.error_table()
        return list(self.columns), [tuple(r) for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def _body(self) -> list[list[str]]:
        """Cells as shown: each value rounded to its error bar (:func:`_fmt`)."""
        return [[_fmt(v, w, self._interval(r, i))
                 for i, (v, w) in enumerate(zip(row, acc, strict=True))]
                for r, (row, acc) in enumerate(zip(self.rows, self.accuracy, strict=True))]

    def __str__(self) -> str:
        conf = f"{100 * (1 - self.alpha):g}%"
        return (
            _table(list(self.columns), self._body())
            + f"\n({len(self.rows)} rows; ± is the {conf} interval half-width, [low, high] "
            f"the {conf} interval where bounds cut it or it is not symmetric; values "
            f"rounded to their error bars; spent epsilon={self.cost[0]:g}, "
            f"delta={self.cost[1]:g})"
            # why an answer has few or no rows (partition selection) and other caveats
            + "".join(f"\nNote: {escape(n)}" for n in self.notes)
        )

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Notebook display: each value with its ± error bar, the cost and confidence."""
        conf = f"{100 * (1 - self.alpha):g}%"
        footer = (f"{len(self.rows)} rows; ± is the {conf} confidence interval half-width, "
                  f"[low, high] the {conf} interval where bounds cut it or it is not symmetric; "
                  f"values rounded to their error bars; spent ε = {self.cost[0]:g}, "
                  f"δ = {self.cost[1]:g}")
        notes = "".join(f"<li>{html.escape(escape(n))}</li>" for n in self.notes)
        return ('<div class="dpsql-result">' + _html_table(list(self.columns), self._body())
                + f"<p><small>{html.escape(footer)}</small></p>"
                + (f'<ul style="font-size:smaller">{notes}</ul>' if notes else "") + "</div>")


@dataclass(frozen=True)
class Explanation:
    """What a query would do and cost, computed without reading data or spending budget.

    Everything in it comes from public information (the catalog's bounds, ε, δ, the
    mechanism, the contribution bounds): it runs the same analysis as ``execute``, so
    the split of the budget and the partition-selection threshold are the ones an
    answer will use.

    Attributes:
        sql: the rewritten SQL.
        statistics: per noisy statistic: ``name`` (its column in the rewritten SQL),
            ``statistic`` (what it computes), ``feeds`` (the output columns it feeds),
            ``linf`` and ``l1`` (how far one user can move it, in one group and over all
            groups), its share of ``epsilon`` (or ``rho``), the ``mechanism`` and its
            ``scale``, and ``half_width``, the ``1 − alpha`` half-width of its noise.
        partition_selection: when keys come from the data, the threshold in users and
            what it means (:func:`dpsql.accuracy.selection_summary`); else None.
        cost: the (epsilon, delta) the query would spend.
        max_groups, max_rows: the contribution bounds in force.
        outputs: per output column, what it is and its predicted error bar
            (:func:`dpsql.accuracy.predict_outputs`).
        notes: caveats.
    """

    sql: str
    statistics: list[dict]
    partition_selection: dict | None
    cost: tuple[float, float]
    max_groups: int
    max_rows: int
    alpha: float = 0.05
    notes: tuple[str, ...] = ()
    mechanism: str = DEFAULT_MECHANISM
    rho: float | None = None
    outputs: list[dict] = field(default_factory=list)

    def _sections(self) -> list[tuple[str, Any]]:
        """The content, in order: ``("title"|"text"|"table"|"pre"|"cost", payload)`` items.

        Both renderings read these (and escape every string themselves).
        """
        conf = f"{100 * (1 - self.alpha):g}%"
        # the share's unit, "epsilon" or "rho" (a display never raises: unknown reads as ε)
        share = getattr(MECHANISMS.get(self.mechanism), "budget", "epsilon")
        parts: list[tuple[str, Any]] = []
        if self.outputs:
            parts.append(("title", f"Output columns (predicted ± at {conf} confidence):"))
            parts.append(("table", (["column", "computed as", "from noisy", f"predicted ±{conf}"],
                                    [[o["column"], o["expression"],
                                      ", ".join(o["statistics"]) or "-", _predicted(o)]
                                     for o in self.outputs])))
            # what each data-dependent prediction means (a fixed ± speaks for itself)
            meanings = [f"{o['column']}: {o['meaning']}" for o in self.outputs
                        if o["role"] == "noisy" and o["half_width"] is None]
            parts += [("text", m) for m in meanings]
        if self.partition_selection:
            from dpsql.accuracy import threshold_words

            ps = self.partition_selection
            keys = ", ".join(ps.get("keys") or ["the group keys"])
            if "likely" in ps:
                text = f"Keys of {keys} come from the data, so {threshold_words(ps)}."
            else:
                text = (f"Partition selection: keys need a noisy user count >= "
                        f"{ps['threshold']} (epsilon={ps['epsilon']:.4g}, "
                        f"delta={ps['delta']:g})")
            parts += [("title", f"Partition selection: a key needs a noisy user count >= "
                       f"{ps['threshold']:,}"), ("text", text)]
        body = [[s["statistic"], ", ".join(s.get("feeds", ())) or "-", f"{s['linf']:g}",
                 f"{s['l1']:g}",
                 f"{(s['rho'] if share == 'rho' and s['rho'] is not None else s['epsilon']):.4g}",
                 s["mechanism"], f"{s['scale']:.4g}", f"{s['half_width']:,.4g}", s["name"]]
                for s in self.statistics]
        parts += [
            ("title", "Noisy statistics:"),
            ("table", (["statistic", "feeds", "one user moves it by <= (per group, L∞)",
                        "(all groups, L1)", share, "noise", "scale", f"±{conf}",
                        "SQL column"], body)),
            ("text", f"Contribution bounds: each user counts in at most max_groups="
                     f"{self.max_groups} group(s), with at most max_rows={self.max_rows} "
                     "row(s) in each"),
            ("cost", (self.cost, self.rho)),
        ]
        parts += [("text", f"Note: {n}") for n in self.notes]
        parts += [("title", "Rewritten SQL (what the backend runs):"), ("pre", self.sql)]
        return parts

    def __str__(self) -> str:
        out: list[str] = []
        previous = None
        for kind, payload in self._sections():
            if out and (kind == "title" or previous == "table"):
                out.append("")
            previous = kind
            if kind == "cost":
                (eps, dlt), rho = payload
                out.append(f"Cost: epsilon={eps:g}, delta={dlt:g}"
                           + (f" (zCDP rho={rho:.4g})" if rho is not None else ""))
                continue
            out.append(_table(*payload) if kind == "table" else escape(payload))
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Notebook display of :meth:`__str__`'s content, escaped."""
        def esc(text: str) -> str:
            return html.escape(escape(text))

        parts = ['<div class="dpsql-explanation">']
        for kind, payload in self._sections():
            if kind == "table":
                parts.append(_html_table(*payload))
            elif kind == "title":
                parts.append(f"<p><b>{esc(payload)}</b></p>")
            elif kind == "cost":
                (eps, dlt), rho = payload
                rho_text = f" (zCDP ρ = {rho:.4g})" if rho is not None else ""
                parts.append(f"<p><b>Cost</b>: ε = {eps:g}, δ = {dlt:g}{rho_text}</p>")
            elif kind == "pre":
                parts.append(f"<pre>{esc(payload)}</pre>")
            else:
                parts.append(f"<p>{esc(payload)}</p>")
        parts.append("</div>")
        return "".join(parts)


def _num(x: float) -> str:
    """A predicted half-width to three significant figures, with thousands separators."""
    if not math.isfinite(x):
        return "no bound"
    if x == 0 or not 1e-3 <= abs(x) < 1e15:
        return f"±{x:.3g}"
    rounded = float(f"{x:.3g}")
    if rounded.is_integer():
        return f"±{int(rounded):,}"
    return f"±{rounded:,.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"


def _predicted(o: dict) -> str:
    """An output's predicted half-width as one table cell."""
    if o["role"] == "key":
        size = o.get("domain_size")
        return ("exact; only keys that clear the threshold" if size is None
                else f"exact; public domain of {size:,} values")
    if o["role"] == "exact":
        return "exact"
    if o["half_width"] is not None:
        return f"{_num(o['half_width'])} in every group"
    if o.get("rank_error") is not None:
        return f"rank ±{o['rank_error']:,.3g}/n (see below)"
    if o["by_size"]:
        return "; ".join(f"{_num(w) if w is not None else '-'} at n={n:,}"
                         for n, w in o["by_size"].items())
    return "depends on the values"
