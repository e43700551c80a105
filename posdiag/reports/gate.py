"""The CI gate behind ``posdiag check``: rules (``max-stress``, ``max-rank-for-stress``,
``min-positional-info``, ``min-support``; docs/cli.md) from options and/or a config file
(:mod:`posdiag.reports.config`), options winning key by key; :func:`measure` the figures, then
:func:`evaluate` them, so the verdicts are a pure function of the figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._util.validate import check_float, check_int
from ..counts.core import Counts
from ..encodings import make_encoding, parse_encoding
from ..errors import PosdiagError
from ..geometry import spectral
from ..geometry.core import MDS, positional_information, reached_rank, stress_floor
from ..geometry.spectral import partial_spectrum
from ..uncertainty.bootstrap import why_no_intervals
from .analysis import CorpusSummary, Progress, analysed_geometry, corpus_summary, spectrum
from .config import CONFIG_FILES, find_config, read_toml
from .intervals import interval_scores
from .longctx import implicit_analysis, implicit_scores, sampled_line, takes_implicit
from .options import Analysis
from .scores import score_encodings

__all__ = [
    "CONFIG_FILES",
    "READING_KEYS",
    "GateConfig",
    "GateFacts",
    "GateReport",
    "RuleResult",
    "build_config",
    "evaluate",
    "find_config",
    "implicit_facts",
    "load_config",
    "measure",
    "run_gate",
]

# Keys of the config table; reading options use the CLI's option names.
_RULE_KEYS = ("max-stress", "max-rank-for-stress", "min-positional-info", "min-support", "strict")
_READ_KEYS = ("column", "tokenizer", "view", "max-len", "min-count", "pad-token")
# The same keys as GateConfig.reading and build_config's ``reading`` spell them.
READING_KEYS = tuple(k.replace("-", "_") for k in _READ_KEYS)


def _encoding_key(spec: str) -> str:
    """Canonical text of an encoding spec, so ``rope`` and ``rope:`` are one rule."""
    name, params = parse_encoding(spec)
    if name == "mds" and set(params) == {"rank"}:
        return f"mds-{params['rank']}"
    if not params:
        return name
    return name + ":" + ",".join(f"{k}={params[k]}" for k in sorted(params))


@dataclass(frozen=True)
class GateConfig:
    """Every rule of one ``posdiag check`` run, plus how to read the corpus.

    Attributes
    ----------
    max_stress : mapping of str to float
        Canonical encoding spec -> largest acceptable stress, in [0, 1].
    max_rank_for_stress : mapping of float to int
        Stress tolerance ``eps`` -> largest acceptable effective rank at ``eps``.
    min_positional_info : float or None
        In bits.
    min_support : int or None
        Over positions ``0..max_len-1``.
    strict : bool
        Judge max-stress rules by the upper confidence bound where one exists.
    reading : mapping
        Corpus reading options from the config file (:data:`READING_KEYS`).
    source : str or None
        The config file the rules came from, if any.
    """

    max_stress: Mapping[str, float] = field(default_factory=dict)
    max_rank_for_stress: Mapping[float, int] = field(default_factory=dict)
    min_positional_info: float | None = None
    min_support: int | None = None
    strict: bool = False
    reading: Mapping[str, Any] = field(default_factory=dict)
    source: str | None = None

    @property
    def n_rules(self) -> int:
        return (
            len(self.max_stress)
            + len(self.max_rank_for_stress)
            + (self.min_positional_info is not None)
            + (self.min_support is not None)
        )


def _number(text: str, kind: type) -> Any:
    """``kind(text)``, or ``text`` itself for the checks to refuse with their message."""
    try:
        return kind(text)
    except ValueError:
        return text


def _parse_rank_rule(text: str) -> tuple[float, int]:
    eps_s, colon, rank_s = str(text).partition(":")
    if not colon:
        raise PosdiagError(
            f"'max-rank-for-stress' must look like EPS:RANK (e.g. 0.1:8); got {text!r}"
        )
    eps = check_float("max-rank-for-stress stress", _number(eps_s, float), 0.0, 1.0)
    return eps, check_int("max-rank-for-stress rank", _number(rank_s, int), 1)


def load_config(path: str | Path) -> dict[str, Any]:
    """The posdiag table of a config file (``pyproject.toml``: ``[tool.posdiag]``; any other
    file: its top level), keys checked, values not yet validated."""
    p = Path(path)
    if not p.is_file():
        raise PosdiagError(f"{path}: no such config file")
    data = read_toml(p)
    if p.name == "pyproject.toml":
        tool = data.get("tool", {})
        table = tool.get("posdiag") if isinstance(tool, dict) else None
        if not isinstance(table, dict):
            raise PosdiagError(f"{path}: has no [tool.posdiag] table")
        data = table
    known = (*_RULE_KEYS, *_READ_KEYS)
    for key in data:
        if key not in known:
            raise PosdiagError(f"{path}: unknown key {key!r}; keys: {', '.join(known)}")
    return dict(data)


def _file_rules(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validated values of a config table, keyed like :func:`build_config`'s arguments."""
    table = raw.get("max-stress", {})
    if not isinstance(table, dict):
        raise PosdiagError(
            "'max-stress' must be a table of encoding = threshold "
            f"(e.g. max-stress = {{ rope = 0.5 }}); got {table!r}"
        )
    stress_rules = {
        _encoding_key(spec): check_float(f"max-stress {spec}", thr, 0.0, 1.0)
        for spec, thr in table.items()
    }
    ranks = raw.get("max-rank-for-stress", {})
    if isinstance(ranks, dict):
        items = [f"{eps}:{rank}" for eps, rank in ranks.items()]
    elif isinstance(ranks, list):
        items = [str(x) for x in ranks]
    else:
        raise PosdiagError(
            "'max-rank-for-stress' must be a table (e.g. { \"0.1\" = 8 }) or a list of "
            f'"EPS:RANK" strings; got {ranks!r}'
        )
    out: dict[str, Any] = {
        "max_stress": stress_rules,
        "max_rank_for_stress": dict(_parse_rank_rule(x) for x in items),
    }
    if "min-positional-info" in raw:
        out["min_positional_info"] = check_float(
            "min-positional-info", raw["min-positional-info"], 0.0
        )
    if "min-support" in raw:
        out["min_support"] = check_int("min-support", raw["min-support"], 1)
    if "strict" in raw:
        if not isinstance(raw["strict"], bool):
            raise PosdiagError(f"'strict' must be true or false; got {raw['strict']!r}")
        out["strict"] = raw["strict"]
    read: dict[str, Any] = {}
    for k in _READ_KEYS:
        if k not in raw:
            continue
        v = raw[k]
        if k in ("max-len", "min-count"):
            v = check_int(k, v, 1)
        elif not isinstance(v, str):
            raise PosdiagError(f"{k!r} must be a string; got {v!r}")
        read[k.replace("-", "_")] = v
    return {**out, "reading": read}


