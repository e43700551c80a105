"""Modern context lengths (issue 35): the implicit geometry at n = 32,768-131,072.

**The corpus** (generated, never shipped): ``WINDOWS`` = 2,000 windows of ``n`` tokens, as the
packed view cuts a token stream, over ``V = 50,257`` ids. Position ``i``'s tokens are drawn
independently from ``p_i = sum_c a_ic q_c``: ``C = 8`` topic distributions ``q_c`` on disjoint
blocks of the vocabulary (a Zipf(1.1) law inside each block) mixed with weights ``a_ic`` that
drift with the position (``a_ic ∝ 1 + 0.8 cos(2 pi f_c i / n + phi_c)``, ``f_c`` from 1 to 8
cycles over the window, plus a slow monotone drift of component 0). Because the supports are
disjoint, ``sqrt(p_iv) = sqrt(a_ic) sqrt(q_cv)``, so the population ``BC = S S^T`` with
``S = sqrt(a)`` (n x C) is exactly of rank 8: the true ``B_H = 1/2 J S S^T J``, its eigenvalues
and every encoding's true stress are computable at any ``n`` in ``O(n C)`` (the known answer).
The counts are generated directly (2,000 draws per position; the same law as counting the
windows), saved as a counts ``.npz`` without shards: what ``posdiag stress FILE.npz --shards 0``
reads, i.e. the thinning's exact cross-fit.

**Measured** in fresh processes (``ru_maxrss`` is the child's): building the halves, the implicit
geometry (row means, lag sums, Lanczos, pair sample) and every default encoding and model
preset's encodings scored, with the largest standard error. Against the dense path (the same
estimator as an ``n x n`` array, :func:`posdiag.geometry.estimator.expected_thinning_bc`,
``eigvalsh``, the production scorer) at the agreement sizes: every stress's distance to the dense
one in units of its stated standard error, the top-10 eigenvalues' relative difference, and
whether the ranking is the same.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

V = 50_257
WINDOWS = 2_000
COMPONENTS = 8
SIZES = (32_768, 131_072)
AGREEMENT_SIZES = (2_048, 4_096, 8_192)
# The dense path is skipped above this (n x n float64 arrays: 0.5 GB each at 8,192).
DENSE_MAX = 8_192


def mixture(n: int, seed: int = 0) -> np.ndarray:
    """The mixing weights ``a`` (n, C), rows summing to 1."""
    rng = np.random.default_rng([seed, 1])
    t = np.arange(n)[:, None] / n
    freq = np.arange(1, COMPONENTS + 1)[None, :]
    phase = rng.random(COMPONENTS)[None, :] * 2 * np.pi
    a = 1.0 + 0.8 * np.cos(2 * np.pi * freq * t + phase)
    a[:, 0] += 2.0 * t[:, 0]  # slow positional drift
    return np.asarray(a / a.sum(axis=1, keepdims=True))


def _blocks() -> list[np.ndarray]:
    return np.array_split(np.arange(V), COMPONENTS)


def generate(n: int, windows: int = WINDOWS, seed: int = 0) -> sp.csr_matrix:
    """Counts (n, V), int64: ``windows`` draws per position from ``p_i``."""
    rng = np.random.default_rng([seed, 2])
    a = mixture(n, seed)
    blocks = _blocks()
    perm = rng.permutation(V)
    cdfs = []
    for b in blocks:
        w = np.arange(1, b.size + 1, dtype=np.float64) ** -1.1
        cdfs.append(np.cumsum(w) / w.sum())
    parts = []
    step = max(1, 4_000_000 // windows)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        m = hi - lo
        # Component of every token: inverse cdf of the row's weights.
        cum = np.cumsum(a[lo:hi], axis=1)
        u = rng.random((m, windows))
        comp = (u[:, :, None] > cum[:, None, :]).sum(axis=2)
        comp = np.minimum(comp, COMPONENTS - 1)
        r = rng.random((m, windows))
        ids = np.empty((m, windows), dtype=np.int64)
        for c, b in enumerate(blocks):
            sel = comp == c
            k = np.minimum(np.searchsorted(cdfs[c], r[sel]), b.size - 1)
            ids[sel] = perm[b[k]]
        keys = (np.arange(m)[:, None] * V + ids).ravel()
        uk, cnt = np.unique(keys, return_counts=True)
        parts.append(sp.csr_matrix((cnt, (uk // V, uk % V)), shape=(m, V), dtype=np.int64))
    return sp.csr_matrix(sp.vstack(parts))


def truth(n: int, seed: int = 0) -> dict[str, object]:
    """The population geometry: top eigenvalues of ``B_H = 1/2 J S S^T J`` and ``||B_H||^2``."""
    s = np.sqrt(mixture(n, seed))
    js = s - s.mean(axis=0, keepdims=True)
    small = 0.5 * js.T @ js  # same nonzero eigenvalues as B_H
    lam = np.sort(np.linalg.eigvalsh(small))[::-1]
    return {"eigenvalues": [float(x) for x in lam], "total": float(lam @ lam)}


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _specs() -> list[tuple[str, dict[str, object], str]]:
    """The default encodings and every model preset's encodings (their RoPE scalings)."""
    from posdiag.encodings import DEFAULT_SET, MODEL_PRESETS, expand_preset, parse_encoding

    out: list[tuple[str, dict[str, object], str]] = []
    for text in DEFAULT_SET:
        name, params = parse_encoding(text)
        out.append((name, dict(params), ""))
    for preset in MODEL_PRESETS:
        for name, params in expand_preset(preset):
            out.append((name, dict(params), preset))
    return out


