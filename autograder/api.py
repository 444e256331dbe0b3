"""The student's functions, called by name in a child process (see autograder.sandbox).

`StudentAPI(worker).softmax(x)` runs the submission's `softmax.softmax(x)` in the child.
The same names exist on attn_ref.RefAPI, so a check can be computed both ways.
"""
import functools
import zlib

import numpy as np

TARGETS = {
    "softmax": "softmax:softmax",
    "dot_scores": "scores:dot_scores",
    "simple_self_attention": "scores:simple_self_attention",
    "project_qkv": "projections:project_qkv",
    "scaled_scores": "scaling:scaled_scores",
    "score_variance": "scaling:score_variance",
    "causal_mask": "masking:causal_mask",
    "apply_mask": "masking:apply_mask",
    "attention": "masking:attention",
    "split_heads": "heads:split_heads",
    "merge_heads": "heads:merge_heads",
    "multi_head_attention": "heads:multi_head_attention",
    "tiled_attention": "tiled:tiled_attention",
    "attention_backward": "backward:attention_backward",
    "score_count": "costs:score_count",
    "kv_cache_floats": "costs:kv_cache_floats",
}
DRIVERS = (
    "warmup", "module_forward", "module_shapes", "module_structure", "kv_cache_numel", "kv_cache_probe",
    "module_decode", "decode_step_flops", "fused_attention", "fused_probe", "module_fused_probe",
    "fused_peak_memory",
)
TARGETS.update({name: f"driver:{name}" for name in DRIVERS})
NP_DRIVERS = ("dropout_probe", "tiled_peak_memory", "tiled_key_rows")  # numpy-only helpers (autograder.np_drivers)
TARGETS.update({name: f"npdriver:{name}" for name in NP_DRIVERS})


class StudentAPI:
    def __init__(self, worker) -> None:
        self.worker = worker

    def __getattr__(self, name: str):
        if name not in TARGETS:
            raise AttributeError(name)
        return functools.partial(self.worker.call, TARGETS[name])


class Context:
    """What a check gets besides the API: seeded randomness, the reference and the known mistakes.

    Public checks always draw from seed 0, so their expected values can ship as fixtures;
    hidden checks draw from the grading seed.
    """

    def __init__(self, seed: int, ref, mistakes, submission) -> None:
        self.seed = seed
        self.ref = ref
        self.mistakes = mistakes
        self.submission = submission

    def for_check(self, visibility: str) -> "Context":
        return Context(0 if visibility == "public" else self.seed, self.ref, self.mistakes, self.submission)

    def rng(self, tag: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(tag.encode())])
