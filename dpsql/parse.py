"""Parse stage: SQL text to one sqlglot expression.

>>> parse("SELECT COUNT(*) FROM pums").sql()
'SELECT COUNT(*) FROM pums'
>>> parse("SELECT 1; SELECT 2")
Traceback (most recent call last):
...
dpsql.errors.UnsupportedQueryError: several statements in one string; send one SELECT per call

T-SQL's ``TOP n`` (SmartNoise SQL's users write it) is read as the ``LIMIT n`` it means:

>>> parse("SELECT TOP 5 educ, COUNT(*) FROM pums GROUP BY educ").sql()
'SELECT educ, COUNT(*) FROM pums GROUP BY educ LIMIT 5'
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from dpsql.errors import ParseError, UnsupportedQueryError
from dpsql.limits import DEFAULT
from dpsql.sqlbuild import unplaced

#: Longest SQL text accepted by default; longer input is refused before tokenizing.
MAX_SQL_LENGTH = DEFAULT.max_sql_length
#: The dialect analyst SQL is read in (DuckDB's is a superset of most analytic SQL).
READ_DIALECT = "duckdb"


def parse(sql: str, max_length: int = MAX_SQL_LENGTH) -> exp.Expression:
    """Parses exactly one SQL statement (of at most ``max_length`` characters).

    Raises:
        ParseError: the text does not parse; carries line and column.
        UnsupportedQueryError: empty input, several statements, or an over-long text.
    """
    if not isinstance(sql, str):
        raise UnsupportedQueryError(f"SQL must be a string, got {type(sql).__name__}")
    if len(sql) > max_length:
        raise UnsupportedQueryError(
            f"SQL text is {len(sql)} characters; the limit is {max_length} (max_sql_length)"
        )
    known = _recalled(sql)
    if known is not None:
        return known
    try:
        statements = parse_statements(sql, READ_DIALECT)
    except sqlglot.errors.ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        desc = first.get("description", str(exc)).split(" <Token")[0]
        raise ParseError(
            f"cannot parse SQL: {desc}", line=first.get("line"), column=first.get("col")
        ) from None
    except sqlglot.errors.TokenError as exc:
        raise ParseError(f"cannot tokenize SQL: {exc}") from None
    except RecursionError:
        raise UnsupportedQueryError("SQL is nested too deeply to parse") from None
    except TypeError:
        # sqlglot's compiled build (sqlglot[c], loaded whenever it is installed) checks
        # node types at run time and raises TypeError on some malformed text that the
        # pure-Python build reads as a ParseError or a tree dpsql refuses later
        raise ParseError("cannot parse SQL: an expression is not valid where it stands") \
            from None
    if not statements:
        raise UnsupportedQueryError("empty SQL: send one SELECT statement")
    if len(statements) > 1:
        raise UnsupportedQueryError(
            "several statements in one string; send one SELECT per call"
        )
    _remember(sql, statements[0])
    return statements[0]


#: Trees of texts that parsed into one statement, by the exact text (the dialect is
#: the fixed :data:`READ_DIALECT`); at most :data:`_PARSED_MAX` of them and
#: :data:`_PARSED_CHARS` characters of text. Why a hit is exactly what parsing the
#: text again returns: sqlglot's tokenizer and parser read nothing but the text and
#: the dialect (no clock, no setting, no catalog), and :func:`parse_statements`'s
#: ``TOP`` lifting and spelled names read only the tokens, so the same text parses
#: into the same tree; the kept tree is a copy taken when it was parsed and is never
#: handed out (callers change the trees they get), and each hit hands out a new deep
#: copy of it, which carries every argument, comment, type and meta entry (the
#: spelled names messages read) of the parsed tree. The length limit is checked
#: before the look-up, and only successes are kept: a refusal is raised again by
#: parsing again. Repeating a query (the plan cache off, or its key new) then parses
#: it once per connection process, not once per asking.
_PARSED: OrderedDict[str, exp.Expression] = OrderedDict()
_PARSED_MAX = 256
_PARSED_CHARS = 4 * 2**20
_PARSED_LOCK = threading.Lock()
_parsed_chars = 0


def _key(sql: str) -> str:
    """The memo's key: the whole text (nothing else is read by the parse)."""
    return sql


def _recalled(sql: str) -> exp.Expression | None:
    """A fresh copy of the remembered tree of ``sql``, or None."""
    with _PARSED_LOCK:
        tree = _PARSED.get(_key(sql))
        if tree is None:
            return None
        _PARSED.move_to_end(_key(sql))
    # copied outside the lock: the kept tree is only ever read
    return tree.copy()


def _remember(sql: str, tree: exp.Expression) -> None:
    global _parsed_chars
    kept = tree.copy()  # before the caller may change ``tree``
    with _PARSED_LOCK:
        if _key(sql) in _PARSED:
            return
        _PARSED[_key(sql)] = kept
        _parsed_chars += len(sql)
        while _PARSED and (len(_PARSED) > _PARSED_MAX or _parsed_chars > _PARSED_CHARS):
            dropped, _ = _PARSED.popitem(last=False)
            _parsed_chars -= len(dropped)