def _label(name: str, params: dict[str, object], preset: str) -> str:
    if name == "mds":
        return f"mds-{params['rank']}"
    return f"{name} ({preset})" if preset else name


def child_implicit(path: Path, pairs: int) -> dict[str, object]:
    from posdiag.encodings import make_encoding
    from posdiag.geometry import implicit

    m = sp.load_npz(path).tocsr()
    n = m.shape[0]
    t0 = time.perf_counter()
    bc = implicit.from_thinning(m, n)
    del m
    t_halves = time.perf_counter() - t0
    geom = implicit.implicit_geometry(bc, pairs=pairs)
    t_geom = time.perf_counter() - t0
    table: dict[str, tuple[float, float]] = {}
    seen: dict[str, tuple[float, float]] = {}  # presets repeat encodings: score each once
    for name, params, preset in _specs():
        key = f"{name}{sorted(params.items())}"
        if key not in seen:
            if name == "mds":
                s = implicit.mds_stress(geom, int(params["rank"]))  # type: ignore[arg-type]
            else:
                enc = make_encoding(name, n, params)
                if enc.profile is not None:
                    s = implicit.score_profile(geom, enc.profile)
                else:
                    s = implicit.score_vectors(geom, enc.vectors)
            seen[key] = (s.stress, s.se)
        table[_label(name, params, preset)] = seen[key]
    t_all = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "time": t_all,
        # CPU of the whole child (loading the counts included): on a loaded machine the wall
        # time follows the load, the CPU much less.
        "cpu": use.ru_utime + use.ru_stime,
        "halves": t_halves,
        "geometry": t_geom,
        "rss": _peak_gb(),
        "table": table,
        "eigenvalues": [float(x) for x in geom.spectrum.eigenvalues[:10]],
        "k": int(geom.spectrum.eigenvalues.size),
        "total": geom.total,
        "total_se": geom.total_se,
        "pairs": int(geom.pairs.rows.size),
    }


def child_dense(path: Path) -> dict[str, object]:
    """The same estimator and scores the dense way (what ``posdiag stress`` runs today)."""
    from posdiag.encodings import make_encoding
    from posdiag.geometry.estimator import expected_thinning_bc, gram_from_bc, implied_distances
    from posdiag.scoring import scores

    m = sp.load_npz(path).tocsr()
    n = m.shape[0]
    t0 = time.perf_counter()
    bc = expected_thinning_bc(m, n)
    d = implied_distances(bc)
    b = gram_from_bc(bc)
    del bc
    lam = np.sort(np.linalg.eigvalsh(b))[::-1]
    side = scores.corpus_side(d, b)
    total = float(lam @ lam)
    table: dict[str, float] = {}
    seen: dict[str, float] = {}
    for name, params, preset in _specs():
        key = f"{name}{sorted(params.items())}"
        if key not in seen:
            if name == "mds":
                r = int(params["rank"])  # type: ignore[arg-type]
                seen[key] = float(np.sqrt(np.sum(lam[r:] ** 2) / total))
            else:
                enc = make_encoding(name, n, params)
                seen[key] = scores.score_encoding(side, d, b, enc).stress
        table[_label(name, params, preset)] = seen[key]
    return {
        "time": time.perf_counter() - t0,
        "rss": _peak_gb(),
        "table": table,
        "eigenvalues": [float(x) for x in lam[:10]],
    }


