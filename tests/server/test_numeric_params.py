"""A NUMERIC Bind parameter in PostgreSQL's binary format is read exactly.

Rebuilt with Decimal arithmetic it was rounded to the thread's decimal context (28
digits by default: 30-digit values changed, fractions were refused; attack review).
"""

from __future__ import annotations

import decimal
import struct
from decimal import Decimal

import pytest

from dpsql.server.protocol import NUMERIC, decode_param


def _binary(value: Decimal) -> bytes:
    """``value`` as PostgreSQL's binary NUMERIC (base-10000 digits, weight, scale)."""
    sign, digits, exponent = value.as_tuple()
    dscale = max(0, -exponent)
    text = "".join(map(str, digits)) or "0"
    if exponent < 0:
        text = text.zfill(-exponent + 1)
    integer_part = text[:len(text) + exponent] if exponent < 0 else text + "0" * exponent
    fraction = text[len(text) + exponent:] if exponent < 0 else ""
    integer_part = integer_part.zfill((len(integer_part) + 3) // 4 * 4)
    fraction = fraction + "0" * (-len(fraction) % 4)
    groups = [int(integer_part[i:i + 4]) for i in range(0, len(integer_part), 4)]
    weight = len(groups) - 1
    groups += [int(fraction[i:i + 4]) for i in range(0, len(fraction), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    return struct.pack(f"!hhHh{len(groups)}h", len(groups), weight if groups else 0,
                       0x4000 if sign else 0, dscale, *groups)


@pytest.mark.parametrize("text", ["123456789012345678901234567890",
                                  "12345678901234567890123456789.5",
                                  "0.1234567890123456789012345678901", "50.555", "-0.001",
                                  "0", "10000", "0.00000000000000000001", "-98765.4321000"])
def test_a_binary_numeric_is_read_exactly_in_any_context(text):
    with decimal.localcontext() as ctx:
        ctx.prec = 3
        ctx.traps[decimal.Inexact] = True
        got = decode_param(_binary(Decimal(text)), NUMERIC, 1)
    assert got == Decimal(text) and got.as_tuple().exponent == Decimal(text).as_tuple().exponent
