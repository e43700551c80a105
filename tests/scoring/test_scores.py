"""Structured encoding scores (posdiag.scoring.scores) against geometry.compare on dense
matrices."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.spatial.distance import pdist

from posdiag.encodings import make_encoding
from posdiag.geometry.core import (
    StressMeasures,
    classical_mds,
    compare,
    gram_from_distances,
    hellinger_distances,
)
from posdiag.scoring.scores import (
    corpus_side,
    diagonal_sums,
    score_profile,
    score_vectors,
    upper_distances,
)
from tests._data import drift_distributions, toeplitz


def corpus(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hellinger distances and their Gram matrix of sampled drifting distributions."""
    mu = drift_distributions(n, 40, rank=3, seed=seed)
    rng = np.random.default_rng(seed)
    counts = np.array([rng.multinomial(300, p) for p in mu], dtype=float)
    d = hellinger_distances(counts)
    return d, gram_from_distances(d)


def assert_same(got: StressMeasures, want: StressMeasures, rho_tol: float = 1e-10) -> None:
    for field in ("stress", "raw", "kruskal", "spearman"):
        a, b = getattr(got, field), getattr(want, field)
        if math.isnan(b):
            assert math.isnan(a), field
        else:
            assert a == pytest.approx(b, abs=rho_tol if field == "spearman" else 1e-10), field


@pytest.fixture(scope="module")
def geo() -> tuple[np.ndarray, np.ndarray]:
    return corpus(70, seed=3)


def test_diagonal_sums_match_trace(geo: tuple[np.ndarray, np.ndarray]) -> None:
    _, b = geo
    want = [np.trace(b, offset=lag) for lag in range(b.shape[0])]
    np.testing.assert_allclose(diagonal_sums(b), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "spec",
    ["sinusoidal", "rope", "alibi", "alibi-kernel", "t5", "shaw", "kerple-log", "nope"],
)
def test_toeplitz_encodings_match_compare(geo: tuple[np.ndarray, np.ndarray], spec: str) -> None:
    d, b = geo
    enc = make_encoding(spec, d.shape[0])
    delta = enc.delta
    # The encoding is Toeplitz: its first row is the whole profile.
    np.testing.assert_array_equal(delta, toeplitz(lambda lag: delta[0][lag.astype(int)], 70))
    side = corpus_side(d, b)
    assert_same(score_profile(side, delta[0]), compare(d, b, delta, enc.gram()))


def test_ties_in_profile_and_distances(geo: tuple[np.ndarray, np.ndarray]) -> None:
    d, b = geo
    d = np.round(d, 2)  # many ties among d_H, as spearmanr's average ranks must handle
    g = np.minimum(np.arange(70), 5).astype(float)  # shaw-like clipped profile: ties by lag
    delta = toeplitz(lambda lag: g[lag.astype(int)], 70)
    side = corpus_side(d, b)
    assert_same(score_profile(side, g), compare(d, b, delta, gram_from_distances(delta)))


@pytest.mark.parametrize("spec", ["learned-random", "mds-2"])
def test_vector_encodings_match_compare(geo: tuple[np.ndarray, np.ndarray], spec: str) -> None:
    d, b = geo
    name, params = _parse(spec)
    enc = make_encoding(name, d.shape[0], params, mds=classical_mds(d))
    assert enc.vectors is not None
    side = corpus_side(d, b)
    # Distances from the Gram expansion differ from pdist by ~1e-9, which can swap the ranks of
    # two nearly equal distances: rho agrees to 1e-7, the other measures to rounding.
    got = score_vectors(side, b, enc.vectors)
    assert_same(got, compare(d, b, enc.delta, enc.gram()), rho_tol=1e-7)


def _parse(spec: str) -> tuple[str, dict[str, int]]:
    return ("mds", {"rank": 2}) if spec == "mds-2" else (spec, {})


