"""Sums of DECIMAL values added in the engine's own fixed point, exactly.

A real-valued sum is otherwise added in integers of a fine binary grid
(:mod:`dpsql.grid_units`): each row is converted to DOUBLE, scaled and cast to BIGINT,
which costs more than the sum itself (TPC-H's ``segment_balance``: 1.8× its floor, against
1.1× with the DECIMAL added as it is). Where the engine types the summed expression as a
``DECIMAL(p, t)`` (TPC-H's prices, discounts and their products), that work is needless:
a DECIMAL is already a whole number of ``10^-t``, and the engine adds DECIMALs exactly.

Here such a statistic's per-row value is written as

    ``d = LEAST(GREATEST(TRY_CAST(arg AS DECIMAL(P, s)), L'), U')``, then ``d − c'``,

with ``s >= t`` the scale (:func:`decide`: the centre's places, and the bounds' as far as
the binary fine grid would resolve them), ``P = p − t + s`` (a widening cast: exact, NULL
only for a NULL ``arg``), ``L'``, ``U'`` and ``c'`` the bounds and the centre in ``s``
places (their shortest decimal text, within half an ulp of the float, or for a bound
with more places, the bound rounded outwards: :func:`_bound`), all written as
``CAST('…' AS DECIMAL(P, s))``, so that every operand of the clamp and of the
subtraction has one type and nothing is converted implicitly. The engine's SUM of them
is a DECIMAL(38, s), exact: fewer than ``2^48`` rows of at most 23 digits stay below
``10^38`` (:data:`dpsql.backends.duckdb_total.SUM_DECIMAL_DIGITS`).

Why it is sound, whatever the engine did (the type of ``arg`` only picks ``s``, for speed
and so that no row is rounded; it is never trusted for privacy):

* **Per-user step** (``top`` False). A user's partial is ``SUM(d − c')`` over the user's
  rows in the group: an exact total, so a function of those rows alone, in any order the
  engine adds them (the property :mod:`dpsql.grid_units` needs of a partial). What
  follows is unchanged: the rescale to ``max_rows`` rows' worth, the clamp to the
  partial's range, computed in DOUBLE from that value, and the fine grid units of the
  released sum. The partial's clamp, not the rows', is what bounds a user, so ``L'`` or
  ``c'`` a hair from ``L`` or ``c`` costs no privacy there; for the answer, a bound is
  kept as written or moved by less than half a step of the binary fine grid
  (:func:`decide`; rounded inwards to the column's places, a bound of 0.5 on whole
  numbers had clamped every 0 to 1: attack review).
* **One row per user** (``top`` True: no per-user step). The released statistic is the
  exact ``SUM(d − c')`` itself, not gridded (``Statistic.grid`` None); the noise stage
  rounds that exact DECIMAL to the noise's grid once
  (:meth:`~dpsql.mechanisms.laplace.Grid.release`, as PostgreSQL's NUMERIC sums). A row
  adds ``d − c'`` with ``d`` in ``[L', U']`` (the clamp is exact: one DECIMAL type), so it
  moves the exact total by at most ``D = max(|L' − c'|, |U' − c'|)``, which
  :func:`choose_decimals` requires to be at most ``L∞`` in exact rational arithmetic (a
  bound beyond the type's range is the type's largest value there). The grid then moves
  by at most ``floor(L∞ / g) + 1`` units, the privacy map's count. Before the charge the
  engine must have typed the released column a DECIMAL of scale ``s``
  (:func:`dpsql.answering.settle_grids`), else the query is refused.

Only DuckDB takes this path (``EngineTraits.decimal_sums``); only a ``sum`` statistic (a
SUM, or AVG's centred sum) with a grid mechanism whose summand the engine types as a
DECIMAL; and only when the numbers fit: ``P`` plus one for the centre at most 23 digits,
and ``s`` at most :data:`MAX_SCALE`.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from sqlglot import exp

from dpsql import types as sqltypes
from dpsql.grid_units import choose_grids, fine_exponent, grid_of
from dpsql.sqlbuild import data_type
from dpsql.whole_sums import choose_whole, whole_candidates

#: Most decimal places a DECIMAL sum is taken in (whole bounds up to 2^53, written as
#: integer literals by :func:`dpsql.sqlbuild.number`, then still fit the DECIMAL(38, s)
#: a partial is clamped in).
MAX_SCALE = 18
#: The context every DECIMAL step of :func:`decide` runs in: wide, and any rounding or
#: other condition raises (then the binary grid is used).
_EXACT = decimal.Context(prec=200, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                         traps=[decimal.Inexact, decimal.Rounded, decimal.InvalidOperation,
                                decimal.DivisionByZero, decimal.Overflow, decimal.Underflow])
#: Most digits of a summand's DECIMAL type, the centring's extra digit included: DuckDB
#: sums 2^48 of them exactly inside DECIMAL(38) (``duckdb_total.SUM_DECIMAL_DIGITS``).
MAX_DIGITS = 23


@dataclass(frozen=True)
class DecimalSum:
    """How one statistic's rows are added as DECIMALs (:mod:`dpsql.decimal_sums`).

    Attributes:
        precision: ``P`` of the per-row ``DECIMAL(P, s)``.
        scale: ``s``.
        lower: ``L'`` (None: below the type's range, so no row is under it).
        upper: ``U'`` (None: above the type's range).
        center: ``c'`` (None: not centred).
        top: the released statistic is the exact DECIMAL sum of rows (one row per user),
            not gridded; otherwise the DECIMAL sums are the per-user partials.
    """

    precision: int
    scale: int
    lower: Decimal | None
    upper: Decimal | None
    center: Decimal | None
    top: bool

    def type(self) -> exp.DataType:
        return data_type(f"DECIMAL({self.precision}, {self.scale})")

    def literal(self, value: Decimal) -> exp.Expression:
        """``CAST('<value>' AS DECIMAL(P, s))``: of the summand's own type, exactly."""
        return exp.Cast(this=exp.Literal.string(format(value, "f")), to=self.type())

    def value(self, arg: exp.Expression, keep_null: bool,
              null_as_zero: bool = False, clamped: bool = True) -> exp.Expression:
        """The per-row value added up: ``arg`` as ``DECIMAL(P, s)``, clamped (unless the
        data proves the clamp keeps every value: :mod:`dpsql.in_bounds`), centred.

        >>> d = DecimalSum(15, 2, Decimal("-1000"), Decimal("10000"), Decimal("4500"), True)
        >>> print(d.value(exp.column("bal"), keep_null=False).sql())
        ... # doctest: +NORMALIZE_WHITESPACE
        LEAST(GREATEST(TRY_CAST(bal AS DECIMAL(15, 2)), CAST('-1000' AS DECIMAL(15, 2))),
              CAST('10000' AS DECIMAL(15, 2))) - CAST('4500' AS DECIMAL(15, 2))
        """
        cast = exp.TryCast(this=arg, to=self.type())
        if keep_null and null_as_zero:
            # a NULL row adds nothing to a sum, nor does a 0 that the clamp keeps: read
            # once, not twice as in the NULL-keeping CASE. The caller's
            # dpsql.aggregates.sums.null_as_zero found the sum uncentred (``center`` None)
            # and 0 inside its bounds, which rounding outwards to ``s`` places keeps
            cast, keep_null = exp.Coalesce(this=cast, expressions=[self.literal(Decimal(0))]), \
                False
        value: exp.Expression = cast
        if clamped and self.lower is not None:
            value = exp.Greatest(this=value, expressions=[self.literal(self.lower)],
                                 ignore_nulls=True)
        if clamped and self.upper is not None:
            value = exp.Least(this=value, expressions=[self.literal(self.upper)],
                              ignore_nulls=True)
        if keep_null and value is not cast:
            # GREATEST and LEAST skip a NULL: a NULL row must stay NULL, not become L'
            value = exp.Case(ifs=[exp.If(this=exp.Is(this=cast.copy(), expression=exp.Null()),
                                         true=exp.Null())], default=value)
        if self.center is not None:
            value = exp.Sub(this=value, expression=self.literal(self.center))
        return value


