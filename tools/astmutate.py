"""The mutations mutmut 3.8 does not make, as a small AST pass (``tools/mutate.py --ast``).

mutmut swaps operators, numbers, strings and arguments, but never a function for another:
``max`` <-> ``min`` (the builtins, ``np.maximum`` / ``np.minimum`` and the ``.max()`` /
``.min()`` methods) and the removal of ``np.sqrt(x)`` / ``np.clip(x, ...)`` (the call replaced
by ``x``) are the classes issue 15 names. Each mutant is one such edit of one call; it runs
against the tests mutmut recorded as covering the enclosing function (``mutants/
mutmut-stats.json``), in a scratch copy of the repository (``mutants/ast/``), first failing
test stops it. Results are stored in ``mutants/ast-results.json`` and reported apart from
mutmut's numbers.

A mutant is named ``<module>.x_<function>__ast_<k>`` (``k`` counts the AST mutants of that
function in source order), the way mutmut names its own; docs/mutation.md lists the equivalent
ones under the same ``- `name`: reason`` form.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "mutants" / "ast"
RESULTS = ROOT / "mutants" / "ast-results.json"
STATS = ROOT / "mutants" / "mutmut-stats.json"
COPY = ["posdiag", "tests", "fixtures", "docs", "benchmarks", "README.md", "pyproject.toml"]
SWAP = {"max": "min", "min": "max", "maximum": "minimum", "minimum": "maximum"}
DROP = {("np", "sqrt"), ("np", "clip"), ("math", "sqrt")}
# Exit codes of pytest: 0 all passed (the mutant survived), 5 no tests collected.
SURVIVED = 0


@dataclass(frozen=True)
class AstMutant:
    name: str
    function: str  # mutmut's mangled name of the enclosing function (its test selection)
    line: int
    what: str
    source: str  # the whole mutated module


def _segment(lines: list[str], node: ast.expr) -> tuple[int, int]:
    """Character offsets of ``node`` in the module text joined by newlines."""
    start = sum(len(x) + 1 for x in lines[: node.lineno - 1]) + node.col_offset
    assert node.end_lineno is not None and node.end_col_offset is not None
    end = sum(len(x) + 1 for x in lines[: node.end_lineno - 1]) + node.end_col_offset
    return start, end


def _edits(call: ast.Call, lines: list[str]) -> list[tuple[int, int, str, str]]:
    """(start, end, replacement, description) for each mutation of one call."""
    text = "\n".join(lines)
    f = call.func
    out = []
    if isinstance(f, ast.Name) and f.id in ("max", "min"):
        s, e = _segment(lines, f)
        out.append((s, e, SWAP[f.id], f"{f.id}() -> {SWAP[f.id]}()"))
    elif isinstance(f, ast.Attribute) and f.attr in SWAP:
        s, e = _segment(lines, f)
        # Only the attribute name changes: keep the receiver's text as written.
        e_name = e
        s_name = e - len(f.attr)
        assert text[s_name:e_name] == f.attr, (text[s:e], f.attr)
        out.append((s_name, e_name, SWAP[f.attr], f".{f.attr} -> .{SWAP[f.attr]}"))
    elif (
        isinstance(f, ast.Attribute)
        and isinstance(f.value, ast.Name)
        and (f.value.id, f.attr) in DROP
        and call.args
        and not isinstance(call.args[0], ast.Starred)
    ):
        s, e = _segment(lines, call)
        a0, a1 = _segment(lines, call.args[0])
        rest = ", ..." if len(call.args) + len(call.keywords) > 1 else ""
        out.append((s, e, "(" + text[a0:a1] + ")", f"{f.value.id}.{f.attr}(x{rest}) -> x"))
    return out


def mutants_of(module_path: str) -> list[AstMutant]:
    """Every AST mutant of one module, in source order."""
    src = (ROOT / module_path).read_text(encoding="utf-8")
    lines = src.split("\n")
    tree = ast.parse(src)
    dotted = module_path.removesuffix(".py").replace("/", ".")
    found: list[tuple[str, ast.Call]] = []

    def visit(node: ast.AST, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            name = owner
            if owner is None and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{dotted}.x_{child.name}"
            elif owner is None and isinstance(child, ast.ClassDef):
                for item in child.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        visit(item, f"{dotted}.x\u01c1{child.name}\u01c1{item.name}")
                continue
            if name is not None and isinstance(child, ast.Call):
                found.append((name, child))
            visit(child, name)

    visit(tree, None)
    found.sort(key=lambda t: (t[1].lineno, t[1].col_offset))
    out: list[AstMutant] = []
    count: dict[str, int] = {}
    for function, call in found:
        for s, e, new, what in _edits(call, lines):
            count[function] = count.get(function, 0) + 1
            out.append(
                AstMutant(
                    f"{function}__ast_{count[function]}",
                    function,
                    call.lineno,
                    what,
                    src[:s] + new + src[e:],
                )
            )
    return out


def _prepare() -> None:
    for item in COPY:
        src, dst = ROOT / item, SCRATCH / item
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def load_results() -> dict[str, dict[str, object]]:
    if not RESULTS.is_file():
        return {}
    results: dict[str, dict[str, object]] = json.loads(RESULTS.read_text(encoding="utf-8"))
    return results


def run(modules: dict[str, str], resume: bool = False) -> None:
    """Run the AST mutants of ``modules`` (name -> path); needs mutmut's stats for the tests."""
    if not STATS.is_file():
        raise SystemExit("tools/mutate.py --ast needs mutmut's test stats: run mutmut first")
    tests_by_function = json.loads(STATS.read_text(encoding="utf-8"))[
        "tests_by_mangled_function_name"
    ]
    results = load_results()
    _prepare()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # same-size edits: no stale .pyc
    for path in modules.values():
        original = (ROOT / path).read_text(encoding="utf-8")
        target = SCRATCH / path
        try:
            for m in mutants_of(path):
                old = results.get(m.name)
                if resume and old and old.get("source") == m.source and old["code"] != SURVIVED:
                    continue
                tests = sorted(tests_by_function.get(m.function, []))
                if not tests:
                    # Properties are not traced by mutmut: every test of the module then.
                    prefix = m.function.split(".x", 1)[0] + ".x"
                    tests = sorted(
                        {t for k, v in tests_by_function.items() if k.startswith(prefix) for t in v}
                    )
                if not tests:
                    code = 33  # no covering test, as mutmut counts it
                else:
                    target.write_text(m.source, encoding="utf-8")
                    cmd = [
                        sys.executable,
                        "-m",
                        "pytest",
                        "-x",
                        "-n",
                        "0",
                        "-p",
                        "no:cacheprovider",
                    ]
                    res = subprocess.run(
                        [*cmd, *tests], cwd=SCRATCH, env=env, capture_output=True, text=True
                    )
                    code = res.returncode
                verdict = "survived" if code == SURVIVED else "killed"
                print(f"  {verdict:<8} {m.name}  line {m.line}: {m.what}", flush=True)
                results[m.name] = {"code": code, "line": m.line, "what": m.what, "source": m.source}
                RESULTS.write_text(json.dumps(results), encoding="utf-8")
        finally:
            target.write_text(original, encoding="utf-8")


