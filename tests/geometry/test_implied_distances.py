"""The compiled implied distances equal the numpy passes bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from posdiag.geometry.crossfit import _implied_distances_numpy
from posdiag.geometry.estimator import implied_distances


@pytest.mark.parametrize("n", [128, 300, 513])
def test_compiled_equals_numpy_bit_for_bit(n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.random((n, 20))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    bc = x @ x.T
    bc += rng.normal(scale=1e-3, size=bc.shape)  # not symmetric
    bc[10, 11] = bc[10, 10] + 1e-3  # (BC_ii + BC_jj) / 2 - BC_ij < 0: clipped
    bc[12, :] = np.diag(bc) - 1e-12  # rounding-size negatives along a row
    bc[3, 7] = np.nan
    bc[5, 9] = bc[9, 5] = bc[5, 5]  # a zero distance next to clipped ones
    got = implied_distances(bc)
    want = _implied_distances_numpy(bc)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want), equal_nan=True)
    assert np.isnan(got[3, 7]) and np.isnan(got[7, 3])
    d2 = (np.diag(bc)[:, None] + np.diag(bc)[None, :]) / 2.0 - bc
    assert (d2 < 0).any()  # the clip is exercised
    np.testing.assert_array_equal(np.diag(got), 0.0)
    np.testing.assert_array_equal(got, got.T)


def test_the_bundled_sizes_stay_in_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from posdiag.geometry import _square

    def refuse(*args: object) -> None:
        raise AssertionError("compiled below COMPILED_FROM")

    monkeypatch.setattr(_square, "_square_kernels", refuse)
    bc = np.eye(40) * 0.5 + 0.5
    np.testing.assert_array_equal(implied_distances(bc), np.sqrt(0.5) * (1 - np.eye(40)))
