"""Tokenizers and views: turn texts into the id sequences a model sees. The views (``text``,
``model``: special tokens and padding, ``packed``: documents joined into windows) are defined
in docs/geometry.md section 6.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.pre_tokenizers import Whitespace

from .._util.memory import require
from .._util.validate import check_choice, check_int
from ..errors import PosdiagError
from ._textfiles import _first_line

__all__ = [
    "VIEWS",
    "BytesTokenizer",
    "FileTokenizer",
    "Tokenizer",
    "WhitespaceTokenizer",
    "load_tokenizer",
    "view",
]

VIEWS = ("text", "model", "packed")
BUILTIN = ("whitespace", "bytes")
PAD_CANDIDATES = ("[PAD]", "<pad>", "<|pad|>", "<|padding|>", "<PAD>")
EOT_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|eot_id|>")


class Tokenizer:
    """What posdiag needs of a tokenizer: batch encoding with and without special tokens."""

    name: str
    # Peak memory per character of a text while it is encoded (checked for huge batches).
    bytes_per_char: int = 100

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    @property
    def fingerprint(self) -> str:
        """What identifies the id assignment: equal fingerprints mean the same id for a token
        (``"run"``: ids follow the order words were first seen, so runs share only tokens)."""
        return self.name

    def vocabulary(self) -> tuple[str, ...] | None:
        """Tokens in id order when ids are assigned per run (``whitespace``), else None."""
        return None

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text without special tokens."""
        raise NotImplementedError

    def encode_batch_model(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        """Ids as the model sees them: special tokens, truncated and padded to ``max_len``."""
        raise NotImplementedError

    def eot_id(self) -> int:
        """Id of the token that separates documents in the packed view."""
        raise NotImplementedError

    def pad_id(self) -> int | None:
        """Id of the token the model view pads with (None when there is none)."""
        return None


class WhitespaceTokenizer(Tokenizer):
    """Built-in offline word-level tokenizer.

    Words come from the ``tokenizers`` ``Whitespace`` pre-tokenizer (``\\w+|[^\\w\\s]+``); ids
    are assigned in order of first appearance, after three reserved specials: ``[PAD]`` = 0,
    ``[CLS]`` = 1, ``[SEP]`` = 2. The model view is BERT's ``[CLS] text [SEP]`` padded with
    ``[PAD]``; the packed view separates documents with ``[SEP]``.
    """

    SPECIALS = ("[PAD]", "[CLS]", "[SEP]")
    bytes_per_char = 0  # texts are pre-tokenized in pieces (see _pieces): no per-text peak

    def __init__(self) -> None:
        self.name = "whitespace"
        self._pre = Whitespace()
        self._vocab: dict[str, int] = {tok: i for i, tok in enumerate(self.SPECIALS)}

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def _ids(self, text: str) -> list[int]:
        vocab = self._vocab
        out = []
        for piece in _pieces(text):
            for word, _ in self._pre.pre_tokenize_str(piece):
                out.append(vocab.setdefault(word, len(vocab)))
        return out

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._ids(t) for t in texts]

    def encode_batch_model(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        body = max(max_len - 2, 0)
        return _padded(([1, *self._ids(t)[:body], 2][:max_len] for t in texts), 0, max_len)

    def eot_id(self) -> int:
        return 2

    def pad_id(self) -> int | None:
        return 0

    @property
    def fingerprint(self) -> str:
        return "run"

    def vocabulary(self) -> tuple[str, ...] | None:
        return tuple(self._vocab)


def _padded(seqs: Iterable[list[int]], pad: int, max_len: int) -> list[list[int]]:
    """Each sequence (at most ``max_len`` ids) padded with ``pad`` to ``max_len``."""
    return [ids + [pad] * (max_len - len(ids)) for ids in seqs]


# Longer texts are pre-tokenized in pieces of about this many characters: the pre-tokenizer's
# (word, offsets) list costs ~700 bytes a word, 2.1 GB for one 20 MB line.
_PIECE = 1 << 20
_SPACE = re.compile(r"[ \t\n\r]")


def _pieces(text: str) -> Iterator[str]:
    """``text`` cut at whitespace into pieces of about :data:`_PIECE` characters (so the
    ``Whitespace`` pre-tokenizer finds the same words)."""

    start, size = 0, len(text)
    while start < size:
        end = start + _PIECE
        if end < size:
            m = _SPACE.search(text, end)
            end = m.start() if m else size
        yield text[start:end]
        start = end


class BytesTokenizer(Tokenizer):
    """Built-in byte-level tokenizer: the UTF-8 bytes of the text, ids 0..255, no vocabulary.

    It has no special tokens: the model view pads with ``pad_token`` (a byte value 0..255 or a
    single ASCII character, required), and the packed view separates documents with the newline
    byte 10, so a packed ``.txt`` corpus is exactly its file's bytes.
    """

    bytes_per_char = 40  # UTF-8 bytes, then a list of ids (8-byte pointers) of up to 4 per char

    def __init__(self, pad_token: str | None = None) -> None:
        self.name = "bytes"
        self._pad: int | None = None
        if pad_token is not None:
            if pad_token.isdigit() and int(pad_token) < 256:
                self._pad = int(pad_token)
            elif len(pad_token) == 1 and ord(pad_token) < 128:
                self._pad = ord(pad_token)
            else:
                raise PosdiagError(
                    f"tokenizer bytes: --pad-token must be a byte value 0..255 or one ASCII "
                    f"character; got {pad_token!r}"
                )

    @property
    def vocab_size(self) -> int:
        return 256

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(t.encode("utf-8")) for t in texts]

    def encode_batch_model(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        if self._pad is None:
            raise PosdiagError(
                "tokenizer bytes: has no pad token; the model view pads to max_len: "
                "name a byte with --pad-token (e.g. --pad-token 0)"
            )
        return _padded((list(t.encode("utf-8")[:max_len]) for t in texts), self._pad, max_len)

    def pad_id(self) -> int | None:
        return self._pad

    def eot_id(self) -> int:
        return 10


class FileTokenizer(Tokenizer):
    """A Hugging Face tokenizer (a ``tokenizer.json`` path, or ``loaded`` from the hub); its pad
    token: ``pad_token``, else its own padding, else the first of :data:`PAD_CANDIDATES`."""

    def __init__(
        self, path: str, pad_token: str | None = None, *, loaded: HFTokenizer | None = None
    ) -> None:
        if loaded is None:
            p = Path(path)
            if not p.is_file():
                raise PosdiagError(
                    f"tokenizer {path!r}: no such file (built-in tokenizers: {', '.join(BUILTIN)})"
                )
            _check_tokenizer_file(p, path)
            try:
                loaded = HFTokenizer.from_file(str(p))
            except Exception as exc:  # tokenizers raises bare Exception subclasses
                raise _not_a_tokenizer(path, exc) from None
        self._tok = loaded
        self.name = path
        self._pad_token = pad_token
        own = self._tok.padding
        self._own_pad: tuple[str, int] | None = (
            (str(own["pad_token"]), int(own["pad_id"])) if own else None
        )
        self._tok.no_truncation()
        self._tok.no_padding()
        self._fingerprint = hashlib.sha256(self._tok.to_str().encode("utf-8")).hexdigest()[:16]

    @property
    def fingerprint(self) -> str:
        return f"sha256:{self._fingerprint}"

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets posdiag never uses.
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)]

    def _find(self, candidates: Sequence[str], what: str, why: str) -> tuple[str, int]:
        """The first of ``candidates`` in the vocabulary, with its id; else an error."""
        for tok in candidates:
            idx = self._tok.token_to_id(tok)
            if idx is not None:
                return tok, idx
        raise PosdiagError(
            f"tokenizer {self.name}: has no {what} (looked for {', '.join(candidates)}); {why}"
        )

    def _pad(self) -> tuple[str, int]:
        if self._pad_token is not None:
            idx = self._tok.token_to_id(self._pad_token)
            if idx is None:
                raise PosdiagError(
                    f"tokenizer {self.name}: pad token {self._pad_token!r} is not in its vocabulary"
                )
            return self._pad_token, idx
        if self._own_pad is not None:
            return self._own_pad
        why = "the model view pads to max_len: name one with --pad-token"
        return self._find(PAD_CANDIDATES, "pad token", why)

    def pad_id(self) -> int | None:
        return self._pad()[1]

    def encode_batch_model(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        pad_token, pad_id = self._pad()
        # tokenizers cannot truncate below the special tokens; it would return whole sequences.
        specials = self._tok.num_special_tokens_to_add(False)
        if specials > max_len:
            raise PosdiagError(
                f"tokenizer {self.name}: --max-len {max_len} is shorter than the {specials} "
                "special tokens its post-processor adds in the model view"
            )
        self._tok.enable_truncation(max_length=max_len)
        self._tok.enable_padding(length=max_len, pad_id=pad_id, pad_token=pad_token)
        try:
            return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=True)]
        finally:
            self._tok.no_truncation()
            self._tok.no_padding()

    def eot_id(self) -> int:
        why = "the packed view joins documents with it"
        return self._find(EOT_CANDIDATES, "end-of-text token", why)[1]


