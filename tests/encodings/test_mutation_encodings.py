"""Registered rope and bias factories, pinned down (issue 15): every parameter check at its
boundary with its exact message, every reported parameter, and the values off the paths the
older tests never took (YaRN ramp with k_lo > 0, Llama-3 with low_freq_factor != 1, T5's
look-ahead buckets). Expected values come from loops written here from the published formulas.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from posdiag.encodings import make_encoding, parse_encoding
from posdiag.encodings.bias import alibi_slopes, t5_bucket
from posdiag.encodings.rope import (
    LongRopeConfig,
    dynamic_ntk_base,
    llama3_frequencies,
    longrope_config,
    longrope_factors,
    rope_frequencies,
    rotated_dim,
    yarn_attention_factor,
    yarn_correction_range,
    yarn_frequencies,
    yarn_mscale,
)
from posdiag.errors import PosdiagError


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


def llama3_loop(d: int, b: float, s: float, lf: float, hf: float, big_l: int) -> list[float]:
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


def test_llama3_with_low_freq_factor_above_one() -> None:
    # lf = 2, hf = 6, L = 600, b = 100, d = 16: wavelengths 6.3 .. 4200 cover all three bands.
    got = llama3_frequencies(16, 100.0, 4.0, 2.0, 6.0, 600)
    expected = llama3_loop(16, 100.0, 4.0, 2.0, 6.0, 600)
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
    short, long = longrope_factors(write(tmp_path, lists, "z.json"), 2)
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
        llama3_frequencies(128, 5e5), llama3_loop(128, 5e5, 8.0, 1.0, 4.0, 8192), rtol=1e-14
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
    expected = llama3_loop(8, 1e4, 4.0, lf, 4 * lf, 1000)
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
