"""The capstone's parts that need no training: the stage check that comes first, GPT-2's checkpoint in the
decoder against the reference forward (a tiny random checkpoint written here), generation with and without
the student's cache, the safetensors reader and writer, the BPE tokenizer, the head scores."""
import json
import re
import shutil
import struct
import subprocess

import pytest
import torch
from conftest import SOLUTIONS, copy_repo, share_venv, tiny_gpt2_checkpoint

from autograder.capstone import gpt2 as g
from autograder.capstone.induction import Task, batch, train
from autograder.capstone.model import Config, Decoder, generate, load_student
from autograder.capstone.run import head_scores


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return share_venv(copy_repo(tmp_path_factory.mktemp("capstone") / "repo"))


def make(repo, *args) -> subprocess.CompletedProcess:
    # -o: the venv is set up already; its marker's age must not start an install
    return subprocess.run(["make", "-s", "-o", ".venv/.student", "capstone", *args], cwd=repo, capture_output=True,
                          text=True, timeout=600, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})


@pytest.mark.slow  # a capstone run (CONTRIBUTING.md, the tiers): make test only
def test_a_module_without_its_mask_is_refused_before_training(repo, tmp_path):
    broken = shutil.copytree(SOLUTIONS, tmp_path / "broken")
    source = (broken / "module.py").read_text()
    mask_line = '        scores = scores.masked_fill(~allowed, float("-inf"))\n'
    assert mask_line in source
    (broken / "module.py").write_text(source.replace(mask_line, ""))
    p = make(repo, f"SUBMISSION={broken}")
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "stage 6 (heads) has not passed: failed" in out, out
    assert "Next step: fix stage 6 (heads)" in out, out
    assert "training" not in out and not (repo / "capstone.html").exists(), out


def test_the_stubs_are_refused_with_the_stage_to_start(repo):
    p = make(repo)
    assert p.returncode != 0
    assert "stage 6 (heads) has not passed: not started" in p.stdout, p.stdout


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_make_capstone_gpt2_runs_the_tiny_checkpoint_through_the_students_attention(repo, tmp_path):
    folder = tiny_gpt2_checkpoint(tmp_path / "gpt2")
    p = make(repo, f"SUBMISSION={SOLUTIONS}", "MODEL=gpt2", f"GPT2_DIR={folder}")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "2 layers, d_model 32, 4 heads, vocabulary 256" in out, out
    assert "they agree" in out and "the same tokens: yes" in out, out
    assert not (folder / "vocab.json").exists()  # the files there were used as they were: nothing downloaded


def student_decoder(cfg: Config, submission=SOLUTIONS):
    attention_cls, kv_cache_cls = load_student(submission)
    return Decoder(cfg, attention_cls), kv_cache_cls


def test_the_tiny_checkpoint_loads_and_matches_the_reference_logits(tmp_path):
    folder = tiny_gpt2_checkpoint(tmp_path / "gpt2")
    w = g.gpt2_weights(folder / "model.safetensors")
    assert not any(k.endswith(".attn.bias") for k in w)  # the mask buffers are not weights
    cfg = g.config_of(w, g.heads_from_config(folder))
    assert (cfg.vocab, cfg.n_ctx, cfg.d_model, cfg.n_heads, cfg.n_layers) == (256, 64, 32, 4, 2)
    model, _ = student_decoder(cfg)
    g.load_into(model, w)
    ids = torch.tensor([g.Bytes().encode("the cat sat on the mat")])
    with torch.no_grad():
        ours = model(ids).double()
    ref = g.reference_logits(w, ids, cfg.n_heads)
    assert ref.shape == (1, ids.shape[1], 256)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)

    # the comparison sees a wrong mapping: c_proj loaded without its transpose moves the logits
    with torch.no_grad():
        model.blocks[0].attn.out.weight.copy_(w["h.0.attn.c_proj.weight"])
        assert (model(ids).double() - ref).abs().max() > 1e-2


def test_q_and_k_swapped_in_qkv_do_not_match_the_reference(tmp_path):
    w = g.gpt2_weights(tiny_gpt2_checkpoint(tmp_path / "gpt2", layers=1) / "model.safetensors")
    cfg = g.config_of(w, 4)
    model, _ = student_decoder(cfg)
    g.load_into(model, w)
    ids = torch.tensor([list(range(10, 30))])
    ref = g.reference_logits(w, ids, 4)
    with torch.no_grad():
        q, k, v = model.blocks[0].attn.qkv.weight.clone().split(32)
        model.blocks[0].attn.qkv.weight.copy_(torch.cat([k, q, v]))
        qb, kb, vb = model.blocks[0].attn.qkv.bias.clone().split(32)
        model.blocks[0].attn.qkv.bias.copy_(torch.cat([kb, qb, vb]))
        assert (model(ids).double() - ref).abs().max() > 1e-3


