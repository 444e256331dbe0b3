"""Bonus stage 11: inverted dropout on the attention weights."""
import numpy as np

from ..declarations import Edit, Function, Mistake, Stage
from ..evidence.compare import check_close
from ..evidence.diagnosis import diagnosed
from ..outcomes import Fail

STAGE = Stage(
    name="dropout", number=11, points=5, files=("dropout.py",), calls=(),
    reread='inverted dropout on the weights; B "Causal attention"',
    bonus=True,
    functions=(
        Function(name="dropout_probe", target="npdriver:dropout_probe", reads=("dropout.py",)),
    ),
    intro="Bonus: inverted dropout on the attention weights.",
    hints=(
        "Inverted dropout: drop each weight with probability p and scale up the survivors, so the expected value "
        "of every weight is unchanged; at inference, do nothing.",
        "rng.random(shape) gives uniform numbers in [0, 1): comparing them with p gives the mask. Divide "
        "survivors by 1 - p.",
    ),
    mistakes=(
        Mistake(id="dropout-not-inverted", where="dropout.py:attention_dropout",
                explanation="the surviving weights are not divided by 1 - p, so dropout shrinks the expected "
                            "output",
                reread="Article B, 'Causal attention'",
                evidence='check:dropout_survivors_rescaled',
                mutant=(
                    Edit('dropout.py',
                         'np.where(keep, weights / (1.0 - p), 0.0)',
                         'np.where(keep, weights, 0.0)'),
                )),
        Mistake(id="dropout-in-eval", where="dropout.py:attention_dropout",
                explanation="weights are dropped when not training; dropout is off at inference",
                reread="Article B, 'Causal attention'",
                evidence='check:dropout_identity_in_eval',
                line=r"^\s*(if|elif)\b.*(\btraining\b|\bp\b)",  # the test that returns the weights unchanged
                mutant=(
                    Edit('dropout.py',
                         'if not training or p == 0.0:',
                         'if p == 0.0:'),
                )),
        Mistake(id="dropout-keep-p", where="dropout.py:attention_dropout",
                explanation="weights are kept with probability p instead of dropped with it",
                reread="Article B, 'Causal attention'",
                evidence='check:dropout_kept_fraction',
                mutant=(
                    Edit('dropout.py',
                         'keep = rng.random(weights.shape) >= p',
                         'keep = rng.random(weights.shape) < p'),
                )),
    ),
)

@STAGE.check(points=1, kind="property", visibility="public", cite="Article B, 'Causal attention'",
              rule="Returns `weights` unchanged when not training (or p == 0).")
def dropout_identity_in_eval(api, ctx):
    """training=False returns the weights unchanged, whatever p"""
    w = np.random.default_rng(0).random((6, 7))
    got = np.asarray(api.dropout_probe(w, 0.5, 1, False), dtype=float)
    if got.shape != w.shape or not np.array_equal(got, w):
        raise diagnosed("dropout-in-eval" if got.shape == w.shape and (got == 0).mean() > 0.2 else None,
                        "attention_dropout(training=False) changed the weights; dropout is off at inference")
    got = np.asarray(api.dropout_probe(w, 0.0, 1, True), dtype=float)
    if not np.array_equal(got, w):
        raise Fail("attention_dropout(p=0, training=True) changed the weights")


@STAGE.check(points=1.5, kind="property", visibility="public", rule="Zero each weight with probability p")
def dropout_kept_fraction(api, ctx):
    """in training, each weight survives with probability 1 - p"""
    w = np.ones((300, 300))
    for p in (0.1, 0.3):
        got = np.asarray(api.dropout_probe(w, p, 7, True), dtype=float)
        kept = float((got != 0).mean())
        sigma = np.sqrt(p * (1 - p) / w.size)
        if abs(kept - (1 - p)) > 6 * sigma:
            bad = "dropout-keep-p" if abs(kept - p) <= 6 * sigma else None
            raise diagnosed(bad, f"with p={p} the kept fraction is {kept:.4f}; expected {1 - p:.2f} (+- {6 * sigma:.4f})")


@STAGE.check(points=1.5, kind="property", visibility="public", rule="divide the survivors by (1 - p)")
def dropout_survivors_rescaled(api, ctx):
    """survivors are divided by 1 - p, so each weight keeps its expected value"""
    w = np.random.default_rng(2).random((200, 200))
    p = 0.25
    got = np.asarray(api.dropout_probe(w, p, 11, True), dtype=float)
    kept = got != 0
    if np.allclose(got[kept], w[kept]):
        raise diagnosed("dropout-not-inverted", "the surviving weights were not divided by 1 - p: the expected "
                        "weight shrinks by the factor 1 - p")
    check_close(got[kept], w[kept] / (1 - p), "surviving weights against w / (1 - p)")
    mean_ratio = got.mean() / w.mean()
    if abs(mean_ratio - 1) > 0.02:
        raise Fail(f"the mean weight changed by x{mean_ratio:.3f} under dropout; expected about x1")


@STAGE.check(points=1, kind="property", visibility="public",
             rule="Draw the mask with one rng.random(weights.shape) call: a weight is dropped where its draw is "
                  "below p.")
def dropout_uses_the_rng(api, ctx):
    """the mask is the docstring's draw: rng.random(weights.shape), a weight dropped where its draw is below p"""
    w = np.ones((20, 20))
    a, b, c = (np.asarray(api.dropout_probe(w, 0.5, s, True)) for s in (3, 3, 4))
    if not np.array_equal(a, b):
        raise Fail("two calls with generators seeded alike gave different masks: draw from the rng you are given")
    if np.array_equal(a, c):
        raise Fail("generators with different seeds gave the same mask: draw from the rng you are given")
    # not square: a draw of another shape, transposed back, is another mask; `keep = draw < 1 - p` is accepted too
    p, shape = 0.25, (12, 9)
    kept = np.asarray(api.dropout_probe(np.ones(shape), p, 5, True)) != 0
    draw = np.random.default_rng(5).random(shape)
    if not (np.array_equal(kept, draw >= p) or np.array_equal(kept, draw < 1 - p)):
        raise Fail(f"with p = {p} and np.random.default_rng(5), the weights you kept are not those of the docstring's "
                   f"draw: {int((kept != (draw >= p)).sum())} of {kept.size} differ from one rng.random(weights.shape) "
                   "call with a weight dropped where its draw is below p")

