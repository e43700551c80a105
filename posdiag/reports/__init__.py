"""Stage 6, reports: the answers the commands give, assembled from the stages before: the corpus
geometry and stress report, the diagnosis, drift between corpora, the CI gate, the inspection of an
encoding file and the export of the optimal encoding.
"""