def test_generation_with_and_without_the_cache_gives_the_same_tokens():
    torch.manual_seed(3)
    model, kv_cache_cls = student_decoder(Config(vocab=50, n_ctx=64, d_model=32, n_heads=4, n_layers=2))
    prompt = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(4))
    cached, _ = generate(model, prompt, 30, kv_cache_cls)
    full, _ = generate(model, prompt, 30)
    assert cached.shape == (2, 37)
    assert torch.equal(cached[:, :7], prompt)
    assert torch.equal(cached, full)
    assert len(set(cached[:, 7:].flatten().tolist())) > 1  # it generated something, not one token over and over


def test_a_cache_that_forgets_its_past_changes_what_is_generated():
    # the cached path really goes through the student's cache: one that returns only the new keys differs
    _, kv_cache_cls = load_student(SOLUTIONS)

    class Forgetful(kv_cache_cls):
        def append(self, k_new, v_new):
            super().append(k_new, v_new)
            return k_new, v_new

    torch.manual_seed(3)
    model, _ = student_decoder(Config(vocab=50, n_ctx=64, d_model=32, n_heads=4, n_layers=2))
    prompt = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(4))
    assert not torch.equal(generate(model, prompt, 30, Forgetful)[0], generate(model, prompt, 30)[0])


def test_safetensors_written_by_hand_is_read_back(tmp_path):
    # the format itself: 8-byte little-endian header length, JSON header with byte ranges, raw little-endian data
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.tensor([1.5, -2.0], dtype=torch.float16)
    body = a.numpy().tobytes() + b.numpy().tobytes()
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                         "b": {"dtype": "F16", "shape": [2], "data_offsets": [24, 28]}}).encode()
    path = tmp_path / "hand.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + body)
    got = g.load_safetensors(path)
    assert set(got) == {"a", "b"}
    assert torch.equal(got["a"], a) and got["b"].dtype == torch.float16 and torch.equal(got["b"], b)


def test_safetensors_writer_round_trips_and_pads_its_header(tmp_path):
    t = {"x": torch.randn(3, 4), "y": torch.randn(5).to(torch.bfloat16), "z": torch.arange(7)}
    g.save_safetensors(t, tmp_path / "t.safetensors")
    raw = (tmp_path / "t.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and json.loads(raw[8 : 8 + n])["y"]["dtype"] == "BF16"
    back = g.load_safetensors(tmp_path / "t.safetensors")
    assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in t.items())


def test_bpe_merges_by_rank_and_decodes_back():
    # a vocabulary in GPT-2's byte alphabet: a space is written "Ġ" (byte 32 -> chr(288))
    chars = ["h", "e", "l", "o", "Ġ", "!"]
    merged = ["he", "ll", "hell", "hello", "Ġhello"]
    vocab = {s: i for i, s in enumerate(chars + merged)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "hello")]
    bpe = g.BPE(vocab, merges)
    assert g.byte_alphabet()[32] == "Ġ"
    ids = bpe.encode("hello hello!")
    assert ids == [vocab["hello"], vocab["Ġhello"], vocab["!"]]
    assert bpe.decode(ids) == "hello hello!"
    assert bpe.encode("oh") == [vocab["o"], vocab["h"]]  # no merge ranks ("o", "h"): the letters stay apart


def test_the_task_has_distinct_tokens_repeated_once_and_weights_only_the_predictable_half():
    task = Task()
    ids, lens, weight = batch(task, 50, torch.Generator().manual_seed(0))
    assert ids.shape == (50, task.length)
    for row, L, wt in zip(ids, lens.tolist(), weight):
        first = row[:L].tolist()
        assert len(set(first)) == L and row[L : 2 * L].tolist() == first
        assert wt.nonzero().flatten().tolist() == list(range(L, 2 * L - 1))


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_training_is_deterministic_under_its_seed():
    task = Task()

    def losses(seed):
        torch.manual_seed(seed)
        model, _ = student_decoder(Config(vocab=task.vocab, n_ctx=task.length))
        return train(model, task, steps=4, seed=seed, show=False)

    assert losses(0) == losses(0)
    assert losses(0) != losses(1)


