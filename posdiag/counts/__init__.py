"""Stage 2, counts: sparse per-position token counts built from a corpus (in one process, forked
workers or on Dask), merged, aligned, saved to and loaded from ``.npz`` archives.
"""
