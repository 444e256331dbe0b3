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

class BrokenFile(ValueError):
    """A file of GPT2_DIR that cannot be what the capstone needs: `path` and `why`, in words."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = Path(path), why


CUT = "the file is cut short (a download that stopped early?)"


def read_header(path: Path, data: bytes | bytearray) -> tuple[int, dict]:
    """(header length, header) of a safetensors file's bytes, or BrokenFile saying what is wrong with them."""
    if len(data) >= 8 and all(32 <= b < 127 or b in b"\t\r\n" for b in data[:8]):  # a real length's top bytes are 0
        raise BrokenFile(path, "is text (a web page or an error message?), not a safetensors file")
    if len(data) < 8:
        raise BrokenFile(path, f"is {len(data)} bytes long, shorter than the 8-byte header length a safetensors "
                               f"file starts with: {CUT}")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise BrokenFile(path, f"its header says it is {n} bytes long but only {len(data) - 8} bytes follow: {CUT}")
    try:
        header = json.loads(bytes(data[8 : 8 + n]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BrokenFile(path, f"its header is not JSON ({e}): not a safetensors file, or a damaged one") from None
    if not isinstance(header, dict):
        raise BrokenFile(path, "its header is not a JSON object naming the tensors: not a safetensors file")
    return n, header


def tensor_range(path: Path, name: str, info, body: int) -> tuple[torch.dtype, list[int], int, int]:
    """(dtype, shape, start, end) of one header entry, checked against itself and the `body` bytes that follow."""
    if not isinstance(info, dict) or info.get("dtype") not in DTYPES:
        raise BrokenFile(path, f"tensor {name!r} has no dtype the kit reads ({', '.join(DTYPES)}) in the header")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(isinstance(x, int) and x >= 0 for x in shape)):
        raise BrokenFile(path, f"tensor {name!r} has the shape {shape!r} in the header, not a list of sizes")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise BrokenFile(path, f"tensor {name!r} has the byte range {offsets!r} in the header, not [start, end]")
    dtype, (start, end) = DTYPES[info["dtype"]], offsets
    if end > body:
        raise BrokenFile(path, f"tensor {name!r} ends at byte {end} of the data, which holds {body} bytes: {CUT}")
    if end - start != math.prod(shape) * dtype.itemsize:
        raise BrokenFile(path, f"tensor {name!r} is {info['dtype']} of shape {shape} ({math.prod(shape) * dtype.itemsize} "
                               f"bytes) but its byte range holds {end - start} bytes")
    return dtype, shape, start, end


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor in a .safetensors file, by name, read into memory (the file is closed after).

    A file that is not one (cut short, a header that is not JSON, byte ranges that disagree with the
    shapes) raises BrokenFile saying which way."""
    path = Path(path)
    data = bytearray(path.stat().st_size)  # one writable buffer that the tensors share (no copy per tensor)
    with path.open("rb") as f:
        f.readinto(data)
    n, header = read_header(path, data)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, start, end = tensor_range(path, name, info, len(data) - 8 - n)
        if end > start:
            t = torch.frombuffer(data, dtype=dtype, offset=8 + n + start, count=(end - start) // dtype.itemsize)
        else:
            t = torch.empty(0, dtype=dtype)
        out[name] = t.reshape(shape)
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


def expected_shapes(vocab: int, n_ctx: int, d: int, n_layers: int) -> dict[str, tuple[int, ...]]:
    """Every tensor a GPT-2 checkpoint of this size holds, with its shape (Conv1D weights [in, out])."""
    out = {"wte.weight": (vocab, d), "wpe.weight": (n_ctx, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}
    for i in range(n_layers):
        g = f"h.{i}."
        out |= {g + "ln_1.weight": (d,), g + "ln_1.bias": (d,), g + "ln_2.weight": (d,), g + "ln_2.bias": (d,),
                g + "attn.c_attn.weight": (d, 3 * d), g + "attn.c_attn.bias": (3 * d,),
                g + "attn.c_proj.weight": (d, d), g + "attn.c_proj.bias": (d,),
                g + "mlp.c_fc.weight": (d, 4 * d), g + "mlp.c_fc.bias": (4 * d,),
                g + "mlp.c_proj.weight": (4 * d, d), g + "mlp.c_proj.bias": (d,)}
    return out


def check_shapes(w: dict[str, torch.Tensor], path: Path) -> None:
    """BrokenFile naming the first tensor GPT-2's layout needs that the checkpoint lacks or holds in another shape
    (the sizes are read off wte and wpe: [vocab, d_model] and [n_ctx, d_model])."""
    for name in ("wte.weight", "wpe.weight"):
        if name not in w or w[name].dim() != 2:
            found = f"holds it in the shape {list(w[name].shape)}" if name in w else "has no such tensor"
            raise BrokenFile(path, f"GPT-2's {name} ([vocab or positions, d_model]) is not there: the file {found}")
    layers = {int(m.group(1)) for m in (re.match(r"h\.(\d+)\.", k) for k in w) if m}
    if not layers:
        raise BrokenFile(path, "it holds no layer (no tensor named h.0....): not a GPT-2 checkpoint")
    (vocab, d), n_ctx = w["wte.weight"].shape, w["wpe.weight"].shape[0]
    for name, shape in expected_shapes(vocab, n_ctx, d, 1 + max(layers)).items():
        if name not in w:
            raise BrokenFile(path, f"it has no tensor {name} (GPT-2's layout; {1 + max(layers)} layers)")
        if tuple(w[name].shape) != shape:
            raise BrokenFile(path, f"tensor {name} has the shape {list(w[name].shape)}; a GPT-2 of width {d} "
                                   f"(wte.weight {[vocab, d]}) has {list(shape)} there")


def config_of(w: dict[str, torch.Tensor], n_heads: int | None = None) -> Config:
    """The decoder's shape, read off the tensors (heads: given, else from the width of a GPT-2 size)."""
    vocab, d = w["wte.weight"].shape
    n_layers = 1 + max(int(m.group(1)) for m in (re.match(r"h\.(\d+)\.", k) for k in w) if m)
    if n_heads is None:
        if d not in HEADS_BY_WIDTH:
            raise ValueError(f"width {d} is no GPT-2 size: say how many heads (config.json's n_head)")
        n_heads = HEADS_BY_WIDTH[d]
    if n_heads < 1 or d % n_heads:
        raise ValueError(f"{n_heads} heads do not divide the width {d}")
    return Config(vocab=vocab, n_ctx=w["wpe.weight"].shape[0], d_model=d, n_heads=n_heads, n_layers=n_layers, bias=True)


def heads_from_config(folder: Path) -> int | None:
    """config.json's n_head where the folder has one (GPT-2's own has; the sizes in HEADS_BY_WIDTH need none)."""
    cfg = folder / "config.json"
    if not cfg.exists():
        return None
    try:
        heads = json.loads(cfg.read_text(encoding="utf-8")).get("n_head")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise BrokenFile(cfg, f"is not a JSON object ({e}): GPT-2's config.json holds one") from None
    if heads is not None and (not isinstance(heads, int) or heads < 1):
        raise BrokenFile(cfg, f"says n_head is {heads!r}, not a number of heads")
    return heads


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
    def from_folder(cls, folder: Path, vocab_size: int | None = None) -> "BPE":
        """vocab.json and merges.txt read and checked (ids below `vocab_size`): BrokenFile on what is wrong."""
        vocab, merges = read_vocab(folder / "vocab.json", vocab_size), read_merges(folder / "merges.txt")
        lost = next((i for i, (a, b) in enumerate(merges) if a + b not in vocab), None)
        if lost is not None:
            raise BrokenFile(folder / "merges.txt", f"makes {merges[lost][0] + merges[lost][1]!r} at merge {lost + 1}, "
                                                    "a token vocab.json lacks: the two files are of different models")
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


def read_vocab(path: Path, vocab_size: int | None = None) -> dict[str, int]:
    """vocab.json: token -> id, every id under the checkpoint's `vocab_size`."""
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BrokenFile(path, f"is not JSON ({e}): {CUT}") from None
    if not isinstance(vocab, dict) or not vocab or not all(isinstance(i, int) for i in vocab.values()):
        raise BrokenFile(path, "is not GPT-2's vocabulary (a JSON object from each token to its id)")
    top = max(vocab.values())
    if vocab_size is not None and top >= vocab_size:
        raise BrokenFile(path, f"has the id {top} but the checkpoint's vocabulary holds {vocab_size} tokens: "
                               "the tokenizer is another model's")
    return vocab


def read_merges(path: Path) -> list[tuple[str, str]]:
    """merges.txt: one merge a line, two symbols each (a '#version' line first)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise BrokenFile(path, f"is not UTF-8 text ({e})") from None
    merges = [tuple(line.split()) for line in lines if line and not line.startswith("#version")]
    bad = next((i for i, m in enumerate(merges) if len(m) != 2), None)
    if not merges or bad is not None:
        where = f"merge {bad + 1} is {' '.join(merges[bad])!r}" if bad is not None else "it holds no merges"
        raise BrokenFile(path, f"is not GPT-2's BPE merges (two symbols a line): {where}")
    return merges


def needs_bpe(folder: Path, vocab_size: int) -> bool:
    """Whether the text needs vocab.json and merges.txt: either is there, or the vocabulary is not the 256 bytes."""
    return vocab_size != 256 or any((folder / name).exists() for name in FILES[1:])


def tokenizer_of(folder: Path, vocab_size: int):
    """The folder's BPE, or raw bytes for a 256-token checkpoint without tokenizer files; BrokenFile when one of
    the two BPE files is missing or damaged."""
    if not needs_bpe(folder, vocab_size):
        return Bytes()
    for name in FILES[1:]:
        if not (folder / name).exists():
            raise BrokenFile(folder / name, f"is missing: a checkpoint of {vocab_size} tokens reads and writes its "
                                            "text through GPT-2's BPE (vocab.json and merges.txt together)")
    return BPE.from_folder(folder, vocab_size)