def test_head_scores_find_a_previous_token_and_an_induction_pattern():
    L, T = 5, 10
    prev = torch.zeros(T, T)
    prev[0, 0] = 1
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1
    ind = torch.eye(T)
    ind[torch.arange(L, T), torch.arange(1, T - L + 1)] = 1
    ind[torch.arange(L, T), torch.arange(L, T)] = 0
    weights = [torch.stack([prev, ind])[None], torch.stack([ind, prev])[None]]  # [1, 2, T, T] per layer
    scores = head_scores(weights, torch.tensor([L]))
    assert scores[(0, 0)] == (1.0, 0.0) and scores[(1, 1)] == (1.0, 0.0)
    assert scores[(0, 1)][1] == 1.0 and scores[(1, 0)][1] == 1.0
    assert re.fullmatch(r"[\d.]+", f"{scores[(0, 1)][0]:.2f}")


@pytest.mark.parametrize("edit,said", [
    (("        return scores.softmax(dim=-1) @ v", "        return scores.detach().softmax(dim=-1) @ v"),
     "no gradient reaches the q and k rows"),
    (("        return scores.softmax(dim=-1) @ v",
      "        w = scores.softmax(dim=-1)\n        w.masked_fill_(~allowed, 0.0)\n        return w @ v"),
     "one training step through your CausalSelfAttention failed")])
def test_a_module_that_cannot_learn_is_refused_before_training(edit, said, tmp_path):
    """Found by a stranger student: scores detached from autograd, or the softmax's output changed in place, pass
    every graded check (they run without gradients). The first trained a useless model and advised more steps,
    the second ended in a traceback from loss.backward(). One training step is tried first, and said in words."""
    from autograder.capstone.run import trainable

    sub = shutil.copytree(SOLUTIONS, tmp_path / "sub")
    source = (sub / "module.py").read_text()
    assert edit[0] in source
    (sub / "module.py").write_text(source.replace(edit[0], edit[1]))
    attention_cls, _ = load_student(sub)
    task = Task()
    why = trainable(Decoder(Config(vocab=task.vocab, n_ctx=2 * task.max_len), attention_cls), task)
    assert why is not None and said in why, why
    good, _ = load_student(SOLUTIONS)
    assert trainable(Decoder(Config(vocab=task.vocab, n_ctx=2 * task.max_len), good), task) is None


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_steps_below_one_and_an_unreachable_download_are_said_in_words(repo, tmp_path):
    p = make(repo, f"SUBMISSION={SOLUTIONS}", "STEPS=0")
    assert p.returncode != 0 and "at least one training step" in p.stdout + p.stderr, p.stdout + p.stderr
    target = tmp_path / "gpt2"
    p = make(repo, f"SUBMISSION={SOLUTIONS}", "MODEL=gpt2", f"GPT2_DIR={target}")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "could not be downloaded" in out and "Traceback" not in out, out
    assert not target.exists()


# ---------------------------------------------------------------- a broken GPT2_DIR (issue 44.5) --

