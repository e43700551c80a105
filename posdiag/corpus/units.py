"""Sampling units: which sequences are independent, and so which shard each one goes to.

A sequence's shard is a function of its content (its first ``prefix`` tokens, or its
``--group-by`` value) and the seed, never of where it sits in the corpus (docs/geometry.md
section 2b, "The sampling unit", gives the hashes). The same pass tallies duplicates and the
units reaching each position (:class:`UnitTally`) and drops exact duplicates with ``dedup``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._util.validate import check_int
from ..errors import PosdiagError

__all__ = [
    "DEFAULT_GROUP_PREFIX",
    "DUPLICATE_WARN_SHARE",
    "Grouped",
    "UnitKeyer",
    "UnitState",
    "UnitTally",
    "duplicate_warning",
    "mix",
    "shard_of_keys",
]

# The shortest prefix independent sentences rarely share (docs/geometry.md 2b, "Why 6 tokens").
DEFAULT_GROUP_PREFIX = 6

# Above this share of exact duplicate sequences the reports warn (docs/geometry.md section 2b).
DUPLICATE_WARN_SHARE = 0.01

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LEN = np.uint64(0xD6E8FEB86659FD93)
# Compact the per-sequence buffers into distinct entries past this many rows.
_COMPACT_AT = 1 << 22


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (a bijection of uint64 with full avalanche), elementwise."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


def flatten(
    seqs: Sequence[Sequence[int]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, position of each id in its sequence, lengths, starts) of ragged ``seqs``: int64 of
    shapes (total,), (total,), (m,), (m,)."""
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=total)
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    return flat, pos, lengths, starts