def shortest(x: float) -> Decimal:
    """The shortest decimal text of the float ``x`` (within half an ulp of it), with no
    trailing zeros.

    >>> shortest(0.05), shortest(4500.0), shortest(-1e-05)
    (Decimal('0.05'), Decimal('4.5E+3'), Decimal('-0.00001'))
    """
    return Decimal(repr(float(x))).normalize()


def places(x: float) -> int:
    """Decimal places of :func:`shortest` ``x``.

    >>> places(0.05), places(4500.0), places(1e-05), places(1e+20)
    (2, 0, 5, 0)
    """
    exponent = shortest(x).as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def _bound(x: float, s: int, outwards) -> Decimal:
    """A bound in ``s`` places: its shortest text where that has no more places (the
    number the catalog's author wrote: the float 0.3 is 0.299999999999999989), else the
    float rounded outwards (``outwards``: ``math.floor`` for a lower bound,
    ``math.ceil`` for an upper one), so that no value inside the bound is clamped.

    >>> _bound(0.3, 1, math.ceil), _bound(0.30000000000000004, 2, math.floor)
    (Decimal('0.3'), Decimal('0.30'))
    """
    if places(x) <= s:
        return shortest(x)
    return Decimal(outwards(Fraction(x) * 10**s)).scaleb(-s)