def report(modules: dict[str, str], equivalent: set[str]) -> None:
    """killed / total of the AST mutants per module, survivors by name."""
    results = load_results()
    print()
    print("AST pass (max/min swaps, np.sqrt / np.clip removed; not counted by mutmut)")
    print(f"{'module':<26} {'killed':>6} / {'total':<6}  {'equiv':>5}  adjusted")
    for path in modules.values():
        names = {m.name: m for m in mutants_of(path)}
        if not names:
            continue
        codes = {
            k: results[k]["code"]
            for k, m in names.items()
            if k in results and results[k]["source"] == m.source
        }
        if not codes:
            print(f"{path:<26} (not run; {len(names)} mutants)")
            continue
        killed = sum(1 for c in codes.values() if c not in (SURVIVED, 33))
        eq = sum(1 for k, c in codes.items() if k in equivalent and c == SURVIVED)
        adjusted = 100.0 * killed / max(len(names) - eq, 1)
        missing = len(names) - len(codes)
        note = f"  ({missing} not run)" if missing else ""
        print(f"{path:<26} {killed:>6} / {len(names):<6}  {eq:>5}  {adjusted:6.1f}%{note}")
        for k, c in sorted(codes.items()):
            if c in (SURVIVED, 33) and k not in equivalent:
                print(f"    survived: {k}  line {names[k].line}: {names[k].what}")