def parse_statements(sql: str, dialect: str | type[Dialect] = READ_DIALECT) -> list[exp.Expression]:
    """The statements of ``sql`` in ``dialect``, with T-SQL's ``TOP n`` read as ``LIMIT n``.

    Raises:
        sqlglot's ParseError and TokenError, as :func:`sqlglot.parse` does;
        UnsupportedQueryError: a TOP that is not a plain row count.
    """
    dialect = Dialect.get_or_raise(dialect)
    tokens, top = _lift_top(dialect.tokenize(sql))
    statements = [s for s in dialect.parser().parse(tokens, sql) if s is not None]
    if top is not None and statements:
        _apply_top(statements[0], top)
    _spell(tokens, statements, dialect)
    return [unplaced(s) for s in statements]


def _spell(tokens: list[Token], statements: list[exp.Expression], dialect: Dialect) -> None:
    """Records on each function node the name the analyst wrote, for messages.

    sqlglot reads several spellings as one node (``strftime`` as TimeToStr, ``LISTAGG``
    and ``STRING_AGG`` as GroupConcat), and writes the node under its own name: a
    refusal would name a function the analyst never wrote. The names written before a
    ``(`` are matched to the node class each one parses to; the node keeps the first
    such name in ``meta["spelled"]``. Only messages read it.
    """
    names: dict[type, str] = {}
    for token, after in zip(tokens, tokens[1:], strict=False):
        if after.token_type == TokenType.L_PAREN and len(token.text) <= 64:
            kind = _spelled_class(token.text.upper(), dialect)
            if kind is not None:
                names.setdefault(kind, token.text)
    if not names:
        return
    for statement in statements:
        for node in statement.walk():
            spelled = names.get(type(node))
            if spelled is not None and not isinstance(node, exp.Anonymous):
                node.meta["spelled"] = spelled


@functools.lru_cache(maxsize=512)
def _spelled_class(name: str, dialect: Dialect) -> type | None:
    """The node class ``name(...)`` parses to (None: a name sqlglot does not know)."""
    if not name.replace("_", "").isalnum():
        return None
    for args in ("", "a", "a, 'b'", "a, 'b', 'c'"):
        try:
            tree = sqlglot.parse_one(f"SELECT {name}({args}) FROM t", read=dialect)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
            continue
        first = tree.expressions[0] if isinstance(tree, exp.Select) and tree.expressions \
            else None
        if isinstance(first, exp.Func) and not isinstance(first, exp.Anonymous):
            return type(first)
    return None


def _lift_top(tokens: list[Token]) -> tuple[list[Token], Token | None]:
    """Takes T-SQL's ``TOP n`` / ``TOP (n)`` off the statement's first SELECT.

    ``SELECT TOP n ...`` returns the first ``n`` rows of the result, after its ORDER BY,
    exactly what ``LIMIT n`` means; DuckDB's grammar has no TOP, so the two or four
    tokens are lifted off here and become the statement's LIMIT (:func:`_apply_top`).
    Only a whole-number literal is taken, and only where no other reading exists: the
    token after ``TOP`` must be a number or ``(`` number ``)``. ``TOP n PERCENT`` and
    ``WITH TIES`` mean something else and are refused; a TOP anywhere else stays in the
    text and fails to parse.

    Returns:
        The tokens without TOP, and the number's token (None when there was no TOP).
    """
    if len(tokens) < 3 or tokens[0].token_type != TokenType.SELECT or not (
            tokens[1].token_type == TokenType.VAR and tokens[1].text.upper() == "TOP"):
        return tokens, None
    if tokens[2].token_type == TokenType.NUMBER:
        number, end = tokens[2], 3
    elif (len(tokens) > 4 and tokens[2].token_type == TokenType.L_PAREN
          and tokens[3].token_type == TokenType.NUMBER
          and tokens[4].token_type == TokenType.R_PAREN):
        number, end = tokens[3], 5
    else:
        return tokens, None
    after = tokens[end].text.upper() if len(tokens) > end else ""
    if after in ("PERCENT", "WITH"):
        raise UnsupportedQueryError(
            f"TOP {number.text} {after} is not supported: write LIMIT n with ORDER BY")
    if not number.text.isdigit():
        raise UnsupportedQueryError(f"TOP needs a whole number, not {number.text[:20]!r}")
    return [tokens[0], *tokens[end:]], number


def _apply_top(statement: exp.Expression, number: Token) -> None:
    """Sets the LIMIT that ``TOP n`` meant (refused next to a LIMIT or OFFSET of its own)."""
    if not isinstance(statement, exp.Select):
        return  # a set operation: validate refuses it with its own message
    if statement.args.get("limit") is not None or statement.args.get("offset") is not None:
        raise UnsupportedQueryError(
            "TOP cannot be combined with LIMIT or OFFSET: write LIMIT n OFFSET m")
    statement.set("limit", exp.Limit(expression=exp.Literal.number(number.text)))
