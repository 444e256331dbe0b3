"""Stage 7: a preallocated key/value cache for token-by-token decoding."""
import torch


class KVCache:
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
        t = k_new.shape[-2]
        start = self.length
        if t > self.max_len:
            raise ValueError(f"KVCache: {t} new positions do not fit ({start} of {self.max_len} used)")
        self.k[:, :, start:start + t] = k_new
        self.v[:, :, start:start + t] = v_new
        self.length = start + t
        return self.k[:, :, :self.length], self.v[:, :, :self.length]