def _fine_places(fine: int) -> int:
    """The fewest places ``s`` with ``10^-s <= 2^(fine - 1)``: a bound rounded to ``s``
    places moves a clamped row by less than half a step of the binary fine grid
    ``2^fine`` the same sum would otherwise be added in (:mod:`dpsql.grid_units`).

    >>> _fine_places(0), _fine_places(-16), _fine_places(-30)
    (1, 6, 10)
    """
    s = 0
    while s <= MAX_SCALE and 10**s < 2 ** (1 - fine):
        s += 1
    return s


def decide(stat, type_name: str | None, top: bool, fine: int) -> DecimalSum | None:
    """The DECIMAL sum for ``stat`` whose summand the engine types ``type_name``, or None.

    The scale ``s`` holds the type's own places ``t`` and the centre's shortest text
    (exactly: the released average adds the float centre back), and the bounds' shortest
    text up to :func:`_fine_places` of ``fine`` (the binary fine grid's exponent); a
    bound with more places is rounded outwards, so that a row inside the bounds is
    never clamped and one outside is clamped less than half a fine step from the bound
    (a rounding the binary grid makes on every row). A bound or centre beyond what
    23 digits hold, or a type of more: None (the binary grid).

    >>> from types import SimpleNamespace as S
    >>> stat = S(interval=S(lower=-1000.0, upper=10000.0), center=4500.0, linf=5500.0)
    >>> decide(stat, "DECIMAL(15,2)", top=True, fine=-30)  # doctest: +NORMALIZE_WHITESPACE
    DecimalSum(precision=15, scale=2, lower=Decimal('-1E+3'), upper=Decimal('1E+4'),
               center=Decimal('4.5E+3'), top=True)
    >>> decide(stat, "DOUBLE", top=True, fine=-30) is None
    True
    """
    parsed = sqltypes.parse(type_name)
    if parsed.array or parsed.base not in sqltypes.DECIMAL_NAMES or len(parsed.params) != 2:
        return None
    try:
        p, t = (int(x) for x in parsed.params)
    except ValueError:
        return None
    try:
        # dpsql's own context: the application's (a small precision, a trapped
        # FloatOperation) had rounded the bounds, the centre and the D <= L∞ test
        # (attack review); here any inexact step is refused, and the binary grid used
        with decimal.localcontext(_EXACT):
            return _decide(stat, p, t, top, fine)
    except (decimal.DecimalException, ArithmeticError, ValueError):
        return None


