"""GPT-2's released weights in the capstone's decoder, with the student's attention in every layer.

Where the files come from (the student's machine, with a network; nothing here is needed by the
tests): the Hugging Face copy of OpenAI's GPT-2 small,

    https://huggingface.co/openai-community/gpt2/resolve/main/model.safetensors   (548 MB)
    https://huggingface.co/openai-community/gpt2/resolve/main/vocab.json          (BPE vocabulary)
    https://huggingface.co/openai-community/gpt2/resolve/main/merges.txt          (BPE merges)

`make capstone MODEL=gpt2` downloads them into GPT2_DIR (default ~/.cache/attention-kit/gpt2) the
first time, or uses that folder as it is when the files are already there (put them there by hand
on a machine without a network). Without vocab.json and merges.txt the text is read and written as
raw bytes (ids 0-255), which only a checkpoint with a byte-level vocabulary understands.

Mapping. GPT-2 stores its Linear layers as Conv1D, weight [in, out], the transpose of nn.Linear's
[out, in]. Its c_attn packs q, k and v side by side along the out axis, which is the student's `qkv`
with output rows q, then k, then v once transposed; c_proj is `out`. Both carry biases, which the
kit gives to the student's two Linear layers (model.Block). The safetensors file is read by hand: an
8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
then the raw bytes.
"""
import json
import math
import re
import struct
import urllib.request
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F

from .model import Config, Decoder, gelu_tanh

URL = "https://huggingface.co/openai-community/gpt2/resolve/main/"
FILES = ("model.safetensors", "vocab.json", "merges.txt")
DEFAULT_DIR = Path.home() / ".cache" / "attention-kit" / "gpt2"
HEADS_BY_WIDTH = {768: 12, 1024: 16, 1280: 20, 1600: 25}  # GPT-2 small, medium, large, XL (no config.json)
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


# ------------------------------------------------------------------------------ safetensors --

def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor in a .safetensors file, by name, read into memory (the file is closed after)."""
    path = Path(path)
    data = bytearray(path.stat().st_size)  # one writable buffer that the tensors share (no copy per tensor)
    with path.open("rb") as f:
        f.readinto(data)
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        if end > start:
            t = torch.frombuffer(data, dtype=dtype, offset=8 + n + start, count=(end - start) // dtype.itemsize)
        else:
            t = torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"])
    return out


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write tensors in the same layout (the header padded with spaces to a multiple of 8 bytes)."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()  # any dtype, bf16 too
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def download(folder: Path, log=print) -> None:
    """Fetch the files FILES lists into folder, each only when it is not there yet."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        dest = folder / name
        if dest.exists():
            continue
        log(f"downloading {URL + name} -> {dest}")
        part = dest.with_suffix(dest.suffix + ".part")
        urllib.request.urlretrieve(URL + name, part)  # a fixed https address
        part.rename(dest)


# ---------------------------------------------------------------------------------- weights --

def gpt2_weights(path: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors in float32, named without a 'transformer.' prefix, GPT-2's mask buffers left out."""
    raw = load_safetensors(path)
    out = {}
    for name, t in raw.items():
        name = name.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")) and t.dim() != 1:
            continue  # the causal mask GPT-2 kept as a buffer, not a weight
        out[name] = t.float()
    return out


def config_of(w: dict[str, torch.Tensor], n_heads: int | None = None) -> Config:
    """The decoder's shape, read off the tensors (heads: given, else from the width of a GPT-2 size)."""
    vocab, d = w["wte.weight"].shape
    n_layers = 1 + max(int(m.group(1)) for m in (re.match(r"h\.(\d+)\.", k) for k in w) if m)
    if n_heads is None:
        if d not in HEADS_BY_WIDTH:
            raise ValueError(f"width {d} is no GPT-2 size: say how many heads (config.json's n_head)")
        n_heads = HEADS_BY_WIDTH[d]
    return Config(vocab=vocab, n_ctx=w["wpe.weight"].shape[0], d_model=d, n_heads=n_heads, n_layers=n_layers, bias=True)


def heads_from_config(folder: Path) -> int | None:
    cfg = folder / "config.json"
    return json.loads(cfg.read_text()).get("n_head") if cfg.exists() else None


def load_into(model: Decoder, w: dict[str, torch.Tensor]) -> None:
    """Copy GPT-2's tensors into the decoder: Conv1D weights transposed to nn.Linear's [out, in]."""
    pairs = {"tok.weight": w["wte.weight"], "pos.weight": w["wpe.weight"],
             "ln_f.weight": w["ln_f.weight"], "ln_f.bias": w["ln_f.bias"], "head.weight": w["wte.weight"]}
    for i in range(model.cfg.n_layers):
        g = f"h.{i}."
        b = f"blocks.{i}."
        pairs |= {
            b + "ln1.weight": w[g + "ln_1.weight"], b + "ln1.bias": w[g + "ln_1.bias"],
            b + "attn.qkv.weight": w[g + "attn.c_attn.weight"].T,  # [C, 3C] -> [3C, C]: rows q, k, v
            b + "attn.qkv.bias": w[g + "attn.c_attn.bias"],
            b + "attn.out.weight": w[g + "attn.c_proj.weight"].T, b + "attn.out.bias": w[g + "attn.c_proj.bias"],
            b + "ln2.weight": w[g + "ln_2.weight"], b + "ln2.bias": w[g + "ln_2.bias"],
            b + "mlp.fc.weight": w[g + "mlp.c_fc.weight"].T, b + "mlp.fc.bias": w[g + "mlp.c_fc.bias"],
            b + "mlp.proj.weight": w[g + "mlp.c_proj.weight"].T, b + "mlp.proj.bias": w[g + "mlp.c_proj.bias"],
        }
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(pairs) - {"head.weight"})
    if missing:
        raise ValueError(f"the decoder has parameters GPT-2 does not fill: {missing[:5]} (the student's module "
                         "must have exactly the parameters of its qkv and out Linear layers)")
    with torch.no_grad():
        for name, t in pairs.items():
            if tuple(params[name].shape) != tuple(t.shape):
                raise ValueError(f"{name}: the checkpoint has {tuple(t.shape)}, the decoder {tuple(params[name].shape)}")
            params[name].copy_(t)