def build_config(
    *,
    file: str | Path | None = None,
    encodings: Sequence[str] = (),
    max_stress: Sequence[float] = (),
    max_rank_for_stress: Sequence[str] = (),
    min_positional_info: float | None = None,
    min_support: int | None = None,
    strict: bool | None = None,
    reading: Mapping[str, Any] | None = None,
) -> GateConfig:
    """Merge the rules of a config file with options; options win key by key (per encoding,
    per tolerance). ``encodings`` and ``max_stress`` pair up in order; a single ``max_stress``
    applies to every encoding. ``reading``: options given explicitly (None values ignored).
    """
    base: dict[str, Any] = {}
    if file is not None:
        raw = load_config(file)
        try:
            base = _file_rules(raw)
        except PosdiagError as exc:
            raise PosdiagError(f"{file}: {exc}") from None

    if max_stress and not encodings:
        raise PosdiagError("'--max-stress' needs the encoding it applies to: add --encoding NAME")
    if encodings and not max_stress:
        raise PosdiagError(
            f"'--encoding {encodings[0]}' needs a threshold: add --max-stress (one per --encoding)"
        )
    stress_rules: dict[str, float] = dict(base.get("max_stress", {}))
    if encodings:
        if len(max_stress) not in (1, len(encodings)):
            raise PosdiagError(
                f"'--max-stress' must be given once or once per --encoding "
                f"({len(encodings)}); got {len(max_stress)}"
            )
        thresholds = list(max_stress) * len(encodings) if len(max_stress) == 1 else max_stress
        for spec, thr in zip(encodings, thresholds, strict=True):
            stress_rules[_encoding_key(spec)] = check_float(f"max-stress {spec}", thr, 0.0, 1.0)

    rank_rules: dict[float, int] = dict(base.get("max_rank_for_stress", {}))
    rank_rules.update(_parse_rank_rule(item) for item in max_rank_for_stress)

    info = base.get("min_positional_info")
    if min_positional_info is not None:
        info = check_float("min-positional-info", min_positional_info, 0.0)
    support = base.get("min_support")
    if min_support is not None:
        support = check_int("min-support", min_support, 1)
    strict_v = strict if strict is not None else base.get("strict", False)
    read = dict(base.get("reading", {}))
    read.update({k: v for k, v in (reading or {}).items() if v is not None})

    cfg = GateConfig(
        max_stress=stress_rules,
        max_rank_for_stress=dict(sorted(rank_rules.items(), reverse=True)),
        min_positional_info=info,
        min_support=support,
        strict=bool(strict_v),
        reading=read,
        source=str(file) if file is not None else None,
    )
    if cfg.n_rules == 0:
        raise PosdiagError(
            "no rules to check: give --encoding NAME --max-stress X, --max-rank-for-stress "
            "EPS:RANK, --min-positional-info BITS or --min-support N, or a config file "
            "([tool.posdiag] in pyproject.toml, or posdiag.toml)"
        )
    return cfg


