"""What a query returns (:class:`Result`) and what ``explain`` shows (:class:`Explanation`).

Their text and HTML renderings escape control characters (:func:`dpsql.text.escape`)
in column names, values, SQL and notes: an analyst's alias or a string key cannot move
the cursor, erase a line or reorder text on the terminal that shows it. The values
themselves (``rows``, ``df``, ``arrow``) are left as they are.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from dpsql.text import escape


def _fmt(value: Any, width: float | None = None) -> str:
    if isinstance(value, float):
        text = f"{value:,.2f}" if abs(value) < 1e15 else f"{value:.6g}"
    else:
        text = "NULL" if value is None else str(value)
    if width is None:
        return text
    if isinstance(value, int) and not isinstance(value, bool) and float(width).is_integer():
        width = int(width)
    if math.isinf(width):
        return f"{text} ± inf"
    return f"{text} ± {width:,.2f}" if isinstance(width, float) else f"{text} ± {width:,}"


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


@dataclass(frozen=True)
class Result:
    """A private answer.

    Attributes:
        columns: output column names.
        rows: one tuple per released group, in ``columns`` order.
        accuracy: parallel to ``rows``: per cell the half-width of its ``1 − alpha``
            confidence interval, None for group keys and other exact columns.
        cost: the (epsilon, delta) this query spent.
        sql: the rewritten SQL that ran on the backend.
        alpha: the confidence level's complement (0.05 for 95% intervals).
        split: how the cost was split across the query's noisy statistics.
        notes: caveats, e.g. that clamping may bias sums.
    """

    columns: list[str]
    rows: list[tuple]
    accuracy: list[tuple]
    cost: tuple[float, float]
    sql: str
    alpha: float = 0.05
    split: list[dict] = field(default_factory=list)
    notes: tuple[str, ...] = ()

    @property
    def df(self):
        """The rows as a pandas DataFrame (columns as in ``columns``)."""
        import pandas as pd

        return pd.DataFrame.from_records(self.rows, columns=self.columns)

    @property
    def arrow(self):
        """The rows as a pyarrow Table (columns as in ``columns``), values only.

        The error bars are not columns of the table: they are in :attr:`accuracy`. The
        table's schema metadata records the cost and confidence level
        (``dpsql.epsilon``, ``dpsql.delta``, ``dpsql.confidence``).
        """
        import pyarrow as pa

        arrays = [_arrow_column([row[i] for row in self.rows])
                  for i in range(len(self.columns))]
        metadata = {"dpsql.epsilon": repr(float(self.cost[0])),
                    "dpsql.delta": repr(float(self.cost[1])),
                    "dpsql.confidence": repr(1 - self.alpha)}
        return pa.Table.from_arrays(arrays, names=list(self.columns), metadata=metadata)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __str__(self) -> str:
        body = [[_fmt(v, w) for v, w in zip(row, acc, strict=True)]
                for row, acc in zip(self.rows, self.accuracy, strict=True)]
        conf = f"{100 * (1 - self.alpha):g}%"
        return (
            _table(list(self.columns), body)
            + f"\n({len(self.rows)} rows; ± is the {conf} interval half-width; "
            f"spent epsilon={self.cost[0]:g}, delta={self.cost[1]:g})"
        )

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Notebook display: each value with its ± error bar, the cost and confidence."""
        body = [[_fmt(v, w) for v, w in zip(row, acc, strict=True)]
                for row, acc in zip(self.rows, self.accuracy, strict=True)]
        conf = f"{100 * (1 - self.alpha):g}%"
        footer = (f"{len(self.rows)} rows; ± is the {conf} confidence interval half-width; "
                  f"spent ε = {self.cost[0]:g}, δ = {self.cost[1]:g}")
        notes = "".join(f"<li>{html.escape(escape(n))}</li>" for n in self.notes)
        return ('<div class="dpsql-result">' + _html_table(list(self.columns), body)
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
    mechanism: str = "laplace"
    rho: float | None = None
    outputs: list[dict] = field(default_factory=list)

    def _sections(self) -> list[tuple[str, Any]]:
        """The content, in order: ``("title"|"text"|"table"|"pre"|"cost", payload)`` items.

        Both renderings read these (and escape every string themselves).
        """
        conf = f"{100 * (1 - self.alpha):g}%"
        share = "rho" if self.mechanism == "gaussian" else "epsilon"
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