def rewrite_header(path, edit) -> None:
    """The checkpoint with its header passed through edit(header) -> header, the data bytes kept."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = edit(json.loads(raw[8 : 8 + n]))
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n :])


def cut_in_half(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def header_not_json(p):
    raw = bytearray(p.read_bytes())
    raw[8:12] = b"\xff\x00{{"
    p.write_bytes(bytes(raw))


def c_attn_of_another_width(p):
    # consistent in itself (shape and byte range agree) but not GPT-2's [d, 3d]
    w = g.load_safetensors(p)
    w["h.1.attn.c_attn.weight"] = torch.zeros(32, 64)
    g.save_safetensors(w, p)


def shape_disagrees_with_bytes(p):
    rewrite_header(p, lambda h: h | {"ln_f.bias": h["ln_f.bias"] | {"shape": [33]}})


def drop_a_tensor(p):
    w = g.load_safetensors(p)
    del w["h.1.mlp.c_fc.bias"]
    g.save_safetensors(w, p)


def tokenizer_files(folder, vocab=None, merges="#version: 0.2\nh e\n"):
    """A byte-level BPE for the 256-token tiny checkpoint: the symbols of bytes 1-255, and "he" as id 0."""
    alphabet = g.byte_alphabet()
    symbols = {alphabet[b]: b for b in range(1, 256)} | {"he": 0}
    (folder / "vocab.json").write_text(vocab if vocab is not None else json.dumps(symbols))
    if merges is not None:
        (folder / "merges.txt").write_text(merges)


BROKEN = {
    "cut short": (cut_in_half, "model.safetensors", "is cut short"),
    "under 8 bytes": (lambda p: p.write_bytes(b"\x10\x00"), "model.safetensors", "is 2 bytes long"),
    "a web page": (lambda p: p.write_text("<!DOCTYPE html><html>Access denied</html>"), "model.safetensors", "is text"),
    "header not JSON": (header_not_json, "model.safetensors", "its header is not JSON"),
    "a shape not GPT-2's": (c_attn_of_another_width, "model.safetensors",
                            "tensor h.1.attn.c_attn.weight has the shape [32, 64]; a GPT-2 of width 32"),
    "a shape its bytes disagree with": (shape_disagrees_with_bytes, "model.safetensors",
                                        "tensor 'ln_f.bias' is F32 of shape [33] (132 bytes) but its byte range holds 128"),
    "a tensor missing": (drop_a_tensor, "model.safetensors", "it has no tensor h.1.mlp.c_fc.bias"),
    "vocab.json cut short": (lambda p: tokenizer_files(p.parent, vocab='{"a": 1, "b'), "vocab.json", "is not JSON"),
    "vocab.json of another model": (lambda p: tokenizer_files(p.parent, vocab='{"a": 0, "b": 50256}'), "vocab.json",
                                    "has the id 50256 but the checkpoint's vocabulary holds 256 tokens"),
    "merges.txt damaged": (lambda p: tokenizer_files(p.parent, merges="#version: 0.2\nh e\nl\n"), "merges.txt",
                           "merge 2 is 'l'"),
    "merges.txt of another vocabulary": (lambda p: tokenizer_files(p.parent, merges="#version: 0.2\nh e\nt h\n"),
                                         "merges.txt", "makes 'th' at merge 2, a token vocab.json lacks"),
    "merges.txt missing": (lambda p: tokenizer_files(p.parent, merges=None), "merges.txt", None),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_gpt2_dir_names_the_file_why_and_where_to_fetch_it(case, tmp_path):
    """Each damage a download or a hand copy can leave: one error line naming the file and what is wrong with it,
    and the address the kit downloads it from; nothing raised (the make test below: no traceback)."""
    from autograder.capstone.run import load_gpt2

    folder = tiny_gpt2_checkpoint(tmp_path / "gpt2")
    damage, name, why = BROKEN[case]
    damage(folder / "model.safetensors")
    error = load_gpt2(folder, no_download=True)
    assert isinstance(error, str), case
    assert error.startswith(f"error: {folder / name} ") or error.startswith(f"error: no {folder / name} "), error
    assert why is None or why in error, error
    assert g.URL + name in error, error


def test_a_sound_gpt2_dir_loads_with_its_bpe_and_without(tmp_path):
    # the checks raise no false alarm: the tiny checkpoint alone (bytes), and with a byte-level BPE beside it
    from autograder.capstone.run import load_gpt2

    folder = tiny_gpt2_checkpoint(tmp_path / "gpt2")
    w, cfg, tok = load_gpt2(folder, no_download=True)
    assert isinstance(tok, g.Bytes) and cfg.n_layers == 2
    tokenizer_files(folder)
    w, cfg, tok = load_gpt2(folder, no_download=True)
    assert isinstance(tok, g.BPE) and tok.encode("he") == [0] and tok.decode(tok.encode("the cat")) == "the cat"


def test_a_checkpoint_without_its_config_or_bpe_says_which_file_it_needs(tmp_path):
    from autograder.capstone.run import load_gpt2

    folder = tiny_gpt2_checkpoint(tmp_path / "gpt2")
    (folder / "config.json").unlink()  # width 32 is no GPT-2 size: the heads are read in config.json
    error = load_gpt2(folder, no_download=True)
    assert error.startswith(f"error: {folder / 'config.json'} is missing") and "no GPT-2 size" in error, error
    (folder / "config.json").write_text("{n_head: 4")
    assert "is not a JSON object" in load_gpt2(folder, no_download=True)
    big = tiny_gpt2_checkpoint(tmp_path / "big", layers=1, vocab=300)  # more than the bytes: GPT-2's BPE is needed
    error = load_gpt2(big, no_download=True)
    assert f"no {big / 'vocab.json'}, {big / 'merges.txt'}" in error and g.URL + "vocab.json" in error, error


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_make_capstone_gpt2_on_a_truncated_checkpoint_says_so_without_a_traceback(repo, tmp_path):
    folder = tiny_gpt2_checkpoint(tmp_path / "gpt2")
    cut_in_half(folder / "model.safetensors")
    p = make(repo, f"SUBMISSION={SOLUTIONS}", "MODEL=gpt2", f"GPT2_DIR={folder}")
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in out, out
    assert f"{folder / 'model.safetensors'} tensor " in out and "the file is cut short" in out, out
    assert f"downloads {g.URL}model.safetensors" in out, out
