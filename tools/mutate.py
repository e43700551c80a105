"""Mutation score of the numerical and gate modules (``make mutate``; issue 15).

Runs mutmut once per module (``--max-children`` from ``MUTATE_CHILDREN``, default 1: the
machines are shared), each mutant against the tests that cover it, then prints killed / total
per module and the score with the mutants listed in ``docs/mutation.md`` as equivalent set aside.

    python tools/mutate.py                 # mutmut and the AST pass on every module
    python tools/mutate.py --report        # report the stored results only
    python tools/mutate.py core gate       # run some modules
    python tools/mutate.py --resume        # skip the mutants an earlier run killed
    python tools/mutate.py --ast [modules] # only the AST pass (tools/astmutate.py)
    python tools/mutate.py --no-ast heldout  # mutmut only
    python tools/mutate.py --equivalents rope  # the listed equivalents only (after an edit)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import astmutate

ROOT = Path(__file__).resolve().parents[1]
MODULES = {
    "core": "posdiag/geometry/core.py",
    "crossfit": "posdiag/geometry/crossfit.py",
    "heldout": "posdiag/geometry/heldout.py",
    "_summary": "posdiag/geometry/_summary.py",
    "rope": "posdiag/encodings/rope.py",
    "bias": "posdiag/encodings/bias.py",
    "gate": "posdiag/reports/gate.py",
    "_gram": "posdiag/geometry/_gram.py",
    "spectral": "posdiag/geometry/spectral.py",
}
# mutmut exit codes that count as caught (killed, pytest internal error, timeout, crash).
CAUGHT = {1, 3, 24, -24, 152, 255, 36, -11, -9, -6, 37}
SURVIVED = 0
EQUIVALENT = re.compile(r"^- `(posdiag\.[\w.\u01c1]+__(?:mutmut|ast)_\d+)`")


def equivalent_mutants() -> set[str]:
    """Mutant names listed as equivalent in docs/mutation.md (one ``- `name`: reason`` a line)."""
    doc = ROOT / "docs" / "mutation.md"
    names = set()
    for line in doc.read_text(encoding="utf-8").splitlines():
        m = EQUIVALENT.match(line)
        if m:
            names.add(m.group(1))
    return names


def stored(path: str) -> dict[str, int | None]:
    meta = ROOT / "mutants" / (path + ".meta")
    if not meta.is_file():
        return {}
    codes: dict[str, int | None] = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
    return codes


def refresh_copies() -> None:
    """Drop mutmut's copies of the modules it does not mutate when the source changed since.

    mutmut copies the package into ``mutants/`` once and never refreshes a file that exists
    there (a merge would leave old helpers beside new mutated modules); a removed copy is
    copied again on the next run. The mutated modules themselves mutmut regenerates, keeping
    the results of every function whose source is unchanged.
    """
    mutated = {ROOT / p for p in MODULES.values()}
    base = ROOT / "mutants"
    for copy in (base / "posdiag").rglob("*.py"):
        source = ROOT / copy.relative_to(base)
        if source in mutated:
            continue
        if not source.is_file() or source.stat().st_mtime != copy.stat().st_mtime:
            copy.unlink()


def mutmut(children: int, names: list[str], generate_only: bool = False) -> None:
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *names]
    print("$", " ".join(cmd[:6]), f"... ({len(names)} names)", flush=True)
    # mutmut's progress line is long and redrawn; keep only its summary on failure.
    # mutmut forks a worker per mutant from a process whose tests already ran the numba kernel
    # of posdiag.geometry._gram (parallel=True); numba's OpenMP layer then SIGTERMs the forked child
    # ("fork() called from a process already using GNU OpenMP"), which mutmut counts as
    # "suspicious" instead of a verdict. The workqueue layer is fork-safe.
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if generate_only and "nothing matches" in res.stdout + res.stderr:
        return  # mutants generated and tests traced; the filter matched no mutant, as meant
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"mutmut failed (exit {res.returncode}): {' '.join(names[:3])}")


def run(
    module: str, children: int, resume: bool = False, sample: int = 0, equivalents: bool = False
) -> None:
    """mutmut on one module; the mutants docs/mutation.md lists as equivalent are not re-run
    (they survive by construction and would each cost the whole covering test set), except
    with ``equivalents``: then only they run (after an edit, mutmut may have renumbered them).

    mutmut re-runs every mutant named on its command line, so once results are stored the
    names are listed one by one: with ``--resume`` only those not caught yet.
    """
    dotted = MODULES[module].removesuffix(".py").replace("/", ".")
    refresh_copies()
    meta = ROOT / "mutants" / (MODULES[module] + ".meta")
    if not meta.is_file():
        mutmut(children, [f"{dotted}.*"])
        return
    if (ROOT / MODULES[module]).stat().st_mtime >= meta.stat().st_mtime:
        # Edited since: let mutmut regenerate the mutants (renumbered; results of unchanged
        # functions kept) without running any, then pick the names below.
        mutmut(children, [f"{dotted}.x__no_such_function__*"], generate_only=True)
    codes = stored(MODULES[module])
    skip = equivalent_mutants()
    if equivalents:
        names = [k for k in codes if k in skip]
    else:
        names = [k for k, c in codes.items() if k not in skip and not (resume and c in CAUGHT)]
    if sample:
        # A seeded random sample of the mutants not run yet (plus every earlier survivor): an
        # unbiased estimate when the whole module would take too long on a shared machine
        # (mutmut itself runs the cheapest first, so stopping a run early biases the count).
        fresh = sorted(k for k in names if codes[k] is None)
        picked = set(random.Random(0).sample(fresh, min(sample, len(fresh))))
        names = [k for k in names if codes[k] is not None or k in picked]
    if names:
        mutmut(children, names)


def report() -> int:
    equivalent = equivalent_mutants()
    worst = 100.0
    print(f"{'module':<26} {'killed':>6} / {'total':<6} {'score':>7}  {'equiv':>5}  adjusted")
    for path in MODULES.values():
        codes = stored(path)
        if not codes:
            print(f"{path:<26} (not run)")
            worst = 0.0
            continue
        total = len(codes)
        killed = sum(1 for c in codes.values() if c in CAUGHT)
        eq = sum(1 for k, c in codes.items() if k in equivalent and c not in CAUGHT)
        unchecked = sum(1 for k, c in codes.items() if c is None and k not in equivalent)
        adjusted = 100.0 * killed / max(total - eq, 1)
        worst = min(worst, adjusted)  # every module is held to 95% adjusted
        note = f"  ({unchecked} not run)" if unchecked else ""
        print(
            f"{path:<26} {killed:>6} / {total:<6} {100.0 * killed / total:6.1f}%  {eq:>5}  "
            f"{adjusted:6.1f}%{note}"
        )
        for name, c in sorted(codes.items()):
            if c not in CAUGHT and c is not None and name not in equivalent:
                print(f"    survived: {name}")
        # A listed name mutmut has renumbered onto another mutant (killed) or dropped.
        dotted = path.removesuffix(".py").replace("/", ".") + "."
        listed = sorted(k for k in equivalent if k.startswith(dotted) and "__mutmut_" in k)
        stale = [(k, "killed") for k in listed if codes.get(k) in CAUGHT]
        stale += [(k, "no such mutant") for k in listed if k not in codes]
        for name, why in stale:
            print(f"    listed as equivalent, {why}: {name}")
        if any(why == "killed" for _, why in stale):
            worst = 0.0  # the list is wrong: it hides what that name now is
    return 0 if worst >= 95.0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help=f"any of {', '.join(MODULES)} (default: all)")
    ap.add_argument("--report", action="store_true", help="only print the stored results")
    ap.add_argument(
        "--resume", action="store_true", help="skip the mutants already killed in an earlier run"
    )
    ap.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="run only a seeded random sample of N of the mutants not run yet (and survivors)",
    )
    ap.add_argument(
        "--equivalents",
        action="store_true",
        help="run only the mutants docs/mutation.md lists as equivalent (after an edit)",
    )
    ap.add_argument(
        "--ast",
        action="store_true",
        help="run the AST pass (max/min swaps, np.sqrt/np.clip removed) instead of mutmut",
    )
    ap.add_argument(
        "--no-ast",
        action="store_true",
        help="mutmut only: skip the AST pass (each of its mutants runs a fresh pytest)",
    )
    args = ap.parse_args()
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        ap.error(f"unknown module {unknown[0]!r}; modules: {', '.join(MODULES)}")
    chosen = args.modules or list(MODULES)
    if args.ast and not args.report:
        astmutate.run({m: MODULES[m] for m in chosen}, args.resume)
    elif not args.report:
        children = int(os.environ.get("MUTATE_CHILDREN", "1"))
        for module in chosen:
            run(module, children, args.resume, args.sample, args.equivalents)
        if not args.no_ast and not args.equivalents:
            astmutate.run({m: MODULES[m] for m in chosen}, args.resume)
    worst = report()
    astmutate.report(MODULES, equivalent_mutants())
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
