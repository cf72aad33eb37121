"""Safe display of text that an analyst (or the data) may have written.

Everything dpsql prints for a person to read — the budget log, the shell, the command
line's tables and errors, :class:`~dpsql.result.Result` and
:class:`~dpsql.result.Explanation` text — passes analyst-influenced strings (SQL,
error messages, column names, string values, analyst names) through :func:`escape`
first. A raw newline would let a free, refused query forge a whole log line; an ANSI
escape sequence (``ESC [2K ESC [1A``: erase the line, move up) would hide a real one on
the owner's terminal; a bidi override (U+202E) would show text in another order than it
was written. After :func:`escape`, every such character is a visible escape sequence,
so nothing is hidden and nothing is lost.

>>> escape("SELECT 1\\n2026-01-01 answered eps=0")
'SELECT 1\\\\n2026-01-01 answered eps=0'
>>> print(escape("ok\\x1b[2K\\x1b[1A\\u202eevil\\u2028\\x9b\\x7f\\t"))
ok\\x1b[2K\\x1b[1A\\u202eevil\\u2028\\x9b\\x7f\\t
>>> escape("café, 東京, naïve")   # printable text, any script, is kept as it is
'café, 東京, naïve'
"""

from __future__ import annotations

import unicodedata

#: Unicode categories that are escaped: controls (C0, DEL, C1), format characters
#: (bidi embeddings, overrides, isolates and marks, zero-width characters, the BOM),
#: lone surrogates, and the line and paragraph separators U+2028 and U+2029.
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def is_plain(text: str) -> bool:
    """Whether ``text`` has no character that :func:`escape` would change.

    >>> is_plain("alice"), is_plain("al\\u200bice"), is_plain("bob\\n")
    (True, False, False)
    """
    return (text.isascii() and text.isprintable()) or not any(
        unicodedata.category(ch) in ESCAPED_CATEGORIES for ch in text)


def escape(value: object) -> str:
    """``str(value)`` with every control, format and separator character made visible.

    Newline, carriage return and tab become ``\\n``, ``\\r`` and ``\\t``; other
    characters of :data:`ESCAPED_CATEGORIES` become ``\\xHH``, ``\\uHHHH`` or
    ``\\UHHHHHHHH``, as Python writes them. Everything else, backslashes included, is
    kept as it is, so the result is one line that a terminal shows exactly as stored.

    Zero-width joiners are escaped too (they are format characters): an analyst name
    ``"al\\u200bice"`` must not pass for ``"alice"`` in the log.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and text.isprintable():  # the common case, at C speed
        return text
    return "".join(_escape_char(ch) if unicodedata.category(ch) in ESCAPED_CATEGORIES
                   else ch for ch in text)