def child_encoding(path: Path, rank: int) -> dict[str, object]:
    """``posdiag build-encoding --rank r`` on the implicit path (its library call), the file
    written and read back: its distances against ``U_r sqrt(L_r)`` of the Lanczos pairs it came
    from (``A``, and ``A^T A`` against the metadata's eigenvalues), ``B`` orthonormal."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    from posdiag.counts.core import Counts
    from posdiag.reports import longctx
    from posdiag.reports.export import write_encoding
    from posdiag.reports.options import Analysis

    counts = Counts(sp.load_npz(path).tocsr(), {"source": path.name})
    t0 = time.perf_counter()
    enc = longctx.implicit_encoding(counts, rank, 768, Analysis(min_count=1))
    out = path.with_suffix(".safetensors")
    write_encoding(enc, out, force=True)
    elapsed = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    rss = _peak_gb()  # before the checks below (20,000 pairs of n x d rows)
    t = load_file(str(out))
    with safe_open(str(out), framework="np") as fh:
        meta = fh.metadata()
    out.unlink()
    a, b, p = (np.asarray(t[k], dtype=np.float64) for k in ("A", "B", "encoding"))
    lam = np.array(json.loads(meta["eigenvalues"])[:rank])
    rng = np.random.default_rng(0)
    i, j = rng.integers(0, a.shape[0], (2, 20_000))
    dp = np.linalg.norm(p[i] - p[j], axis=1)
    dx = np.linalg.norm(enc.A[i] - enc.A[j], axis=1)  # float64 U_r sqrt(L_r)
    return {
        "time": elapsed,
        "cpu": use.ru_utime + use.ru_stime,
        "rss": rss,
        "stress": enc.stress,
        "se": enc.stress_se,
        "distance_err": float(np.max(np.abs(dp - dx)) / float(np.mean(dx))),
        "gram_err": float(np.max(np.abs(a.T @ a - np.diag(lam))) / float(lam[0])),
        "orthonormal_err": float(np.max(np.abs(b.T @ b - np.eye(rank)))),
        "bytes": int(sum(v.nbytes for v in t.values())),
    }


def child_diagnose(path: Path) -> dict[str, object]:
    """``posdiag diagnose`` on the implicit path (its library call), one run: time, memory and
    the sampled figures with their standard errors."""
    from posdiag.counts.core import Counts
    from posdiag.reports import longctx
    from posdiag.reports.options import Analysis

    counts = Counts(sp.load_npz(path).tocsr(), {"source": path.name})
    t0 = time.perf_counter()
    d = longctx.implicit_diagnose(counts, analysis=Analysis(min_count=1))
    elapsed = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "time": elapsed,
        "cpu": use.ru_utime + use.ru_stime,
        "rss": _peak_gb(),
        "bits": d.information.bits,
        "z": d.information.z,
        "fraction": d.noise.fraction,
        "share": d.noise.noise_share,
        "r2": d.shift.r2,
        "smoothness": d.shift.smoothness,
        "rank": d.rank.rank,
        "reached": d.rank.reached,
        "recommendation": d.recommendation.encoding,
        "line": d.warnings[0],
    }


def _run(kind: str, path: Path, *args: str) -> dict[str, object]:
    from .longctx import run_child  # here: a child process need not import it

    return run_child(kind, path, *args, module="benchmarks.implicit", nice=True)


def _median_run(path: Path, repeat: int, pairs: int) -> dict[str, object]:
    runs = [_run("implicit", path, str(pairs)) for _ in range(repeat)]
    ok = [r for r in runs if "time" in r]
    if not ok:
        return runs[0]
    ok.sort(key=lambda r: float(r["time"]))  # type: ignore[arg-type]
    best = ok[len(ok) // 2]
    best["times"] = [round(float(r["time"]), 1) for r in ok]  # type: ignore[arg-type]
    best["cpus"] = [round(float(r.get("cpu", "nan")), 1) for r in ok]  # type: ignore[arg-type]
    best["rss_max"] = max(float(r["rss"]) for r in ok)  # type: ignore[arg-type]
    return best


def _table(res: dict[str, object], dense: dict[str, object] | None) -> None:
    table: dict[str, list[float]] = res["table"]  # type: ignore[assignment]
    order = sorted(table, key=lambda k: table[k][0])
    for name in order:
        s, se = table[name]
        extra = ""
        if dense and "table" in dense:
            ds = float(dense["table"][name])  # type: ignore[index]
            z = abs(s - ds) / se if se > 0 else (0.0 if abs(s - ds) < 1e-9 else np.inf)
            extra = f"   dense {ds:.4f}  |diff| {abs(s - ds):.1e} = {z:.2f} SE"
        print(f"     {name:<34} {s:.4f} ± {se:.1e}{extra}")


def bench_implicit(
    sizes: tuple[int, ...] = SIZES,
    agreement: tuple[int, ...] = AGREEMENT_SIZES,
    repeat: int = 5,
    pairs: int | None = None,
) -> None:
    from posdiag.geometry.implicit import DEFAULT_PAIRS

    pairs = DEFAULT_PAIRS if pairs is None else pairs
    print("\n8. Modern context lengths (issue 35): the implicit geometry, no n x n array")
    print(
        f"   generated packed corpus: V = {V:,}, {WINDOWS:,} windows, {COMPONENTS} drifting "
        f"topics on disjoint vocabularies (true B_H of rank {COMPONENTS}); {pairs:,} pairs"
    )
    print(f"   load: {os.getloadavg()[0]:.1f} (1-min) on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for n in agreement:
            path = Path(tmp) / f"agree-{n}.npz"
            sp.save_npz(path, generate(n), compressed=False)
            ours = _run("implicit", path, str(pairs))
            dense = _run("dense", path) if n <= DENSE_MAX else {}
            path.unlink()
            _agreement_row(n, ours, dense)
        rows = []
        for n in sizes:
            path = Path(tmp) / f"long-{n}.npz"
            t0 = time.perf_counter()
            m = generate(n)
            sp.save_npz(path, m, compressed=False)
            nnz = m.nnz
            del m
            gen = time.perf_counter() - t0
            res = _median_run(path, repeat, pairs)
            built = _run("encoding", path, "8")
            diag = _run("diagnose", path)
            path.unlink()
            if "error" in res:
                print(f"   n = {n:,}: failed: {res['error']}")
                continue
            rows.append((n, res))
            table: dict[str, list[float]] = res["table"]  # type: ignore[assignment]
            worst = max(se for _, se in table.values())
            tr = truth(n)
            lam = np.array(res["eigenvalues"])
            true = np.array(tr["eigenvalues"])[: min(lam.size, COMPONENTS)]  # type: ignore[index]
            print(
                f"   n = {n:,}: median {float(res['time']):.1f} s of {res['times']} "  # type: ignore[arg-type]
                f"(CPU {res['cpus']} s; halves {float(res['halves']):.1f} s, "  # type: ignore[arg-type]
                f"geometry {float(res['geometry']):.1f} s), "  # type: ignore[arg-type]
                f"peak RSS {float(res['rss_max']):.2f} GB, largest SE {worst:.4f}; "  # type: ignore[arg-type]
                f"{nnz:,} counts, generated in {gen:.0f} s"
            )
            print(
                f"     ||B_H||^2 = {float(res['total']):.5f} ± {float(res['total_se']):.5f} "  # type: ignore[arg-type]
                f"({res['pairs']:,} pairs, {res['k']} eigenpairs); top eigenvalues "
                f"{np.round(lam[:4], 5).tolist()} vs population {np.round(true[:4], 5).tolist()}"
            )
            _table(res, None)
            _one_run(
                "build-encoding --rank 8",
                built,
                lambda r: (
                    f"stress {float(r['stress']):.4f} ± {float(r['se']):.4f}; the file's "  # type: ignore[arg-type]
                    f"distances vs U_r sqrt(L_r) {float(r['distance_err']):.1e} of the mean, "  # type: ignore[arg-type]
                    f"A^T A vs diag(L) {float(r['gram_err']):.1e}, B^T B vs I "  # type: ignore[arg-type]
                    f"{float(r['orthonormal_err']):.1e}"  # type: ignore[arg-type]
                ),
            )
            _one_run(
                "diagnose",
                diag,
                lambda r: (
                    f"I = {float(r['bits']):.4f} bits (z = {float(r['z']):.0f}), pairs within "  # type: ignore[arg-type]
                    f"noise {float(r['fraction']):.2%}, noise share {float(r['share']):.2%}, "  # type: ignore[arg-type]
                    f"R^2 = {float(r['r2']):.3f}, smoothness {float(r['smoothness']):.3f}, "  # type: ignore[arg-type]
                    f"rank {r['rank']} (reached: {r['reached']}), recommended "
                    f"{r['recommendation']}\n     {r['line']}"
                ),
            )
        if len(rows) >= 2:
            x = np.log([n for n, _ in rows])
            for key, label in (("time", "time"), ("rss", "peak RSS")):
                y = np.log([float(r[key]) for _, r in rows])  # type: ignore[arg-type]
                print(f"   fitted growth exponent of {label}: n^{np.polyfit(x, y, 1)[0]:.2f}")


def _one_run(
    label: str, res: dict[str, object], detail: Callable[[dict[str, object]], str]
) -> None:
    """One child's line: its time, CPU and peak memory, then ``detail`` of its figures."""
    if "error" in res:
        print(f"     {label}: failed: {res['error']}")
        return
    print(
        f"     {label} (one run): {float(res['time']):.1f} s "  # type: ignore[arg-type]
        f"(CPU {float(res['cpu']):.1f} s), peak RSS {float(res['rss']):.2f} GB; {detail(res)}"  # type: ignore[arg-type]
    )


