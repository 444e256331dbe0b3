"""Bonus stage: what attention costs, in numbers."""


def score_count(n_tokens: int, n_heads: int = 1) -> int:
    return n_tokens * n_tokens


def kv_cache_floats(n_tokens: int, n_layers: int, n_kv_heads: int, d_head: int, batch: int = 1) -> int:
    per_token = 2 * n_kv_heads * d_head  # one key and one value vector per head
    return batch * n_layers * n_tokens * per_token
