"""Stage 8, the command line (stage 7 is :mod:`posdiag.render`): each command parses its options and
calls one library function; one place turns :class:`~posdiag.errors.PosdiagError` into
``Error: ...`` and an exit code.
"""
