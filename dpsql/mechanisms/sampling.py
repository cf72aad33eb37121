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
#: Words :func:`_word_stream` fetches at once: a draw takes about nine, and a query's
#: few draws should not pay for a large read of the CSPRNG (2 KiB took 30 us right
#: after a backend query had evicted the caches).
_BATCH = 32
_UNPACK = struct.Struct(f"<{_BATCH}Q").unpack
_MAX64 = 0xFFFF_FFFF_FFFF_FFFF
#: ``floor((2^64 − 1) / m) · m`` for the small ``m`` of Bernoulli(exp(−1))'s rounds.
_LIMITS = tuple((_MAX64 // m) * m if m else 0 for m in range(64))


def _word_stream():
    """Uniform 64-bit words from the CSPRNG, :data:`_BATCH` at a time.

    Each word is 8 bytes of ``os.urandom`` read as one unsigned little-endian integer,
    as :func:`random_words` reads them (numpy's ``uint64`` on a little-endian machine),
    without numpy: a query's few draws run right after the backend's query, when
    numpy's code is out of the caches. A generator's ``__next__`` is the cheapest call
    Python has for it.
    """
    while True:
        yield from _UNPACK(os.urandom(8 * _BATCH))


def discrete_laplace_list(n: int, t: int, s: int = 1, next_word=None) -> list[int]:
    """:func:`discrete_laplace`'s algorithm, one candidate after another, as a list of
    Python integers (no numpy: :data:`SMALL` draws or fewer, a query's groups).

    The same steps on the same integers as the vectorised rounds (CKS Algorithm 2):
    ``U`` uniform below ``t`` kept with probability ``exp(−U/t)``; ``V`` the number of
    successes of ``Bernoulli(exp(−1))`` before the first failure; ``Y = (U + t·V) // s``;
    a fair sign, with "negative zero" rejected. Each kept candidate is an independent
    draw of the distribution, so ``n`` of them in turn are ``n`` i.i.d. draws.

    Every uniform draw is :func:`uniform_below`'s rejection rule on one word (``w < L``
    with ``L = floor((2^64 − 1) / m) · m``, then ``w mod m``), written inline: a draw
    is about nine of them, and a function call each was most of the time. One draw is
    left out because it decides nothing: ``Bernoulli(exp(−1))``'s first round is
    ``Bernoulli(1/1)``, a uniform below 1, which is 0 whatever the word (so ``K`` starts
    at 2). ``tests/test_sampling.py`` checks, word for word, that the outputs are those
    of the same algorithm written with one call per uniform draw.

    Args:
        next_word: where the 64-bit words come from (a test's fixed stream); the
            CSPRNG by default.
    """
    if t < 1 or s < 1:
        raise ValueError("t and s must be positive integers")
    word = next_word or _word_stream().__next__
    max64, limits = _MAX64, _LIMITS
    limit_t = (max64 // t) * t
    out: list[int] = []
    while len(out) < n:
        w = word()
        while w >= limit_t:
            w = word()
        u = w % t
        # Bernoulli(exp(−U/t)): K is the first k with Bernoulli(U/(t·k)) = 0; kept iff odd
        k = 1
        while True:
            m = t * k
            w = word()
            limit = limit_t if k == 1 else (max64 // m) * m
            while w >= limit:
                w = word()
            if w % m < u:
                k += 1
            else:
                break
        if not k & 1:
            continue
        v = 0
        while True:  # V: Bernoulli(exp(−1)) successes before the first failure
            k = 2  # Bernoulli(1/1) = 1 without a word
            while True:
                limit = limits[k] if k < 64 else (max64 // k) * k
                w = word()
                while w >= limit:
                    w = word()
                if w % k < 1:
                    k += 1
                else:
                    break
            if not k & 1:
                break
            v += 1
        y = (u + t * v) // s
        w = word()
        while w >= limits[2]:
            w = word()
        negative = w % 2 < 1
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
