"""Counting a corpus named on the command line: the one entry point every command calls.

:func:`corpus_counts` reads a counts ``.npz`` (checked against the options), or counts the
source here (:mod:`posdiag.counts.core`) or on Dask (:mod:`posdiag.counts.distributed`).
"""

from __future__ import annotations

from typing import Any

from ..corpus.sources import Source, open_source
from ..corpus.tokenizers import Tokenizer, load_tokenizer
from ..corpus.units import check_group_options
from ..errors import PosdiagError
from .core import (
    Counts,
    ProgressFn,
    check_max_len,
    count_source,
    is_counts_file,
    load_counts,
)
from .distributed import Engine, count_on_dask, engine_from_options, job_for
from .ids import count_ids

__all__ = ["corpus_counts"]


def _counted_otherwise(corpus: str, key: str, counted: Any, asked: Any) -> str:
    """What to do when an option asks a counts file for another reading than it was counted
    with: drop the option, or count the corpus again with it."""
    flag = "--" + key.replace("_", "-")
    was = f"{key}={counted!r}" if counted is not None else f"the default {key}"
    fix = f"drop {flag} to use {corpus} as counted, or count the corpus again with {flag} {asked}"
    if key == "column":
        fix += " (posdiag diff: --column-b sets corpus B's column on its own)"
    return f"{corpus}: was counted with {was}, not {key}={asked!r}; {fix}"


def corpus_counts(
    corpus: str,
    *,
    column: str | None = None,
    tokenizer: str | None = None,
    view_name: str | None = None,
    max_len: int | None = None,
    pad_token: str | None = None,
    batch_size: int = 1024,
    progress: ProgressFn | None = None,
    limit: int | None = None,
    sample: float | None = None,
    seed: int = 0,
    data_dir: str | None = None,
    dtype: str | None = None,
    vocab_size: int | None = None,
    shards: int = 0,
    shard_seed: int = 0,
    engine: str | Engine | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    group_by: str | None = None,
    group_prefix: int | None = None,
    dedup: bool | None = None,
) -> Counts:
    """Counts of ``corpus``: read from a counts ``.npz`` (options given, not None, must match
    how it was counted), or streamed from a corpus (None: the default). The options are
    :class:`~posdiag.corpus.reading.Reading`'s; ``engine`` may be an
    :class:`~posdiag.counts.distributed.Engine`; ``shards=K`` keeps ``K`` shards' counts.
    """
    if isinstance(engine, Engine):
        where = engine
    else:
        where = engine_from_options(engine or "local", scheduler, workers)
    if is_counts_file(corpus):
        asked: dict[str, Any] = dict(column=column, tokenizer=tokenizer, view=view_name)
        asked.update(max_len=max_len, vocab_size=vocab_size, limit=limit, sample=sample)
        units = {"group_by": group_by, "group_prefix": group_prefix, "dedup": dedup}
        return _checked_counts_file(corpus, asked, units)

    group_by, prefix, dedup = check_group_options(group_by, group_prefix, dedup)
    source = open_source(
        corpus,
        column,
        limit=limit,
        sample=sample,
        seed=seed,
        data_dir=data_dir,
        dtype=dtype,
        group_by=group_by,
    )
    max_len = check_max_len(512 if max_len is None else max_len)
    if source.is_ids:
        if dedup or group_prefix is not None or group_by is not None:
            flag = "--dedup" if dedup else "--group-by" if group_by else "--group-prefix"
            raise PosdiagError(
                f"{corpus}: {flag} needs documents, and token id files do not delimit them "
                "(they are counted without shards, split by thinning)"
            )
        return _count_id_file(
            source, where, progress, view_name, max_len, vocab_size, tokenizer, pad_token
        )
    if vocab_size is not None:
        raise PosdiagError(f"{corpus}: --vocab-size applies to token id files (.npy, .bin)")
    tok = load_tokenizer(tokenizer or "whitespace", pad_token=pad_token)
    how: dict[str, Any] = {
        "view_name": view_name or "text",
        "max_len": max_len,
        "batch_size": batch_size,
        "group_prefix": prefix,
        "dedup": dedup,
    }
    if where.is_dask:
        return _on_dask(
            source, tok, where, progress, pad_token=pad_token, shards=shards, seed=shard_seed, **how
        )
    return count_source(source, tok, progress=progress, shards=shards, shard_seed=shard_seed, **how)


def _on_dask(
    source: Source,
    tok: Tokenizer | None,
    engine: Engine,
    progress: ProgressFn | None,
    **job: Any,
) -> Counts:
    return count_on_dask(
        source,
        job_for(source, tok, **job),
        engine,
        tokenizer_name=tok.name if tok is not None else "ids",
        progress=progress,
    )


def _checked_counts_file(corpus: str, asked: dict[str, Any], units: dict[str, Any]) -> Counts:
    """The counts file ``corpus``, refused when an option given (not None) asks for another
    reading than it was counted with."""
    counts = load_counts(corpus)
    tally = counts.meta.get("units")
    tally = tally if isinstance(tally, dict) else {}
    counted = {key: counts.meta.get(key) for key in asked}
    counted.update(
        group_by=tally.get("group_by"),
        group_prefix=tally.get("prefix"),
        dedup=bool(tally.get("dedup", False)) if tally else None,
    )
    for key, value in {**asked, **units}.items():
        if value is not None and counted[key] != value:
            raise PosdiagError(_counted_otherwise(corpus, key, counted[key], value))
    return counts


def _count_id_file(
    source: Source,
    where: Engine,
    progress: ProgressFn | None,
    view_name: str | None,
    max_len: int,
    vocab_size: int | None,
    tokenizer: str | None,
    pad_token: str | None,
) -> Counts:
    """A token id file in the packed view, here or on Dask; ``vocab_size`` defaults to the
    tokenizer's."""
    corpus = source.name
    if view_name not in (None, "packed"):
        raise PosdiagError(
            f"{corpus}: token id files are read in the packed view; got --view {view_name}"
        )
    tok = load_tokenizer(tokenizer, pad_token=pad_token) if tokenizer else None
    if vocab_size is None and (tok is None or tok.fingerprint == "run"):
        raise PosdiagError(
            f"{corpus}: token id files need --vocab-size (or a --tokenizer with a fixed vocabulary)"
        )
    v = vocab_size if vocab_size is not None else tok.vocab_size  # type: ignore[union-attr]
    if where.is_dask:
        return _on_dask(
            source, tok, where, progress, view_name="packed", max_len=max_len, vocab_size=v
        )
    return count_ids(
        source,
        max_len=max_len,
        vocab_size=v,
        tokenizer=tok.name if tok else "ids",
        fingerprint=tok.fingerprint if tok else None,
        progress=progress,
    )
