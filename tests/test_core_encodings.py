"""Each core encoding's induced distances against a brute-force construction from its definition."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from posdiag.encodings import make_encoding, parse_encoding, t5_bucket
from posdiag.errors import PosdiagError
from posdiag.geometry import classical_mds, gram_from_distances, hellinger_distances, stress

N = 20


def rotation_stack(i: int, d: int, base: float) -> np.ndarray:
    """Block-diagonal RoPE rotation R_i of size (d, d), pairs (2k, 2k+1)."""
    r = np.zeros((d, d))
    for k in range(d // 2):
        a = i * base ** (-2 * k / d)
        r[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return r


@pytest.fixture(scope="module")
def corpus_gram() -> np.ndarray:
    rng = np.random.default_rng(0)
    return gram_from_distances(hellinger_distances(rng.integers(1, 30, size=(N, 50))))


def test_sinusoidal_vectors_and_distances() -> None:
    e = make_encoding("sinusoidal", N, {"d": 16, "base": 100.0})
    p = np.zeros((N, 16))
    for i in range(N):
        for k in range(8):
            w = 100.0 ** (-2 * k / 16)
            p[i, 2 * k], p[i, 2 * k + 1] = np.sin(i * w), np.cos(i * w)
    np.testing.assert_allclose(e.vectors, p, atol=1e-12)
    np.testing.assert_allclose(e.delta, squareform(pdist(p)), atol=1e-9)
    assert e.n_params == 0


def test_rope_matches_explicit_rotation_matrices() -> None:
    e = make_encoding("rope", N, {"head_dim": 8, "base": 50.0})
    rs = [rotation_stack(i, 8, 50.0) for i in range(N)]
    brute = np.array([[np.linalg.norm(rs[i] - rs[j]) for j in range(N)] for i in range(N)])
    np.testing.assert_allclose(e.delta, brute, atol=1e-9)


def test_rope_equals_sinusoidal_under_fitted_stress(corpus_gram: np.ndarray) -> None:
    for d in (8, 64):
        rope = make_encoding("rope", N, {"head_dim": d})
        sin = make_encoding("sinusoidal", N, {"d": d})
        assert stress(corpus_gram, rope.gram()) == pytest.approx(
            stress(corpus_gram, sin.gram()), abs=1e-10
        )


def test_learned_random_is_seeded_gaussian() -> None:
    e = make_encoding("learned-random", N, {"d": 32, "std": 0.5, "seed": 7})
    p = np.random.default_rng(7).normal(0.0, 0.5, size=(N, 32))
    np.testing.assert_allclose(e.vectors, p)
    np.testing.assert_allclose(e.delta, squareform(pdist(p)), atol=1e-12)
    assert e.n_params == N * 32


def test_alibi_readings_from_explicit_bias_matrix() -> None:
    heads = 8
    slopes = [2 ** (-8 * t / heads) for t in range(1, heads + 1)]
    idx = np.arange(N)
    bias = np.array([-m * np.abs(idx[:, None] - idx[None, :]) for m in slopes])
    line = make_encoding("alibi", N)
    kernel = make_encoding("alibi-kernel", N)
    # Every head is a multiple of |i-j|: the line reading is -bias / slope.
    for h, m in enumerate(slopes):
        np.testing.assert_allclose(line.delta, -bias[h] / m)
    # Kernel reading: -bias is a squared Euclidean distance; its MDS reproduces sqrt(-bias).
    np.testing.assert_allclose(kernel.delta**2, -bias[0] / slopes[0])
    x = classical_mds(np.sqrt(-bias[0])).coordinates(N - 1)
    np.testing.assert_allclose(squareform(pdist(x)), np.sqrt(-bias[0]), atol=1e-6)


def test_t5_buckets_match_boundary_tables() -> None:
    # ENCODINGS.md, bidirectional, per side: 0..7 exact; 8:[8,11] 9:[12,15] 10:[16,22] ...
    table = {
        8: (8, 11),
        9: (12, 15),
        10: (16, 22),
        11: (23, 31),
        12: (32, 45),
        13: (46, 63),
        14: (64, 90),
        15: (91, 500),
    }
    for b, (lo, hi) in table.items():
        rel = -np.arange(lo, hi + 1)
        assert set(t5_bucket(rel).tolist()) == {b}
        assert set(t5_bucket(-rel).tolist()) == {b + 16}
    assert t5_bucket(-np.arange(8)).tolist() == list(range(8))
    causal = {16: (16, 18), 17: (19, 20), 22: (35, 39), 30: (99, 112), 31: (113, 400)}
    for b, (lo, hi) in causal.items():
        assert set(t5_bucket(-np.arange(lo, hi + 1), bidirectional=False).tolist()) == {b}
    assert set(t5_bucket(np.arange(1, 50), bidirectional=False).tolist()) == {0}


def test_t5_delta_is_bucket_of_distance() -> None:
    e = make_encoding("t5", 150)
    i, j = np.meshgrid(np.arange(150), np.arange(150), indexing="ij")
    np.testing.assert_array_equal(e.delta, t5_bucket(-np.abs(i - j)))
    assert e.n_params == 32 * 8


def test_nope_and_mds() -> None:
    rng = np.random.default_rng(1)
    d = hellinger_distances(rng.integers(1, 9, size=(N, 30)))
    m = classical_mds(d)
    assert stress(m.gram, make_encoding("nope", N).gram()) == 1.0
    e = make_encoding("mds", N, {"rank": 2}, mds=m)
    assert e.name == "mds-2" and e.n_params == 2 * (N + 768)
    np.testing.assert_allclose(e.delta, squareform(pdist(m.coordinates(2))), atol=1e-12)


def test_parse_encoding_syntax_and_errors() -> None:
    assert parse_encoding("rope:head_dim=128,base=5e5") == ("rope", {"head_dim": 128, "base": 5e5})
    assert parse_encoding("mds-4") == ("mds", {"rank": 4})
    assert parse_encoding("t5:bidirectional=false") == ("t5", {"bidirectional": False})
    with pytest.raises(
        PosdiagError, match=r"^unknown encoding 'ropey'; did you mean 'rope'\? encodings: nope, "
    ):
        parse_encoding("ropey")
    with pytest.raises(
        PosdiagError, match=r"^encoding 'rope': unknown parameter 'dim'; parameters: head_dim, base"
    ):
        parse_encoding("rope:dim=3")
    with pytest.raises(
        PosdiagError, match=r"^encoding 'rope': parameter 'base' must be a float; got 'x'$"
    ):
        parse_encoding("rope:base=x")
    with pytest.raises(
        PosdiagError, match=r"^encoding 'rope': parameter 'head_dim' must be an int; got 'x'$"
    ):
        parse_encoding("rope:head_dim=x")
    with pytest.raises(PosdiagError, match=r"^'d' must be an even int >= 2; got 7$"):
        make_encoding("sinusoidal", N, {"d": 7})
    with pytest.raises(PosdiagError, match=r"^'rank' must be an int in \[1, n_eff-1=19\]; got 20$"):
        make_encoding("mds", N, {"rank": 20}, mds=classical_mds(np.ones((N, N)) - np.eye(N)))
