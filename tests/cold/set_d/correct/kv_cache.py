# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Stage 7: a preallocated key/value cache for token-by-token decoding.

Article B, "What it costs as the sequence grows" (KV cache).
"""
import torch


class KVCache:
    """Keys and values of the tokens seen so far, for one attention layer.

    `k` and `v` are allocated once, [B, H, max_len, D], in `dtype`; `length` counts the filled positions.
    """

    def __init__(
        self,
        batch: int,
        n_heads: int,
        max_len: int,
        d_head: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self.max_len = max_len
        self.k = torch.zeros(batch, n_heads, max_len, d_head, dtype=dtype, device=device)
        self.v = torch.zeros(batch, n_heads, max_len, d_head, dtype=dtype, device=device)
        self.length = 0

    def append(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k_new, v_new [B, H, t, D] at position `length`; return the filled k, v [B, H, length, D].

        Raises ValueError if the t new positions do not fit in max_len, and leaves the cache as it was.
        They fit while length + t <= max_len: a fill that ends exactly at max_len is fine.
        """
        t = k_new.shape[2]
        if self.length + t > self.max_len:
            raise ValueError(f"KVCache: {self.length} + {t} positions exceed max_len {self.max_len}")
        self.k[:, :, self.length : self.length + t] = k_new
        self.v[:, :, self.length : self.length + t] = v_new
        self.length += t
        return self.k[:, :, : self.length], self.v[:, :, : self.length]
