"""posdiag benchmarks: ``python -m benchmarks`` (``make bench``).

Each figure is printed with its ratio against a baseline measured in the same process, never
against a stored number, so the ratios hold on any machine. Run on an otherwise idle machine.
"""
