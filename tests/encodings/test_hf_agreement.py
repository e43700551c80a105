"""Agreement with Hugging Face transformers and torchscale where they define an encoding.

Each reference below is an independent float64 re-statement of the published formula (HF
``modeling_rope_utils``, torchscale ``XPOS``), built operator by operator; the numbers quoted in
the docstrings are the ones Hugging Face prints for the same configs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from posdiag.encodings import REGISTRY, make_encoding
from posdiag.encodings.rope import yarn_attention_factor
from posdiag.errors import PosdiagError


def hf_get_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def hf_yarn_attention(factor: float, mscale: float | None, mscale_all_dim: float | None) -> float:
    """HF ``_compute_yarn_parameters``: mscale counts only together with mscale_all_dim."""
    if mscale and mscale_all_dim:
        return hf_get_mscale(factor, mscale) / hf_get_mscale(factor, mscale_all_dim)
    return hf_get_mscale(factor)


def hf_inv_freq(dim: int, base: float) -> np.ndarray:
    """HF default inverse frequencies: ``1 / base^(arange(0, dim, 2) / dim)``."""
    return np.array([1.0 / base ** (j / dim) for j in range(0, dim, 2)])


def hf_rotation(angles: np.ndarray, head_dim: int, m: float = 1.0) -> np.ndarray:
    """``x -> x cos + rotate_half(x) sin`` on the first 2 len(angles) dims, as a matrix."""
    half = len(angles)
    r = np.eye(head_dim)
    for k, a in enumerate(angles):
        r[k, k] = r[k + half, k + half] = m * math.cos(a)
        r[k, k + half] = -m * math.sin(a)
        r[k + half, k] = m * math.sin(a)
    return r


def operator_distances(ops: list[np.ndarray]) -> np.ndarray:
    n = len(ops)
    return np.array([[np.linalg.norm(ops[i] - ops[j]) for j in range(n)] for i in range(n)])


def hf_rope_delta(inv_freq: np.ndarray, head_dim: int, n: int, m: float = 1.0) -> np.ndarray:
    return operator_distances([hf_rotation(i * inv_freq, head_dim, m) for i in range(n)])


# --- 15. YaRN attention factor ------------------------------------------------------------------

YARN = {"head_dim": 64, "base": 1e4, "original_max_position_embeddings": 4096, "factor": 40.0}


def test_yarn_mscale_alone_is_ignored_as_in_hugging_face() -> None:
    # HF prints 1.36889 for this config: mscale without mscale_all_dim does not count.
    e = make_encoding("rope-yarn", 4, {**YARN, "mscale": 0.707})
    assert e.params["attention_factor"] == pytest.approx(1.36889, abs=5e-6)
    assert e.params["attention_factor"] == pytest.approx(hf_yarn_attention(40, 0.707, None))


def test_yarn_deepseek_mscale_equal_to_mscale_all_dim_gives_one() -> None:
    e = make_encoding("rope-yarn", 4, {**YARN, "mscale": 0.707, "mscale_all_dim": 0.707})
    assert e.params["attention_factor"] == 1.0


@pytest.mark.parametrize(
    "mscale,all_dim", [(1.0, 0.707), (0.707, 1.0), (0.0, 0.707), (2.0, 0.0), (1.0, 1.0)]
)
def test_yarn_attention_factor_matches_the_hf_formula(mscale: float, all_dim: float) -> None:
    expected = hf_yarn_attention(40.0, mscale or None, all_dim or None)
    assert yarn_attention_factor(40.0, mscale, all_dim) == pytest.approx(expected, rel=1e-15)
    e = make_encoding("rope-yarn", 4, {**YARN, "mscale": mscale, "mscale_all_dim": all_dim})
    assert e.params["attention_factor"] == pytest.approx(expected, rel=1e-15)


def test_yarn_attention_factor_scales_the_operators() -> None:
    # d = 16, L = 64, s = 4: k_lo = 0, k_hi = 3, so the ramp mixes pairs 1 and 2.
    n, d = 12, 16
    params = {"head_dim": d, "original_max_position_embeddings": 64, "factor": 4.0}
    e = make_encoding("rope-yarn", n, {**params, "mscale": 1.0, "mscale_all_dim": 0.5})
    m = hf_get_mscale(4.0, 1.0) / hf_get_mscale(4.0, 0.5)
    inv = hf_inv_freq(d, 1e4)
    ramp = np.clip((np.arange(d // 2) - 0.0) / (3.0 - 0.0), 0.0, 1.0)
    theta = inv * (1 - ramp) + inv / 4.0 * ramp
    np.testing.assert_allclose(e.delta, hf_rope_delta(theta, d, n, m), atol=1e-12)


def test_yarn_negative_mscale_all_dim_is_an_error() -> None:
    with pytest.raises(PosdiagError) as exc:
        make_encoding("rope-yarn", 4, {"mscale_all_dim": -1.0})
    assert str(exc.value) == "'mscale_all_dim' must be a float in [0, inf]; got -1.0"


# --- 16. xPos centre ----------------------------------------------------------------------------


def torchscale_xpos_delta(n: int, d: int, big_b: int, base: float = 1e4) -> np.ndarray:
    """Operators of torchscale's XPOS: exponents arange(min_pos, min_pos + n) / B."""
    min_pos = -n // 2  # torchscale writes -(length + offset) // 2, i.e. floor(-n/2)
    z = np.array([(j + 0.4 * d) / (1.4 * d) for j in range(0, d, 2)])
    inv = hf_inv_freq(d, base)
    q, k = [], []
    for i in range(n):
        rot = hf_rotation(i * inv, d)
        e = (min_pos + i) / big_b
        q.append(np.diag(np.concatenate([z, z]) ** e) @ rot)
        k.append(np.diag(np.concatenate([z, z]) ** -e) @ rot)
    return np.sqrt(operator_distances(q) ** 2 + operator_distances(k) ** 2)


