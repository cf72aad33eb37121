"""Validate stage: fail closed on anything outside an allow-list.

Only a single ``SELECT`` over one catalog table, built from the node types and functions
listed here, gets through. Everything else is refused with an
:class:`~dpsql.errors.UnsupportedQueryError` naming the construct; the refusal happens
before any data is read and charges nothing.

>>> from dpsql.parse import parse
>>> validate(parse("SELECT sex, COUNT(*) FROM pums GROUP BY sex")).sql()
'SELECT sex, COUNT(*) FROM pums GROUP BY sex'
>>> validate(parse("SELECT * FROM read_csv('/etc/passwd')"))
Traceback (most recent call last):
...
dpsql.errors.UnsupportedQueryError: table function READ_CSV is not allowed: ...
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql import aggregates
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits

#: Aggregate functions this version answers: those of the registry's families.
AGGREGATES: tuple[type[exp.Expression], ...] = aggregates.FUNCTIONS

#: Scalar functions allowed anywhere (they cannot read outside the row they are given).
SCALAR_FUNCTIONS: tuple[type[exp.Expression], ...] = (
    exp.Abs, exp.Least, exp.Greatest, exp.Coalesce, exp.Case, exp.If, exp.Cast,
    exp.TryCast, exp.Round, exp.Floor, exp.Ceil, exp.Lower, exp.Upper, exp.Length,
    exp.Substring, exp.Year, exp.Month, exp.Day, exp.Extract, exp.Nullif, exp.DPipe,
    exp.Concat, exp.Sign, exp.Sqrt, exp.Ln, exp.Exp, exp.TimestampTrunc, exp.DateTrunc,
    exp.Quarter, exp.Week, exp.WeekOfYear, exp.DayOfWeek, exp.DayOfMonth, exp.DayOfYear,
    exp.Left, exp.Right, exp.Trim, exp.Replace, exp.Dayname, exp.Monthname, exp.TimeToStr,
)

#: Non-function nodes allowed anywhere.
SYNTAX: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.From, exp.Table, exp.TableAlias, exp.Identifier, exp.Column,
    exp.Alias, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.Limit,
    exp.Offset, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Neg, exp.Not,
    exp.And, exp.Or, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.In,
    exp.Between, exp.Like, exp.ILike, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv,
    exp.Mod, exp.DataType, exp.DataTypeParam, exp.Star, exp.Distinct, exp.Var,
    exp.NullSafeEQ, exp.NullSafeNEQ, exp.Xor, exp.Join, exp.Interval, exp.Subquery,
    exp.With, exp.CTE, exp.WithinGroup,
)

#: Functions allowed only in the outer query, over aggregates and group keys: they run
#: in post-processing on released values (never on a backend, so no guard is needed
#: there), and error bars follow them by interval arithmetic.
OUTER_FUNCTIONS: tuple[type[exp.Expression], ...] = (exp.Pow,)

_ALLOWED = AGGREGATES + SCALAR_FUNCTIONS + SYNTAX + OUTER_FUNCTIONS

#: Ceiling on the number of nodes of one query (deeply nested or huge inputs).
MAX_NODES = DEFAULT.max_nodes
#: Ceiling on the depth of one query's expression tree.
MAX_DEPTH = DEFAULT.max_depth

_T = exp.DataType.Type
#: The only type names a CAST may name: scalars whose text sqlglot writes itself. A type
#: sqlglot does not know is kept as raw text (USERDEFINED) and written back verbatim,
#: so it could carry SQL of its own; nested types (LIST, STRUCT, MAP) are no group keys.
TYPES = frozenset({
    _T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT, _T.INT128, _T.UTINYINT, _T.USMALLINT,
    _T.UINT, _T.UBIGINT, _T.FLOAT, _T.DOUBLE, _T.DECIMAL, _T.TEXT, _T.VARCHAR, _T.CHAR,
    _T.BOOLEAN, _T.DATE, _T.TIMESTAMP, _T.TIMESTAMPNTZ,
})
#: Date and time parts (EXTRACT, DATE_TRUNC, INTERVAL units): sqlglot keeps a part as a
#: bare keyword and writes it back verbatim, so only these names are let through.
DATE_PARTS = frozenset({
    "YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DOW", "ISODOW", "DOY", "DAYOFWEEK",
    "DAYOFYEAR", "HOUR", "MINUTE", "SECOND",
    "YEARS", "QUARTERS", "MONTHS", "WEEKS", "DAYS", "HOURS", "MINUTES", "SECONDS",
})
#: Nodes whose date part sqlglot may write back as raw text, and the argument holding it.
_PART_SLOTS = {exp.Extract: "this", exp.TimestampTrunc: "unit", exp.DateTrunc: "unit",
               exp.Interval: "unit"}
#: Names of tables, aliases and columns that need no quoting anywhere.
SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: Text a backend would rewrite after dpsql checked it (Spark's ``${...}`` variable
#: substitution) and characters no name or literal needs.
_REWRITTEN = re.compile(r"\$\{|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e"
                        r"\u2066-\u2069\ufeff]")


def validate(expression: exp.Expression, limits: Limits = DEFAULT) -> exp.Expression:
    """Returns ``expression`` (comments dropped) if every node is allowed; raises otherwise.

    Besides node types and functions, the payloads sqlglot would write back verbatim are
    checked here: type names come from :data:`TYPES`, date parts from
    :data:`DATE_PARTS`, aliases are plain names, literals are bounded in length and carry
    no text a backend would rewrite. Comments are dropped: they never reach a backend.

    Raises:
        UnsupportedQueryError: names the first construct outside the allow-list.
    """
    if not isinstance(expression, exp.Select):
        what = _describe(expression)
        if isinstance(expression, exp.Column | exp.Alias | exp.Identifier):
            # a bare keyword statement (CHECKPOINT, DEALLOCATE x) parses as a column
            what = f"{expression.sql().split()[0].upper()} statement"
        raise UnsupportedQueryError(
            f"{what} is not allowed: only a single SELECT can be answered"
        )
    check_size(expression, limits)
    for table in expression.find_all(exp.Table):
        _check_table(table)
    for node in expression.walk():
        node.pop_comments()
        _check_node(node, expression)
        _check_payload(node, expression, limits)
    return expression


def check_size(expression: exp.Expression, limits: Limits = DEFAULT) -> None:
    """Refuses a tree over the node or depth limit (before any pass walks it further)."""
    for count, node in enumerate(expression.walk(), start=1):
        if count > limits.max_nodes:
            raise UnsupportedQueryError(
                f"query has more than {limits.max_nodes} syntax nodes (limit max_nodes)")
        if node.depth > limits.max_depth:
            raise UnsupportedQueryError(
                f"query is nested deeper than {limits.max_depth} levels (limit max_depth)")


def _check_payload(node: exp.Expression, root: exp.Select, limits: Limits) -> None:
    """Refuses payloads that sqlglot would write back as raw text (see :func:`validate`)."""
    if isinstance(node, exp.DataType):
        if node.this not in TYPES or node.args.get("nested"):
            raise UnsupportedQueryError(
                f"type {_short(node.sql(dialect='duckdb'))!r} is not supported; use one of "
                "TINYINT, SMALLINT, INTEGER, BIGINT, HUGEINT, DOUBLE, DECIMAL(p, s), "
                "VARCHAR, BOOLEAN, DATE, TIMESTAMP")
        params = node.expressions
        if len(params) > 2 or not all(
                isinstance(p, exp.DataTypeParam) and isinstance(p.this, exp.Literal)
                and p.this.is_int and 0 <= int(p.this.this) <= 38 for p in params) or (
                params and node.this not in (_T.DECIMAL, _T.VARCHAR, _T.CHAR)):
            raise UnsupportedQueryError(
                f"type parameters of {_short(node.sql(dialect='duckdb'))!r} must be whole "
                "numbers from 0 to 38 (DECIMAL(p, s))")
    elif isinstance(node, exp.TimeToStr):
        _check_format(node)
    elif isinstance(node, exp.Dayname | exp.Monthname):
        if node.args.get("abbreviated"):
            raise UnsupportedQueryError(
                f"{node.sql_name().lower()}() takes one date; for the short name write "
                "strftime(d, '%a') or strftime(d, '%b')")
    elif isinstance(node, exp.DataTypeParam):
        if not isinstance(node.parent, exp.DataType):
            raise UnsupportedQueryError("type parameters are allowed only in a type")
    elif type(node) in _PART_SLOTS:
        _check_part(node)
    elif isinstance(node, exp.Var):
        if node.name.upper() not in DATE_PARTS:
            raise UnsupportedQueryError(
                f"date part {_short(node.name)!r} is not supported; use one of "
                f"{', '.join(sorted(DATE_PARTS))}")
    elif isinstance(node, exp.Literal):
        text = node.this
        if not isinstance(text, str) or len(text) > limits.max_literal_length:
            raise UnsupportedQueryError(
                f"a literal is {len(str(text))} characters long; the limit is "
                f"{limits.max_literal_length} (max_literal_length)")
        if _REWRITTEN.search(text):
            raise UnsupportedQueryError(
                "literals may not contain '${' (a backend would substitute it) or control "
                "characters")
        if "\\" in text:
            # backends disagree on backslashes (PostgreSQL with standard_conforming_strings
            # off, Spark, LIKE's default escape): one text, two meanings
            raise UnsupportedQueryError(
                "backslashes in string literals are not supported: the backends read them "
                "differently")
        if not node.is_string and not _NUMBER.fullmatch(text):
            raise UnsupportedQueryError(f"number literal {_short(text)!r} is not a number")
    elif isinstance(node, exp.Identifier):
        name = node.this
        if not isinstance(name, str) or len(name) > 128 or _REWRITTEN.search(name):
            raise UnsupportedQueryError(
                f"name {_short(str(name))!r} is not allowed: names are at most 128 "
                "characters, without control characters or '${'")
        output_alias = (isinstance(node.parent, exp.Alias) and node.parent.parent is root
                        and node.arg_key == "alias")
        # a table or column reference must name a catalog object or an alias (checked
        # here) to get anywhere: analysis refuses any other name
        reference = isinstance(node.parent, exp.Table | exp.Column) and node.arg_key in (
            "this", "table")
        if not (output_alias or reference) and not SAFE_NAME.fullmatch(name):
            raise UnsupportedQueryError(
                f"name {_short(name)!r} is not allowed: table, alias and column names "
                "are letters, digits and underscores (only output column aliases may "
                "be other quoted text)")


def _check_part(node: exp.Expression) -> None:
    """A date part is a keyword of :data:`DATE_PARTS`: a string one becomes that keyword.

    sqlglot keeps ``EXTRACT('<text>' FROM d)`` as a string but some dialects write it
    back as a bare keyword, i.e. as raw SQL: only a known part is let through, as a
    keyword dpsql writes itself. An INTERVAL's amount is a whole-number literal.
    """
    slot = _PART_SLOTS[type(node)]
    part = node.args.get(slot)
    if part is None and isinstance(node, exp.Interval):
        raise UnsupportedQueryError("an INTERVAL needs a unit (e.g. INTERVAL 3 DAY)")
    text = part.name.upper() if isinstance(part, exp.Var | exp.Literal) else None
    if isinstance(part, exp.Literal) and not part.is_string:
        text = None
    if text not in DATE_PARTS:
        shown = _short(part.sql(dialect="duckdb")) if part is not None else "none"
        raise UnsupportedQueryError(
            f"date part {shown!r} is not supported; use one of "
            f"{', '.join(sorted(DATE_PARTS))}")
    if not isinstance(part, exp.Var):
        node.set(slot, exp.var(text))
    if isinstance(node, exp.Interval):
        amount = node.this
        if not (isinstance(amount, exp.Literal) and re.fullmatch(r"-?[0-9]{1,9}",
                                                                  amount.name.strip())):
            raise UnsupportedQueryError(
                "an INTERVAL's amount must be a whole-number literal (INTERVAL 3 DAY)")


#: strftime's format: a constant made of these specifiers (each writes a number or a
#: name of bounded length whatever the date) and plain separators. sqlglot translates
#: it for each backend (PostgreSQL's to_char, Spark's date_format).
FORMAT = re.compile(r"(%[YmdHMSjaAbByeUWuwpIGVFTD%]|[-/ :.,T_])+")
#: Longest format accepted: with the longest specifier (%Y of an extreme date, 8
#: characters) the value stays a short text.
MAX_FORMAT = 32


def _check_format(node: exp.TimeToStr) -> None:
    """strftime(d, '<format>'): a constant format of :data:`FORMAT`, nothing else."""
    fmt = node.args.get("format")
    if node.args.get("culture") is not None or node.args.get("zone") is not None:
        raise UnsupportedQueryError("strftime takes a date and a format, nothing else")
    if not (isinstance(fmt, exp.Literal) and fmt.is_string and len(fmt.this) <= MAX_FORMAT
            and FORMAT.fullmatch(fmt.this)):
        shown = _short(fmt.this if isinstance(fmt, exp.Literal) else fmt.sql(
            dialect="duckdb")) if fmt is not None else "none"
        raise UnsupportedQueryError(
            f"strftime format {shown!r} is not supported: write a constant of at most "
            f"{MAX_FORMAT} characters made of %Y %m %d %H %M %S %j %a %A %b %B %y %e %U "
            "%W %u %w %p %I %G %V %F %T %D and the separators - / : . , T _ (e.g. "
            "strftime(d, '%Y-%m'))")


_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?")


def _short(text: str, n: int = 40) -> str:
    """Names user text in a message without echoing long or hostile input."""
    text = _REWRITTEN.sub("?", text)
    return text if len(text) <= n else text[:n] + "..."


def _check_table(node: exp.Table) -> None:
    if not isinstance(node.this, exp.Identifier):
        inner = node.this
        if isinstance(inner, exp.Anonymous):
            name = str(inner.this).upper()
        elif isinstance(inner, exp.GenerateSeries) and inner.args.get("is_end_exclusive"):
            name = "RANGE"
        elif isinstance(inner, exp.Func):
            name = inner.sql_name()
        else:
            name = type(inner).__name__.upper()
        raise UnsupportedQueryError(
            f"table function {name} is not allowed: only tables of the catalog can be read"
        )
    if node.args.get("db") or node.args.get("catalog"):
        raise UnsupportedQueryError(
            f"qualified table name {node.sql()!r} is not allowed: name a catalog table"
        )


def _check_node(node: exp.Expression, root: exp.Select) -> None:
    if isinstance(node, exp.Select) and node is not root:
        holder = node.parent
        placed = (isinstance(holder, exp.Subquery)
                  and isinstance(holder.parent, exp.From | exp.Join | exp.In)) or isinstance(
                      holder, exp.CTE)
        if not placed:
            raise UnsupportedQueryError(
                "subqueries are allowed only in FROM, in WITH, and as IN (SELECT ...) over "
                "public tables")
    if isinstance(node, exp.Subquery) and not isinstance(node.parent, exp.From | exp.Join
                                                          | exp.In):
        raise UnsupportedQueryError(
            "scalar subqueries and EXISTS are not supported: use a JOIN or IN (SELECT ...)")
    if not isinstance(node, _ALLOWED):
        raise UnsupportedQueryError(f"{_describe(node)} is not supported{_instead(node)}")
    if isinstance(node, OUTER_FUNCTIONS) and (
            node.find_ancestor(exp.Select) is not root
            or node.find_ancestor(*AGGREGATES) is not None
            or node.find_ancestor(exp.Where, exp.Group, exp.Join) is not None):
        raise UnsupportedQueryError(
            f"{node.sql_name()}() is not supported here: only over aggregates and group "
            "keys in the outer SELECT, HAVING and ORDER BY (e.g. POWER(AVG(x), 2))")
    if isinstance(node, exp.WithinGroup) and not isinstance(
            node.this, exp.PercentileCont | exp.PercentileDisc):
        raise UnsupportedQueryError(
            "WITHIN GROUP is supported only with PERCENTILE_CONT and PERCENTILE_DISC")
    if isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count) \
            and not _derived_star(node, root):
        raise UnsupportedQueryError(
            "SELECT * would release raw rows: select aggregates such as COUNT(*) (a "
            "derived table or CTE may SELECT * from catalog tables, without GROUP BY or "
            "renamed columns)")
    if isinstance(node, exp.Distinct) and not isinstance(node.parent, exp.Count):
        if isinstance(node.parent, exp.AggFunc):
            raise UnsupportedQueryError(
                f"{node.parent.sql_name()}(DISTINCT ...) is not supported: only "
                "COUNT(DISTINCT <user key>) is")
        raise UnsupportedQueryError(
            "SELECT DISTINCT would release raw values: use GROUP BY with an aggregate"
        )
    if isinstance(node, exp.Var) and not isinstance(
            node.parent, exp.Extract | exp.Interval | exp.TimestampTrunc | exp.DateTrunc):
        raise UnsupportedQueryError(f"bare keyword {node.name!r} is not supported")
    if isinstance(node, exp.Select):
        for key in ("laterals", "windows", "qualify", "distinct",
                    "sample", "into", "locks", "kind", "settings"):
            if node.args.get(key):
                message = _SELECT_PARTS.get(key, f"{key.upper()} is not supported")
                raise UnsupportedQueryError(message)
        if not node.args.get("from_"):
            raise UnsupportedQueryError("SELECT without FROM reads no table; name a catalog table")


def _derived_star(node: exp.Star, root: exp.Select) -> bool:
    """``*`` or ``t.*`` in the select list of a derived table or CTE: it names columns.

    The rows it selects stay inside the query; a row-level derived table is written out
    (:func:`dpsql.analyze.derived.inline_row_derived`), any other must aggregate.
    """
    item = node.parent if isinstance(node.parent, exp.Column) else node
    select = item.parent
    if not (isinstance(select, exp.Select) and select is not root
            and item.arg_key == "expressions"
            and (isinstance(select.parent, exp.CTE) or (
                isinstance(select.parent, exp.Subquery)
                and isinstance(select.parent.parent, exp.From | exp.Join)))):
        return False
    # ``*`` stands for the catalog's columns only when it reads catalog tables (over
    # another derived table or a CTE it would skip that table's projections), groups
    # nothing (GROUP BY ALL over ``*``) and is not renamed by position (``AS d(a, b)``:
    # the catalog's column order need not be the table's)
    ctes = {cte.alias_or_name.lower() for cte in root.find_all(exp.CTE)}
    sources = [select.args.get("from_"), *(select.args.get("joins") or [])]
    tables = [s.this for s in sources if s is not None]
    alias = select.parent.args.get("alias")
    return (all(isinstance(t, exp.Table) and t.name.lower() not in ctes for t in tables)
            and not select.args.get("group")
            and not (alias is not None and alias.args.get("columns")))


_SELECT_PARTS = {
    "distinct": "SELECT DISTINCT would release raw values: use GROUP BY with an aggregate",
    "windows": "window functions are not allowed over private rows",
    "qualify": "QUALIFY is not supported",
    "sample": "SAMPLE/TABLESAMPLE is not allowed in a private query",
    "into": "SELECT INTO writes data and is not allowed",
    "laterals": "LATERAL is not supported",
}


#: What to write instead of a refused function, by the name the analyst wrote.
_INSTEAD = {
    **dict.fromkeys(
        ("LISTAGG", "STRING_AGG", "GROUP_CONCAT", "STRINGAGG", "ARRAY_AGG", "LIST",
         "ARRAY_TO_STRING", "HISTOGRAM", "MODE", "FIRST", "LAST", "ANY_VALUE", "ARG_MAX",
         "ARG_MIN", "MAX_BY", "MIN_BY"),
        "it would release raw values: GROUP BY the column and COUNT(*) each value"),
    **dict.fromkeys(("TO_CHAR", "DATE_FORMAT", "TIME_TO_STR"),
                    "write strftime(d, '%Y-%m') with a constant format"),
    **dict.fromkeys(("DATE_PART", "DATEPART"), "write EXTRACT(part FROM d)"),
    **dict.fromkeys(("RANDOM", "RAND", "UUID", "GEN_RANDOM_UUID", "SETSEED"),
                    "dpsql adds the randomness itself"),
    **dict.fromkeys(("E", "TAU"), "write the number as a literal"),
}


def _instead(node: exp.Expression) -> str:
    """``: <what to write instead>`` for a refused construct, or ''."""
    if isinstance(node, exp.Exists):
        return (": use a JOIN, or IN (SELECT ...) over a public table; whether rows "
                "exist is answered by COUNT(*), with noise")
    if isinstance(node, exp.Anonymous):
        name = str(node.this).upper()
    elif isinstance(node, exp.Func):
        name = str(node.meta.get("spelled") or node.sql_name()).upper()
    else:
        return ""
    if name in _INSTEAD:
        return f": {_INSTEAD[name]}"
    if isinstance(node, exp.AggFunc):
        return (": the aggregates answered are COUNT, SUM, AVG, VARIANCE, STDDEV, MEDIAN, "
                "QUANTILE, PERCENTILE_CONT/DISC, MIN and MAX")
    return ""


def _describe(node: exp.Expression) -> str:
    """Names a construct for an error message without echoing long user input."""
    if isinstance(node, exp.IgnoreNulls | exp.RespectNulls) and node.this is not None:
        return _describe(node.this)
    if isinstance(node, exp.Anonymous):
        return f"function {_short(str(node.this))}()"  # as written
    if isinstance(node, exp.Exists):
        return "EXISTS (subquery)"
    if isinstance(node, exp.Func) and not isinstance(node, exp.Table):
        # the name the analyst wrote (dpsql.parse records it): sqlglot reads strftime
        # as TIME_TO_STR and LISTAGG as GROUP_CONCAT
        return f"function {node.meta.get('spelled') or node.sql_name()}()"
    if isinstance(node, exp.Window):
        return "window function (OVER)"
    if isinstance(node, exp.Command):
        return f"{str(node.this).upper()} statement"
    name = type(node).__name__
    return {
        "Union": "UNION", "Intersect": "INTERSECT", "Except": "EXCEPT",
        "Insert": "INSERT statement", "Update": "UPDATE statement",
        "Delete": "DELETE statement", "Create": "CREATE statement",
        "Drop": "DROP statement", "Attach": "ATTACH statement",
        "Pragma": "PRAGMA statement", "Set": "SET statement", "Copy": "COPY statement",
        "Subquery": "subquery", "Placeholder": "query parameter",
    }.get(name, name.upper())
