# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Bonus stage: what attention costs, in numbers.

Article B, "What it costs as the sequence grows" and "Multi-head attention": the score matrix
is n x n per head; a KV cache stores a key and a value vector per token, head and layer.
"""


def score_count(n_tokens: int, n_heads: int = 1) -> int:
    """Number of attention scores (entries of q k^T) for one sequence of n_tokens, over n_heads heads."""
    return n_heads * n_tokens * n_tokens


def kv_cache_floats(n_tokens: int, n_layers: int, n_kv_heads: int, d_head: int, batch: int = 1) -> int:
    """Numbers a KV cache holds: keys and values for every token, key/value head and layer.

    It equals the number of elements your KVCache's k and v hold together.
    """
    return 2 * batch * n_layers * n_kv_heads * n_tokens * d_head