@dataclass(frozen=True)
class GateFacts:
    """The figures the rules are judged on.

    Attributes
    ----------
    corpus : CorpusSummary
    scores : mapping of str to EncodingScore
        Canonical encoding spec -> its score (possibly with ``ci_low``/``ci_high``).
    eigenvalues : tuple of float
        MDS eigenvalues of ``B_H``, descending (of a partial spectrum the top ``k``).
    positional_info : float
        ``I(position; token)`` over positions ``0..n_eff-1``, in bits.
    stress_by_rank : tuple of float
        Of a partial spectrum: the exact stress of ranks ``1..k``; else empty.
    floor : float or None
        The stress floor of a partial spectrum when known.
    warnings : tuple of str
    stress_se : mapping of str to float
        Long contexts: the standard error of each encoding's stress scored here.
    """

    corpus: CorpusSummary
    scores: Mapping[str, Any]
    eigenvalues: tuple[float, ...]
    positional_info: float
    stress_by_rank: tuple[float, ...] = ()
    floor: float | None = None
    warnings: tuple[str, ...] = ()
    stress_se: Mapping[str, float] = field(default_factory=dict)


def measure(
    counts: Counts,
    config: GateConfig,
    analysis: Analysis | None = None,
    *,
    progress: Progress = None,
) -> GateFacts:
    """Compute exactly the figures ``config``'s rules need, on ``counts``.

    ``analysis.min_count`` None: the config file's ``min-count``, else the default. Scores carry
    bootstrap intervals when ``counts`` have shards.
    """
    analysis = analysis or Analysis()
    if analysis.min_count is None:
        analysis = replace(analysis, min_count=config.reading.get("min_count"))
    min_count = analysis.positions_from
    if not (config.max_stress or config.max_rank_for_stress):
        # No geometry: these rules must judge a corpus too thin for one.
        summary = corpus_summary(counts, min_count)
        n = summary.n_eff
        total = positional_information(counts.matrix[:n])[0] if n else 0.0
        return GateFacts(summary, {}, (), total)
    if takes_implicit(counts, min_count):
        return implicit_facts(counts, config, analysis)
    # plain=False: no verdict and no output uses the plug-in figure.
    geo = analysed_geometry(counts, analysis, plain=False)
    # One encoding at a time, so each score stays keyed by the spec it was asked as.
    by_key = {key: score_encodings(geo, [key])[0] for key in config.max_stress}
    if by_key and not why_no_intervals(counts):
        pairs = []
        for key, score in by_key.items():
            name, params = parse_encoding(key)
            pairs.append((score, make_encoding(name, geo.n_eff, params, mds=geo.mds)))
        with_ci, _ = interval_scores(
            counts,
            geo.n_eff,
            pairs,
            analysis,
            progress,
            full_mds=geo.mds,  # a partial MDS keeps exact tails and warm-starts the replicates
        )
        by_key = dict(zip(by_key, with_ci, strict=True))
    total, _ = positional_information(counts.matrix[: geo.n_eff])
    if geo.mds.total is not None and config.max_rank_for_stress:
        partial = _partial_facts(geo.summary, by_key, geo.mds, config, total)
        return replace(partial, warnings=geo.warnings)
    return GateFacts(geo.summary, by_key, spectrum(geo).eigenvalues, total, warnings=geo.warnings)


