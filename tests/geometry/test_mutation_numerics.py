"""fastgram.py and spectral.py paths pinned against independent values (issue 15).

Every expected number is computed here by dense numpy / scipy, never by calling the function
under test on other data.
"""

from __future__ import annotations

import numpy as np
import pytest

from posdiag.errors import PosdiagError
from posdiag.geometry._gram import sqrt_rows


def test_sqrt_rows_equals_the_dense_square_root_of_the_frequencies() -> None:
    counts = np.array([[3, 0, 1, 0], [0, 0, 0, 7], [2, 2, 2, 2]])
    want = np.sqrt(counts / counts.sum(axis=1, keepdims=True))
    got = sqrt_rows(counts)
    assert got.format == "csr" and got.dtype == np.float64
    np.testing.assert_allclose(got.toarray(), want, rtol=0, atol=1e-16)


def test_sqrt_rows_names_the_first_empty_row() -> None:
    counts = np.array([[1, 0], [0, 0], [0, 0]])
    with pytest.raises(PosdiagError, match=r"row 1 has 0$"):
        sqrt_rows(counts)
