"""Default values the command line shows in its help, in a module that imports nothing.

They live here, not beside the code that uses them, so ``posdiag --version`` and ``--help`` need
not import numpy and scipy (a CLI should answer those at once); :mod:`posdiag.analysis`,
:mod:`posdiag.uncertainty` and :mod:`posdiag.encodings` re-export them.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_ESTIMATOR",
    "DEFAULT_LEVEL",
    "DEFAULT_MIN_COUNT",
    "DEFAULT_REPLICATES",
    "DEFAULT_SHARDS",
    "LONG_CONTEXT_FROM",
    "LONG_CONTEXT_REPLICATES",
]

# Why 100: the split-half noise floor of d_H at a position falls roughly like 1/sqrt(N_i); below
# ~100 sequences a word-level distribution is mostly singletons and its distances to every other
# position saturate near 1, which would masquerade as geometry (README, "min-count").
DEFAULT_MIN_COUNT = 100
# Why 20 shards: the bootstrap resamples shards, so K bounds how many distinct replicate corpora
# exist (C(2K-1, K) ~ 7e10 for K = 20) and how finely the interval's tails are resolved; more
# shards cost memory (one accumulator each) for little gain in a 95% interval.
DEFAULT_SHARDS = 20
DEFAULT_REPLICATES = 200
# From LONG_CONTEXT_FROM positions the default is LONG_CONTEXT_REPLICATES replicates and a t
# interval from their standard deviation (posdiag.uncertainty.PERCENTILE_FROM): a replicate costs
# two full products R^A (R^B)^T there (3.4 s at n = 4,096), and 50 replicates keep the
# calibration of 200 percentile ones. On 300 independent synthetic samples (n = 32, 20 shards):
# coverage 0.93-0.95 against 0.92-0.95 for the fixed encodings, mean width / (3.92 sd) 1.04-1.06
# against 0.98-1.01, the widths' coefficient of variation 0.16-0.18 against 0.15-0.16: with 20
# shards the spread's own precision is bounded by the shards (19 degrees of freedom), not by
# the replicates (docs/scale.md, "Seventh pass").
#
# Where a Hadamard matrix of the shard count is built (20 shards: yes), the default is instead
# min(LONG_CONTEXT_REPLICATES, 2 (k - 1)) balanced half-samples in complementary pairs
# (posdiag.uncertainty.replicate_halves): 38 for 20 shards, every row of the matrix and its
# complement. On 240 independent samples of that corpus the fixed encodings' intervals from
# them spread their widths less (coefficient of variation 0.15-0.16) than the 50 random
# replicates' (0.17-0.19), with coverage 0.95 against 0.93-0.96 and mean width / (3.92 sd)
# 1.04-1.06 against 1.02-1.04, at 76% of their cost (docs/theory.md, "Balanced half-samples").
#
# Since issue 33 this applies from 128 positions (the name is older): at n = 512 a replicate
# costs ~0.3 s, so 200 of them took 14-35x the estimate; 38 balanced ones keep the stress a
# small multiple of it (docs/scale.md, "Intervals at 128-1,023 positions"). Below 128 (the
# bundled corpus) nothing moved.
LONG_CONTEXT_FROM = 128
LONG_CONTEXT_REPLICATES = 50
DEFAULT_LEVEL = 0.95
# One model dimension d for every encoding that has one (BERT-base's 768, also the default of
# build-encoding and diagnose): a comparison of sinusoidal at 512 with learned-random at 768
# would compare dimensions, not geometries.
DEFAULT_DIM = 768
# The geometry estimator: the cross-fit removes the plug-in's sampling-noise bias
# (docs/geometry.md); see posdiag.estimator.
DEFAULT_ESTIMATOR = "crossfit"