def implicit_facts(counts: Counts, config: GateConfig, analysis: Analysis) -> GateFacts:
    """Facts at long contexts: ``stress``'s implicit figures (with standard errors, no
    intervals); the top eigenpairs grown by one more implicit pass when they do not settle a
    rank rule."""
    # stress's very call: the same pairs and sample, so the same figures (and mds-r ranks).
    run = implicit_analysis(counts, analysis)
    summary, geom = run.summary, run.geometry
    scored = {k: implicit_scores(geom, [k])[0] for k in config.max_stress}
    by_key = {k: s for k, (s, _) in scored.items()}
    largest = max((se for _, se in scored.values()), default=0.0)
    bits, _ = positional_information(counts.matrix[: geom.n])
    spec = geom.spectrum
    by_rank = spec.stress_by_rank()
    floor = None
    if not _rank_rules_settled(by_rank, int(spec.eigenvalues.size), config):
        cap = max(config.max_rank_for_stress.values()) + 1
        grown = implicit_analysis(counts, analysis, rank=cap).geometry
        # The tail from the headline's ||B_H|| estimate: ranks 1..k read as in `stress`.
        spec = replace(grown.spectrum, total=geom.total)
        by_rank, floor = spec.stress_by_rank(), spec.floor()
    notes = (*run.notes, sampled_line(geom, largest))
    stress_se = {k: se for k, (_, se) in scored.items()}
    lam = _floats(spec.eigenvalues)
    return GateFacts(summary, by_key, lam, bits, _floats(by_rank), floor, notes, stress_se)


def _rank_rules_settled(by_rank: np.ndarray, k: int, config: GateConfig) -> bool:
    """Whether the top ``k`` pairs settle every max-rank-for-stress rule (its tolerance reached
    within them, or ``k`` past its rank). ``by_rank`` (>= k,): stress by rank."""
    return all(
        bool(np.any(by_rank[:k] <= eps)) or k > rank
        for eps, rank in config.max_rank_for_stress.items()
    )


def _partial_facts(
    summary: CorpusSummary,
    scores: Mapping[str, Any],
    mds: MDS,
    config: GateConfig,
    bits: float,
) -> GateFacts:
    """Facts of a partial spectrum, its top eigenpairs grown (warm-started) until they settle
    every max-rank-for-stress rule."""
    k = int(mds.eigenvalues.size)
    lam, by_rank, floor = mds.eigenvalues, mds.stress_by_rank(), None
    if not _rank_rules_settled(by_rank, k, config):
        cap = max(config.max_rank_for_stress.values()) + 1
        spec = partial_spectrum(
            mds.gram,
            tuple(config.max_rank_for_stress),
            max_rank=max(cap, k),
            start=mds.vectors,
            full_max=spectral.PARTIAL_FROM - 1,  # read when called, as mds_of_gram does
        )
        lam, by_rank, floor = spec.eigenvalues, spec.stress_by_rank(), spec.floor()
    return GateFacts(summary, scores, _floats(lam), bits, _floats(by_rank), floor)


def _floats(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in values)


@dataclass(frozen=True)
class RuleResult:
    """The verdict on one rule.

    ``figure`` is the measured value the verdict used (the upper confidence bound under
    ``strict`` when one exists); ``comparison`` is ``<=`` or ``>=`` (what passing means).
    """

    rule: str
    target: str
    figure: float
    threshold: float
    comparison: str
    passed: bool
    measure: str
    note: str = ""
    unit: str = ""

    @property
    def id(self) -> str:
        return f"{self.rule}[{self.target}]" if self.target else self.rule