def _blake(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def shard_of_keys(keys: np.ndarray, seed: int, k: int) -> np.ndarray:
    """Shard in ``[0, k)`` of each unit key, for ``seed``: ``mix(key ^ mix(seed)) mod k``.

    Parameters
    ----------
    keys : ndarray of shape (m,), uint64
    seed : int
        Non-negative.
    k : int
        Number of shards, >= 1.

    Returns
    -------
    ndarray of shape (m,), int64
    """
    salt = mix(np.array([seed], dtype=np.uint64) * _GOLDEN + np.uint64(1))
    return (mix(np.asarray(keys, dtype=np.uint64) ^ salt) % np.uint64(k)).astype(np.int64)


class Grouped(str):
    """A document's text that carries its ``--group-by`` value (``group``) through the readers."""

    group: str

    def __new__(cls, text: str, group: str) -> Grouped:
        obj = super().__new__(cls, text)
        obj.group = group
        return obj


@dataclass(frozen=True)
class UnitState:
    """What a counting pass (or a piece of it) saw of its units, in a form that adds up.

    ``pairs`` (m, 2) uint64 and ``pair_counts`` (m,): distinct (prefix key, content hash) with
    how many items had them; ``units`` (u,) uint64 and ``reach`` (u,): distinct unit keys with the
    longest sequence of each (positions it reaches). ``items`` and ``dropped`` are totals.
    """

    pairs: np.ndarray
    pair_counts: np.ndarray
    units: np.ndarray
    reach: np.ndarray
    items: int = 0
    dropped: int = 0

    def __add__(self, other: UnitState) -> UnitState:
        return _compact(
            [self.pairs, other.pairs],
            [self.pair_counts, other.pair_counts],
            [self.units, other.units],
            [self.reach, other.reach],
            self.items + other.items,
            self.dropped + other.dropped,
        )


def _compact(
    pairs: list[np.ndarray],
    counts: list[np.ndarray],
    units: list[np.ndarray],
    reach: list[np.ndarray],
    items: int,
    dropped: int,
) -> UnitState:
    p, c = np.concatenate(pairs), np.concatenate(counts)
    if p.shape[0]:
        uniq, inv = np.unique(p, axis=0, return_inverse=True)
        c = np.bincount(inv.reshape(-1), weights=c, minlength=uniq.shape[0]).astype(np.int64)
        p = uniq
    u, r = np.concatenate(units), np.concatenate(reach)
    if u.size:
        order = np.lexsort((r, u))
        u, r = u[order], r[order]
        last = np.r_[u[1:] != u[:-1], True]
        u, r = u[last], r[last]  # the longest of each unit sorts last
    return UnitState(p, c, u, r, items, dropped)


@dataclass(frozen=True)
class UnitTally:
    """Duplicates and sampling units of a corpus (docs/geometry.md section 2b).

    Attributes
    ----------
    item : str
        What was hashed: ``"sequences"`` (text and model views) or ``"documents"`` (packed).
    items, distinct, units : int
        Items read (before ``--dedup``), distinct items (by content hash), distinct unit keys.
    prefix : int
        Shared-prefix length in tokens (0: off).
    prefix_groups, prefix_grouped, largest_group : int
        Groups of >= 2 distinct items sharing their first ``prefix`` tokens, the items in them
        (copies included) and in the largest.
    group_by : str or None
    dropped : int
        Exact duplicates dropped by ``--dedup``.
    unit_supports : tuple of int
        Distinct units reaching each position (``max_len`` entries).
    dedup : bool
    """

    item: str
    items: int
    distinct: int
    prefix: int
    prefix_groups: int
    prefix_grouped: int
    largest_group: int
    units: int
    group_by: str | None
    dropped: int
    unit_supports: tuple[int, ...]
    dedup: bool = False

    @property
    def duplicates(self) -> int:
        """Items that repeat an earlier one exactly (``items - distinct``)."""
        return self.items - self.distinct

    @property
    def share(self) -> float:
        """``duplicates / items`` (0 for an empty corpus)."""
        return self.duplicates / self.items if self.items else 0.0

    def to_meta(self) -> dict[str, Any]:
        """JSON-ready fields, as stored in a counts file's metadata (``units``)."""
        meta = dataclasses.asdict(self)
        head = {k: meta.pop(k) for k in ("item", "items", "distinct")}
        supports = list(meta.pop("unit_supports"))
        derived = {"duplicates": self.duplicates, "duplicate_share": self.share}
        return {**head, **derived, **meta, "unit_supports": supports}

    @staticmethod
    def from_meta(meta: Mapping[str, Any] | None) -> UnitTally | None:
        """The tally stored by :meth:`to_meta`, or None (older counts files, token id files)."""
        if not isinstance(meta, Mapping):
            return None
        try:
            ints = [f.name for f in dataclasses.fields(UnitTally) if f.type == "int"]
            counts: dict[str, Any] = {name: int(meta[name]) for name in ints}
            return UnitTally(
                item=str(meta["item"]),
                group_by=None if meta.get("group_by") is None else str(meta["group_by"]),
                unit_supports=tuple(int(x) for x in meta["unit_supports"]),
                dedup=bool(meta.get("dedup", False)),
                **counts,
            )
        except (KeyError, TypeError, ValueError):
            return None


def duplicate_warning(tally: UnitTally | None, *, sharded: bool = True) -> str | None:
    """The reports' warning when exact duplicates exceed :data:`DUPLICATE_WARN_SHARE`."""
    if tally is None or tally.dedup or tally.share <= DUPLICATE_WARN_SHARE:
        return None  # with --dedup the counts hold one copy of each
    what = tally.item
    head = (
        f"{tally.duplicates:,} of {tally.items:,} {what} ({tally.share:.1%}) are exact "
        f"duplicates: each copy weighs in every distribution"
    )
    if sharded:
        return (
            f"{head}, but copies share a shard, so the cross-fit and the intervals count each "
            f"once as a sampling unit; --dedup counts them once"
        )
    return (
        f"{head}, and counts without shards are split by thinning, which takes copies for "
        f"independent sequences: the noise bias returns; count the corpus with --dedup"
    )


class UnitKeyer:
    """Unit keys, duplicate tally and ``--dedup`` of one counting pass (or piece).

    Parameters
    ----------
    tokenizer
        The tokenizer whose ids are hashed (per-run vocabularies hash the tokens' text).
    prefix, group_by, dedup
        The shared-prefix length (0: exact content only), the ``--group-by`` field (the texts
        are then :class:`Grouped`) and whether exact duplicates are dropped.
    pad_id : int or None
        Model view: the pad id, not counted in the positions a unit reaches.
    seen : ndarray or None
        With ``dedup``: content hashes already counted elsewhere (every copy is dropped).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        prefix: int = DEFAULT_GROUP_PREFIX,
        group_by: str | None = None,
        dedup: bool = False,
        pad_id: int | None = None,
        seen: np.ndarray | None = None,
    ) -> None:
        self.prefix = check_int("group_prefix", prefix, 0)
        self.group_by = group_by
        self.dedup = dedup
        self.pad_id = pad_id
        self._run = getattr(tokenizer, "fingerprint", "") == "run"
        self._tok = tokenizer
        self._table = np.empty(0, dtype=np.uint64)
        self._seen: set[int] = set() if seen is None else set(np.asarray(seen).tolist())
        self._pairs: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._units: list[np.ndarray] = []
        self._reach: list[np.ndarray] = []
        self._rows = 0
        empty = np.empty(0, np.int64)
        self._state = UnitState(np.empty((0, 2), np.uint64), empty, empty.astype(np.uint64), empty)
        self._items = 0
        self._dropped = 0

    def _token_hashes(self, ids: np.ndarray) -> np.ndarray:
        if not self._run:
            return mix(ids.astype(np.uint64) * _GOLDEN + np.uint64(7))
        if ids.size and int(ids.max()) >= self._table.size:
            vocab = self._tok.vocabulary() or ()
            new = [_blake(w.encode("utf-8", "surrogatepass")) for w in vocab[self._table.size :]]
            self._table = np.concatenate([self._table, np.array(new, dtype=np.uint64)])
        return self._table[ids]

    def hashes(self, seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(content hash, prefix key, length) of each sequence, each of shape (m,).

        The content hash of ``t_0 .. t_{L-1}`` is ``mix(sum_p mix(h(t_p) ^ mix(p + 1)) + L c)``
        (sums wrap mod 2**64; ``h`` the token hash); the prefix key is the same over
        ``p < prefix`` with ``min(L, prefix)``, so it equals the content hash when ``L <= prefix``.
        """
        flat, pos, lengths, starts = flatten(seqs)
        x = mix(self._token_hashes(flat) ^ mix(pos.astype(np.uint64) + np.uint64(1)))
        full = self._segment_hash(x, starts, lengths)
        if self.prefix <= 0:
            return full, full, lengths
        xk = np.where(pos < self.prefix, x, np.uint64(0))
        pkey = self._segment_hash(xk, starts, np.minimum(lengths, self.prefix), lengths)
        return full, pkey, lengths

    @staticmethod
    def _segment_hash(
        x: np.ndarray, starts: np.ndarray, counted: np.ndarray, spans: np.ndarray | None = None
    ) -> np.ndarray:
        spans = counted if spans is None else spans
        csum = np.zeros(x.size + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.cumsum(x, out=csum[1:])
            seg = csum[starts + spans] - csum[starts]
            return mix(seg + counted.astype(np.uint64) * _LEN)

    def keys(
        self, seqs: Sequence[Sequence[int]], texts: Sequence[str] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unit key of each item and which to keep (all but exact duplicates with ``dedup``),
        recording the tally; ``texts`` (:class:`Grouped`) when ``group_by`` is set."""
        full, pkey, _ = self.hashes(seqs)
        if self.group_by is not None:
            if texts is None or not all(isinstance(t, Grouped) for t in texts):
                raise PosdiagError(
                    f"--group-by {self.group_by}: the texts carry no group values (read them "
                    "with posdiag.corpus.sources.open_source(..., group_by=FIELD))"
                )
            # A group's key: blake2b (64 bits) of its UTF-8 text.
            groups = (t.group.encode("utf-8", "surrogatepass") for t in texts)  # type: ignore[attr-defined]
            ukey = np.fromiter((_blake(b"group\x00" + g) for g in groups), np.uint64, len(texts))
        else:
            ukey = pkey
        keep = np.ones(full.size, dtype=bool)
        if self.dedup:
            for j, h in enumerate(full.tolist()):
                keep[j] = h not in self._seen  # the first copy is kept
                self._seen.add(h)
            self._dropped += int(full.size - np.count_nonzero(keep))
        self._items += int(full.size)
        self._pairs.append(np.stack([pkey, full], axis=1))
        self._counts.append(np.ones(full.size, dtype=np.int64))
        self._rows += full.size
        return ukey, keep

    def reach(self, seqs: Sequence[Sequence[int]], ukeys: np.ndarray) -> None:
        """Record the positions each counted sequence of unit ``ukeys`` reaches."""
        if self.pad_id is None:
            lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        else:
            pad = self.pad_id
            lengths = np.fromiter(
                (sum(1 for t in s if t != pad) for s in seqs), dtype=np.int64, count=len(seqs)
            )
        self._units.append(np.asarray(ukeys, dtype=np.uint64))
        self._reach.append(lengths)
        self._rows += len(seqs)
        if self._rows >= _COMPACT_AT:
            self._flush()

    def _flush(self) -> None:
        self._state = _compact(
            [self._state.pairs, *self._pairs],
            [self._state.pair_counts, *self._counts],
            [self._state.units, *self._units],
            [self._state.reach, *self._reach],
            0,
            0,
        )
        self._pairs, self._counts, self._units, self._reach, self._rows = [], [], [], [], 0

    def state(self) -> UnitState:
        """Everything seen so far, in a form that adds up across pieces."""
        self._flush()
        s = self._state
        return UnitState(s.pairs, s.pair_counts, s.units, s.reach, self._items, self._dropped)


def tally_of(
    state: UnitState,
    max_len: int,
    item: str,
    prefix: int,
    group_by: str | None,
    *,
    dedup: bool = False,
) -> UnitTally:
    """The :class:`UnitTally` of a (summed) :class:`UnitState`."""
    pairs, counts = state.pairs, state.pair_counts
    # Distinct content hashes: pairs are distinct per (prefix key, hash), and the prefix key is a
    # function of the content, so each hash appears in one pair.
    distinct = int(pairs.shape[0])
    groups = grouped = largest = 0
    if prefix > 0 and distinct:
        uniq, inv, per = np.unique(pairs[:, 0], return_inverse=True, return_counts=True)
        members = np.bincount(inv.reshape(-1), weights=counts, minlength=uniq.size)
        shared = per >= 2
        groups = int(np.count_nonzero(shared))
        grouped = int(members[shared].sum())
        largest = int(members[shared].max()) if groups else 0
    reach = np.minimum(state.reach, max_len)
    hist = np.bincount(reach, minlength=max_len + 1)
    # Units reaching position i: those whose longest sequence is longer than i.
    supports = hist[::-1].cumsum()[::-1][1 : max_len + 1]
    return UnitTally(
        item=item,
        items=state.items,
        distinct=distinct,
        prefix=prefix,
        prefix_groups=groups,
        prefix_grouped=grouped,
        largest_group=largest,
        units=int(state.units.size),
        group_by=group_by,
        dropped=state.dropped,
        unit_supports=tuple(int(s) for s in supports),
        dedup=dedup,
    )


def check_group_options(
    group_by: str | None, group_prefix: int | None, dedup: bool | None
) -> tuple[str | None, int, bool]:
    """Validated ``(group_by, group_prefix, dedup)`` with their defaults."""
    prefix = (
        DEFAULT_GROUP_PREFIX if group_prefix is None else check_int("group_prefix", group_prefix, 0)
    )
    if group_by is not None and not str(group_by).strip():
        raise PosdiagError("'group_by' must name a field; got ''")
    return group_by, prefix, bool(dedup)
