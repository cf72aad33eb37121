"""Exact, vectorised samplers on a cryptographically secure random source.

Everything here works on integers only: no floating-point value ever decides an
outcome, so the samplers draw from exactly the distributions their privacy maps
assume. The algorithms are those of Canonne, Kamath and Steinke, "The Discrete
Gaussian for Differential Privacy" (NeurIPS 2020), Algorithms 1 and 2, run on whole
numpy vectors at once: each round advances every pending sample, and samples that
are rejected or not yet finished go on to the next round.

* :func:`uniform_below` draws ``U ~ Uniform{0, …, m−1}`` exactly by rejection from
  64-bit words of ``os.urandom`` (the operating system's CSPRNG).
* :func:`bernoulli_exp` draws ``Bernoulli(exp(−n/d))`` exactly for rational ``n/d``
  in [0, 1]: ``K`` is the first ``k`` with ``Bernoulli(n/(d·k)) = 0``; the result is 1
  iff ``K`` is odd (its probability is the alternating series of ``exp(−n/d)``).
* :func:`discrete_laplace` draws ``Z`` with ``P(Z = z) ∝ exp(−|z|·s/t)``.

>>> z = discrete_laplace(10_000, t=3, s=1)
>>> z.dtype, len(z)
(dtype('int64'), 10000)
>>> rational_scale(3.0)
(1572864, 524288)
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np

_MAX = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
#: Scales are represented as t/s with t >= 2^PRECISION, so rounding the scale up to a
#: rational costs at most a relative 2^-PRECISION of epsilon.
PRECISION = 20


def random_words(n: int) -> np.ndarray:
    """``n`` uniform 64-bit words from the operating system's CSPRNG."""
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