def test_upper_distances_blockwise_match_pdist() -> None:
    p = np.random.default_rng(0).standard_normal((53, 7))
    for block in (1, 5, 53, 100):
        np.testing.assert_allclose(upper_distances(p, block_rows=block), pdist(p), rtol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(3, 30),
    st.lists(st.integers(0, 4), min_size=30, max_size=30),
    st.integers(0, 10_000),
)
def test_property_any_profile(n: int, levels: list[int], seed: int) -> None:
    d, b = corpus(n, seed)
    g = np.concatenate(([0.0], np.array(levels[: n - 1], dtype=float)))
    delta = toeplitz(lambda lag: g[lag.astype(int)], n)
    side = corpus_side(d, b)
    assert_same(score_profile(side, g), compare(d, b, delta, gram_from_distances(delta)))


def test_symmetrize_in_place_any_block() -> None:
    from tests.geometry._oracles import symmetrize

    m = np.random.default_rng(0).standard_normal((37, 37))
    want = (m + m.T) / 2
    for block in (1, 5, 37, 100):
        got = symmetrize(m.copy(), block=block)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("dense_max", "table_max"), [(0, 0), (0, 10_000), (10_000, 10_000)])
@pytest.mark.parametrize("spec", ["learned-random", "alibi", "t5", "nope"])
def test_gram_scorer_matches_compare(
    geo: tuple[np.ndarray, np.ndarray],
    spec: str,
    dense_max: int,
    table_max: int,
) -> None:
    """Every route of a table (the dense gram from its distances, (JP)(JP)^T kept dense, B JP
    per replicate) and of a lag profile gives compare's stress."""
    from posdiag.scoring.scores import GramScorer

    d, b = geo
    enc = make_encoding(spec, d.shape[0])
    scorer = GramScorer(enc, dense_max, table_max)
    table = spec == "learned-random"
    assert (scorer.jp is not None) == (table and dense_max == 0 and table_max == 0)
    assert (scorer.dense is not None) == (table and not (dense_max == 0 and table_max == 0))
    got = scorer.stress(b, float(np.linalg.norm(b)), diagonal_sums(b))
    assert got == pytest.approx(compare(d, b, enc.delta, enc.gram()).stress, abs=1e-12)


def test_all_zero_corpus_distances_give_nan_kruskal_like_compare() -> None:
    n = 6
    d = np.zeros((n, n))
    b = np.random.default_rng(0).standard_normal((n, n))
    b = b + b.T
    b = b - b.mean(0) - b.mean(1)[:, None] + b.mean()
    enc = make_encoding("alibi", n)
    got = score_profile(corpus_side(d, b), enc.profile)
    want = compare(d, b, enc.delta, enc.gram())
    assert math.isnan(got.kruskal) and math.isnan(want.kruskal)
    assert got.stress == pytest.approx(want.stress, abs=1e-12)


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_the_default_stress_run_never_imports_scipy_stats_or_numba(extra: list[str]) -> None:
    # scipy.stats costs ~0.3 s of import (only compare()/violation_rate() need it, lazily), and
    # numba's import and cache load ~0.5 s (its kernels serve long inputs only): `make run`.
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from posdiag.cli.app import app\n"
        f"args = ['stress', 'fixtures/corpus_en.txt', '--quiet', *{extra!r}]\n"
        "r = CliRunner().invoke(app, args)\n"
        "assert r.exit_code == 0, r.output\n"
        "print('scipy.stats' in sys.modules, 'numba' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False False"


def test_lazy_stats_is_scipy_stats() -> None:
    from posdiag.geometry.core import stats as lazy

    assert lazy.spearmanr is stats.spearmanr


def test_corpus_side_refuses_more_positions_than_its_exact_sums_hold() -> None:
    from posdiag.errors import PosdiagError
    from posdiag.scoring import scores as fastscore

    # n(n-1)/2 < 2^30 pairs: the limbs' factor and the uint32 ranks; the real bound is 46,341.
    assert 46_341 * 46_340 // 2 < 2**30 <= 46_342 * 46_341 // 2
    assert fastscore.EXACT_MAX_POSITIONS == 46_341
    d = np.broadcast_to(0.0, (46_342, 46_342))  # no memory: the size is refused first
    with pytest.raises(
        PosdiagError,
        match=r"^'n_eff' must be an int in \[2, 46341\] for exact Spearman ranks \(the rank "
        r"sums' integer range\); got 46342$",
    ):
        fastscore.corpus_side(d, d)