def reference_logits(w: dict[str, torch.Tensor], ids: torch.Tensor, n_heads: int) -> torch.Tensor:
    """GPT-2's forward written out plainly in float64, from the checkpoint's own tensors: ids [B, T] -> [B, T, vocab].

    It shares no code with the decoder or the student's module (its own attention, LayerNorm and
    Conv1D products), so agreeing with it shows the weights went to the right places."""
    d = {k: v.double() for k, v in w.items()}
    B, T = ids.shape
    x = d["wte.weight"][ids] + d["wpe.weight"][:T]  # [B, T, C]
    C = x.shape[-1]
    D = C // n_heads
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    n_layers = 1 + max(int(m.group(1)) for m in (re.match(r"h\.(\d+)\.", k) for k in d) if m)
    for i in range(n_layers):
        g = f"h.{i}."
        h = F.layer_norm(x, (C,), d[g + "ln_1.weight"], d[g + "ln_1.bias"], 1e-5)
        qkv = h @ d[g + "attn.c_attn.weight"] + d[g + "attn.c_attn.bias"]  # Conv1D: x @ W [C, 3C]
        q, k, v = (t.reshape(B, T, n_heads, D).permute(0, 2, 1, 3) for t in qkv.split(C, dim=-1))  # [B, H, T, D]
        att = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ d[g + "attn.c_proj.weight"] + d[g + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), d[g + "ln_2.weight"], d[g + "ln_2.bias"], 1e-5)
        x = x + gelu_tanh(h @ d[g + "mlp.c_fc.weight"] + d[g + "mlp.c_fc.bias"]) @ d[g + "mlp.c_proj.weight"] \
            + d[g + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), d["ln_f.weight"], d["ln_f.bias"], 1e-5)
    return x @ d["wte.weight"].T


# -------------------------------------------------------------------------------- tokenizer --

@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters (its vocab is written in them)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in keep]
    return {b: chr(b) for b in keep} | {b: chr(256 + i) for i, b in enumerate(extra)}


# GPT-2's pre-split into words, numbers, punctuation and spaces ([^\W\d_] is a letter in Python's re)
PIECES = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


class BPE:
    """GPT-2's byte-level BPE from vocab.json and merges.txt: encode(text) -> ids, decode(ids) -> text."""

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]]) -> None:
        self.vocab = vocab
        self.inverse = {i: s for s, i in vocab.items()}
        self.rank = {pair: r for r, pair in enumerate(merges)}
        self.to_char = byte_alphabet()
        self.to_byte = {c: b for b, c in self.to_char.items()}

    @classmethod
    def from_folder(cls, folder: Path) -> "BPE":
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
        merges = [tuple(line.split()) for line in lines if line and not line.startswith("#version")]
        return cls(vocab, merges)

    def _word(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.rank.get((a, b), math.inf), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            best, i = min(pairs)
            if best == math.inf:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in PIECES.findall(text):
            word = "".join(self.to_char[b] for b in piece.encode("utf-8"))
            ids += [self.vocab[p] for p in self._word(word)]
        return ids

    def decode(self, ids: list[int]) -> str:
        text = "".join(self.inverse[i] for i in ids)
        return bytes(self.to_byte[c] for c in text).decode("utf-8", errors="replace")


class Bytes:
    """Text as its UTF-8 bytes, ids 0-255: the tokenizer of a checkpoint without vocab.json (the tests' tiny one)."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def tokenizer_of(folder: Path):
    return BPE.from_folder(folder) if (folder / "vocab.json").exists() and (folder / "merges.txt").exists() else Bytes()
