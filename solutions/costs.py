"""Bonus stage: what attention costs, in numbers.

Article B, "What it costs as the sequence grows" and "Multi-head attention": the score matrix
is n x n per head; a KV cache stores a key and a value vector per token, head and layer.
"""


def score_count(n_tokens: int, n_heads: int = 1) -> int:
    """Number of attention scores (entries of q k^T) for one sequence of n_tokens, over n_heads heads."""
    # BEGIN SOLUTION
    return n_tokens * n_tokens * n_heads
    # END SOLUTION


def kv_cache_floats(n_tokens: int, n_layers: int, n_kv_heads: int, d_head: int, batch: int = 1) -> int:
    """Numbers a KV cache holds: keys and values for every token, key/value head and layer.

    It equals the number of elements your KVCache's k and v hold together.
    """
    # BEGIN SOLUTION
    return 2 * batch * n_layers * n_tokens * n_kv_heads * d_head
    # END SOLUTION
