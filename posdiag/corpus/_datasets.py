"""Corpora read through Hugging Face ``datasets``: presets, ``hf:`` data sets (streamed, or the
cache offline), ``save_to_disk`` folders and ``.parquet``/``.arrow`` files; what to do when the
Hub is out of reach (:class:`HubUnavailable`)."""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..errors import PosdiagError
from ._textfiles import DEFAULT_COLUMN, _first_line, _grouped, _no_field

if TYPE_CHECKING:
    from .sources import Source

# Rows per datasets batch: large enough to amortise Arrow -> Python conversion, small in memory.
_HF_BATCH = 1000
# Seconds to wait for the Hub before declaring it unreachable (instead of datasets' long retries).
_HUB_TIMEOUT = 3.0


@dataclass(frozen=True)
class Preset:
    """A named Hugging Face data set: where it lives and which column holds the text;
    ``splits``, those of its config, are checked before the Hub is asked."""

    name: str
    dataset: str
    summary: str
    splits: tuple[str, ...]
    config: str | None = None
    split: str = "train"
    column: str = "text"


_TVT = ("train", "validation", "test")


def _wikitext(size: str) -> Preset:
    summary = f"WikiText-{size} (raw), one line per row"
    return Preset(
        f"wikitext-{size}", "Salesforce/wikitext", summary, _TVT, f"wikitext-{size}-raw-v1"
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("sst2", "stanfordnlp/sst2", "SST-2 movie-review sentences", _TVT, column="sentence"),
        Preset("imdb", "stanfordnlp/imdb", "IMDb movie reviews", ("train", "test", "unsupervised")),
        _wikitext("2"),
        _wikitext("103"),
        Preset("tinystories", "roneneldan/TinyStories", "TinyStories", _TVT[:2]),
        Preset("c4-en", "allenai/c4", "C4 English, validation split", _TVT[:2], "en", "validation"),
    )
}


