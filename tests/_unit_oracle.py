"""A scalar, pure-Python reference of the sampling-unit rule of docs/geometry.md section 2b.

Written from the documented rule, one sequence at a time with Python integers, as an oracle for
the vectorised production code in posdiag/corpus/units.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_LEN = 0xD6E8FEB86659FD93


def mix(x: int) -> int:
    x &= _MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def word_hash(word: str) -> int:
    """Token hash of a per-run (whitespace) vocabulary: blake2b-64 of the token's text."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


def id_hash(token_id: int) -> int:
    """Token hash of a fixed vocabulary: the mixed id."""
    return mix(token_id * _GOLDEN + 7)


def content_hash(token_hashes: Sequence[int], prefix: int = 0) -> int:
    """Hash of the first ``prefix`` tokens (all when 0 or when the sequence is shorter)."""
    used = list(token_hashes) if prefix <= 0 else list(token_hashes)[:prefix]
    total = 0
    for p, h in enumerate(used):
        total = (total + mix(h ^ mix(p + 1))) & _MASK
    return mix(total + len(used) * _LEN)


def group_key(value: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(b"group\x00" + value.encode(), digest_size=8).digest(), "little"
    )


def shard(key: int, seed: int, k: int) -> int:
    return mix(key ^ mix(seed * _GOLDEN + 1)) % k


def words_shard(words: Sequence[str], seed: int, k: int, prefix: int = 6) -> int:
    """Shard of a whitespace-tokenized sequence."""
    return shard(content_hash([word_hash(w) for w in words], prefix), seed, k)
