"""The PostgreSQL v3 wire protocol: framing, messages, type OIDs and value codecs.

Only what a server needs: reading the startup packet and typed frontend messages (with
a size limit checked *before* the body is read, so a client cannot make the server
buffer a gigabyte), building backend messages, and converting values between Python
and the text/binary formats of the types dpsql answers with.

>>> oid_of("BIGINT"), oid_of("DOUBLE"), oid_of("VARCHAR"), oid_of("DECIMAL(18,3)")
(20, 701, 25, 1700)
>>> encode_text(True, BOOL), encode_text(1.5, FLOAT8), encode_text(None, INT8)
(b't', b'1.5', None)
>>> decode_param(b"42", INT8, 0), decode_param(b"\\x00\\x00\\x00\\x07", INT4, 1)
(42, 7)
>>> bytes(error_fields("ERROR", "42601", "bad"))[:7]
b'SERROR\\x00'
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from dpsql.server import ProtocolError

PROTOCOL_3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

# -- type OIDs (pg_type.oid of PostgreSQL's built-in types) ---------------------------
BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 19, 20, 21, 23, 25, 26
FLOAT4, FLOAT8, UNKNOWN, VARCHAR, BPCHAR = 700, 701, 705, 1043, 1042
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC = 1082, 1083, 1114, 1184, 1186, 1700
CHAR = 18

#: pg_type.typlen of each OID this server sends (-1: variable length).
TYPLEN = {BOOL: 1, INT2: 2, INT4: 4, INT8: 8, OID: 4, FLOAT4: 4, FLOAT8: 8, DATE: 4,
          TIME: 8, TIMESTAMP: 8, TIMESTAMPTZ: 8, CHAR: 1}

#: DuckDB type name (dpsql's DB-API type codes, and DuckDB's own result types) → OID.
#: Unsigned and huge integers go out as numeric: they may not fit an int8.
_DUCK_OIDS = {
    "BOOLEAN": BOOL, "BOOL": BOOL, "TINYINT": INT2, "SMALLINT": INT2, "UTINYINT": INT2,
    "INTEGER": INT4, "INT": INT4, "USMALLINT": INT4, "BIGINT": INT8, "UINTEGER": INT8,
    "UBIGINT": NUMERIC, "HUGEINT": NUMERIC, "UHUGEINT": NUMERIC, "FLOAT": FLOAT4,
    "REAL": FLOAT4, "DOUBLE": FLOAT8, "DECIMAL": NUMERIC, "NUMERIC": NUMERIC,
    "VARCHAR": TEXT, "TEXT": TEXT, "STRING": TEXT, "CHAR": TEXT, "UUID": TEXT, "ENUM": TEXT,
    "DATE": DATE, "TIME": TIME, "TIMESTAMP": TIMESTAMP, "DATETIME": TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ, "TIMESTAMPTZ": TIMESTAMPTZ, "BLOB": BYTEA,
    "BYTEA": BYTEA, "INTERVAL": INTERVAL,
}

_EPOCH_DATE = datetime.date(2000, 1, 1)
_EPOCH_TS = datetime.datetime(2000, 1, 1)


def oid_of(type_code: str | None) -> int:
    """The OID for a DuckDB type name; text for anything else (lists, structs...).

    Anything without an exact PostgreSQL counterpart is sent as text, which every
    client can read and which has an obvious binary form (UTF-8).
    """
    if not type_code:
        return TEXT
    name = str(type_code).upper().split("(")[0].strip()
    return _DUCK_OIDS.get(name, TEXT)


# -- framing ---------------------------------------------------------------------------


async def read_startup(reader: asyncio.StreamReader, limit: int) -> tuple[int, bytes]:
    """Reads an untyped startup-phase packet; returns (code, payload after the code).

    Raises:
        ProtocolError: a length below 8 or above ``limit``.
    """
    head = await reader.readexactly(4)
    (length,) = struct.unpack("!i", head)
    if length < 8 or length > min(limit, 10_000):  # startup packets are small
        raise ProtocolError(f"invalid startup packet length {length}")
    body = await reader.readexactly(length - 4)
    (code,) = struct.unpack("!i", body[:4])
    return code, body[4:]


async def read_message(reader: asyncio.StreamReader, limit: int) -> tuple[bytes, bytes]:
    """Reads one typed frontend message; returns (type byte, body).

    The length is checked before the body is read.

    Raises:
        ProtocolError: a length below 4 or above ``limit``.
    """
    head = await reader.readexactly(5)
    kind = head[:1]
    (length,) = struct.unpack("!i", head[1:])
    if length < 4 or length > limit:
        raise ProtocolError(f"message of {length} bytes: the limit is {limit}")
    return kind, await reader.readexactly(length - 4)


def parse_startup_params(payload: bytes) -> dict[str, str]:
    """``key\\0value\\0...\\0`` → dict.

    Raises:
        ProtocolError: not NUL-terminated pairs of UTF-8 text.
    """
    try:
        parts = payload.decode("utf-8").split("\0")
    except UnicodeDecodeError:
        raise ProtocolError("startup parameters are not UTF-8") from None
    if len(parts) < 2 or parts[-1] != "" or parts[-2] != "":
        raise ProtocolError("malformed startup parameters")
    parts = parts[:-2]
    if len(parts) % 2:
        raise ProtocolError("malformed startup parameters")
    return dict(zip(parts[::2], parts[1::2], strict=True))


class Reader:
    """Reads the fields of one message body; every overrun is a ProtocolError."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("message shorter than its fields")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack("!h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack("!i", self._take(4))[0]

    def byte(self) -> bytes:
        return self._take(1)

    def cstr(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError("unterminated string in message")
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string in message is not UTF-8") from None

    def value(self) -> bytes | None:
        n = self.int32()
        return None if n == -1 else self._take(n)

    def rest(self) -> bytes:
        out = self.data[self.pos:]
        self.pos = len(self.data)
        return out


# -- backend messages ------------------------------------------------------------------


def msg(kind: bytes, body: bytes = b"") -> bytes:
    """One typed backend message."""
    return kind + struct.pack("!i", len(body) + 4) + body


def cstr(text: str) -> bytes:
    return text.replace("\0", "").encode("utf-8") + b"\0"


def auth(code: int, data: bytes = b"") -> bytes:
    return msg(b"R", struct.pack("!i", code) + data)


def parameter_status(name: str, value: str) -> bytes:
    return msg(b"S", cstr(name) + cstr(value))


def backend_key(pid: int, secret: int) -> bytes:
    return msg(b"K", struct.pack("!ii", pid, secret))


def ready(status: str) -> bytes:
    return msg(b"Z", status.encode())


def command_complete(tag: str) -> bytes:
    return msg(b"C", cstr(tag))


def error_fields(severity: str, code: str, message: str, detail: str | None = None,
                 hint: str | None = None) -> bytes:
    out = b"S" + cstr(severity) + b"V" + cstr(severity) + b"C" + cstr(code) + b"M" + \
        cstr(message)
    if detail:
        out += b"D" + cstr(detail)
    if hint:
        out += b"H" + cstr(hint)
    return out + b"\0"


def error(code: str, message: str, severity: str = "ERROR", **kw) -> bytes:
    return msg(b"E", error_fields(severity, code, message, **kw))


def notice(message: str, code: str = "00000", severity: str = "NOTICE") -> bytes:
    return msg(b"N", error_fields(severity, code, message))


def row_description(columns: Sequence[tuple[str, int]], formats: Sequence[int]) -> bytes:
    """``T`` for (name, type OID) columns sent in the given formats (0 text, 1 binary)."""
    body = struct.pack("!h", len(columns))
    for (name, oid), fmt in zip(columns, formats, strict=True):
        body += cstr(name) + struct.pack("!ihihih", 0, 0, oid, TYPLEN.get(oid, -1), -1, fmt)
    return msg(b"T", body)


def parameter_description(oids: Sequence[int]) -> bytes:
    return msg(b"t", struct.pack(f"!h{len(oids)}i", len(oids), *oids))


def data_row(values: Iterable[bytes | None]) -> bytes:
    parts = []
    n = 0
    for v in values:
        n += 1
        parts.append(struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v)
    return msg(b"D", struct.pack("!h", n) + b"".join(parts))


PARSE_COMPLETE = msg(b"1")
BIND_COMPLETE = msg(b"2")
CLOSE_COMPLETE = msg(b"3")
NO_DATA = msg(b"n")
EMPTY_QUERY = msg(b"I")
PORTAL_SUSPENDED = msg(b"s")


def formats_for(codes: Sequence[int], n: int) -> list[int]:
    """Bind's result/parameter format codes expanded to ``n`` columns (0, 1 or n codes).

    Raises:
        ProtocolError: another count, or a code other than 0 and 1.
    """
    if any(c not in (0, 1) for c in codes):
        raise ProtocolError("format codes must be 0 (text) or 1 (binary)")
    if not codes:
        return [0] * n
    if len(codes) == 1:
        return [codes[0]] * n
    if len(codes) != n:
        raise ProtocolError(f"{len(codes)} format codes for {n} values")
    return list(codes)


# -- values out ------------------------------------------------------------------------


def _float_text(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(float(x))


def _array_text(values: Sequence[Any]) -> str:
    def one(v: Any) -> str:
        if v is None:
            return "NULL"
        s = text_of(v)
        if s == "" or any(c in s for c in ' ,{}"\\') or s.upper() == "NULL":
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return s
    return "{" + ",".join(one(v) for v in values) + "}"


def text_of(value: Any) -> str:
    """A value's PostgreSQL text form."""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, list | tuple):
        return _array_text(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{text_of(v)}" for k, v in value.items()) + "}"
    return str(value)


def encode_text(value: Any, oid: int) -> bytes | None:
    """The text-format bytes of a value (None for NULL)."""
    if value is None:
        return None
    if oid in (FLOAT8, FLOAT4) and isinstance(value, int | decimal.Decimal):
        value = float(value)
    return text_of(value).encode("utf-8")


def _numeric_binary(value: decimal.Decimal) -> bytes:
    """PostgreSQL's binary numeric: base-10000 digits, weight, sign, display scale."""
    if not value.is_finite():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    sign = 0x4000 if value.is_signed() else 0
    t = value.as_tuple()
    digits, exp = list(t.digits), t.exponent
    dscale = max(0, -exp)
    # pad so the decimal point falls on a base-10000 boundary
    frac_pad = (4 - dscale % 4) % 4
    digits += [0] * frac_pad
    int_len = len(digits) - dscale - frac_pad
    lead_pad = (4 - int_len % 4) % 4 if int_len > 0 else 0
    digits = [0] * lead_pad + digits
    groups = [int("".join(map(str, digits[i:i + 4]))) for i in range(0, len(digits), 4)]
    weight = (int_len + lead_pad) // 4 - 1 if int_len > 0 else -((-int_len) // 4) - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        return struct.pack("!hhHh", 0, 0, 0, dscale)
    return struct.pack(f"!hhHh{len(groups)}H", len(groups), weight, sign, dscale, *groups)


def encode_binary(value: Any, oid: int) -> bytes | None:
    """The binary-format bytes of a value in the given type (None for NULL).

    Raises:
        ValueError: a value the type cannot hold (the caller reports it, nothing else).
    """
    if value is None:
        return None
    if oid == BOOL:
        return b"\x01" if value else b"\x00"
    if oid == INT2:
        return struct.pack("!h", int(value))
    if oid in (INT4, OID):
        return struct.pack("!i", int(value))
    if oid == INT8:
        return struct.pack("!q", int(value))
    if oid == FLOAT4:
        return struct.pack("!f", float(value))
    if oid == FLOAT8:
        return struct.pack("!d", float(value))
    if oid == NUMERIC:
        return _numeric_binary(decimal.Decimal(str(value)) if not isinstance(
            value, decimal.Decimal) else value)
    if oid == DATE:
        return struct.pack("!i", (value - _EPOCH_DATE).days)
    if oid == TIMESTAMP:
        delta = value.replace(tzinfo=None) - _EPOCH_TS
        return struct.pack("!q", (delta.days * 86400 + delta.seconds) * 1_000_000
                           + delta.microseconds)
    if oid == TIME:
        return struct.pack("!q", ((value.hour * 60 + value.minute) * 60 + value.second)
                           * 1_000_000 + value.microsecond)
    if oid == BYTEA and isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return text_of(value).encode("utf-8")


# -- values in (Bind parameters) --------------------------------------------------------

_INTS = {INT2: "!h", INT4: "!i", INT8: "!q", OID: "!I"}


def _numeric_from_binary(raw: bytes) -> decimal.Decimal:
    r = Reader(raw)
    n, weight, sign, dscale = r.int16(), r.int16(), r.int16() & 0xFFFF, r.int16()
    if sign == 0xC000:
        return decimal.Decimal("NaN")
    digits = [r.int16() for _ in range(n)]
    if any(not 0 <= d < 10000 for d in digits):
        raise ValueError("binary numeric digit out of range")
    # built exactly, in integers: Decimal arithmetic would round to the thread's context
    # (28 digits by default, or whatever the application set; attack review)
    coefficient = 0
    for d in digits:
        coefficient = coefficient * 10000 + d
    exponent = 4 * (weight - n + 1) if n else 0
    # written with the display scale's places, as PostgreSQL prints it: the digits it
    # leaves out are zeros (a trailing group's padding is dropped only when zero)
    if exponent > -dscale:
        coefficient *= 10 ** (exponent + dscale)
        exponent = -dscale
    elif exponent < -dscale and coefficient % 10 ** (-dscale - exponent) == 0:
        coefficient //= 10 ** (-dscale - exponent)
        exponent = -dscale
    return decimal.Decimal((1 if sign == 0x4000 else 0,
                            tuple(int(c) for c in str(coefficient)), exponent))


def decode_param(raw: bytes | None, oid: int, fmt: int) -> Any:
    """A Bind parameter as a Python value for dpsql's literal binding.

    Text parameters of unspecified type (OID 0, unknown, text) stay strings; the
    caller decides by the query's context what they mean.

    Raises:
        ValueError: bytes that are not a value of the type (reported as 22P02).
    """
    if raw is None:
        return None
    try:
        if fmt == 1:
            if oid in _INTS:
                size = struct.calcsize(_INTS[oid])
                if len(raw) != size:
                    raise ValueError(f"binary integer of {len(raw)} bytes")
                return struct.unpack(_INTS[oid], raw)[0]
            if oid == BOOL:
                if len(raw) != 1:
                    raise ValueError("binary boolean of wrong size")
                return raw != b"\x00"
            if oid == FLOAT4:
                return struct.unpack("!f", raw)[0]
            if oid == FLOAT8:
                return struct.unpack("!d", raw)[0]
            if oid == NUMERIC:
                return _numeric_from_binary(raw)
            if oid == DATE:
                (days,) = struct.unpack("!i", raw)
                return _EPOCH_DATE + datetime.timedelta(days=days)
            if oid in (TIMESTAMP, TIMESTAMPTZ):
                (us,) = struct.unpack("!q", raw)
                ts = _EPOCH_TS + datetime.timedelta(microseconds=us)
                return ts
            if oid in (TEXT, VARCHAR, BPCHAR, NAME, UNKNOWN, 0, CHAR):
                return raw.decode("utf-8")
            raise ValueError(f"binary parameters of type OID {oid} are not supported")
        text = raw.decode("utf-8")
        return parse_text(text, oid)
    except (struct.error, UnicodeDecodeError, ProtocolError, decimal.InvalidOperation,
            OverflowError) as exc:
        raise ValueError(str(exc)) from None


def parse_text(text: str, oid: int) -> Any:
    """A text-format value of a known type as Python (strings for unknown types)."""
    if oid in (INT2, INT4, INT8, OID):
        return int(text.strip())
    if oid in (FLOAT4, FLOAT8):
        return float(text)
    if oid == NUMERIC:
        return decimal.Decimal(text.strip())
    if oid == BOOL:
        low = text.strip().lower()
        if low in ("t", "true", "y", "yes", "on", "1"):
            return True
        if low in ("f", "false", "n", "no", "off", "0"):
            return False
        raise ValueError(f"invalid boolean {text!r}")
    if oid == DATE:
        return datetime.date.fromisoformat(text.strip())
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return datetime.datetime.fromisoformat(text.strip()).replace(tzinfo=None)
    return text