def _not_a_tokenizer(path: str, exc: Exception) -> PosdiagError:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return PosdiagError(f"{path}: not a valid tokenizer.json ({first})")


def _largest_id(doc: object) -> int:
    """The largest token id a parsed ``tokenizer.json`` declares (model vocab, added tokens)."""
    if not isinstance(doc, dict):
        return -1
    ids: list[int] = []
    model = doc.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids += [v for v in vocab.values() if isinstance(v, int)]
    elif isinstance(vocab, list):  # Unigram: [token, score] pairs, ids are positions
        ids.append(len(vocab) - 1)
    added = doc.get("added_tokens")
    if isinstance(added, list):
        ids += [a["id"] for a in added if isinstance(a, dict) and isinstance(a.get("id"), int)]
    return max(ids, default=-1)


def _check_tokenizer_file(p: Path, path: str) -> None:
    """Refuse a ``tokenizer.json`` whose ids would make the tokenizers library allocate too much
    (it keeps a table indexed by id: one huge id in a tiny file costs gigabytes)."""
    size = p.stat().st_size
    require(f"{path}: parsing a {size:,}-byte tokenizer.json", 20 * size)
    try:
        doc = json.loads(p.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise _not_a_tokenizer(path, exc) from None
    largest = _largest_id(doc)
    if largest >= 2**31 - 1:
        raise PosdiagError(
            f"{path}: token id {largest:,} is outside [0, 2147483646]; not a usable tokenizer"
        )
    # The library's id table and posdiag's vocabulary list: ~100 bytes per id up to the largest.
    require(f"{path}: a vocabulary of ids up to {largest:,}", 100 * (largest + 1))


def load_tokenizer(spec: str = "whitespace", *, pad_token: str | None = None) -> Tokenizer:
    """A tokenizer by name or path: ``whitespace``, ``bytes``, a ``tokenizer.json`` path, or a
    Hugging Face Hub name (from the local cache when the Hub is out of reach)."""
    if spec == "whitespace":
        return WhitespaceTokenizer()
    if spec == "bytes":
        return BytesTokenizer(pad_token)
    if Path(spec).exists() or spec.endswith(".json") or spec.count("/") > 1:
        return FileTokenizer(spec, pad_token=pad_token)
    from ..encodings._core import did_you_mean

    # A typo of a built-in name is not sent to the Hub (where it fails offline, or loads another).
    hint = did_you_mean(spec, BUILTIN)
    if hint:
        raise PosdiagError(
            f"tokenizer {spec!r}: not a built-in tokenizer or a file; {hint}"
            f"built-in tokenizers: {', '.join(BUILTIN)} (else a tokenizer.json path or a hub name)"
        )
    return FileTokenizer(spec, pad_token=pad_token, loaded=_from_hub(spec))


def _from_hub(name: str) -> HFTokenizer:
    from .sources import HubUnavailable, hub_offline, offline_mode

    why = hub_offline()
    try:
        with offline_mode() if why else contextlib.nullcontext():
            return HFTokenizer.from_pretrained(name)
    except Exception as exc:
        text = _first_line(exc)
        if why is not None or "connection" in text.lower():
            raise HubUnavailable(
                f"tokenizer {name!r}: not a file, and the Hugging Face Hub is out of reach "
                f"({why or text}) with no cached copy; pass a tokenizer.json path "
                f"(built-in tokenizers: {', '.join(BUILTIN)})"
            ) from None
        raise PosdiagError(
            f"tokenizer {name!r}: not a file, and not loadable from the Hugging Face Hub ({text}); "
            f"built-in tokenizers: {', '.join(BUILTIN)}"
        ) from None


# A batch's characters above which the tokenizer's memory is estimated (and checked) first.
_CHECK_CHARS = 1 << 22


def _batches(texts: Iterable[str], size: int, per_char: int = 0) -> Iterator[list[str]]:
    """Batches of ``size`` texts; one whose encoding would hold ``per_char`` bytes a character
    (a hub tokenizer's offsets and tokens) past the memory budget is refused up front."""
    it = iter(texts)
    while batch := list(itertools.islice(it, size)):
        chars = sum(map(len, batch))
        if per_char and chars > _CHECK_CHARS:
            require(f"tokenizing a batch of {chars:,} characters", per_char * chars)
        yield batch


def view(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    view: str = "text",
    max_len: int = 512,
    *,
    batch_size: int = 1024,
) -> Iterator[tuple[list[list[int]], int]]:
    """Encode ``texts`` in batches and apply a view.

    Yields
    ------
    (sequences, documents)
        ``sequences`` is a list of id lists, each of length at most ``max_len``; ``documents`` is
        how many input texts this batch consumed (in the packed view not one per sequence).
    """
    check_choice("view", view, VIEWS)
    max_len = check_int("max_len", max_len, 1)
    batch_size = check_int("batch_size", batch_size, 1)
    if view == "text":
        for batch in _batches(texts, batch_size, tokenizer.bytes_per_char):
            # Cut only what is too long: copying every list costs throughput.
            seqs = [
                ids if len(ids) <= max_len else ids[:max_len]
                for ids in tokenizer.encode_batch(batch)
            ]
            yield seqs, len(batch)
    elif view == "model":
        for batch in _batches(texts, batch_size, tokenizer.bytes_per_char):
            yield tokenizer.encode_batch_model(batch, max_len), len(batch)
    else:
        for windows, consumed, _ in packed_windows(
            texts, tokenizer, max_len, batch_size=batch_size
        ):
            yield windows, consumed


def packed_windows(
    texts: Iterable[str],
    tokenizer: Tokenizer,
    max_len: int,
    *,
    batch_size: int = 1024,
    keyer: Any = None,
) -> Iterator[tuple[list[list[int]], int, np.ndarray | None]]:
    """The packed view: documents joined with the end-of-text token, cut into ``max_len`` windows.

    With ``keyer`` (a :class:`posdiag.corpus.units.UnitKeyer`) each document gets a unit key (and
    exact duplicates are left out with ``--dedup``) before it is packed, and every window takes
    the key of the document it starts in (docs/geometry.md section 2b).

    Yields
    ------
    (windows, documents, keys)
        ``keys``: uint64 array of shape (len(windows),), or None without ``keyer``.
    """
    eot = tokenizer.eot_id()
    carry: list[int] = []
    # (offset in carry, key) of the documents that start in carry; the first covers offset 0.
    starts: list[int] = []
    keys: list[int] = []
    for batch in _batches(texts, batch_size, tokenizer.bytes_per_char):
        docs = tokenizer.encode_batch(batch)
        if keyer is None:
            for ids in docs:
                carry.extend(ids)
                carry.append(eot)
        else:
            doc_keys, keep = keyer.keys(docs, batch)
            for ids, key, kept in zip(docs, doc_keys.tolist(), keep.tolist(), strict=True):
                if kept:
                    starts.append(len(carry))
                    keys.append(key)
                    carry.extend(ids)
                    carry.append(eot)
        whole = len(carry) // max_len * max_len
        windows = [carry[i : i + max_len] for i in range(0, whole, max_len)]
        carry = carry[whole:]
        yield windows, len(batch), _window_keys(starts, keys, whole, max_len, keyer)
    if carry:
        yield [carry], 0, _window_keys(starts, keys, max_len, max_len, keyer)


def _window_keys(
    starts: list[int], keys: list[int], whole: int, max_len: int, keyer: Any
) -> np.ndarray | None:
    """Keys of the windows starting at ``0, max_len, .. < whole`` (the document each starts in);
    drops the documents wholly before ``whole`` from ``starts``/``keys`` (in place) and shifts
    the rest by ``whole``."""
    if keyer is None:
        return None
    offsets = np.arange(0, whole, max_len, dtype=np.int64)
    at = np.asarray(starts, dtype=np.int64)
    which = np.searchsorted(at, offsets, side="right") - 1
    out = np.asarray(keys, dtype=np.uint64)[which]
    # The document that covers offset `whole` carries over (it starts there or before).
    first = max(0, int(np.searchsorted(at, whole, side="right")) - 1)
    del starts[:first], keys[:first]
    starts[:] = [max(0, s - whole) for s in starts]
    return out