def uniform_below(m: np.ndarray | int, n: int | None = None) -> np.ndarray:
    """Exactly uniform integers in ``[0, m)`` (``m`` per element, 1 <= m < 2^63).

    A word ``w`` is accepted iff ``w < L`` where ``L = floor((2^64 − 1) / m) · m`` is a
    multiple of ``m``; then ``w mod m`` is uniform. Rejected elements draw again.
    """
    m = np.asarray(m, dtype=np.uint64)
    if n is None:
        n = m.size
    m = np.broadcast_to(m, (n,))
    limit = (_MAX // m) * m
    out = np.empty(n, dtype=np.uint64)
    pending = np.arange(n)
    while pending.size:
        w = random_words(pending.size)
        ok = w < limit[pending]
        idx = pending[ok]
        out[idx] = w[ok] % m[idx]
        pending = pending[~ok]
    return out.astype(np.int64)


def bernoulli(num: np.ndarray | int, den: np.ndarray | int, n: int | None = None) -> np.ndarray:
    """Exact ``Bernoulli(num/den)`` for integers ``0 <= num <= den``."""
    den = np.asarray(den, dtype=np.int64)
    if n is None:
        n = np.broadcast(np.asarray(num), den).size
    return uniform_below(np.broadcast_to(den, (n,)), n) < np.broadcast_to(num, (n,))


def bernoulli_exp(num: np.ndarray, den: np.ndarray | int) -> np.ndarray:
    """Exact ``Bernoulli(exp(−num/den))`` for ``0 <= num <= den`` (CKS Algorithm 1)."""
    num = np.asarray(num, dtype=np.int64)
    n = num.size
    den = np.broadcast_to(np.asarray(den, dtype=np.int64), (n,))
    k = np.ones(n, dtype=np.int64)
    active = np.arange(n)
    while active.size:
        a = bernoulli(num[active], den[active] * k[active])
        k[active[a]] += 1
        active = active[a]
    return (k % 2) == 1


def discrete_laplace(n: int, t: int, s: int = 1) -> np.ndarray:
    """``n`` draws of the discrete Laplace distribution of scale ``t/s`` (CKS Alg. 2).

    ``P(Z = z) = (1 − q)/(1 + q) · q^|z|`` with ``q = exp(−s/t)``. Up to
    :data:`SMALL` draws (a query's groups) run the same algorithm one candidate at a
    time on Python integers (:func:`discrete_laplace_list`): numpy's fixed cost
    per operation is most of the time of a few draws.
    """
    if t < 1 or s < 1:
        raise ValueError("t and s must be positive integers")
    if n <= SMALL:
        return np.array(discrete_laplace_list(n, t, s), dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        # A candidate is kept with probability about (1 − 1/e)·(1 − P(negative zero))
        # >= 0.6, so drawing 1.7× what is missing (plus a few) usually finishes in one
        # round: the fixed cost of a round dominates the small vectors of a query. Kept
        # candidates are i.i.d. draws, so the first ones in index order are too.
        need = n - filled
        m = need + (need * 7) // 10 + 16
        u = uniform_below(np.int64(t), m)
        keep = bernoulli_exp(u, t)  # accept U with probability exp(−U/t)
        u = u[keep]
        # V ~ Geometric: count successes of Bernoulli(exp(−1)) before the first failure
        v = np.zeros(u.size, dtype=np.int64)
        going = np.arange(u.size)
        while going.size:
            a = bernoulli_exp(np.ones(going.size, dtype=np.int64), 1)
            v[going[a]] += 1
            going = going[a]
        y = (u + t * v) // s
        b = bernoulli(1, 2, u.size)
        ok = ~(b & (y == 0))  # reject "negative zero" so 0 is not counted twice
        z = np.where(b[ok], -y[ok], y[ok])[:need]
        out[filled:filled + z.size] = z
        filled += z.size
    return out


#: Draws up to which :func:`discrete_laplace` runs on Python integers.
SMALL = 64
#: Words :class:`_Words` fetches at once: a draw takes about a dozen, and a query's
#: few draws should not pay for a large read of the CSPRNG (2 KiB took 30 us right
#: after a backend query had evicted the caches).
_BATCH = 32
_UNPACK = struct.Struct(f"<{_BATCH}Q").unpack


class _Words:
    """Uniform 64-bit words from the CSPRNG, fetched :data:`_BATCH` at a time.

    Each word is 8 bytes of ``os.urandom`` read as one unsigned little-endian integer,
    as :func:`random_words` reads them (numpy's ``uint64`` on a little-endian machine),
    without numpy: a query's few draws run right after the backend's query, when
    numpy's code is out of the caches.
    """

    __slots__ = ("_words", "_next")

    def __init__(self) -> None:
        self._words: tuple[int, ...] = ()
        self._next = 0

    def __call__(self) -> int:
        if self._next == len(self._words):
            self._words = _UNPACK(os.urandom(8 * _BATCH))
            self._next = 0
        word = self._words[self._next]
        self._next += 1
        return word


def _uniform_below_one(m: int, word: _Words) -> int:
    """:func:`uniform_below` for one ``m`` (same rejection rule)."""
    limit = (0xFFFF_FFFF_FFFF_FFFF // m) * m
    while True:
        w = word()
        if w < limit:
            return w % m


def _bernoulli_exp_one(num: int, den: int, word: _Words) -> bool:
    """:func:`bernoulli_exp` for one ``num/den`` in [0, 1] (same K, same parity rule)."""
    k = 1
    while _uniform_below_one(den * k, word) < num:  # Bernoulli(num / (den·k)) = 1
        k += 1
    return k % 2 == 1


def discrete_laplace_list(n: int, t: int, s: int = 1) -> list[int]:
    """:func:`discrete_laplace`'s algorithm, one candidate after another, as a list of
    Python integers (no numpy: :data:`SMALL` draws or fewer, a query's groups).

    The same steps on the same integers as the vectorised rounds (CKS Algorithm 2):
    ``U`` uniform below ``t`` kept with probability ``exp(−U/t)``; ``V`` the number of
    successes of ``Bernoulli(exp(−1))`` before the first failure; ``Y = (U + t·V) // s``;
    a fair sign, with "negative zero" rejected. Each kept candidate is an independent
    draw of the distribution, so ``n`` of them in turn are ``n`` i.i.d. draws.
    """
    if t < 1 or s < 1:
        raise ValueError("t and s must be positive integers")
    word = _Words()
    out: list[int] = []
    while len(out) < n:
        u = _uniform_below_one(t, word)
        if not _bernoulli_exp_one(u, t, word):
            continue
        v = 0
        while _bernoulli_exp_one(1, 1, word):
            v += 1
        y = (u + t * v) // s
        negative = _uniform_below_one(2, word) < 1
        if negative and y == 0:
            continue
        out.append(-y if negative else y)
    return out


def rational_scale(scale: float) -> tuple[int, int]:
    """The smallest ``t/s >= scale`` with ``t >= 2^PRECISION`` and ``s`` a power of 2.

    Rounding the scale *up* keeps the privacy map ``Δ·s/t <= Δ/scale``.
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    exponent = PRECISION - math.floor(math.log2(scale))
    s = 2 ** max(exponent, 0)
    t = math.ceil(scale * s)  # exact: scale * 2^k is exact in binary floating point
    return t, s