@pytest.mark.parametrize("n", [7, 8])
def test_xpos_matches_torchscale_for_odd_and_even_n(n: int) -> None:
    e = make_encoding("xpos", n, {"head_dim": 8, "scale_base": 4})
    np.testing.assert_allclose(e.delta, torchscale_xpos_delta(n, 8, 4), atol=1e-12)
    assert e.params["center"] == -(-n // 2)


def test_xpos_odd_n_201_centre_is_101() -> None:
    # The case: n = 201, B = 16. The centre n//2 = 100 moved the Gram matrix by 0.15.
    e = make_encoding("xpos", 201, {"head_dim": 16, "scale_base": 16})
    assert e.params["center"] == 101
    np.testing.assert_allclose(e.delta, torchscale_xpos_delta(201, 16, 16), atol=1e-10)


# --- 17. LongRoPE lengths from config.json ------------------------------------------------------


def phi3_config(tmp_path: Path, pairs: int = 48, **extra: object) -> Path:
    """A Phi-3-mini-128k-shaped config.json (lengths at the top level, lists in rope_scaling)."""
    short = [1.0 + 0.01 * k for k in range(pairs)]
    long = [1.0 + 0.5 * k for k in range(pairs)]
    cfg = {
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long},
        **extra,
    }
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    return f


def test_longrope_phi3_mini_128k_attention_factor(tmp_path: Path) -> None:
    # HF: factor = 131072 / 4096 = 32, m = sqrt(1 + ln 32 / ln 4096) = 1.1902.
    f = phi3_config(tmp_path)
    e = make_encoding("rope-longrope", 10, {"head_dim": 96, "factors": str(f)})
    assert e.params["factor"] == 32.0
    assert e.params["original_max_position_embeddings"] == 4096
    assert e.params["attention_factor"] == pytest.approx(1.1902, abs=5e-5)
    assert e.params["attention_factor"] == pytest.approx(math.sqrt(1 + 5 / 12), rel=1e-15)


