"""The cross-fitted geometry at long contexts without an ``n x n`` array (docs/geometry.md,
"Long contexts: the implicit path").

``B_H = 1/2 J BC J`` with ``BC = mean_s (X_s + X_s^T) / 2``, ``X_s = R^A_s (R^B_s)^T``, is held as
its halves: row means (:func:`bc_row_means`), entries (:func:`gram_entries`), lag sums by FFT
and pair lists (:func:`gram_lag_sums`) and products (:func:`gram_matmat`, for the block Lanczos
of :mod:`.spectral`) are exact; ``||B_H||_F^2`` is the top pairs' ``sum_k l_k^2`` plus the
residual's squared norm from a seeded lag-stratified pair sample (with its standard error), or
exact by row blocks (:func:`gram_frobenius_exact`). Memory ``O(nnz + n (rank + lags))`` plus the
pair sample, never ``O(n^2)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import scipy.fft
import scipy.sparse as sp

from ..errors import PosdiagError
from . import _pairs
from ._gram import cross_product as fast_cross_product
from ._gram import sqrt_rows
from .crossfit import canonical_csr, thinning_halves
from .spectral import GramOperator, PartialSpectrum, operator_spectrum

__all__ = [
    "DEFAULT_PAIRS",
    "IMPLICIT_MAX_RANK",
    "ImplicitBC",
    "ImplicitGeometry",
    "PairSample",
    "Scored",
    "bc_entries",
    "bc_lag_sums",
    "bc_matmat",
    "bc_row_means",
    "from_halves",
    "from_rows",
    "from_thinning",
    "gram_entries",
    "gram_frobenius_exact",
    "gram_lag_sums",
    "gram_matmat",
    "implicit_geometry",
    "mds_stress",
    "sample_pairs",
    "score_profile",
    "score_vectors",
]

# Position pairs sampled for the residual norm (and table encodings' residual share), besides
# the diagonal; the standard error it leaves is reported with every figure.
DEFAULT_PAIRS = 50_000
# Eigenpairs the implicit path grows to at most (each pass is a sparse product over every
# count): effective ranks past it read "> 32".
IMPLICIT_MAX_RANK = 32
# A token's lag sums go by FFT when its pair list nnz_A(v) nnz_B(v) is longer than this many
# times the transform length (the break-even: benchmarks/NOTES.md).
FFT_PAIRS_PER_POINT = 16.0
# Frequent tokens transformed per block (dense block of ~2n x this, float64).
FFT_BLOCK = 64
# Rows of BC per block of the exact norm (a dense block of rows x n float64).
EXACT_BLOCK_BYTES = 64 << 20


@dataclass(frozen=True)
class ImplicitBC:
    """The cross-fitted ``BC`` of positions ``0..n-1`` held as its factors.

    Attributes
    ----------
    halves : tuple of (csr_matrix, csr_matrix)
        ``(R^A_s, R^B_s)``, each (n, V), canonical, one pair per split.
    transposes : tuple of (csr_matrix, csr_matrix)
        Their transposes as csr (V, n): the gathers of ``R^T x`` and the columns of the lag sums.
    diagonal : ndarray of shape (n,)
        ``BC_ii`` (the products' own diagonal, or the thinning's exact ``E X_ii``).
    own : ndarray of shape (n,)
        The products' diagonal ``mean_s <R^A_i, R^B_i>``, which ``diagonal`` replaces.
    same : tuple of bool
        Whether a split's two halves are the same matrix (every position's token count even):
        ``(X + X^T) / 2 = R R^T``, one product instead of two.
    """

    halves: tuple[tuple[sp.csr_matrix, sp.csr_matrix], ...]
    transposes: tuple[tuple[sp.csr_matrix, sp.csr_matrix], ...]
    diagonal: np.ndarray
    own: np.ndarray
    same: tuple[bool, ...]

    @property
    def n(self) -> int:
        return int(self.diagonal.shape[0])


def _build(
    pairs: Sequence[tuple[sp.csr_matrix, sp.csr_matrix]], diag: np.ndarray | None
) -> ImplicitBC:
    if not pairs:
        raise PosdiagError("'splits' must be an int in [1, inf]; got 0")
    halves = tuple((canonical_csr(a, np.float64), canonical_csr(b, np.float64)) for a, b in pairs)
    same = tuple(_identical(a, b) for a, b in halves)
    # Equal halves are kept once (the second copy would be O(nnz) memory for nothing).
    halves = tuple((a, a if one else b) for (a, b), one in zip(halves, same, strict=True))
    transposes = []
    n = halves[0][0].shape[0]
    own = np.zeros(n)
    for (a, b), one in zip(halves, same, strict=True):
        at = canonical_csr(a.T.tocsr(), np.float64)
        transposes.append((at, at if one else canonical_csr(b.T.tocsr(), np.float64)))
        prod = sp.csr_matrix((a.data * a.data, a.indices, a.indptr)) if one else a.multiply(b)
        own += np.asarray(prod.sum(axis=1)).ravel()
    own /= len(halves)
    diagonal = own.copy() if diag is None else diag
    return ImplicitBC(halves, tuple(transposes), diagonal, own, same)


def _identical(a: sp.csr_matrix, b: sp.csr_matrix) -> bool:
    return bool(
        a.nnz == b.nnz
        and np.array_equal(a.indptr, b.indptr)
        and np.array_equal(a.indices, b.indices)
        and np.array_equal(a.data, b.data)
    )


def from_thinning(counts: sp.spmatrix | np.ndarray, n: int) -> ImplicitBC:
    """The exact average over every thinning of rows ``0..n-1`` (docs/geometry.md 2b), the
    ``BC`` of :func:`~.crossfit.expected_thinning_bc`."""
    # No copy of canonical int64 counts: at 131,072 positions they are 1.6 GB.
    ma, mb, diag = thinning_halves(counts, n)
    return _build([(ma, mb)], diag)


def from_halves(
    halves: Sequence[tuple[sp.spmatrix | np.ndarray, sp.spmatrix | np.ndarray]],
) -> ImplicitBC:
    """``BC`` of the cross-fit over the given count halves ``(C^A_s, C^B_s)`` (n, V): the same
    as :func:`posdiag.geometry.estimator.crossfit_bc`."""
    return _build([(sqrt_rows(a), sqrt_rows(b)) for a, b in halves], None)


def from_rows(s: sp.spmatrix) -> ImplicitBC:
    """The plug-in ``BC = S S^T`` of square-root rows ``S`` (n, V), diagonal exactly 1
    (:func:`~.crossfit.plugin_bc` without its clip to [0, 1], which only rounding reaches)."""
    s = canonical_csr(s, np.float64)
    return _build([(s, s)], np.ones(s.shape[0]))


def bc_matmat(bc: ImplicitBC, x: np.ndarray) -> np.ndarray:
    """``BC @ x`` for ``x`` of shape (n, k) (or (n,)); no ``n x n`` array."""
    vec = x.ndim == 1
    x2 = np.ascontiguousarray(x.reshape(bc.n, -1), dtype=np.float64)
    k = x2.shape[1]
    out = np.zeros((bc.n, k))
    vocab = bc.halves[0][0].shape[1]
    for (a, b), (at, btr), one in zip(bc.halves, bc.transposes, bc.same, strict=True):
        ya = np.zeros((vocab, k))
        _pairs.gather_product(at, x2, ya)  # A^T x
        if one:
            ya *= 2.0  # (A A^T + A A^T) x
            _pairs.gather_product(a, ya, out)
            continue
        yb = np.zeros((vocab, k))
        _pairs.gather_product(btr, x2, yb)  # B^T x
        _pairs.gather_product(a, yb, out)
        _pairs.gather_product(b, ya, out)
    out *= 0.5 / len(bc.halves)
    out += (bc.diagonal - bc.own)[:, None] * x2
    return out[:, 0] if vec else out


def bc_row_means(bc: ImplicitBC) -> np.ndarray:
    """``BC 1 / n``, exact; shape (n,)."""
    return bc_matmat(bc, np.ones(bc.n)) / bc.n


def gram_matmat(bc: ImplicitBC, x: np.ndarray) -> np.ndarray:
    """``B_H @ x = 1/2 J BC J x`` for ``x`` of shape (n, k)."""
    xc = x - x.mean(axis=0, keepdims=True)
    y = bc_matmat(bc, xc)
    y -= y.mean(axis=0, keepdims=True)
    return 0.5 * y


def bc_entries(bc: ImplicitBC, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``BC[rows[k], cols[k]]``; shape (m,)."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    out = np.zeros(rows.size)
    for (a, b), one in zip(bc.halves, bc.same, strict=True):
        if one:
            out += 2.0 * _pairs.pair_products(a, a, rows, cols)
            continue
        out += _pairs.pair_products(a, b, rows, cols)
        out += _pairs.pair_products(a, b, cols, rows)
    out *= 0.5 / len(bc.halves)
    same = rows == cols
    out[same] = bc.diagonal[rows[same]]
    return out


def gram_entries(
    bc: ImplicitBC, means: np.ndarray, rows: np.ndarray, cols: np.ndarray
) -> np.ndarray:
    """``B_H[rows[k], cols[k]] = 1/2 (BC_ij - m_i - m_j + mean(m))`` with ``m`` the row means."""
    grand = float(means.mean())
    return 0.5 * (bc_entries(bc, rows, cols) - means[rows] - means[cols] + grand)


def _fft_lags(
    at: sp.csr_matrix, btr: sp.csr_matrix, tokens: np.ndarray, n: int, one: bool
) -> np.ndarray:
    """``sum over tokens`` of the symmetrised cross-correlation of A's and B's columns, lags
    ``0..n-1``, by real FFTs of length >= 2n - 1 (no wrap-around)."""
    size = scipy.fft.next_fast_len(2 * n - 1, real=True)
    spec = np.zeros(size // 2 + 1)
    for lo in range(0, tokens.size, FFT_BLOCK):
        block = tokens[lo : lo + FFT_BLOCK]
        fa = scipy.fft.rfft(at[block].toarray(), n=size, axis=1)
        fb = fa if one else scipy.fft.rfft(btr[block].toarray(), n=size, axis=1)
        # Re(conj(A) B) summed over tokens: the transform of (c_AB + c_BA) / 2.
        spec += np.einsum("ij,ij->j", fa.real, fb.real) + np.einsum("ij,ij->j", fa.imag, fb.imag)
    return np.asarray(scipy.fft.irfft(spec, n=size)[:n])


def bc_lag_sums(bc: ImplicitBC) -> np.ndarray:
    """Diagonal sums ``sum_i BC[i, i+l]``, ``l = 0..n-1``; exact, shape (n,)."""
    n = bc.n
    out = np.zeros(n)
    size = scipy.fft.next_fast_len(2 * n - 1, real=True)
    for (at, btr), one in zip(bc.transposes, bc.same, strict=True):
        na = np.diff(at.indptr).astype(np.float64)
        nb = np.diff(btr.indptr).astype(np.float64)
        work = na * nb
        frequent = np.flatnonzero(work > FFT_PAIRS_PER_POINT * size)
        rare = np.flatnonzero((work > 0) & (work <= FFT_PAIRS_PER_POINT * size))
        part = np.zeros(n)
        _pairs.rare_lag_sums(at, btr, rare, part)
        if frequent.size:
            part += _fft_lags(at, btr, frequent, n, one)
        out += part
    out /= len(bc.transposes)
    out[0] = float(bc.diagonal.sum())
    return out


def gram_lag_sums(bc: ImplicitBC, means: np.ndarray | None = None) -> np.ndarray:
    """Diagonal sums ``sum_i B_H[i, i+l]``, ``l = 0..n-1`` (``CorpusSide.b_lags``); exact,
    shape (n,)."""
    n = bc.n
    m = bc_row_means(bc) if means is None else means
    prefix = np.concatenate(([0.0], np.cumsum(m)))
    lags = np.arange(n)
    head = prefix[n - lags]  # sum_{i < n-l} m_i
    tail = prefix[n] - prefix[lags]  # sum_{j >= l} m_j
    return 0.5 * (bc_lag_sums(bc) - head - tail + (n - lags) * float(m.mean()))


def gram_frobenius_exact(bc: ImplicitBC, means: np.ndarray | None = None) -> float:
    """``||B_H||_F^2`` exactly, by blocks of rows of ``BC``."""
    n = bc.n
    m = bc_row_means(bc) if means is None else means
    grand = float(m.mean())
    rows = max(1, min(n, EXACT_BLOCK_BYTES // (8 * n)))
    total = 0.0
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        block = np.zeros((hi - lo, n))
        for a, b in bc.halves:
            fast_cross_product(a[lo:hi], b, dtype=np.float64, out=block)
            fast_cross_product(b[lo:hi], a, dtype=np.float64, out=block)
        block *= 0.5 / len(bc.halves)
        idx = np.arange(lo, hi)
        block[idx - lo, idx] = bc.diagonal[lo:hi]
        block -= m[lo:hi, None]
        block -= m[None, :]
        block += grand
        total += float(np.vdot(block, block))
    return 0.25 * total


@dataclass(frozen=True)
class PairSample:
    """A seeded sample of position pairs ``i < j`` stratified by lag, plus the diagonal.

    Sums over all ordered pairs are estimated as ``sum_k weights[k] y_k``: weight 1 on the
    diagonal (every ``i`` once), 2 on a stratum enumerated in full (``(i, j)`` and ``(j, i)``),
    ``2 N_h / m_h`` on a sampled stratum of ``N_h`` pairs with ``m_h`` draws (with replacement).

    Attributes
    ----------
    rows, cols : ndarray of shape (m,), int64
    weights : ndarray of shape (m,)
    stratum : ndarray of shape (m,), int64
        The sampled stratum of each pair, -1 where the stratum is enumerated (no variance).
    sizes : ndarray of shape (h,)
        ``2 N_h`` of each sampled stratum (ordered pairs).
    draws : ndarray of shape (h,), int64
        ``m_h``.
    seed : int
    """

    rows: np.ndarray
    cols: np.ndarray
    weights: np.ndarray
    stratum: np.ndarray
    sizes: np.ndarray
    draws: np.ndarray
    seed: int

    def total(self, y: np.ndarray) -> float:
        """The estimate of ``sum_{i, j} Y_ij`` from the values ``y`` at the pairs."""
        return float(self.weights @ y)

    def cov(self, y: np.ndarray, z: np.ndarray) -> float:
        """Sampling covariance of :meth:`total` of ``y`` and of ``z`` (stratified, with
        replacement: ``sum_h (2 N_h)^2 cov_h(y, z) / m_h``)."""
        out = 0.0
        for h in range(self.sizes.size):
            sel = self.stratum == h
            mh = int(self.draws[h])
            if mh < 2:
                continue
            yh, zh = y[sel], z[sel]
            c = float(np.sum((yh - yh.mean()) * (zh - zh.mean()))) / (mh - 1)
            out += float(self.sizes[h]) ** 2 * c / mh
        return out


def sample_pairs(n: int, m: int = DEFAULT_PAIRS, seed: int = 0) -> PairSample:
    """Stratified pair sample of ``n`` positions: the diagonal, then lag strata ``[2^t, 2^(t+1))``
    each given half of ``m`` in proportion to its pairs and half in equal shares; a stratum with
    no more pairs than its share is enumerated in full."""
    rng = np.random.default_rng([seed, 35])
    edges = [1]
    while edges[-1] < n:
        edges.append(min(n, 2 * edges[-1]))
    strata = [(lo, hi) for lo, hi in zip(edges[:-1], edges[1:], strict=True) if lo < hi]
    counts = np.array(
        [sum(n - lag for lag in range(lo, hi)) for lo, hi in strata], dtype=np.float64
    )
    share = 0.5 * m * counts / max(counts.sum(), 1.0) + 0.5 * m / max(len(strata), 1)
    rows = [np.arange(n)]
    cols = [np.arange(n)]
    weights = [np.ones(n)]
    labels = [np.full(n, -1)]
    sizes: list[float] = []
    draws: list[int] = []
    for (lo, hi), pairs, want in zip(strata, counts, share, strict=True):
        lags = np.arange(lo, hi)
        if pairs <= want:
            lag = np.repeat(lags, n - lags)
            start = np.concatenate([np.arange(n - lg) for lg in lags])
            rows.append(start)
            cols.append(start + lag)
            weights.append(np.full(start.size, 2.0))
            labels.append(np.full(start.size, -1))
            continue
        mh = max(2, int(round(want)))
        p = (n - lags) / pairs
        lag = rng.choice(lags, size=mh, p=p)
        start = np.floor(rng.random(mh) * (n - lag)).astype(np.int64)
        rows.append(start)
        cols.append(start + lag)
        weights.append(np.full(mh, 2.0 * pairs / mh))
        labels.append(np.full(mh, len(sizes)))
        sizes.append(2.0 * pairs)
        draws.append(mh)
    return PairSample(
        rows=np.concatenate(rows).astype(np.int64),
        cols=np.concatenate(cols).astype(np.int64),
        weights=np.concatenate(weights),
        stratum=np.concatenate(labels).astype(np.int64),
        sizes=np.array(sizes),
        draws=np.array(draws, dtype=np.int64),
        seed=seed,
    )


@dataclass(frozen=True)
class ImplicitGeometry:
    """The cross-fitted ``B_H`` of ``n`` positions, summarised without an ``n x n`` array.

    Attributes
    ----------
    n : int
    means : ndarray of shape (n,)
        Row means of ``BC``.
    lag_sums : ndarray of shape (n,)
        ``sum_i B_H[i, i+l]``, exact.
    spectrum : PartialSpectrum
        The top eigenpairs of ``B_H`` (block Lanczos on :func:`gram_matmat`); its ``total`` is
        :attr:`total`.
    total : float
        ``||B_H||_F^2``: ``sum_k l_k^2`` plus the residual's estimated (or exact) squared norm.
    total_var : float
        Sampling variance of :attr:`total` (0 when exact).
    pairs : PairSample
    residual : ndarray of shape (m,)
        ``(B_H - U diag(l) U^T)_ij`` at the sampled pairs.
    """

    n: int
    means: np.ndarray
    lag_sums: np.ndarray
    spectrum: PartialSpectrum
    total: float
    total_var: float
    pairs: PairSample
    residual: np.ndarray

    @property
    def total_se(self) -> float:
        return math.sqrt(self.total_var)


def _pair_dots(
    x: np.ndarray, y: np.ndarray, rows: np.ndarray, cols: np.ndarray, step: int
) -> np.ndarray:
    """``<x[rows[k]], y[cols[k]]>`` for (n, d) ``x`` and ``y``, ``step`` pairs at a time; (m,)."""
    out = np.empty(rows.size)
    for lo in range(0, rows.size, step):
        r, c = rows[lo : lo + step], cols[lo : lo + step]
        out[lo : lo + step] = np.einsum("ij,ij->i", x[r], y[c])
    return out


def _low_rank(spec: PartialSpectrum, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``(U diag(l) U^T)[rows[k], cols[k]]`` of the top pairs; shape (m,)."""
    u = spec.vectors
    return _pair_dots(u * spec.eigenvalues[None, :], u, rows, cols, 1 << 16)