class HubUnavailable(PosdiagError):
    """A hub data set or tokenizer cannot be reached and is not in the local cache; for a data
    set, :meth:`message_for` rewrites the user's command to read the suggested local copy."""

    def __init__(
        self,
        message: str,
        *,
        corpus: str | None = None,
        local: str | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.corpus, self.local, self.column = corpus, local, column

    def message_for(self, argv: Sequence[str] | None) -> str:
        """The message with ``posdiag <command> ...`` replaced by ``argv`` (the arguments after
        ``posdiag``, command first) with the corpus swapped for the local copy and ``--column``
        set; every other option is kept as typed."""
        text = str(self)
        if not argv or self.corpus is None or self.local is None:
            return text
        old = _template_command(self.local, self.column)
        return text.replace(old, local_command(argv, self.corpus, self.local, self.column))


def _template_command(local: str, column: str | None) -> str:
    col = f" --column {shlex.quote(column)}" if column else ""
    return f"posdiag <command> {shlex.quote(local)}{col}"


def local_command(argv: Sequence[str], corpus: str, local: str, column: str | None = None) -> str:
    """``posdiag`` + ``argv`` with the argument ``corpus`` replaced by ``local`` and
    ``--column`` set to ``column`` (an existing ``--column`` is replaced), shell-quoted."""
    out: list[str] = []
    args = iter(enumerate(argv))
    for i, arg in args:
        if column is not None and arg == "--column" and i + 1 < len(argv):
            next(args)  # the old column's value
        elif column is None or not arg.startswith("--column="):
            out.append(arg)
    if corpus in out:
        out[out.index(corpus)] = local
    if column is not None:
        out += ["--column", column]
    return "posdiag " + shlex.join(out)


def _parquet_rows(path: str, column: str | None) -> int:
    """Rows in a parquet file from its footer; checks the file and the column up front."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise PosdiagError(f"{path}: not a valid parquet file ({_first_line(exc)})") from None
    names = meta.schema_arrow.names
    col = column or DEFAULT_COLUMN
    if col not in names:
        raise PosdiagError(f"{path}: no column {col!r}; columns: {', '.join(names)}")
    return int(meta.metadata.num_rows)


def _column_texts(
    batches: Iterable[dict[str, list[Any]]], column: str, name: str, group: str | None = None
) -> Iterator[str]:
    for batch in batches:
        if group is not None and group not in batch:
            raise _no_field(name, group, batch)
        groups = batch[group] if group is not None else None
        for k, value in enumerate(batch[column]):
            if value is None:
                continue
            if not isinstance(value, str):
                raise PosdiagError(
                    f"{name}: column {column!r} must hold text; got {type(value).__name__}"
                )
            if value.strip():
                if group is None or groups is None:
                    yield value
                else:
                    yield _grouped(value, {group: groups[k]}, group, name, "a row")


def _datafile_texts(
    files: tuple[str, ...], fmt: str, column: str | None, name: str, group: str | None = None
) -> Iterator[str]:
    import datasets

    with _quiet_datasets():
        ds = datasets.load_dataset(fmt, data_files=list(files), split="train", streaming=True)

    def unreadable(exc: Exception) -> PosdiagError:
        bad = _find_corrupt(files, fmt) or ", ".join(files)
        return PosdiagError(f"{bad}: cannot read the {fmt} file ({_first_line(exc)})")

    yield from _streamed_texts(ds, column or DEFAULT_COLUMN, name, unreadable, group)


def _streamed_texts(
    ds: Any,
    col: str,
    name: str,
    unreadable: Callable[[Exception], PosdiagError],
    group: str | None = None,
) -> Iterator[str]:
    """Texts of column ``col`` of a streamed ``datasets`` data set, batch by batch; ``unreadable``
    makes a reading failure's error. The column is checked on the first batch read."""

    with _quiet_datasets(), contextlib.suppress(Exception):
        ds = ds.select_columns([col] if group is None else [col, group])
    it = iter(ds.iter(batch_size=_HF_BATCH))
    while True:
        try:
            with _quiet_datasets():
                batch = next(it)
        except StopIteration:
            return
        except PosdiagError:
            raise
        except Exception as exc:
            raise unreadable(exc) from None
        if col not in batch:
            raise PosdiagError(f"{name}: no column {col!r}; columns: {', '.join(batch)}")
        yield from _column_texts([batch], col, name, group)


def _find_corrupt(files: tuple[str, ...], fmt: str) -> str | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in files:
        try:
            if fmt == "parquet":
                pq.ParquetFile(f).read_row_group(0) if pq.ParquetFile(f).num_row_groups else None
            else:
                with pa.memory_map(f) as src:
                    pa.ipc.open_stream(src).read_all()
        except Exception:
            return f
    return None


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Silence datasets' own progress bars and info logging (posdiag draws its own)."""
    import datasets

    was = datasets.utils.logging.is_progress_bar_enabled()
    datasets.utils.logging.disable_progress_bar()
    level = datasets.utils.logging.get_verbosity()
    datasets.utils.logging.set_verbosity_error()
    try:
        yield
    finally:
        datasets.utils.logging.set_verbosity(level)
        if was:
            datasets.utils.logging.enable_progress_bar()


def _load_disk(name: str, path: str, split: str | None) -> Any:
    import datasets

    try:
        with _quiet_datasets():
            ds = datasets.load_from_disk(path)
    except Exception as exc:
        raise PosdiagError(f"{name}: cannot load the saved data set ({_first_line(exc)})") from None
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if split is None:
            split = splits[0] if len(splits) == 1 else "train"
        if split not in ds:
            raise PosdiagError(f"{name}: no split {split!r}; splits: {', '.join(splits)}")
        ds = ds[split]
    elif split not in (None, "train"):
        raise PosdiagError(f"{name}: a single saved data set has no split {split!r}")
    return ds


def _load(src: Source) -> Any:
    """The data set of a ``disk`` or ``hf`` source."""
    if src.format == "disk":
        return _load_disk(src.name, str(src.dataset), src.split)
    return _load_hf(src)


def _disk_texts(src: Source, rows: range | None = None) -> Iterator[str]:
    """The texts of a map-style data set (a ``disk`` one, or rows ``rows`` of any)."""
    ds = _load(src)
    col, group = src.column or DEFAULT_COLUMN, src.group_by
    if group is not None and group not in ds.column_names:
        raise _no_field(src.name, group, ds.column_names)
    if rows is not None:
        ds = ds.select(rows)
    cols = [col] if group is None else [col, group]
    yield from _column_texts(
        ds.select_columns(cols).iter(batch_size=_HF_BATCH), col, src.name, group
    )


def _parse_hub(spec: str) -> tuple[str, str | None, str | None]:
    """``OWNER/NAME[:CONFIG][@SPLIT]`` -> (dataset, config, split)."""
    body, _, split = spec.partition("@")
    dataset, _, config = body.partition(":")
    if not dataset:
        raise PosdiagError(f"hf:{spec}: expected hf:OWNER/NAME[:CONFIG][@SPLIT]")
    return dataset, config or None, split or None


def _local_copy(dataset: str, names: tuple[str, ...], root: str | None) -> Path | None:
    if Path(dataset).exists():
        return Path(dataset)
    if root is None:
        return None
    base = Path(root)
    if not base.is_dir():
        raise PosdiagError(f"--data-dir {root}: no such folder")
    for cand in (*names, dataset, dataset.split("/")[-1]):
        p = base / cand
        if p.exists():
            return p
    return None


def _hf_columns(ds: Any) -> list[str] | None:
    if getattr(ds, "column_names", None):
        return list(ds.column_names)
    if getattr(ds, "features", None):
        return list(ds.features)
    return None


_PROBE: dict[str, bool] = {}


def hub_offline() -> str | None:
    """Why the Hugging Face Hub is out of reach (offline mode, or no TCP connection within a
    short timeout instead of the libraries' retries), else None."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").upper() in ("1", "ON", "YES", "TRUE"):
            return f"{var}={os.environ[var]}"
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    if host not in _PROBE:
        try:
            socket.create_connection((host, port), timeout=_HUB_TIMEOUT).close()
            _PROBE[host] = True
        except OSError:
            _PROBE[host] = False
    return None if _PROBE[host] else f"no connection to {host}"


@contextlib.contextmanager
def offline_mode() -> Iterator[None]:
    """Make ``datasets`` and ``huggingface_hub`` use only their caches for the duration."""
    import datasets.config as dc
    import huggingface_hub.constants as hc

    saved = (dc.HF_HUB_OFFLINE, dc.HF_DATASETS_OFFLINE, hc.HF_HUB_OFFLINE)
    dc.HF_HUB_OFFLINE = dc.HF_DATASETS_OFFLINE = hc.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        dc.HF_HUB_OFFLINE, dc.HF_DATASETS_OFFLINE, hc.HF_HUB_OFFLINE = saved


def _load_hf(src: Source) -> Any:
    import datasets

    dataset = str(src.dataset)
    why = None if Path(dataset).exists() else hub_offline()
    try:
        with _quiet_datasets():
            if why is None:
                return datasets.load_dataset(dataset, src.config, split=src.split, streaming=True)
            # Offline: the prepared Arrow cache (memory-mapped, not loaded into memory).
            with offline_mode():
                return datasets.load_dataset(dataset, src.config, split=src.split)
    except PosdiagError:
        raise
    except Exception as exc:
        msg = _first_line(exc)
        if why is not None or isinstance(exc, ConnectionError):
            raise _unavailable(src, why or msg) from None
        if "split" in msg.lower() or isinstance(exc, ValueError):
            raise PosdiagError(f"{src.name}: {msg}") from None
        raise PosdiagError(f"{src.name}: cannot load the data set ({msg})") from None


def _unavailable(src: Source, why: str) -> HubUnavailable:
    """What to do when a data set is neither reachable nor cached: the ``datasets`` line that
    makes a local copy on a connected machine, and the user's command reading it."""
    dataset = str(src.dataset)
    preset = next((p for p in PRESETS.values() if p.dataset == dataset), None)
    stem = preset.name if preset else dataset.split("/")[-1]
    local = f"{stem}.parquet"
    col = src.column or DEFAULT_COLUMN
    args = ", ".join(repr(a) for a in (dataset, src.config) if a is not None)
    load = f"datasets.load_dataset({args}, split={src.split!r})"
    return HubUnavailable(
        f"{src.name}: cannot reach the Hugging Face Hub ({why}) and it is not in the datasets "
        f'cache; make a local copy on a connected machine: python -c "import datasets; '
        f'{load}.to_parquet({local!r})", then run {_template_command(local, col)} '
        f"(or {load}.save_to_disk('DIR/{stem}') there and pass --data-dir DIR)",
        corpus=src.name,
        local=local,
        column=col,
    )


def _hub_texts(src: Source) -> Iterator[str]:
    def unreadable(exc: Exception) -> PosdiagError:
        return PosdiagError(f"{src.name}: reading failed ({_first_line(exc)})")

    yield from _streamed_texts(
        _load_hf(src), src.column or DEFAULT_COLUMN, src.name, unreadable, src.group_by
    )
