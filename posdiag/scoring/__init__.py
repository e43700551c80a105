"""Stage 4, scoring: every encoding's stress, Kruskal stress and Spearman correlation against the
corpus geometry, without an ``n x n`` matrix per encoding where the encoding allows.
"""