def implicit_geometry(
    bc: ImplicitBC,
    tolerances: Sequence[float] = (0.1, 0.05),
    *,
    min_rank: int = 16,
    max_rank: int | None = IMPLICIT_MAX_RANK,
    pairs: int = DEFAULT_PAIRS,
    exact_total: bool = False,
    seed: int = 0,
    spectrum: PartialSpectrum | None = None,
) -> ImplicitGeometry:
    """Row means, lag sums, top eigenpairs and ``||B_H||_F^2`` (sampled, or exact) of ``bc``.

    Parameters
    ----------
    tolerances : sequence of float
        Stress levels whose effective rank the eigenpairs grow for (as the dense path).
    min_rank, max_rank : int
        Eigenpairs at least / at most.
    pairs : int
        Position pairs sampled for the residual norm.
    exact_total : bool
        Compute ``||B_H||_F^2`` by row blocks (the cost of the dense products) instead.
    spectrum : PartialSpectrum, optional
        Eigenpairs of the same ``bc`` computed before: no Lanczos.
    """
    n = bc.n
    means = bc_row_means(bc)
    lag_sums = gram_lag_sums(bc, means)
    sample = sample_pairs(n, pairs, seed)
    values = gram_entries(bc, means, sample.rows, sample.cols)
    pilot = gram_frobenius_exact(bc, means) if exact_total else sample.total(values * values)
    spec = spectrum
    if spec is None:
        op = GramOperator(n, lambda x: gram_matmat(bc, x))
        spec = operator_spectrum(
            op, max(pilot, 1e-300), tolerances, min_rank=min_rank, max_rank=max_rank, seed=seed
        )
    residual = values - _low_rank(spec, sample.rows, sample.cols)
    top = float(spec.eigenvalues @ spec.eigenvalues)
    if exact_total:
        total, var = pilot, 0.0
    else:
        r2 = residual * residual
        total, var = top + max(0.0, sample.total(r2)), sample.cov(r2, r2)
    spec = replace(spec, total=total)
    return ImplicitGeometry(n, means, lag_sums, spec, total, var, sample, residual)


