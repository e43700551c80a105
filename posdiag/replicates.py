"""Bootstrap replicates of the cross-fitted geometry without per-replicate sparse bookkeeping
(issue 13, intervals).

A replicate of :func:`posdiag.uncertainty.bootstrap_stress` keeps half of the ``K`` shards and
cross-fits them: each split sums a quarter of the shards into ``C^A`` and ``C^B``, takes
``R = sqrt(C / N)`` row-wise and multiplies ``R^A (R^B)^T``. Done with scipy objects that is
~10 sparse constructions and products per split, whose fixed overhead (~0.2 ms each) dominated
the bundled corpus (n = 76: 5.3 s CPU for 200 replicates).

Every shard's counts on positions ``0..n-1`` sit inside the support of the total, so
:class:`ShardPattern` lays them out once on that fixed pattern: a dense ``(K, nnz)`` array.
Then a subset's counts are one matrix-vector product, the supports a ``reduceat``, ``R`` an
elementwise ``sqrt`` on the pattern, and the product is split once by column: the frequent
tokens as a dense BLAS block (the rule of :mod:`posdiag.fastgram`), the rare ones as a
precomputed list of entry pairs sharing a column, summed by one ``bincount``. A cell a half
does not hold is an explicit 0, which adds nothing to any sum, so the numbers are those of the
scipy path up to the order of floating-point additions (~1e-14; tests/test_replicates.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .errors import PosdiagError
from .fastgram import DENSE_FRACTION

__all__ = [
    "LINEAR_RANKS",
    "MAX_PAIRS",
    "LinearSamples",
    "ShardInfluence",
    "ShardPattern",
    "linear_samples",
    "shard_influence",
]

# Rare-column entry pairs kept in memory (3 int64 arrays): 20 M pairs = 480 MB.
MAX_PAIRS = 20_000_000


class ShardPattern:
    """The shards' counts on rows ``0..n-1``, laid out on the total's sparsity pattern.

    Parameters
    ----------
    shards : sequence of K matrices of shape (n_positions, vocab_size)
    n : int
        Rows (positions) kept.

    Attributes
    ----------
    table : ndarray of shape (K, nnz)
        ``table[k, e]`` is shard ``k``'s count at the total's ``e``-th stored cell (row-major,
        sorted columns); 0 where the shard lacks the token.
    """

    def __init__(self, shards: Sequence[sp.spmatrix | sp.sparray | np.ndarray], n: int) -> None:
        parts = [sp.csr_matrix(s)[:n] for s in shards]
        total = sp.csr_matrix(parts[0], dtype=np.float64, copy=True)
        for p in parts[1:]:
            total = total + p
        total.sum_duplicates()
        total.eliminate_zeros()
        total.sort_indices()
        v = total.shape[1]
        self.k, self.n = len(parts), n
        self.indptr, self.indices = total.indptr, total.indices
        self.row = np.repeat(np.arange(n), np.diff(total.indptr))
        if np.any(np.diff(total.indptr) == 0):
            raise PosdiagError("every analysed position needs tokens for the bootstrap")
        keys = self.row.astype(np.int64) * v + self.indices
        self.table = np.zeros((self.k, keys.size))
        for i, p in enumerate(parts):
            p = sp.csr_matrix(p, dtype=np.float64)
            p.sum_duplicates()
            p.eliminate_zeros()
            pk = np.repeat(np.arange(n), np.diff(p.indptr)).astype(np.int64) * v + p.indices
            self.table[i, np.searchsorted(keys, pk)] = p.data
        # Column split, once for every split of every replicate: the fastgram rule on the
        # total's pattern (a half holds a subset of it). Below fastgram's hybrid size a dense
        # block still beats scipy here, whose per-product cost is what we are saving.
        col_nnz = np.bincount(self.indices, minlength=v)
        dense_cols = col_nnz > DENSE_FRACTION * n
        self.kd = int(dense_cols.sum())
        position = np.cumsum(dense_cols) - 1
        is_dense = dense_cols[self.indices]
        self.dense_entries = np.flatnonzero(is_dense)
        self.dense_flat = self.row[is_dense] * self.kd + position[self.indices[is_dense]]
        rare = np.flatnonzero(~is_dense)
        r_cols = self.indices[rare]
        # The rare part as a list of entry pairs sharing a column: sum_v nnz_v^2 pairs (~40k
        # on the bundled corpus), each adding ra[e] rb[f] to cell (row e, row f). One
        # bincount per split, where a csr product cost ~1.3 ms of fixed overhead.
        order = rare[np.argsort(r_cols, kind="stable")]
        per_col = np.bincount(r_cols, minlength=v)
        m = per_col[self.indices[order]]  # column size, per entry in column order
        starts = np.concatenate(([0], np.cumsum(per_col)))[self.indices[order]]
        pairs = int(m.sum())
        if pairs > MAX_PAIRS:
            raise PosdiagError(
                f"the replicate pattern needs {pairs:,} rare pairs (max {MAX_PAIRS:,}); "
                "fewer positions take the other replicate path"
            )
        self.pair_a = np.repeat(order, m)
        block = np.repeat(np.cumsum(m) - m, m)
        self.pair_b = order[np.repeat(starts, m) + np.arange(pairs) - block]
        self.pair_cell = self.row[self.pair_a] * n + self.row[self.pair_b]
        self.v = v
        self.starts = self.indptr[:-1]

    def counts(self, weights: np.ndarray) -> np.ndarray:
        """Counts on the pattern of the shards weighted by ``weights`` (shape (K,)): (nnz,).

        Weights are 0/1, so this is a sum of rows of :attr:`table`: exact integers in float64.
        """
        return np.asarray(weights, dtype=np.float64) @ self.table

    def supports(self, data: np.ndarray) -> np.ndarray:
        """Row sums of counts on the pattern, shape (n,)."""
        return np.add.reduceat(data, self.starts)

    def sqrt_rows(self, data: np.ndarray, supports: np.ndarray) -> np.ndarray:
        """``sqrt(C / N)`` on the pattern, as :func:`posdiag.estimator.sqrt_rows` computes it
        (``C * (1/N)``, then the root)."""
        inv = 1.0 / supports
        return np.sqrt(data * inv[self.row])

    def product(self, ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
        """``R^A (R^B)^T`` for two rows-on-pattern arrays, dense (n, n)."""
        n = self.n
        out = np.zeros((n, n))
        if self.kd:
            da = np.zeros(n * self.kd)
            db = np.zeros(n * self.kd)
            da[self.dense_flat] = ra[self.dense_entries]
            db[self.dense_flat] = rb[self.dense_entries]
            out += da.reshape(n, self.kd) @ db.reshape(n, self.kd).T
        if self.pair_cell.size:
            out += np.bincount(
                self.pair_cell, weights=ra[self.pair_a] * rb[self.pair_b], minlength=n * n
            ).reshape(n, n)
        return out

    def csr(self, data: np.ndarray) -> sp.csr_matrix:
        """Counts on the pattern as a csr matrix of shape (n, V) (explicit zeros removed)."""
        # Own copies: eliminate_zeros compacts the arrays in place.
        m = sp.csr_matrix(
            (data.copy(), self.indices.copy(), self.indptr.copy()), shape=(self.n, self.v)
        )
        m.eliminate_zeros()
        return m


# ---------------------------------------------------------------------------------------------
# Linearised replicates (long contexts)
# ---------------------------------------------------------------------------------------------

# Top eigenpairs of the full-data B_H whose perturbation each linearised replicate follows
# (the rank intervals beyond keep the full-data eigenvalues; see ShardInfluence).
LINEAR_RANKS = 32


@dataclass(frozen=True)
class ShardInfluence:
    """First-order effect of each shard's weight on ``B_H``, reduced to what stress needs.

    With shard weights ``w`` (1 = the full data) and ``u = w - 1``, the linear replicate model
    is ``B(u) = B_0 + sum_k u_k Delta_k`` with ``Delta_k = dB_H / dw_k`` at ``w = 1``
    (docs/geometry.md, "Intervals at long contexts"). Every replicate statistic is then a
    closed form in ``u``: ``||B(u)||^2 = ||B_0||^2 + 2 u.a + u^T M u``, ``<B(u), B_E> =
    <B_0, B_E> + u.e_E``, and the top eigenvalues those of ``Lambda + sum_k u_k V^T Delta_k V``
    (Rayleigh-Ritz in the full-data top-``m`` eigenvectors ``V``).

    Attributes
    ----------
    norm2 : float
        ``||B_0||_F^2``.
    a : ndarray of shape (K,)
        ``<B_0, Delta_k>``.
    gram : ndarray of shape (K, K)
        ``<Delta_k, Delta_l>``.
    enc : ndarray of shape (E, K)
        ``<B_E, Delta_k>`` for each fixed encoding.
    enc0 : ndarray of shape (E,)
        ``<B_0, B_E>``.
    lam : ndarray of shape (m,)
        Top eigenvalues of ``B_0``, descending.
    proj : ndarray of shape (K, m, m)
        ``V^T Delta_k V``.
    rest : ndarray
        The eigenvalues of ``B_0`` after the top ``m`` that are known (all of them, or none).
    bc_var : ndarray of shape (n, n)
        ``sum_k G_k^2 - (sum_k G_k)^2 / K`` with ``G_k = dBC / dw_k`` (distance spread).
    """

    norm2: float
    a: np.ndarray
    gram: np.ndarray
    enc: np.ndarray
    enc0: np.ndarray
    lam: np.ndarray
    proj: np.ndarray
    rest: np.ndarray
    bc_var: np.ndarray


def _hybrid_rows(
    z: sp.csr_matrix, s_dense: np.ndarray, s_rare_t: sp.csr_matrix, dense: np.ndarray
) -> np.ndarray:
    """``Z S^T`` with ``S``'s column split done once: dense block by BLAS, rare by the
    compiled kernel of :mod:`posdiag.fastgram` (scipy when numba is missing)."""
    from .fastgram import _rare_kernel, _split_columns

    zd, zr = _split_columns(z, dense, s_dense.dtype.type)
    out = np.asarray(zd @ s_dense.T, dtype=np.float64)
    kernel = _rare_kernel()
    if kernel is None:
        out += (zr @ s_rare_t).toarray()
    else:
        zr.sort_indices()
        kernel(
            zr.indptr,
            zr.indices,
            zr.data,
            0,
            z.shape[0],
            s_rare_t.indptr,
            s_rare_t.indices,
            s_rare_t.data,
            out,
        )
    return out


def shard_influence(
    shards: Sequence[sp.spmatrix | sp.sparray | np.ndarray],
    n: int,
    gram: np.ndarray,
    eigenvalues: np.ndarray,
    vectors: np.ndarray,
    encodings: Sequence[tuple[np.ndarray | None, np.ndarray | None, float]],
    *,
    ranks: int = LINEAR_RANKS,
    secant: bool = True,
) -> ShardInfluence:
    """The :class:`ShardInfluence` of ``K`` shards on the Gram ``gram`` (the full estimate).

    ``Delta_k`` is the derivative of the plug-in ``B_H`` (the cross-fit has the same first
    order: both halves move with the shard's weight, and the diagonal of ``BC`` does not move).
    With ``S = sqrt(C/N)``, ``Z_k = C_k / sqrt(C N)`` on shard ``k``'s cells (``sum_k Z_k = S``)
    and ``q_k = N_k / N``: ``dS/dw_k = (Z_k - diag(q_k) S) / 2``, so ``G_k = dBC/dw_k =
    sym(Z_k S^T) - (diag(q_k) BC + BC diag(q_k)) / 2`` with ``BC = S S^T = sum_k Z_k S^T``, and
    ``Delta_k = J G_k J / 2``. Cost: one product ``Z_k S^T`` per shard (together about the
    cost of ``S S^T`` for the rare tokens, ``K`` times its dense block), ``K n^2 m`` for the
    projections and ``K^2 n^2 / 2`` for ``M``; memory: the ``K`` centred ``Delta_k`` in float32
    (``4 K n^2`` bytes).

    Parameters
    ----------
    shards : sequence of K matrices of shape (n_positions, vocab_size)
    gram : ndarray of shape (n, n)
        ``B_0``, double-centred.
    eigenvalues, vectors : ndarray of shape (k,) and (n, k')
        Descending eigenvalues of ``B_0`` (all, or the top ``k``) and their eigenvectors.
    encodings : sequence of (weights, dense, norm)
        Per fixed encoding: lag weights of ``<B, B_E>`` over diagonal sums (Toeplitz), or the
        dense ``B_E``; and ``||B_E||_F``.
    """
    from .fastgram import plan_product, sqrt_rows

    parts = [sp.csr_matrix(s, dtype=np.float64)[:n] for s in shards]
    k = len(parts)
    total = parts[0].copy()
    for p in parts[1:]:
        total = total + p
    total = sp.csr_matrix(total)
    total.sum_duplicates()
    total.eliminate_zeros()
    total.sort_indices()
    supports = np.asarray(total.sum(axis=1)).ravel()
    if np.any(supports <= 0):
        raise PosdiagError("every analysed position needs tokens for the bootstrap")
    s = sqrt_rows(total)
    w = total.copy()
    w.data = 1.0 / np.sqrt(w.data * np.repeat(supports, np.diff(w.indptr)))
    _, dense = plan_product(s, s, dtype=np.float64)
    from .fastgram import _split_columns

    s_dense, s_rare = _split_columns(s, dense, np.float64)
    s_rare_t = sp.csr_matrix(s_rare.T)
    s_rare_t.sort_indices()
    q = np.array([np.asarray(p.sum(axis=1)).ravel() / supports for p in parts])
    store = np.empty((k, n, n), dtype=np.float32)
    bc = np.zeros((n, n))
    for i, p in enumerate(parts):
        if secant:
            p = sp.csr_matrix(p)
            p.sum_duplicates()
            p.eliminate_zeros()
            p.sort_indices()
            at = sp.csr_matrix(total.multiply(p.astype(bool)))
            at.sort_indices()
            c_k, c_all = p.data, at.data
            rows = np.repeat(np.arange(n), np.diff(p.indptr))
            z = sp.csr_matrix(
                (
                    (np.sqrt(c_all + c_k) - np.sqrt(np.clip(c_all - c_k, 0.0, None)))
                    / np.sqrt(supports[rows]),
                    p.indices,
                    p.indptr,
                ),
                shape=p.shape,
            )
        else:
            z = sp.csr_matrix(p.multiply(w))
        y = _hybrid_rows(z, s_dense, s_rare_t, dense)
        bc += y
        store[i] = (y + y.T) / 2.0
    if secant:
        bc = _hybrid_rows(s, s_dense, s_rare_t, dense)
    bc = (bc + bc.T) / 2.0
    m = min(ranks, vectors.shape[1], n - 1)
    v = vectors[:, :m]
    lam = np.asarray(eigenvalues[:m], dtype=np.float64)
    a = np.empty(k)
    enc = np.zeros((len(encodings), k))
    proj = np.empty((k, m, m))
    g_sum = np.zeros((n, n))
    g_sq = np.zeros((n, n))
    for i in range(k):
        g = store[i].astype(np.float64) - (q[i][:, None] + q[i][None, :]) * bc / 2.0
        g_sum += g
        g_sq += g * g
        delta = 0.5 * _double_center(g)
        a[i] = float(np.vdot(gram, delta))
        lags = None
        for e, (weights, dense_e, _) in enumerate(encodings):
            if weights is not None:
                if lags is None:
                    lags = _diagonal_sums(delta)
                enc[e, i] = float(weights @ lags)
            elif dense_e is not None:
                enc[e, i] = float(np.vdot(dense_e, delta))
        dv = delta @ v
        proj[i] = (v.T @ dv + dv.T @ v) / 2.0
        store[i] = delta
    flat = store.reshape(k, n * n)
    mk = np.zeros((k, k))
    step = max(1, (64 << 20) // (8 * k))
    for lo in range(0, n * n, step):
        blk = flat[:, lo : lo + step].astype(np.float64)
        mk += blk @ blk.T
    enc0 = np.zeros(len(encodings))
    lags0 = None
    for e, (weights, dense_e, _) in enumerate(encodings):
        if weights is not None:
            if lags0 is None:
                lags0 = _diagonal_sums(gram)
            enc0[e] = float(weights @ lags0)
        elif dense_e is not None:
            enc0[e] = float(np.vdot(dense_e, gram))
    return ShardInfluence(
        norm2=float(np.vdot(gram, gram)),
        a=a,
        gram=(mk + mk.T) / 2.0,
        enc=enc,
        enc0=enc0,
        lam=lam,
        proj=proj,
        rest=np.asarray(eigenvalues[m:], dtype=np.float64),
        bc_var=g_sq - g_sum * g_sum / k,
    )


def _double_center(m: np.ndarray) -> np.ndarray:
    row = m.mean(axis=1, keepdims=True)
    col = m.mean(axis=0, keepdims=True)
    return np.asarray(m - row - col + m.mean())


def _diagonal_sums(m: np.ndarray) -> np.ndarray:
    from .fastscore import diagonal_sums

    return diagonal_sums(m)


@dataclass(frozen=True)
class LinearSamples:
    """Replicate statistics of the linear model, one row per replicate.

    Attributes
    ----------
    enc_stress : ndarray of shape (R, E)
        Stress of each fixed encoding.
    by_rank : ndarray of shape (R, r_max)
        Stress of the rank-r MDS encoding, r = 1..r_max.
    """

    enc_stress: np.ndarray
    by_rank: np.ndarray


def linear_samples(
    infl: ShardInfluence,
    u: np.ndarray,
    enc_norms: np.ndarray,
    n_ranks: int,
    quadratic: bool = True,
) -> LinearSamples:
    """Evaluate the linear model at replicate deviations ``u`` (shape (R, K)).

    Parameters
    ----------
    enc_norms : ndarray of shape (E,)
        ``||B_E||_F`` (0 for an encoding without geometry: its stress is 1).
    n_ranks : int
        Ranks of the rank intervals (``n - 1``, or fewer with a partial spectrum).
    """
    u = np.asarray(u, dtype=np.float64)
    nb2 = infl.norm2 + 2.0 * (u @ infl.a)
    if quadratic:
        nb2 = nb2 + np.einsum("rk,kl,rl->r", u, infl.gram, u)
    nb2 = np.clip(nb2, 1e-300, None)
    nb = np.sqrt(nb2)
    inner = infl.enc0[None, :] + u @ infl.enc.T
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.clip(inner, 0.0, None) / (nb[:, None] * enc_norms[None, :])
    enc_stress = np.where(enc_norms[None, :] > 0, np.sqrt(np.clip(1.0 - cos * cos, 0.0, None)), 1.0)
    m = infl.lam.size
    mats = np.diag(infl.lam)[None, :, :] + np.tensordot(u, infl.proj, axes=(1, 0))
    theta = np.linalg.eigvalsh(mats)[:, ::-1]
    kept = np.cumsum(np.clip(theta, 0.0, None) ** 2, axis=1)
    if n_ranks > m:
        rest = np.clip(infl.rest[: n_ranks - m], 0.0, None) ** 2
        more = kept[:, -1:] + np.cumsum(rest)[None, :]
        kept = np.concatenate([kept, more], axis=1)
    kept = kept[:, :n_ranks]
    by_rank = np.sqrt(np.clip((nb2[:, None] - kept) / nb2[:, None], 0.0, 1.0))
    return LinearSamples(enc_stress=enc_stress, by_rank=by_rank)
