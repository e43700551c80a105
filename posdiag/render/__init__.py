"""Everything a user reads or sees: rich tables, JSON documents, CI formats, HTML and PNG plots.

Analysis modules never import this package; each module here renders one result type
(``stress``, ``diagnosis``, ``inspection``, ``drift``, ``gate``, ``encodings``, ``corpora``) or one
medium (``html``, ``plots``). ``plots`` imports matplotlib only when a figure is drawn.
"""