@dataclass(frozen=True)
class Scored:
    """A stress with its standard error (0 when every ingredient is exact)."""

    stress: float
    se: float


def _stress_se(
    inner: float, total: float, ne2: float, var_i: float, var_t: float, cov: float
) -> Scored:
    """``sqrt(1 - max(0, I)^2 / (T N_E^2))`` (docs/geometry.md section 4) and its delta-method
    standard error from the sampling (co)variances of ``I = <B_H, B_E>`` and ``T = ||B_H||^2``."""
    if ne2 <= 0.0 or total <= 0.0 or inner <= 0.0:
        return Scored(1.0, 0.0)
    c2 = min(1.0, inner * inner / (total * ne2))
    s = math.sqrt(max(0.0, 1.0 - c2))
    s_safe = max(s, 1e-12)
    di = -(inner / (total * ne2)) / s_safe
    dt = (inner * inner / (2.0 * total * total * ne2)) / s_safe
    var = di * di * var_i + dt * dt * var_t + 2.0 * di * dt * cov
    return Scored(s, math.sqrt(max(0.0, var)))


def profile_norm2(g: np.ndarray) -> float:
    """``||B_E||_F^2`` of the Toeplitz encoding ``delta(i, j) = g[|i - j|]`` (closed form of
    docs/geometry.md section 4: ``B_E = -1/2 J (g o g) J``)."""
    n = g.size
    g2 = g * g
    lags = np.arange(n)
    count = np.where(lags == 0, n, 2 * (n - lags)).astype(np.float64)
    full = float(np.sum(count * g2 * g2))
    prefix = np.cumsum(g2)
    rows = prefix + prefix[::-1] - g2[0]
    s = float(rows.sum())
    return 0.25 * max(0.0, full - 2.0 / n * float(rows @ rows) + s * s / (n * n))