def _agreement_row(n: int, ours: dict[str, object], dense: dict[str, object]) -> None:
    if "error" in ours or "error" in dense:
        print(f"   n = {n:,}: failed: {ours.get('error') or dense.get('error')}")
        return
    table: dict[str, list[float]] = ours["table"]  # type: ignore[assignment]
    worst = max(se for _, se in table.values())
    print(
        f"   n = {n:,}: implicit {float(ours['time']):.1f} s "  # type: ignore[arg-type]
        f"(CPU {float(ours.get('cpu', 'nan')):.1f} s), "  # type: ignore[arg-type]
        f"{float(ours['rss']):.2f} GB, "  # type: ignore[arg-type]
        f"largest SE {worst:.4f}"
        + (
            f"; dense {float(dense['time']):.1f} s, {float(dense['rss']):.2f} GB"  # type: ignore[arg-type]
            if dense
            else ""
        )
    )
    if not dense:
        return
    dt: dict[str, float] = dense["table"]  # type: ignore[assignment]
    zs = []
    for name, (s, se) in table.items():
        diff = abs(s - dt[name])
        zs.append(diff / se if se > 0 else (0.0 if diff < 1e-9 else np.inf))
    la, lb = np.array(ours["eigenvalues"]), np.array(dense["eigenvalues"])
    rel = float(np.max(np.abs(la - lb[: la.size]) / np.abs(lb[: la.size])))
    same = sorted(table, key=lambda k: table[k][0]) == sorted(dt, key=lambda k: dt[k])
    print(
        f"     agreement: every stress within {max(zs):.2f} SE of the dense one "
        f"({sum(z <= 1 for z in zs)}/{len(zs)} within 1 SE, {sum(z <= 2 for z in zs)} within 2); "
        f"top-10 eigenvalues within {rel:.1e} relative; same ranking: {same}"
    )
    _table(ours, dense)


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "implicit":
        print(json.dumps(child_implicit(Path(sys.argv[2]), int(sys.argv[3]))))
    elif kind == "encoding":
        print(json.dumps(child_encoding(Path(sys.argv[2]), int(sys.argv[3]))))
    elif kind == "diagnose":
        print(json.dumps(child_diagnose(Path(sys.argv[2]))))
    elif kind == "dense":
        print(json.dumps(child_dense(Path(sys.argv[2]))))
    elif kind == "generate":
        # python -m benchmarks.implicit generate N OUT.npz: write the corpus's counts.
        sp.save_npz(sys.argv[3], generate(int(sys.argv[2])), compressed=False)