@dataclass(frozen=True)
class GateReport:
    """Every rule's verdict; ``passed`` when all pass."""

    corpus: CorpusSummary
    results: tuple[RuleResult, ...]
    strict: bool
    config_file: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> int:
        return sum(not r.passed for r in self.results)


def evaluate(config: GateConfig, facts: GateFacts) -> GateReport:
    """Judge every rule of ``config`` on ``facts``, in a fixed order."""
    out: list[RuleResult] = []
    for key, thr in config.max_stress.items():
        s = facts.scores[key]
        ci_high = float(getattr(s, "ci_high", float("nan")))
        ci_low = float(getattr(s, "ci_low", float("nan")))
        figure, measure_name = float(s.stress), "stress"
        interval = "" if math.isnan(ci_high) else f"interval [{ci_low:.4f}, {ci_high:.4f}]"
        if key in facts.stress_se:
            interval = f"standard error {facts.stress_se[key]:.4f} (sampled ||B_H||, long context)"
        note = interval
        if config.strict:
            if math.isnan(ci_high):
                note = "strict: no confidence interval was available; judged on the stress"
                if key in facts.stress_se:
                    note += f" ({interval})"
            else:
                figure, measure_name = ci_high, "stress upper bound"
                note = f"strict; stress {s.stress:.4f}, {interval}"
        out.append(
            RuleResult("max-stress", key, figure, thr, "<=", figure <= thr, measure_name, note)
        )
    lam = facts.eigenvalues
    for eps, max_rank in config.max_rank_for_stress.items():
        note = f"smallest rank whose MDS encoding has stress <= {eps:g}"
        if facts.stress_by_rank:
            r, note = _partial_rank(facts, eps, note)
        else:
            hit = reached_rank(np.asarray(lam), eps) if len(lam) >= 2 else 0
            if hit is None:
                # Below the floor the estimate's negative eigenvalues leave, no rank reaches it.
                note += f": not reached (floor {stress_floor(np.asarray(lam)):.3f})"
            r = math.inf if hit is None else float(hit)
        out.append(
            RuleResult(
                "max-rank-for-stress",
                f"{eps:g}",
                r,
                float(max_rank),
                "<=",
                r <= max_rank,
                "MDS rank",
                note,
            )
        )
    if config.min_positional_info is not None:
        bits = facts.positional_info
        out.append(
            RuleResult(
                "min-positional-info",
                "",
                bits,
                config.min_positional_info,
                ">=",
                bits >= config.min_positional_info,
                "I(position; token)",
                f"positions 0..{facts.corpus.n_eff - 1}",
                " bits",
            )
        )
    if config.min_support is not None:
        # Model view: real (non-pad) tokens, since every sequence is padded to every position.
        supports = facts.corpus.counted_supports
        pos = int(np.argmin(supports))  # the first of the smallest
        low = int(supports[pos])
        out.append(
            RuleResult(
                "min-support",
                "",
                float(low),
                float(config.min_support),
                ">=",
                low >= config.min_support,
                "smallest support",
                f"at position {pos} of 0..{facts.corpus.max_len - 1}",
                f" {facts.corpus.support_unit}",
            )
        )
    return GateReport(facts.corpus, tuple(out), config.strict, config.source, facts.warnings)


def _partial_rank(facts: GateFacts, eps: float, note: str) -> tuple[float, str]:
    """The rank figure of a partial spectrum: the effective rank among the computed ones,
    infinity below a known floor, else ``k + 1`` ("more than k", a lower bound)."""
    by_rank = np.asarray(facts.stress_by_rank)
    hits = np.flatnonzero(by_rank <= eps)
    if hits.size:
        return float(hits[0] + 1), note
    if facts.floor is not None and facts.floor > eps:
        return math.inf, note + f": not reached (floor {facts.floor:.3f})"
    k = by_rank.size
    return float(k + 1), note + f": more than {k} (only the top {k} eigenvalues were computed)"


def run_gate(
    counts: Counts,
    config: GateConfig,
    analysis: Analysis | None = None,
    *,
    progress: Progress = None,
) -> GateReport:
    """:func:`measure` then :func:`evaluate`."""
    return evaluate(config, measure(counts, config, analysis, progress=progress))
