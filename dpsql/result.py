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

    Attributes:
        sql: the rewritten SQL.
        statistics: per noisy statistic: name, what it computes, its per-group and
            L1 sensitivity, its share of epsilon, the mechanism and its scale, and the
            predicted half-width of its ``1 − alpha`` interval.
        partition_selection: threshold and cost when keys come from the data.
        cost: the (epsilon, delta) the query would spend.
        max_groups, max_rows: the contribution bounds in force.
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

    def __str__(self) -> str:
        conf = f"±{100 * (1 - self.alpha):g}%"
        share = "rho" if self.mechanism == "gaussian" else "epsilon"
        body = [[s["name"], s["statistic"], f"{s['linf']:g}", f"{s['l1']:g}",
                 f"{(s['rho'] if share == 'rho' and s['rho'] is not None else s['epsilon']):.4g}",
                 s["mechanism"], f"{s['scale']:.4g}",
                 f"{s['half_width']:,.4g}"] for s in self.statistics]
        parts = [
            "Rewritten SQL:",
            escape(self.sql),
            "",
            f"Contribution bounds: max_groups={self.max_groups}, max_rows={self.max_rows}",
            "",
            _table(["name", "statistic", "L∞", "L1", share, "mechanism", "scale", conf],
                   body),
        ]
        if self.partition_selection:
            ps = self.partition_selection
            parts += ["", f"Partition selection: keys need a noisy user count >= "
                      f"{ps['threshold']} (epsilon={ps['epsilon']:.4g}, delta={ps['delta']:g})"]
        parts += ["", f"Cost: epsilon={self.cost[0]:g}, delta={self.cost[1]:g}"
                  + (f" (zCDP rho={self.rho:.4g})" if self.rho is not None else "")]
        parts += [f"Note: {escape(n)}" for n in self.notes]
        return "\n".join(parts)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Notebook display of :meth:`__str__`'s content, escaped."""
        def esc(text: str) -> str:
            return html.escape(escape(text))

        conf = f"±{100 * (1 - self.alpha):g}%"
        share = "rho" if self.mechanism == "gaussian" else "epsilon"
        body = [[s["name"], s["statistic"], f"{s['linf']:g}", f"{s['l1']:g}",
                 f"{(s['rho'] if share == 'rho' and s['rho'] is not None else s['epsilon']):.4g}",
                 s["mechanism"], f"{s['scale']:.4g}",
                 f"{s['half_width']:,.4g}"] for s in self.statistics]
        parts = ['<div class="dpsql-explanation">',
                 f"<p><b>Rewritten SQL</b></p><pre>{esc(self.sql)}</pre>",
                 f"<p>Contribution bounds: max_groups={self.max_groups}, "
                 f"max_rows={self.max_rows}</p>",
                 _html_table(["name", "statistic", "L∞", "L1", share, "mechanism", "scale",
                              conf], body)]
        if self.partition_selection:
            ps = self.partition_selection
            parts.append(f"<p>Partition selection: keys need a noisy user count &gt;= "
                         f"{esc(str(ps['threshold']))} (ε = {ps['epsilon']:.4g}, "
                         f"δ = {ps['delta']:g})</p>")
        rho = f" (zCDP ρ = {self.rho:.4g})" if self.rho is not None else ""
        parts.append(f"<p><b>Cost</b>: ε = {self.cost[0]:g}, δ = {self.cost[1]:g}{rho}</p>")
        parts += [f"<p>Note: {esc(n)}</p>" for n in self.notes]
        parts.append("</div>")
        return "".join(parts)
