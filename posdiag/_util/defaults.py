"""Default values the command line shows in its help, in a module that imports nothing.

They live here, not beside the code that uses them, so ``posdiag --version`` and ``--help`` need
not import numpy and scipy (a CLI should answer those at once); :mod:`posdiag.reports.analysis`,
:mod:`posdiag.uncertainty.bootstrap` and :mod:`posdiag.encodings` re-export them.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_ESTIMATOR",
    "DEFAULT_LEVEL",
    "DEFAULT_MIN_COUNT",
    "DEFAULT_REPLICATES",
    "DEFAULT_SHARDS",
    "BALANCED_FROM",
    "BALANCED_MAX_REPLICATES",
]

# Why 100: the split-half noise floor of d_H at a position falls roughly like 1/sqrt(N_i); below
# ~100 sequences a word-level distribution is mostly singletons and its distances to every other
# position saturate near 1, which would masquerade as geometry (docs/cli.md, "min-count").
DEFAULT_MIN_COUNT = 100
# Why 20 shards: the bootstrap resamples shards, so K bounds how many distinct replicate corpora
# exist (C(2K-1, K) ~ 7e10 for K = 20) and how finely the interval's tails are resolved; more
# shards cost memory (one accumulator each) for little gain in a 95% interval.
DEFAULT_SHARDS = 20
DEFAULT_REPLICATES = 200
# From BALANCED_FROM positions, where a replicate costs two full products (docs/performance.md),
# the default is at most BALANCED_MAX_REPLICATES balanced half-samples read as a t interval: with
# 20 shards the spread's precision is bounded by the shards, not the replicates (docs/theory.md,
# "Balanced half-samples"). Below: 200 random replicates and percentile intervals.
BALANCED_FROM = 128
BALANCED_MAX_REPLICATES = 50
DEFAULT_LEVEL = 0.95
# One model dimension d for every encoding that has one (BERT-base's 768, also the default of
# build-encoding and diagnose): a comparison of sinusoidal at 512 with learned-random at 768
# would compare dimensions, not geometries.
DEFAULT_DIM = 768
# The geometry estimator: the cross-fit removes the plug-in's sampling-noise bias
# (docs/geometry.md); see posdiag.geometry.estimator.
DEFAULT_ESTIMATOR = "crossfit"
