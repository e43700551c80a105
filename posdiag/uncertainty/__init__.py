"""Stage 5, uncertainty: the shard bootstrap and its replicate designs (random and balanced
half-samples), the noise floor and the positional-information null.
"""
