"""Stage 3, the geometry: Hellinger distances between positions (plug-in and cross-fitted), the
split-half noise and held-out estimates, classical MDS and the partial spectra long contexts need,
with the Gram products and compiled kernels behind them (docs/geometry.md).
"""