def test_longrope_lists_switch_at_the_original_length_read_from_the_file(tmp_path: Path) -> None:
    f = phi3_config(tmp_path, pairs=4)
    doc = json.loads(f.read_text())
    m = math.sqrt(1 + math.log(32) / math.log(4096))
    for seq_len, key in ((4096, "short_factor"), (4097, "long_factor")):
        e = make_encoding(
            "rope-longrope", 9, {"head_dim": 8, "factors": str(f), "seq_len": seq_len}
        )
        theta = hf_inv_freq(8, 1e4) / np.asarray(doc["rope_scaling"][key])
        np.testing.assert_allclose(e.delta, hf_rope_delta(theta, 8, 9, m), atol=1e-12)


def test_longrope_explicit_parameters_win_over_the_file(tmp_path: Path) -> None:
    f = phi3_config(tmp_path, pairs=4)
    e = make_encoding(
        "rope-longrope",
        5,
        {"head_dim": 8, "factors": str(f), "factor": 8.0, "original_max_position_embeddings": 2048},
    )
    assert e.params["attention_factor"] == pytest.approx(math.sqrt(1 + 3 / 11), rel=1e-15)


def test_longrope_without_original_length_uses_max_and_the_rope_scaling_factor(
    tmp_path: Path,
) -> None:
    # HF: no original_max_position_embeddings -> L = max_position_embeddings, s = factor.
    f = tmp_path / "c.json"
    lists = {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4, "factor": 4.0}
    f.write_text(json.dumps({"max_position_embeddings": 1024, "rope_scaling": lists}))
    e = make_encoding("rope-longrope", 5, {"head_dim": 8, "factors": str(f)})
    assert e.params["original_max_position_embeddings"] == 1024
    assert e.params["factor"] == 4.0
    assert e.params["attention_factor"] == pytest.approx(math.sqrt(1 + 2 / 10), rel=1e-15)