def score_profile(geom: ImplicitGeometry, g: np.ndarray) -> Scored:
    """Stress of a Toeplitz encoding from its lag profile ``g`` (shape (n,), ``g[0] = 0``):
    ``<B_H, B_E> = -1/2 sum_l mult_l g_l^2 lagsum_l`` exactly, ``||B_E||`` in closed form; only
    ``||B_H||`` carries sampling error."""
    g = np.asarray(g, dtype=np.float64)
    n = geom.n
    mult = np.where(np.arange(n) == 0, 1.0, 2.0)
    inner = -0.5 * float(np.sum(mult * g * g * geom.lag_sums))
    return _stress_se(inner, geom.total, profile_norm2(g), 0.0, geom.total_var, 0.0)


def score_vectors(geom: ImplicitGeometry, p: np.ndarray) -> Scored:
    """Stress of an additive encoding with position vectors ``p`` (n, d), ``B_E = (JP)(JP)^T``:
    the low-rank part of ``<B_H, B_E>`` exactly, the residual's from the pair sample."""
    q = np.asarray(p, dtype=np.float64)
    q = q - q.mean(axis=0, keepdims=True)
    spec = geom.spectrum
    proj = q.T @ spec.vectors  # (d, k)
    inner_top = float(np.sum(spec.eigenvalues * np.sum(proj * proj, axis=0)))
    sample = geom.pairs
    step = max(1, (32 << 20) // (8 * max(1, q.shape[1])))  # rows gathered per chunk
    y = geom.residual * _pair_dots(q, q, sample.rows, sample.cols, step)
    r2 = geom.residual * geom.residual
    inner = inner_top + sample.total(y)
    gram = q.T @ q
    ne2 = float(np.vdot(gram, gram))
    return _stress_se(inner, geom.total, ne2, sample.cov(y, y), geom.total_var, sample.cov(y, r2))


def mds_stress(geom: ImplicitGeometry, rank: int) -> Scored:
    """In-sample stress of the rank-r MDS encoding: the eigenvalue tail over the (estimated)
    total, ``sqrt(1 - sum_{k<=r, l_k>0} l_k^2 / T)``, with its standard error."""
    lam = np.clip(geom.spectrum.eigenvalues[:rank], 0.0, None)
    kept = float(lam @ lam)
    t = geom.total
    if t <= 0:
        return Scored(0.0, 0.0)
    s = math.sqrt(max(0.0, 1.0 - kept / t))
    se = kept / (2.0 * t * t * max(s, 1e-12)) * geom.total_se
    return Scored(s, se)
