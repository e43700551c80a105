"""Plumbing every stage shares: parameter checks in one message format, atomic file output, the
memory guard, BLAS threads, numba loading, lazy imports and the defaults the help shows.
"""