def test_longrope_original_length_under_rope_scaling(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    rs = {
        "short_factor": [1.0] * 4,
        "long_factor": [2.0] * 4,
        "original_max_position_embeddings": 256,
    }
    f.write_text(json.dumps({"max_position_embeddings": 1024, "rope_scaling": rs}))
    e = make_encoding("rope-longrope", 5, {"head_dim": 8, "factors": str(f)})
    assert (e.params["factor"], e.params["original_max_position_embeddings"]) == (4.0, 256)


def test_longrope_without_a_file_keeps_the_old_defaults() -> None:
    e = make_encoding("rope-longrope", 5, {"head_dim": 8})
    assert (e.params["factor"], e.params["original_max_position_embeddings"]) == (1.0, 4096)
    assert e.params["attention_factor"] == 1.0


@pytest.mark.parametrize(
    "value,message",
    [
        (0, "max_position_embeddings must be an int >= 1; got 0"),
        (2.5, "max_position_embeddings must be an int >= 1; got 2.5"),
        ("x", "max_position_embeddings must be an int >= 1; got 'x'"),
    ],
)
def test_longrope_bad_lengths_in_the_file_are_errors(
    tmp_path: Path, value: object, message: str
) -> None:
    f = tmp_path / "c.json"
    rs = {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
    f.write_text(json.dumps({"max_position_embeddings": value, "rope_scaling": rs}))
    with pytest.raises(PosdiagError) as exc:
        make_encoding("rope-longrope", 5, {"head_dim": 8, "factors": str(f)})
    assert str(exc.value) == f"rope-longrope: factors {f}: {message}"


def test_longrope_bad_factor_in_the_file_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    rs = {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4, "factor": -2}
    f.write_text(json.dumps({"rope_scaling": rs}))
    with pytest.raises(PosdiagError) as exc:
        make_encoding("rope-longrope", 5, {"head_dim": 8, "factors": str(f)})
    assert str(exc.value) == (
        f"rope-longrope: factors {f}: factor must be a finite number > 0; got -2"
    )


# --- 18. Shaw parameter count -------------------------------------------------------------------


def test_shaw_counts_key_and_value_vectors() -> None:
    e = make_encoding("shaw", 5, {"k": 16, "d_head": 64})
    assert e.n_params == 2 * 33 * 64 == 4224
    assert REGISTRY["shaw"].n_params_formula == "2*(2k+1)*d_head"


# --- 19. odd rotated dimensions -----------------------------------------------------------------


def test_odd_rotated_dimension_rotates_ceil_d_over_2_pairs_as_hf() -> None:
    # head_dim 64 x 0.4 = 25: HF rotates 13 pairs (26 dims) with theta_k = 1e4^(-2k/25).
    n = 10
    e = make_encoding("rope", n, {"head_dim": 64, "partial_rotary_factor": 0.4})
    inv = hf_inv_freq(25, 1e4)
    assert len(inv) == 13
    np.testing.assert_allclose(e.delta, hf_rope_delta(inv, 64, n), atol=1e-12)


def test_odd_rotated_dimension_in_the_scaled_variants() -> None:
    n, hd, prf, s = 8, 64, 0.4, 4.0
    lin = make_encoding("rope-linear", n, {"head_dim": hd, "partial_rotary_factor": prf})
    np.testing.assert_allclose(lin.delta, hf_rope_delta(hf_inv_freq(25, 1e4) / s, hd, n), 1e-12)
    ntk = make_encoding("rope-ntk", n, {"head_dim": hd, "partial_rotary_factor": prf})
    inv = hf_inv_freq(25, 1e4 * s ** (25 / 23))
    np.testing.assert_allclose(ntk.delta, hf_rope_delta(inv, hd, n), atol=1e-12)
    dyn = make_encoding(
        "rope-dynamic",
        n,
        {"head_dim": hd, "partial_rotary_factor": prf, "max_position_embeddings": 4, "seq_len": 6},
    )
    inv = hf_inv_freq(25, 1e4 * (s * 6 / 4 - (s - 1)) ** (25 / 23))
    np.testing.assert_allclose(dyn.delta, hf_rope_delta(inv, hd, n), atol=1e-12)


def test_odd_rotated_dimension_longrope_takes_ceil_d_over_2_factors(tmp_path: Path) -> None:
    f = phi3_config(tmp_path, pairs=13)
    e = make_encoding(
        "rope-longrope", 6, {"head_dim": 64, "partial_rotary_factor": 0.4, "factors": str(f)}
    )
    short = np.asarray(json.loads(f.read_text())["rope_scaling"]["short_factor"])
    m = math.sqrt(1 + math.log(32) / math.log(4096))
    np.testing.assert_allclose(
        e.delta, hf_rope_delta(hf_inv_freq(25, 1e4) / short, 64, 6, m), atol=1e-12
    )


def test_odd_rotated_dimension_yarn_is_refused_like_hf() -> None:
    # HF's YaRN multiplies ceil(d/2) frequencies by a d//2-entry ramp and fails on odd d.
    with pytest.raises(PosdiagError) as exc:
        make_encoding("rope-yarn", 4, {"head_dim": 64, "partial_rotary_factor": 0.4})
    assert str(exc.value) == (
        "rope-yarn needs an even rotated dimension (Hugging Face's ramp has d//2 entries); "
        "got head_dim=64 * 0.4 = 25"
    )


def test_rotated_dimension_one_and_three() -> None:
    # d = 1: one pair at theta = 1; d = 3 is the smallest a base rescaling accepts (d/(d-2) = 3).
    e = make_encoding("rope", 5, {"head_dim": 2, "partial_rotary_factor": 0.5})
    np.testing.assert_allclose(e.delta, hf_rope_delta(np.array([1.0]), 2, 5), atol=1e-12)
    e = make_encoding("rope-ntk", 5, {"head_dim": 4, "partial_rotary_factor": 0.75})
    np.testing.assert_allclose(
        e.delta, hf_rope_delta(hf_inv_freq(3, 1e4 * 4.0**3), 4, 5), atol=1e-12
    )
