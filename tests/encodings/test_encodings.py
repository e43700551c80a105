"""Every encoding's induced distances against a brute-force construction from its definition.

RoPE variants: explicit rotation matrices (Hugging Face ``rotate_half`` layout, pair k with
k + d/2) and frequencies recomputed pair by pair from docs/encodings.md. Bias methods: explicit bias
matrices, read as Schoenberg distances where -b is conditionally negative definite.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import pdist, squareform

from posdiag.encodings import DEFAULT_SET, REGISTRY, make_encoding, parse_encoding
from posdiag.encodings.bias import alibi_slopes, t5_bucket
from posdiag.encodings.rope import (
    LongRopeConfig,
    dynamic_ntk_base,
    llama3_frequencies,
    longrope_config,
    rope_frequencies,
    rotated_dim,
    yarn_attention_factor,
    yarn_correction_range,
    yarn_frequencies,
    yarn_mscale,
)
from posdiag.errors import PosdiagError
from posdiag.geometry.core import classical_mds, gram_from_distances, hellinger_distances, stress

N = 40


def frob_distances(ops: list[np.ndarray]) -> np.ndarray:
    """Frobenius distances between operators (each (d, d)), brute force over all pairs."""
    n = len(ops)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = np.linalg.norm(ops[i] - ops[j])
    return out


def rotation(angles: np.ndarray, head_dim: int, m: float = 1.0) -> np.ndarray:
    """HF layout: pair k is (k, k + d/2) of the rotated dims; the rest is the identity."""
    r = np.eye(head_dim)
    half = len(angles)
    for k, a in enumerate(angles):
        c, s = m * math.cos(a), m * math.sin(a)
        r[k, k], r[k, k + half] = c, -s
        r[k + half, k], r[k + half, k + half] = s, c
    return r


def rope_delta_brute(theta: list[float], head_dim: int, n: int, m: float = 1.0) -> np.ndarray:
    return frob_distances([rotation(i * np.asarray(theta), head_dim, m) for i in range(n)])


def base_theta(d: int, base: float) -> list[float]:
    return [base ** (-2.0 * k / d) for k in range(d // 2)]


def test_sinusoidal_is_the_distance_of_its_interleaved_vectors() -> None:
    d = 16
    p = np.zeros((N, d))
    for i in range(N):
        for k in range(d // 2):
            w = 10000.0 ** (-2 * k / d)
            p[i, 2 * k], p[i, 2 * k + 1] = math.sin(i * w), math.cos(i * w)
    e = make_encoding("sinusoidal", N, {"d": d})
    np.testing.assert_allclose(e.delta, squareform(pdist(p)), atol=1e-10)
    np.testing.assert_allclose(e.vectors, p, atol=1e-12)


def test_scaled_sinusoidal_is_the_concatenated_layout_times_its_scale() -> None:
    d = 12
    ang = np.array([[i * 10000.0 ** (-k / (d / 2)) for k in range(d // 2)] for i in range(N)])
    p = d**-0.5 * np.hstack([np.sin(ang), np.cos(ang)])
    e = make_encoding("scaled-sinusoidal", N, {"d": d})
    np.testing.assert_allclose(e.delta, squareform(pdist(p)), atol=1e-10)
    assert e.params["scale"] == pytest.approx(d**-0.5) and e.n_params == 1
    e2 = make_encoding("scaled-sinusoidal", N, {"d": d, "scale": 3.0})
    np.testing.assert_allclose(e2.delta, 3.0 * squareform(pdist(p / d**-0.5)), atol=1e-10)


def test_learned_random_is_the_distance_of_its_seeded_table() -> None:
    e = make_encoding("learned-random", N, {"d": 8, "std": 0.5, "seed": 3})
    p = np.random.default_rng(3).normal(0, 0.5, size=(N, 8))
    np.testing.assert_allclose(e.delta, squareform(pdist(p)), atol=1e-12)
    assert e.n_params == N * 8


@pytest.mark.parametrize("head_dim,base", [(8, 10000.0), (16, 500000.0)])
def test_rope_is_the_frobenius_distance_of_its_rotations(head_dim: int, base: float) -> None:
    e = make_encoding("rope", N, {"head_dim": head_dim, "base": base})
    np.testing.assert_allclose(
        e.delta, rope_delta_brute(base_theta(head_dim, base), head_dim, N), atol=1e-9
    )


def test_partial_rotary_rotates_only_part_of_the_head() -> None:
    # head_dim 16 with factor 0.5: 8 rotated dims with theta_k = b^(-2k/8), 8 identity dims.
    e = make_encoding("rope", N, {"head_dim": 16, "partial_rotary_factor": 0.5})
    ops = [rotation(i * np.asarray(base_theta(8, 1e4)), 16) for i in range(N)]
    np.testing.assert_allclose(e.delta, frob_distances(ops), atol=1e-9)


def test_attention_factor_scales_cos_and_sin() -> None:
    e = make_encoding("rope", N, {"head_dim": 8, "attention_factor": 1.5})
    np.testing.assert_allclose(
        e.delta, rope_delta_brute(base_theta(8, 1e4), 8, N, m=1.5), atol=1e-9
    )


@pytest.mark.parametrize("s", [2.0, 4.0, 8.0])
def test_rope_linear_at_i_is_rope_at_i_over_s(s: float) -> None:
    theta = np.asarray(base_theta(8, 1e4))
    ops = [rotation((i / s) * theta, 8) for i in range(N)]
    e = make_encoding("rope-linear", N, {"head_dim": 8, "factor": s})
    np.testing.assert_allclose(e.delta, frob_distances(ops), atol=1e-9)


def test_rope_ntk_rescales_the_base() -> None:
    d, s = 8, 4.0
    e = make_encoding("rope-ntk", N, {"head_dim": d, "factor": s})
    new_base = 1e4 * s ** (d / (d - 2))
    np.testing.assert_allclose(e.delta, rope_delta_brute(base_theta(d, new_base), d, N), atol=1e-9)


def test_rope_dynamic_is_rope_until_the_sequence_outgrows_L() -> None:
    short = make_encoding("rope-dynamic", N, {"head_dim": 8, "max_position_embeddings": 64})
    np.testing.assert_allclose(short.delta, make_encoding("rope", N, {"head_dim": 8}).delta)
    assert short.params["seq_len"] == N  # n is the length the model is scoring
    d, s, big_l, seq = 8, 2.0, 16, 40
    e = make_encoding(
        "rope-dynamic", N, {"head_dim": d, "factor": s, "max_position_embeddings": big_l}
    )
    new_base = 1e4 * (s * seq / big_l - (s - 1)) ** (d / (d - 2))
    np.testing.assert_allclose(e.delta, rope_delta_brute(base_theta(d, new_base), d, N), atol=1e-9)
    e2 = make_encoding("rope-dynamic", N, {"head_dim": d, "seq_len": 10000, "factor": s})
    b2 = 1e4 * (s * 10000 / 4096 - (s - 1)) ** (d / (d - 2))
    np.testing.assert_allclose(e2.delta, rope_delta_brute(base_theta(d, b2), d, N), atol=1e-9)


def yarn_theta_brute(d: int, b: float, s: float, big_l: int, fast: float, slow: float) -> list:
    def kk(rho: float) -> float:
        return d * math.log(big_l / (2 * math.pi * rho)) / (2 * math.log(b))

    lo, hi = max(math.floor(kk(fast)), 0), min(math.ceil(kk(slow)), d - 1)
    out = []
    for k in range(d // 2):
        r = min(max((k - lo) / (hi - lo), 0.0), 1.0)
        t = b ** (-2 * k / d)
        out.append((1 - r) * t + r * t / s)
    return out


def test_yarn_worked_numbers() -> None:
    # docs/encodings.md: d=128, b=1e4, L=4096, s=4 gives k_lo=20, k_hi=46, m=1.139.
    assert yarn_correction_range(128, 1e4, 4096, 32, 1) == (20.0, 46.0)
    assert round(yarn_mscale(4.0), 3) == 1.139
    e = make_encoding("rope-yarn", 3, {"head_dim": 128})
    assert e.params["attention_factor"] == pytest.approx(0.1 * math.log(4) + 1)


def test_yarn_is_the_rotation_distance_with_ramped_frequencies() -> None:
    d, s, big_l = 32, 4.0, 256
    theta = yarn_theta_brute(d, 1e4, s, big_l, 32.0, 1.0)
    # The ramp really mixes here: some pairs kept, some divided, some in between.
    ratio = np.asarray(base_theta(d, 1e4)) / np.asarray(theta)
    assert ratio[0] == 1.0 and ratio[-1] == pytest.approx(s) and ((ratio > 1) & (ratio < s)).any()
    m = 0.1 * math.log(s) + 1
    e = make_encoding(
        "rope-yarn", N, {"head_dim": d, "factor": s, "original_max_position_embeddings": big_l}
    )
    np.testing.assert_allclose(e.delta, rope_delta_brute(theta, d, N, m=m), atol=1e-9)


def llama3_theta_brute(d: int, b: float, s: float, lf: float, hf: float, big_l: int) -> list[float]:
    out = []
    for k in range(d // 2):
        t = b ** (-2 * k / d)
        lam = 2 * math.pi / t
        if lam < big_l / hf:
            out.append(t)
        elif lam > big_l / lf:
            out.append(t / s)
        else:
            g = (big_l / lam - lf) / (hf - lf)
            out.append((1 - g) * t / s + g * t)
    return out


def test_llama3_worked_numbers() -> None:
    # Llama-3.1 (d=128, b=5e5): pairs <= 28 unchanged, 29..34 smoothed, >= 35 divided by 8.
    theta = rope_frequencies(128, 5e5)
    new = llama3_frequencies(128, 5e5, 8.0, 1.0, 4.0, 8192)
    ratio = theta / new
    np.testing.assert_array_equal(ratio[:29], 1.0)
    assert ((ratio[29:35] > 1.0) & (ratio[29:35] < 8.0)).all()
    np.testing.assert_allclose(ratio[35:], 8.0, rtol=1e-12)
    np.testing.assert_allclose(new, llama3_theta_brute(128, 5e5, 8, 1, 4, 8192), rtol=1e-12)


def test_llama3_is_the_rotation_distance_with_its_frequencies() -> None:
    e = make_encoding("rope-llama3", N, {"head_dim": 32, "original_max_position_embeddings": 512})
    theta = llama3_theta_brute(32, 5e5, 8, 1, 4, 512)
    np.testing.assert_allclose(e.delta, rope_delta_brute(theta, 32, N), atol=1e-9)


def test_longrope_divides_by_the_short_or_long_list(tmp_path: Path) -> None:
    d = 8
    short, long = [1.0, 1.5, 2.0, 3.0], [1.0, 2.0, 4.0, 8.0]
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"rope_scaling": {"short_factor": short, "long_factor": long}}))
    theta = np.asarray(base_theta(d, 1e4))
    common = {
        "head_dim": d,
        "factors": str(f),
        "factor": 16.0,
        "original_max_position_embeddings": 32,
    }
    m = math.sqrt(1 + math.log(16) / math.log(32))
    e_short = make_encoding("rope-longrope", N, {**common, "seq_len": 32})
    np.testing.assert_allclose(
        e_short.delta, rope_delta_brute(list(theta / short), d, N, m=m), atol=1e-9
    )
    e_long = make_encoding("rope-longrope", N, common)  # seq_len = n = 40 > L = 32
    assert e_long.params["lists"] == "long"
    np.testing.assert_allclose(
        e_long.delta, rope_delta_brute(list(theta / long), d, N, m=m), atol=1e-9
    )


def test_longrope_factor_list_of_the_wrong_length_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "f.json"
    f.write_text(json.dumps({"short_factor": [1, 2], "long_factor": [1, 2, 3, 4]}))
    with pytest.raises(PosdiagError) as exc:
        make_encoding("rope-longrope", N, {"head_dim": 8, "factors": str(f)})
    assert str(exc.value) == (
        f"rope-longrope: factors {f}: short_factor must have ceil(rotated_dim/2)=4 entries; got 2"
    )


def test_xpos_is_the_distance_of_its_scaled_rotation_operators() -> None:
    d, big_b, n = 8, 16, 21
    c = 11  # torchscale: exponents from min_pos = -(n // 2 rounded up) = -11
    theta = np.asarray(base_theta(d, 1e4))
    z = np.array([(2 * k + 0.4 * d) / (1.4 * d) for k in range(d // 2)])

    def op(i: int, sign: float) -> np.ndarray:
        scale = np.concatenate([z, z]) ** (sign * (i - c) / big_b)
        return np.diag(scale) @ rotation(i * theta, d)

    q = frob_distances([op(i, 1.0) for i in range(n)])
    k = frob_distances([op(i, -1.0) for i in range(n)])
    e = make_encoding("xpos", n, {"head_dim": d, "scale_base": big_b})
    np.testing.assert_allclose(e.delta, np.sqrt(q**2 + k**2), atol=1e-9)
    # Not Toeplitz: the same lag gives different distances at the ends and in the centre
    # (the query and key halves together make it symmetric under reflection about c).
    assert abs(e.delta[0, 1] - e.delta[c, c + 1]) > 1e-3
    assert e.delta[2, 3] == pytest.approx(e.delta[2 * c - 3, 2 * c - 2], abs=1e-12)


def test_rope_equals_sinusoidal_of_the_same_dimension_exactly_up_to_scale() -> None:
    for d in (8, 64):
        r = make_encoding("rope", N, {"head_dim": d}).delta
        s = make_encoding("sinusoidal", N, {"d": d}).delta
        np.testing.assert_allclose(r**2, 2 * s**2, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    half=st.integers(1, 16),
    seed=st.integers(0, 2**31 - 1),
    rank=st.integers(1, 5),
    log_base=st.floats(1.0, 7.0),
)
def test_rope_and_sinusoidal_have_equal_fitted_stress(
    half: int, seed: int, rank: int, log_base: float
) -> None:
    d, n = 2 * half, 24
    x = np.random.default_rng(seed).normal(size=(n, rank))
    b_h = gram_from_distances(squareform(pdist(x)))
    base = 10.0**log_base
    r = make_encoding("rope", n, {"head_dim": d, "base": base})
    s = make_encoding("sinusoidal", n, {"d": d, "base": base})
    assert stress(b_h, r.gram()) == pytest.approx(stress(b_h, s.gram()), abs=1e-9)


def test_alibi_slopes_for_8_and_12_heads() -> None:
    np.testing.assert_allclose(alibi_slopes(8), [2.0**-t for t in range(1, 9)])
    expected_12 = [2.0**-t for t in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    np.testing.assert_allclose(alibi_slopes(12), expected_12)


@given(st.integers(1, 300))
def test_alibi_slopes_are_distinct_and_in_0_1(h: int) -> None:
    s = alibi_slopes(h)
    assert s.shape == (h,) and len(set(s.tolist())) == h and ((s > 0) & (s < 1)).all()


def bias_delta(biases: list[np.ndarray]) -> np.ndarray:
    """Schoenberg reading of CND biases: delta^2 = sum_h -b_h."""
    return np.sqrt(-np.sum(biases, axis=0))


def explicit(fn, n: int = N) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array([[fn(i, j) for j in range(n)] for i in range(n)], dtype=np.float64)


@pytest.mark.parametrize("heads", [8, 12])
def test_alibi_readings_from_explicit_bias_matrices(heads: int) -> None:
    biases = [explicit(lambda i, j, m=m: -m * abs(i - j)) for m in alibi_slopes(heads)]
    kernel = make_encoding("alibi-kernel", N, {"heads": heads})
    # Each head's Schoenberg distance is the same shape, sqrt(m_h)*kernel.delta; so is the sum.
    for h, m in enumerate(alibi_slopes(heads)):
        np.testing.assert_allclose(np.sqrt(m) * kernel.delta, bias_delta([biases[h]]), atol=1e-12)
    total = alibi_slopes(heads).sum()
    np.testing.assert_allclose(np.sqrt(total) * kernel.delta, bias_delta(biases), atol=1e-12)
    # Line reading: every head is a multiple of the first, which is -m_1 |i-j|.
    line = make_encoding("alibi", N, {"heads": heads})
    np.testing.assert_allclose(line.delta, -biases[0] / alibi_slopes(heads)[0], atol=1e-12)
    # Schoenberg: -b CND makes the kernel reading Euclidean (PSD Gram), the line is rank 1.
    assert np.linalg.eigvalsh(kernel.gram()).min() > -1e-9
    lam = np.linalg.eigvalsh(line.gram())
    assert (np.abs(lam[:-1]) < 1e-8 * lam[-1]).all()


@pytest.mark.parametrize("a,p", [(1.0, 1.0), (0.3, 2.0), (5.0, 0.5)])
def test_kerple_from_explicit_bias_matrices(a: float, p: float) -> None:
    log_b = explicit(lambda i, j: -p * math.log(1 + a * abs(i - j)))
    e = make_encoding("kerple-log", N, {"a": a, "p": p})
    np.testing.assert_allclose(e.delta, bias_delta([log_b]), atol=1e-12)
    assert np.linalg.eigvalsh(e.gram()).min() > -1e-9
    if p <= 2:
        pow_b = explicit(lambda i, j: -a * abs(i - j) ** p)
        e = make_encoding("kerple-power", N, {"a": a, "p": p})
        np.testing.assert_allclose(e.delta, bias_delta([pow_b]), atol=1e-12)
        assert np.linalg.eigvalsh(e.gram()).min() > -1e-9 * np.abs(e.gram()).max()


def test_kerple_power_at_p1_is_alibi_kernel_shape() -> None:
    a = make_encoding("kerple-power", N).gram()
    b = make_encoding("alibi-kernel", N).gram()
    x = np.random.default_rng(0).normal(size=(N, 3))
    b_h = gram_from_distances(squareform(pdist(x)))
    assert stress(b_h, a) == pytest.approx(stress(b_h, b), abs=1e-12)


def t5_bucket_brute(r: int, buckets: int, max_distance: int, bidirectional: bool) -> int:
    """HF `_relative_position_bucket`, one scalar at a time."""
    ret = 0
    nb = buckets
    if bidirectional:
        nb //= 2
        ret += nb if r > 0 else 0
        r = abs(r)
    else:
        r = max(-r, 0)
    max_exact = nb // 2
    if r < max_exact:
        return ret + r
    big = max_exact + int(
        math.log(r / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact)
    )
    return ret + min(big, nb - 1)


# docs/encodings.md tables: bucket -> [first, last] distance (last None = unbounded).
T5_BIDIRECTIONAL = {
    **{b: (b, b) for b in range(8)},
    8: (8, 11), 9: (12, 15), 10: (16, 22), 11: (23, 31),
    12: (32, 45), 13: (46, 63), 14: (64, 90), 15: (91, None),
}  # fmt: skip


T5_CAUSAL = {
    **{b: (b, b) for b in range(16)},
    16: (16, 18), 17: (19, 20), 18: (21, 23), 19: (24, 26), 20: (27, 30), 21: (31, 34),
    22: (35, 39), 23: (40, 45), 24: (46, 51), 25: (52, 58), 26: (59, 66), 27: (67, 76),
    28: (77, 86), 29: (87, 98), 30: (99, 112), 31: (113, None),
}  # fmt: skip


@pytest.mark.parametrize("bidirectional,table", [(True, T5_BIDIRECTIONAL), (False, T5_CAUSAL)])
def test_t5_bucket_boundaries(bidirectional: bool, table: dict) -> None:  # type: ignore[type-arg]
    dist = np.arange(0, 2000)
    got = t5_bucket(-dist, 32, 128, bidirectional)
    for b, (lo, hi) in table.items():
        members = dist[got == b]
        assert members.min() == lo
        assert members.max() == (dist[-1] if hi is None else hi)
    if bidirectional:  # looking ahead uses the upper half of the buckets
        np.testing.assert_array_equal(t5_bucket(dist[1:], 32, 128, True), got[1:] + 16)


@pytest.mark.parametrize(
    "buckets,max_distance,bidi", [(32, 128, True), (32, 128, False), (16, 20, True)]
)
def test_t5_encoding_from_explicit_bucket_matrix(
    buckets: int, max_distance: int, bidi: bool
) -> None:
    n = 150
    brute = explicit(lambda i, j: t5_bucket_brute(-abs(j - i), buckets, max_distance, bidi), n)
    e = make_encoding(
        "t5", n, {"buckets": buckets, "max_distance": max_distance, "bidirectional": bidi}
    )
    np.testing.assert_array_equal(e.delta, brute)
    assert e.n_params == buckets * 8


def test_shaw_from_explicit_clipped_relative_positions() -> None:
    k = 5
    clipped = explicit(lambda i, j: max(-k, min(k, j - i)))
    e = make_encoding("shaw", N, {"k": k, "d_head": 4})
    np.testing.assert_array_equal(e.delta, np.abs(clipped))
    assert e.n_params == 2 * (2 * k + 1) * 4  # key and value vectors


@pytest.mark.parametrize("name", [k for k in REGISTRY if k not in ("learned", "mds")])
def test_every_encoding_at_its_defaults_is_a_dissimilarity(name: str) -> None:
    e = make_encoding(name, 30)
    assert e.delta.shape == (30, 30)
    np.testing.assert_allclose(e.delta, e.delta.T, atol=1e-12)
    assert (np.diag(e.delta) == 0).all() and (e.delta >= 0).all() and np.isfinite(e.delta).all()
    assert REGISTRY[name].docs.keys() == REGISTRY[name].defaults.keys()  # every parameter doc'd


@pytest.mark.parametrize(
    "text,message",
    [
        ("rope:head_dim=2,partial_rotary_factor=0.4", "'partial_rotary_factor' must leave a "
         "rotated dimension >= 1; got head_dim=2 * 0.4 = 0"),
        ("rope-ntk:head_dim=2", "base rescaling needs a rotated dimension >= 3; got 2 "
         "(head_dim * partial_rotary_factor=1)"),
        ("rope-yarn:factor=0.5", "'factor' must be a float in [1, inf]; got 0.5"),
        ("rope-llama3:low_freq_factor=4,high_freq_factor=2",
         "'high_freq_factor' must be a float in (4, inf]; got 2.0"),
        ("kerple-power:p=2.5", "'p' must be a float in (0, 2]; got 2.5"),
        ("shaw:k=0", "'k' must be an int in [1, inf]; got 0"),
        ("xpos:scale_base=0", "'scale_base' must be an int in [1, inf]; got 0"),
    ],
)  # fmt: skip
def test_bad_parameters_name_the_rule_and_value(text: str, message: str) -> None:
    name, params = parse_encoding(text)
    with pytest.raises(PosdiagError) as exc:
        make_encoding(name, N, params)
    assert str(exc.value) == message


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0.01, 100.0), p=st.floats(0.05, 2.0), n=st.integers(2, 60))
def test_kerple_readings_are_euclidean(a: float, p: float, n: int) -> None:
    # Schoenberg: -b conditionally negative definite <=> B_E positive semidefinite.
    for name in ("kerple-log", "kerple-power"):
        g = make_encoding(name, n, {"a": a, "p": p}).gram()
        assert np.linalg.eigvalsh(g).min() >= -1e-8 * max(1.0, np.abs(g).max())


N_CORE = 20


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
    return gram_from_distances(hellinger_distances(rng.integers(1, 30, size=(N_CORE, 50))))


def test_sinusoidal_vectors_and_distances() -> None:
    e = make_encoding("sinusoidal", N_CORE, {"d": 16, "base": 100.0})
    p = np.zeros((N_CORE, 16))
    for i in range(N_CORE):
        for k in range(8):
            w = 100.0 ** (-2 * k / 16)
            p[i, 2 * k], p[i, 2 * k + 1] = np.sin(i * w), np.cos(i * w)
    np.testing.assert_allclose(e.vectors, p, atol=1e-12)
    np.testing.assert_allclose(e.delta, squareform(pdist(p)), atol=1e-9)
    assert e.n_params == 0


def test_rope_matches_explicit_rotation_matrices() -> None:
    e = make_encoding("rope", N_CORE, {"head_dim": 8, "base": 50.0})
    rs = [rotation_stack(i, 8, 50.0) for i in range(N_CORE)]
    brute = np.array(
        [[np.linalg.norm(rs[i] - rs[j]) for j in range(N_CORE)] for i in range(N_CORE)]
    )
    np.testing.assert_allclose(e.delta, brute, atol=1e-9)


def test_rope_equals_sinusoidal_under_fitted_stress(corpus_gram: np.ndarray) -> None:
    for d in (8, 64):
        rope = make_encoding("rope", N_CORE, {"head_dim": d})
        sin = make_encoding("sinusoidal", N_CORE, {"d": d})
        assert stress(corpus_gram, rope.gram()) == pytest.approx(
            stress(corpus_gram, sin.gram()), abs=1e-10
        )


def test_learned_random_is_seeded_gaussian() -> None:
    e = make_encoding("learned-random", N_CORE, {"d": 32, "std": 0.5, "seed": 7})
    p = np.random.default_rng(7).normal(0.0, 0.5, size=(N_CORE, 32))
    np.testing.assert_allclose(e.vectors, p)
    np.testing.assert_allclose(e.delta, squareform(pdist(p)), atol=1e-12)
    assert e.n_params == N_CORE * 32


def test_alibi_readings_from_explicit_bias_matrix() -> None:
    heads = 8
    slopes = [2 ** (-8 * t / heads) for t in range(1, heads + 1)]
    idx = np.arange(N_CORE)
    bias = np.array([-m * np.abs(idx[:, None] - idx[None, :]) for m in slopes])
    line = make_encoding("alibi", N_CORE)
    kernel = make_encoding("alibi-kernel", N_CORE)
    # Every head is a multiple of |i-j|: the line reading is -bias / slope.
    for h, m in enumerate(slopes):
        np.testing.assert_allclose(line.delta, -bias[h] / m)
    # Kernel reading: -bias is a squared Euclidean distance; its MDS reproduces sqrt(-bias).
    np.testing.assert_allclose(kernel.delta**2, -bias[0] / slopes[0])
    x = classical_mds(np.sqrt(-bias[0])).coordinates(N_CORE - 1)
    np.testing.assert_allclose(squareform(pdist(x)), np.sqrt(-bias[0]), atol=1e-6)


def test_t5_buckets_match_boundary_tables() -> None:
    # docs/encodings.md, bidirectional, per side: 0..7 exact; 8:[8,11] 9:[12,15] 10:[16,22] ...
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
    d = hellinger_distances(rng.integers(1, 9, size=(N_CORE, 30)))
    m = classical_mds(d)
    assert stress(m.gram, make_encoding("nope", N_CORE).gram()) == 1.0
    e = make_encoding("mds", N_CORE, {"rank": 2}, mds=m)
    assert e.name == "mds-2" and e.n_params == 2 * (N_CORE + 768)
    np.testing.assert_allclose(e.delta, squareform(pdist(m.coordinates(2))), atol=1e-12)


def test_make_encoding_names_the_spec_form_of_mds() -> None:
    """``mds-2`` is what the CLI and parse_encoding take; make_encoding used to answer
    "unknown encoding 'mds-2'; did you mean 'mds-2'?"."""
    with pytest.raises(
        PosdiagError,
        match=r"^unknown encoding 'mds-2': 'mds-R' is a spec for parse_encoding; make_encoding "
        r"takes 'mds' with params \{'rank': 2\}$",
    ):
        make_encoding("mds-2", 8)


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
        make_encoding("sinusoidal", N_CORE, {"d": 7})
    with pytest.raises(PosdiagError, match=r"^'rank' must be an int in \[1, n_eff-1=19\]; got 20$"):
        make_encoding(
            "mds",
            N_CORE,
            {"rank": 20},
            mds=classical_mds(np.ones((N_CORE, N_CORE)) - np.eye(N_CORE)),
        )


def test_long_context_encodings_are_not_refused_for_matrices_they_never_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Was: "encoding 'alibi' on 16,384 positions (heads=8) needs about 24.0 GiB" on a machine
    # with 17.6 GiB free, although the default set is scored from lag profiles and vectors.
    monkeypatch.setenv("POSDIAG_MAX_MEMORY", "1GiB")
    n = 16_384
    for spec in DEFAULT_SET:
        name, params = parse_encoding(spec)
        if name == "mds":
            continue  # needs a corpus
        enc = make_encoding(name, n, params)
        held = sum(a.nbytes for a in (enc.profile, enc.vectors, enc.matrix) if a is not None)
        assert held < 8 * n * 1024, (name, held)  # no n x n array
    # Short inputs still count the dense matrices a bootstrap may build: 2 x 8 n^2 at n = 2,048
    # is 64 MiB; a 32 MiB budget refuses it with the estimate.
    monkeypatch.setenv("POSDIAG_MAX_MEMORY", "32MiB")
    with pytest.raises(PosdiagError, match=r"^encoding 'alibi' on 2,048 positions \(heads=8\)"):
        make_encoding("alibi", 2048, {})
    make_encoding("alibi", 4096, {})  # profile only: 64 MiB less, fits


# Mutation-strength tests: the registered rope and bias factories pinned down, every parameter
# check at its boundary with its exact message; expected values from the published formulas.


def lag(n: int) -> np.ndarray:
    return np.abs(np.subtract.outer(np.arange(n), np.arange(n))).astype(float)


def rope_delta(theta: list[float] | np.ndarray, n: int, m: float = 1.0) -> np.ndarray:
    """4 m^2 sum_k (1 - cos) summed pair by pair in a loop."""
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            out[i, j] = m * math.sqrt(sum(4 * (1 - math.cos((i - j) * t)) for t in theta))
    return out


def theta_loop(d: int, base: float) -> list[float]:
    return [base ** (-j / d) for j in range(0, d, 2)]


def build(text: str, n: int = 6):
    name, params = parse_encoding(text)
    return make_encoding(name, n, params)


# --- every parameter check, at and beyond its bound ---------------------------------------------

ERRORS = [
    ("rope:head_dim=3", "'head_dim' must be an even int >= 2; got 3"),
    ("rope:head_dim=0", "'head_dim' must be an int in [2, inf]; got 0"),
    ("rope:partial_rotary_factor=0", "'partial_rotary_factor' must be a float in (0, 1]; got 0.0"),
    ("rope:partial_rotary_factor=1.5",
     "'partial_rotary_factor' must be a float in (0, 1]; got 1.5"),
    ("rope:base=1", "'base' must be a float in (1, inf]; got 1.0"),
    ("rope:attention_factor=0", "'attention_factor' must be a float in (0, inf]; got 0.0"),
    ("rope-linear:factor=0.99", "'factor' must be a float in [1, inf]; got 0.99"),
    ("rope-linear:base=0.5", "'base' must be a float in (1, inf]; got 0.5"),
    ("rope-ntk:factor=0.5", "'factor' must be a float in [1, inf]; got 0.5"),
    ("rope-ntk:head_dim=8,partial_rotary_factor=0.25", "base rescaling needs a rotated dimension "
     ">= 3; got 2 (head_dim * partial_rotary_factor=0.25)"),
    ("rope-dynamic:head_dim=2", "base rescaling needs a rotated dimension >= 3; got 2 "
     "(head_dim * partial_rotary_factor=1)"),
    ("rope-dynamic:factor=0.5", "'factor' must be a float in [1, inf]; got 0.5"),
    ("rope-dynamic:max_position_embeddings=0",
     "'max_position_embeddings' must be an int in [1, inf]; got 0"),
    ("rope-dynamic:seq_len=-1", "'seq_len' must be an int in [0, inf]; got -1"),
    ("rope-yarn:original_max_position_embeddings=0",
     "'original_max_position_embeddings' must be an int in [1, inf]; got 0"),
    ("rope-yarn:beta_fast=0", "'beta_fast' must be a float in (0, inf]; got 0.0"),
    ("rope-yarn:beta_slow=0", "'beta_slow' must be a float in (0, 32]; got 0.0"),
    ("rope-yarn:beta_slow=33", "'beta_slow' must be a float in (0, 32]; got 33.0"),
    ("rope-yarn:attention_factor=-1", "'attention_factor' must be a float in [0, inf]; got -1.0"),
    ("rope-yarn:mscale=-0.5", "'mscale' must be a float in [0, inf]; got -0.5"),
    ("rope-yarn:base=1", "'base' must be a float in (1, inf]; got 1.0"),
    ("rope-llama3:factor=0.5", "'factor' must be a float in [1, inf]; got 0.5"),
    ("rope-llama3:low_freq_factor=0", "'low_freq_factor' must be a float in (0, inf]; got 0.0"),
    ("rope-llama3:low_freq_factor=4", "'high_freq_factor' must be a float in (4, inf]; got 4.0"),
    ("rope-llama3:original_max_position_embeddings=0",
     "'original_max_position_embeddings' must be an int in [1, inf]; got 0"),
    ("rope-llama3:head_dim=5", "'head_dim' must be an even int >= 2; got 5"),
    ("rope-longrope:factor=0.5", "'factor' must be a float in [1, inf]; got 0.5"),
    ("rope-longrope:factor=-1", "'factor' must be a float in [0, inf]; got -1.0"),
    ("rope-longrope:original_max_position_embeddings=1",
     "'original_max_position_embeddings' must be an int in [2, inf]; got 1"),
    ("rope-longrope:seq_len=-1", "'seq_len' must be an int in [0, inf]; got -1"),
    ("rope-longrope:attention_factor=-1",
     "'attention_factor' must be a float in [0, inf]; got -1.0"),
    ("rope-longrope:base=1", "'base' must be a float in (1, inf]; got 1.0"),
    ("xpos:scale_base=0", "'scale_base' must be an int in [1, inf]; got 0"),
    ("xpos:head_dim=7", "'head_dim' must be an even int >= 2; got 7"),
    ("xpos:base=1", "'base' must be a float in (1, inf]; got 1.0"),
    ("alibi:heads=0", "'heads' must be an int in [1, inf]; got 0"),
    ("alibi-kernel:heads=0", "'heads' must be an int in [1, inf]; got 0"),
    ("t5:buckets=3", "'buckets' must be an int in [4, inf]; got 3"),
    ("t5:buckets=6,max_distance=1", "'max_distance' must be an int in [2, inf]; got 1"),
    ("t5:buckets=5", "'buckets' must be an even int >= 4 when bidirectional; got 5"),
    ("t5:bidirectional=false,buckets=1", "'buckets' must be an int in [2, inf]; got 1"),
    ("t5:max_distance=8", "'max_distance' must be an int in [9, inf]; got 8"),
    ("t5:bidirectional=false,max_distance=16",
     "'max_distance' must be an int in [17, inf]; got 16"),
    ("t5:heads=0", "'heads' must be an int in [1, inf]; got 0"),
    ("kerple-log:a=0", "'a' must be a float in (0, inf]; got 0.0"),
    ("kerple-log:p=0", "'p' must be a float in (0, inf]; got 0.0"),
    ("kerple-log:heads=0", "'heads' must be an int in [1, inf]; got 0"),
    ("kerple-power:a=0", "'a' must be a float in (0, inf]; got 0.0"),
    ("kerple-power:p=0", "'p' must be a float in (0, 2]; got 0.0"),
    ("kerple-power:heads=0", "'heads' must be an int in [1, inf]; got 0"),
    ("shaw:k=0", "'k' must be an int in [1, inf]; got 0"),
    ("shaw:d_head=0", "'d_head' must be an int in [1, inf]; got 0"),
]  # fmt: skip


@pytest.mark.parametrize("text,message", ERRORS)
def test_parameter_checks_name_the_parameter_rule_and_value(text: str, message: str) -> None:
    with pytest.raises(PosdiagError) as exc:
        build(text)
    assert str(exc.value) == message


BOUNDARIES = [
    "rope:partial_rotary_factor=1,attention_factor=0.001",
    "rope-linear:factor=1",
    "rope-ntk:factor=1,head_dim=4,partial_rotary_factor=0.75",
    "rope-dynamic:max_position_embeddings=1,seq_len=0",
    "rope-yarn:original_max_position_embeddings=1,beta_slow=32,mscale=0,attention_factor=0",
    "rope-llama3:factor=1,original_max_position_embeddings=1,low_freq_factor=0.5",
    "rope-longrope:original_max_position_embeddings=2,factor=1",
    "xpos:scale_base=1,head_dim=2",
    "alibi:heads=1",
    "alibi-kernel:heads=1",
    "t5:buckets=4,max_distance=2,heads=1",
    "t5:bidirectional=false,buckets=2,max_distance=2",
    "t5:bidirectional=false,buckets=3,max_distance=2",
    "kerple-log:a=0.001,p=0.001,heads=1",
    "kerple-power:p=2,heads=1",
    "shaw:k=1,d_head=1",
]


@pytest.mark.parametrize("text", BOUNDARIES)
def test_values_at_the_bounds_are_accepted(text: str) -> None:
    e = build(text, 5)
    assert e.delta.shape == (5, 5) and np.isfinite(e.delta).all()


def test_longrope_factor_zero_means_derived() -> None:
    e = build("rope-longrope:factor=0", 5)
    assert e.params["factor"] == 1.0


# --- names, params and parameter counts ---------------------------------------------------------


def test_rope_family_reports_its_parameters() -> None:
    assert build("rope").params == {"head_dim": 64, "base": 10000.0}
    e = build("rope:partial_rotary_factor=0.5,attention_factor=2")
    assert e.params == {
        "head_dim": 64,
        "base": 10000.0,
        "partial_rotary_factor": 0.5,
        "attention_factor": 2.0,
    }
    assert build("rope-linear:factor=2").params == {"head_dim": 64, "base": 1e4, "factor": 2.0}
    e = build("rope-ntk:head_dim=8,factor=2")
    assert e.params == {
        "head_dim": 8,
        "base": 1e4,
        "factor": 2.0,
        "scaled_base": 1e4 * 2.0 ** (8 / 6),
    }
    e = build("rope-dynamic:head_dim=8,factor=2,max_position_embeddings=4,seq_len=10")
    assert e.params == {
        "head_dim": 8,
        "base": 1e4,
        "factor": 2.0,
        "max_position_embeddings": 4,
        "seq_len": 10,
        "scaled_base": 1e4 * (2.0 * 10 / 4 - 1.0) ** (8 / 6),
    }
    e = build("rope-yarn:head_dim=8,factor=2,original_max_position_embeddings=64,beta_fast=16")
    assert e.params == {
        "head_dim": 8,
        "base": 1e4,
        "factor": 2.0,
        "original_max_position_embeddings": 64,
        "beta_fast": 16.0,
        "beta_slow": 1.0,
        "attention_factor": 0.1 * math.log(2.0) + 1.0,
    }
    e = build("rope-llama3:head_dim=8,base=100,factor=2,low_freq_factor=2,high_freq_factor=3")
    assert e.params == {
        "head_dim": 8,
        "base": 100.0,
        "factor": 2.0,
        "low_freq_factor": 2.0,
        "high_freq_factor": 3.0,
        "original_max_position_embeddings": 8192,
    }
    e = build("rope-longrope:head_dim=8,factor=4,original_max_position_embeddings=3", 5)
    assert e.params == {
        "head_dim": 8,
        "base": 1e4,
        "factor": 4.0,
        "original_max_position_embeddings": 3,
        "attention_factor": math.sqrt(1 + math.log(4) / math.log(3)),
        "seq_len": 5,
        "lists": "long",
    }
    e = build("xpos:head_dim=8,scale_base=4", 7)
    assert e.params == {"head_dim": 8, "base": 1e4, "scale_base": 4, "center": 4}
    for name in ("rope", "rope-linear", "rope-ntk", "rope-dynamic", "rope-yarn", "rope-llama3"):
        e = build(name)
        assert (e.name, e.n_params, e.vectors) == (name, 0, None)
    for name in ("rope-longrope", "xpos"):
        assert (build(name).name, build(name).n_params) == (name, 0)


def test_bias_family_reports_names_params_and_counts() -> None:
    e = build("alibi:heads=3")
    assert (e.name, dict(e.params), e.n_params) == ("alibi", {"heads": 3}, 0)
    e = build("alibi-kernel:heads=3")
    assert (e.name, dict(e.params), e.n_params) == ("alibi-kernel", {"heads": 3}, 0)
    e = build("t5:buckets=8,max_distance=20,heads=3,bidirectional=false")
    assert (e.name, e.n_params) == ("t5", 24)
    assert e.params == {"buckets": 8, "max_distance": 20, "bidirectional": False, "heads": 3}
    e = build("kerple-log:a=2,p=3,heads=5")
    assert (e.name, dict(e.params), e.n_params) == (
        "kerple-log",
        {"a": 2.0, "p": 3.0, "heads": 5},
        10,
    )
    e = build("kerple-power:a=2,p=0.5,heads=5")
    assert (e.name, dict(e.params), e.n_params) == (
        "kerple-power",
        {"a": 2.0, "p": 0.5, "heads": 5},
        10,
    )
    e = build("shaw:k=3,d_head=5")
    assert (e.name, dict(e.params), e.n_params) == ("shaw", {"k": 3, "d_head": 5}, 70)


# --- bias values ---------------------------------------------------------------------------------


def test_alibi_slopes_by_hand() -> None:
    np.testing.assert_array_equal(alibi_slopes(1), [2.0**-8])
    np.testing.assert_array_equal(alibi_slopes(2), [2.0**-4, 2.0**-8])
    # 6 heads: p = 4 -> 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 (odd slopes of 8 heads)
    np.testing.assert_allclose(alibi_slopes(6), 2.0 ** -np.array([2, 4, 6, 8, 1, 3]), rtol=1e-15)
    with pytest.raises(PosdiagError) as exc:
        alibi_slopes(0)
    assert str(exc.value) == "'heads' must be an int in [1, inf]; got 0"


def test_alibi_readings_by_hand() -> None:
    np.testing.assert_array_equal(build("alibi", 4).delta, lag(4))
    np.testing.assert_allclose(build("alibi-kernel", 4).delta, np.sqrt(lag(4)), rtol=1e-15)


def hf_t5_bucket(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """HF ``_relative_position_bucket`` of ``rel = memory - query`` for one int, with math."""
    ret = 0
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = -min(rel, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return ret + min(val, num_buckets - 1)


@pytest.mark.parametrize(
    "bidirectional,buckets,max_distance", [(True, 32, 128), (False, 32, 128), (True, 10, 30)]
)
def test_t5_bucket_matches_hf_on_both_sides(
    bidirectional: bool, buckets: int, max_distance: int
) -> None:
    rel = np.arange(-200, 201)
    got = t5_bucket(rel, buckets, max_distance, bidirectional)
    expected = [hf_t5_bucket(int(r), bidirectional, buckets, max_distance) for r in rel]
    np.testing.assert_array_equal(got, expected)


def test_t5_encoding_is_the_look_back_bucket() -> None:
    e = build("t5:buckets=8,max_distance=12", 15)
    row = [hf_t5_bucket(-k, True, 8, 12) for k in range(15)]
    np.testing.assert_array_equal(e.delta[0], row)
    assert row[-1] == 3 and row[2] == 2  # exact for lag < 2, then log buckets, saturated at 3


def test_kerple_values_by_hand() -> None:
    e = build("kerple-log:a=2,p=3", 4)
    np.testing.assert_allclose(e.delta, np.sqrt(3 * np.log(1 + 2 * lag(4))), rtol=1e-15)
    e = build("kerple-power:a=2,p=0.5", 4)
    np.testing.assert_allclose(e.delta, np.sqrt(2 * lag(4) ** 0.5), rtol=1e-15)


def test_shaw_values_by_hand() -> None:
    np.testing.assert_array_equal(build("shaw:k=2", 5).delta[0], [0, 1, 2, 2, 2])


# --- RoPE values off the well-trodden paths ------------------------------------------------------


def test_rotated_dim_and_frequencies_by_hand() -> None:
    assert rotated_dim(64, 0.4) == 25 and rotated_dim(80, 0.4) == 32 and rotated_dim(2, 0.5) == 1
    np.testing.assert_allclose(rope_frequencies(4, 100.0), [1.0, 0.1], rtol=1e-15)
    np.testing.assert_allclose(rope_frequencies(5, 100.0), theta_loop(5, 100.0), rtol=1e-15)


def test_rope_attention_factor_and_partial_values() -> None:
    e = build("rope:head_dim=8,partial_rotary_factor=0.5,attention_factor=3", 5)
    np.testing.assert_allclose(e.delta, rope_delta(theta_loop(4, 1e4), 5, 3.0), atol=1e-12)


def test_ntk_and_dynamic_values() -> None:
    e = build("rope-ntk:head_dim=6,factor=3", 5)
    np.testing.assert_allclose(e.delta, rope_delta(theta_loop(6, 1e4 * 3**1.5), 5), atol=1e-12)
    e = build("rope-dynamic:head_dim=6,factor=3,max_position_embeddings=4", 5)  # seq_len = n = 5
    b = 1e4 * (3 * 5 / 4 - 2) ** 1.5
    np.testing.assert_allclose(e.delta, rope_delta(theta_loop(6, b), 5), atol=1e-12)
    assert dynamic_ntk_base(1e4, 6, 3.0, 4, 2) == 1e4  # l = max(seq_len, L) = L


def yarn_loop(d: int, b: float, s: float, big_l: int, fast: float, slow: float, trunc: bool):
    def kk(rho: float) -> float:
        return d * math.log(big_l / (2 * math.pi * rho)) / (2 * math.log(b))

    lo, hi = kk(fast), kk(slow)
    if trunc:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if hi == lo:
        hi += 0.001
    out = []
    for k in range(d // 2):
        r = min(max((k - lo) / (hi - lo), 0.0), 1.0)
        t = b ** (-2 * k / d)
        out.append((1 - r) * t + r * t / s)
    return (lo, hi), out


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_ramp_with_a_positive_lower_end(truncate: bool) -> None:
    # d = 32, b = 100, L = 4096: k(32) = 10.5, k(1) = 22.5, so pairs below k_lo are kept.
    (lo, hi), theta = yarn_loop(32, 100.0, 4.0, 4096, 32.0, 1.0, truncate)
    assert 10 <= lo < 11 and 22 < hi <= 23
    got = yarn_correction_range(32, 100.0, 4096, 32.0, 1.0, truncate)
    assert got == pytest.approx((lo, hi), rel=1e-15)
    np.testing.assert_allclose(
        yarn_frequencies(32, 100.0, 4.0, 4096, 32.0, 1.0, truncate), theta, rtol=1e-14
    )
    ratio = np.asarray(theta_loop(32, 100.0)) / np.asarray(theta)
    assert ratio[10] == 1.0 and 1.0 < ratio[12] < ratio[-1] < 4.0
    spec = (
        f"rope-yarn:head_dim=32,base=100,original_max_position_embeddings=4096,truncate={truncate}"
    )
    e = build(spec + ",mscale=2,mscale_all_dim=0.5", 6)
    m = (0.2 * math.log(4) + 1) / (0.05 * math.log(4) + 1)
    np.testing.assert_allclose(e.delta, rope_delta(theta, 6, m), atol=1e-12)
    e = build(spec + ",attention_factor=0.25", 6)
    np.testing.assert_allclose(e.delta, rope_delta(theta, 6, 0.25), atol=1e-12)


def test_yarn_range_clamps_at_d_minus_1_and_zero_width_ramp() -> None:
    # d = 8, b = 10, L = 1200: k(32) = 3.1, k(1) = 9.1 -> (3, 10), clamped to (3, 7).
    assert yarn_correction_range(8, 10.0, 1200, 32.0, 1.0) == (3.0, 7.0)
    (lo, hi), theta = yarn_loop(8, 10.0, 2.0, 1200, 32.0, 1.0, True)
    np.testing.assert_allclose(yarn_frequencies(8, 10.0, 2.0, 1200), theta, rtol=1e-15)
    # L = 12000: k(32) = 7.1 -> k_lo = 7 = the clamped k_hi; HF widens the ramp by 0.001, so
    # every pair (k <= 3 < 7) is kept.
    (lo, hi), theta = yarn_loop(8, 10.0, 2.0, 12000, 32.0, 1.0, True)
    assert (lo, hi) == (7, 7.001)
    np.testing.assert_allclose(yarn_frequencies(8, 10.0, 2.0, 12000), theta_loop(8, 10.0))
    assert yarn_mscale(1.0, 5.0) == 1.0 and yarn_mscale(0.5) == 1.0
    assert yarn_mscale(math.e, 2.0) == pytest.approx(1.2, rel=1e-15)


def test_llama3_with_low_freq_factor_above_one() -> None:
    # lf = 2, hf = 6, L = 600, b = 100, d = 16: wavelengths 6.3 .. 4200 cover all three bands.
    got = llama3_frequencies(16, 100.0, 4.0, 2.0, 6.0, 600)
    expected = llama3_theta_brute(16, 100.0, 4.0, 2.0, 6.0, 600)
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    ratio = np.asarray(theta_loop(16, 100.0)) / got
    assert ratio[0] == 1.0 and ratio[-1] == pytest.approx(4.0)
    assert ((ratio > 1.0) & (ratio < 4.0)).sum() >= 1
    e = build(
        "rope-llama3:head_dim=16,base=100,factor=4,low_freq_factor=2,high_freq_factor=6,"
        "original_max_position_embeddings=600",
        5,
    )
    np.testing.assert_allclose(e.delta, rope_delta(expected, 5), atol=1e-12)


# --- LongRoPE file reading ------------------------------------------------------------------------


def write(tmp_path: Path, doc: object, name: str = "c.json") -> str:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return str(f)


def test_longrope_file_errors(tmp_path: Path) -> None:
    lists = {"short_factor": [1.0, 2.0], "long_factor": [1.0, 2.0]}
    cases = [
        (str(tmp_path / "missing.json"), None),
        (write(tmp_path, {"long_factor": [1, 2]}, "a.json"), "needs a list 'short_factor'"),
        (write(tmp_path, [1, 2], "b.json"), "needs a list 'short_factor'"),
        (write(tmp_path, {**lists, "long_factor": ["x", 2]}, "c.json"),
         "long_factor must be numbers"),
        (write(tmp_path, {**lists, "short_factor": [0, 2]}, "d.json"),
         "short_factor must be finite and > 0"),
        (write(tmp_path, {**lists, "factor": True}, "e.json"),
         "factor must be a finite number > 0; got True"),
        (write(tmp_path, {**lists, "original_max_position_embeddings": True}, "f.json"),
         "original_max_position_embeddings must be an int >= 1; got True"),
    ]  # fmt: skip
    for path, message in cases:
        with pytest.raises(PosdiagError) as exc:
            longrope_config(path, 2)
        if message is None:
            assert str(exc.value) == f"rope-longrope: factors {path!r}: no such file"
        else:
            assert str(exc.value) == f"rope-longrope: factors {path}: {message}"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PosdiagError) as exc:
        longrope_config(str(bad), 2)
    assert str(exc.value).startswith(f"rope-longrope: factors {bad}: not a JSON file (")


def test_longrope_config_reads_lengths_from_both_places(tmp_path: Path) -> None:
    lists = {"short_factor": [1.0, 2.0], "long_factor": [3.0, 4.0]}
    cfg = longrope_config(write(tmp_path, {**lists, "max_position_embeddings": 64.0}), 2)
    assert cfg.max_position_embeddings == 64 and isinstance(cfg.max_position_embeddings, int)
    assert (cfg.original_max_position_embeddings, cfg.factor) == (None, None)
    assert (cfg.length(), cfg.scale()) == (64, None)
    doc = {"max_position_embeddings": 64, "factor": 9.0, "rope_scaling": {**lists, "factor": 2}}
    cfg = longrope_config(write(tmp_path, doc, "x.json"), 2)
    assert cfg.factor == 2.0 and isinstance(cfg.factor, float)  # rope_scaling before the top
    assert cfg.scale() == 2.0
    doc = {"original_max_position_embeddings": 16, "rope_scaling": {**lists}}
    cfg = longrope_config(write(tmp_path, doc, "y.json"), 2)
    assert (cfg.length(), cfg.scale()) == (16, None)  # no max: no ratio
    cfg = longrope_config(write(tmp_path, lists, "z.json"), 2)
    short, long = cfg.short_factor, cfg.long_factor
    np.testing.assert_array_equal(short, [1.0, 2.0])
    np.testing.assert_array_equal(long, [3.0, 4.0])
    assert LongRopeConfig(short, long).scale() is None


def test_longrope_attention_factor_given_and_at_factor_one(tmp_path: Path) -> None:
    path = write(tmp_path, {"short_factor": [1.0, 2.0], "long_factor": [3.0, 4.0]})
    e = build(f"rope-longrope:head_dim=4,factors={path},attention_factor=0.5,seq_len=1", 4)
    np.testing.assert_allclose(e.delta, rope_delta([1.0, 0.01 / 2.0], 4, 0.5), atol=1e-12)
    assert e.params["factors"] == path and e.params["lists"] == "short"
    e = build(f"rope-longrope:head_dim=4,factors={path},original_max_position_embeddings=3", 4)
    np.testing.assert_allclose(e.delta, rope_delta([1 / 3.0, 0.01 / 4.0], 4), atol=1e-12)
    assert e.params["attention_factor"] == 1.0 and e.params["lists"] == "long"


# --- xPos ----------------------------------------------------------------------------------------


def test_xpos_vectors_by_hand() -> None:
    # head_dim 2, base b: one pair, theta = 1, z = 0.4 / 1.4 = 2/7; n = 3 -> c = 2, B = 1.
    e = build("xpos:head_dim=2,scale_base=1", 3)
    z = 2 / 7
    rows = []
    for i in range(3):
        a, b = math.sqrt(2) * z ** (i - 2), math.sqrt(2) * z ** (2 - i)
        rows.append([a * math.cos(i), a * math.sin(i), b * math.cos(i), b * math.sin(i)])
    assert e.vectors is not None
    np.testing.assert_allclose(e.vectors, rows, rtol=1e-14)
    expected = [[np.linalg.norm(np.subtract(r, s)) for s in rows] for r in rows]
    np.testing.assert_allclose(e.delta, expected, atol=1e-12)


@pytest.mark.parametrize(
    "bidirectional,buckets,max_distance", [(False, 3, 2), (False, 3, 5), (True, 4, 2), (True, 6, 7)]
)
def test_t5_bucket_smallest_configs_match_hf(
    bidirectional: bool, buckets: int, max_distance: int
) -> None:
    # max_exact = 1 here: r = 1 is the first log bucket, log(1 / 1) = 0.
    rel = np.arange(-12, 13)
    expected = [hf_t5_bucket(int(r), bidirectional, buckets, max_distance) for r in rel]
    np.testing.assert_array_equal(t5_bucket(rel, buckets, max_distance, bidirectional), expected)
    e = make_encoding(
        "t5", 13, {"buckets": buckets, "max_distance": max_distance, "bidirectional": bidirectional}
    )
    np.testing.assert_array_equal(e.delta[0], expected[12::-1])


def test_t5_bucket_returns_ints_for_float_input() -> None:
    got = t5_bucket(np.array([-3.0, 5.0, 40.0]), 32, 128, True)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [3, 16 + 5, 16 + hf_t5_bucket(-40, False, 16, 128)])


def test_public_rope_helpers_at_their_defaults() -> None:
    # ENCODINGS worked examples: YaRN's defaults beta_fast = 32, beta_slow = 1.
    assert yarn_correction_range(128, 1e4, 4096) == (20.0, 46.0)
    np.testing.assert_array_equal(
        llama3_frequencies(128, 5e5), llama3_frequencies(128, 5e5, 8.0, 1.0, 4.0, 8192)
    )
    np.testing.assert_allclose(
        llama3_frequencies(128, 5e5), llama3_theta_brute(128, 5e5, 8.0, 1.0, 4.0, 8192), rtol=1e-14
    )
    assert yarn_attention_factor(40.0) == pytest.approx(0.1 * math.log(40) + 1, rel=1e-15)
    assert yarn_attention_factor(40.0, 0.707) == pytest.approx(0.1 * math.log(40) + 1, rel=1e-15)
    assert yarn_attention_factor(40.0, mscale_all_dim=0.5) == yarn_attention_factor(40.0)
    assert yarn_mscale(1.0, 3.0) == 1.0 and yarn_mscale(2.0) == pytest.approx(1 + 0.1 * math.log(2))


def test_llama3_wavelength_exactly_at_the_low_frequency_edge() -> None:
    # Pair 0 has wavelength 2 pi; with L = 1000 and lf = 1000 / (2 pi), L / lf == 2 pi exactly.
    # HF counts it as medium (not "> L/lf"), where g = 0 gives theta / s.
    lf = 1000 / (2 * math.pi)
    assert 1000 / lf == 2 * math.pi
    got = llama3_frequencies(8, 1e4, 4.0, lf, 4 * lf, 1000)
    expected = llama3_theta_brute(8, 1e4, 4.0, lf, 4 * lf, 1000)
    assert expected[0] == 0.25
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_longrope_attention_factor_below_and_just_above_one(tmp_path: Path) -> None:
    lists = {"short_factor": [1.0, 1.0], "long_factor": [1.0, 1.0]}
    # A file whose max length is below the original one: s = 0.25 <= 1, so m = 1 (HF).
    doc = {"max_position_embeddings": 1024, "original_max_position_embeddings": 4096, **lists}
    path = write(tmp_path, doc)
    e = build(f"rope-longrope:head_dim=4,factors={path}", 4)
    assert (e.params["factor"], e.params["attention_factor"]) == (0.25, 1.0)
    e = build(f"rope-longrope:head_dim=4,factors={path},factor=1.5", 4)
    assert e.params["attention_factor"] == pytest.approx(
        math.sqrt(1 + math.log(1.5) / math.log(4096)), rel=1e-15
    )


def test_longrope_file_lengths_and_factor_at_their_bounds(tmp_path: Path) -> None:
    lists = {"short_factor": [1.0, 1.0], "long_factor": [1.0, 1.0]}
    cfg = longrope_config(
        write(tmp_path, {**lists, "max_position_embeddings": 1, "factor": 0.5}), 2
    )
    assert (cfg.max_position_embeddings, cfg.factor) == (1, 0.5)
    for doc, message in (
        ({**lists, "factor": 0}, "factor must be a finite number > 0; got 0"),
        ({**lists, "original_max_position_embeddings": 0},
         "original_max_position_embeddings must be an int >= 1; got 0"),
    ):  # fmt: skip
        path = write(tmp_path, doc, "bad.json")
        with pytest.raises(PosdiagError) as exc:
            longrope_config(path, 2)
        assert str(exc.value) == f"rope-longrope: factors {path}: {message}"


def test_yarn_default_betas_matter_where_k_lo_is_just_above_an_integer() -> None:
    # d = 128, b = 1e4, L = 3627: k(32) = 20.1 but k(33) = 19.9, so beta_fast = 32 is visible.
    def kk(rho: float) -> float:
        return 128 * math.log(3627 / (2 * math.pi * rho)) / (2 * math.log(1e4))

    assert math.floor(kk(32)) != math.floor(kk(33)) and math.ceil(kk(1)) != math.ceil(kk(2))
    assert yarn_correction_range(128, 1e4, 3627) == (math.floor(kk(32)), math.ceil(kk(1)))
    _, theta = yarn_loop(128, 1e4, 4.0, 3627, 32.0, 1.0, True)
    np.testing.assert_allclose(yarn_frequencies(128, 1e4, 4.0, 3627), theta, rtol=1e-14)


def test_yarn_zero_width_ramp_at_the_first_pair() -> None:
    # L = 6 < 2 pi: k(1) is just below 0, so k_lo = k_hi = 0 and HF widens the ramp to 0.001:
    # pair 0 is kept, every other pair divided by s.
    (lo, hi), theta = yarn_loop(8, 1e4, 2.0, 6, 32.0, 1.0, True)
    assert (lo, hi) == (0, 0.001)
    got = yarn_frequencies(8, 1e4, 2.0, 6)
    np.testing.assert_allclose(got, theta, rtol=1e-15)
    np.testing.assert_allclose(got / np.asarray(theta_loop(8, 1e4)), [1.0, 0.5, 0.5, 0.5])
