"""Stage 1, the corpus: where sequences come from (files, folders, globs, ``datasets`` presets,
pre-tokenized ids), how they are read (:class:`~posdiag.corpus.reading.Reading`), the tokenizers
and views that turn texts into ids, and which shard a sequence belongs to.
"""