def _decide(stat, p: int, t: int, top: bool, fine: int) -> DecimalSum | None:
    low, high, center = stat.interval.lower, stat.interval.upper, stat.center
    bounds = [low, high] + ([center] if center else [])
    if not all(isinstance(b, int | float) and abs(b) < float("inf") for b in bounds):
        return None
    most = min(MAX_SCALE, MAX_DIGITS - (p - t) - (1 if center else 0))
    wanted = min(max(places(low), places(high)), _fine_places(fine))
    centre_places = places(center) if center else 0
    s = min(max(t, centre_places, wanted), most)
    if s < t or centre_places > s:
        return None
    P = p - t + s
    largest = Decimal(10) ** (P - s) - Decimal(10) ** -s  # the type's largest value
    lower, upper = _bound(low, s, math.floor), _bound(high, s, math.ceil)
    half_step = Fraction(2) ** (fine - 1)
    if Fraction(low) - Fraction(lower) > half_step or Fraction(upper) - Fraction(high) > half_step:
        return None  # the scale is capped short of the bound's places: the binary grid
    c = shortest(center) if center else None
    if lower > upper or (c is not None and abs(c) > largest):
        return None
    if lower > largest or upper < -largest:
        return None  # every row would be clamped to a bound the type cannot hold
    lower_kept = lower if lower >= -largest else None
    upper_kept = upper if upper <= largest else None
    if top:
        # one row moves the exact total by at most D, which must be within L∞ exactly
        lo = lower_kept if lower_kept is not None else -largest
        hi = upper_kept if upper_kept is not None else largest
        centre = c if c is not None else Decimal(0)
        reach = max(abs(lo - centre), abs(hi - centre))
        if Fraction(reach) > Fraction(float(stat.linf)):
            return None
    return DecimalSum(P, s, lower_kept, upper_kept, c, top)


def candidates(plan, engine) -> list:
    """The statistics that may be summed as DECIMALs on ``engine`` (their summand's
    type decides): sums (and AVG's centred sums) with a grid mechanism."""
    if not getattr(engine, "decimal_sums", False):
        return []
    return [s for s in plan.stats
            if s.kind == "sum" and s.bins is None and s.arg is not None
            and s.interval is not None and grid_of(s, engine) is not None]


def choose_decimals(plan, engine, summand_types: dict[str, str | None]) -> None:
    """Records on each candidate statistic of ``plan`` its DECIMAL sum (before the
    rewrite, before :func:`dpsql.grid_units.choose_grids`, which leaves a ``top`` one
    ungridded). ``summand_types``: the engine's type of each statistic's summand."""
    top = plan.uid is None or plan.one_row_per_user
    for stat in candidates(plan, engine):
        fine = fine_exponent(stat.linf, grid_of(stat, engine))
        stat.decimal = decide(stat, summand_types.get(stat.name), top, fine)


def choose_sums(plan, engine, backend) -> None:
    """How each statistic of ``plan`` is added up, recorded once, before the rewrite:
    as DECIMALs (:func:`choose_decimals`, from the engine's types of the summands), a
    user's partial of whole numbers as a BIGINT (:func:`dpsql.whole_sums.choose_whole`),
    then in grid units (:func:`dpsql.grid_units.choose_grids`)."""
    decimals = candidates(plan, engine)
    wholes = whole_candidates(plan, engine)
    types = summand_types(plan, backend,
                          decimals if decimals and _reads_decimals(plan, backend) else [],
                          wholes)
    choose_decimals(plan, engine, types)
    choose_whole(wholes, types)
    choose_grids(plan, engine)


def summand_types(plan, backend, *groups: list) -> dict[str, str | None]:
    """The engine's type of the summand (``arg``) of each statistic in ``groups``, bound
    over no data by the backend's type probes, in one probe
    (:meth:`~dpsql.backends.base.Backend.engine_types`); empty when there is none (no
    probe then). Only the choices of :func:`decide` and
    :func:`~dpsql.whole_sums.choose_whole` read it, never their soundness, so a probe
    that fails leaves every statistic as it was (the binary grid)."""
    stats = list({id(s): s for group in groups for s in group}.values())
    if not stats:
        return {}
    select = exp.select(*(exp.alias_(s.arg.copy(), f"__a{i}") for i, s in enumerate(stats)))
    first, joins = plan.scope.from_clause()
    select = select.from_(first, copy=False)
    for join in joins:
        select.append("joins", join)
    try:
        types = backend.engine_types(select)
        return {s.name: types(item.this)
                for s, item in zip(stats, select.expressions, strict=True)}
    except Exception:  # noqa: BLE001 - a choice of speed: the binary grid is always sound
        return {}


def _reads_decimals(plan, backend) -> bool:
    for source in plan.scope.sources:
        tables = source.reads if source.derived is not None else [source.table]
        for table in tables:
            name = getattr(table, "name", table)
            columns = backend.columns(name) or {}
            if any(sqltypes.parse(t).base in sqltypes.DECIMAL_NAMES for t in columns.values()):
                return True
    return False
