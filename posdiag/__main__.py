"""``python -m posdiag``: the same command line as ``posdiag``."""

from posdiag.cli.app import main

if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in the tests
    main()
