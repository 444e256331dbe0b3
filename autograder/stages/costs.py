"""Bonus stage 12: counting scores and KV-cache numbers."""


from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Stage
from ..evidence.diagnosis import diagnosed
from .common import expect_defaults

STAGE = Stage(
    name="costs", number=12, points=5, files=("costs.py",), calls=("kv_cache",),
    reread='score and KV-cache counts; B "What it costs as the sequence grows"',
    torch=True, bonus=True, worked_points=1.0,
    functions=(
        Function(name="score_count", target="costs:score_count", reference="core:score_count"),
        Function(name="kv_cache_floats", target="costs:kv_cache_floats", reference="core:kv_cache_floats"),
    ),
    intro="Bonus: count the scores and the KV cache's numbers.",
    hints=(
        "Every query scores every key, in every head. A KV cache keeps two vectors (a key and a value) per token, "
        "per key/value head, per layer, per sequence in the batch.",
        "Check your formula against the KVCache you wrote: count the numbers its k and v tensors hold.",
    ),
    mistakes=(
        Mistake(id="costs-kv-missing-factor-2", where="costs.py:kv_cache_floats",
                explanation="the cache holds a key and a value per token and head: the factor 2 is missing",
                reread="Article B, 'What it costs as the sequence grows'",
                evidence='mistakes:costs_variants',
                mutant=(
                    Edit('costs.py',
                         'return 2 * batch * n_layers',
                         'return batch * n_layers'),
                )),
        Mistake(id="costs-scores-not-squared", where="costs.py:score_count",
                explanation="every query scores every key: n x n scores per head, not n",
                reread="Article B, 'What it costs as the sequence grows'",
                evidence='check:costs_reference',
                mutant=(
                    Edit('costs.py',
                         'return n_tokens * n_tokens * n_heads',
                         'return n_tokens * n_heads'),
                )),
    ),
)

@STAGE.check(points=1, kind="reference")
def costs_reference(api, ctx):
    """score_count and kv_cache_floats match the formulas for random sizes"""
    rng = ctx.rng("costs")
    for _ in range(5):
        n, h, layers, kvh, d, b = (int(x) for x in rng.integers(1, [5000, 32, 48, 16, 256, 8]))
        got, want = api.score_count(n, h), ctx.ref.score_count(n, h)
        if int(got) != want:
            raise diagnosed("costs-scores-not-squared" if int(got) == n * h else None,
                            f"score_count({n}, {h}) = {got}; expected {want}")
        got, want = api.kv_cache_floats(n, layers, kvh, d, b), ctx.ref.kv_cache_floats(n, layers, kvh, d, b)
        bad = ctx.mistakes.costs_variants(n, layers, kvh, d, b)  # asked every time: the release records it
        if int(got) != want:
            found = next((m for m, x in bad.items() if int(got) == x), None)
            raise diagnosed(found, f"kv_cache_floats({n}, {layers}, {kvh}, {d}, {b}) = {got}; expected {want}")


@STAGE.check(points=1.5, kind="property", visibility="public", cite="Article B, 'What it costs as the sequence grows'",
              rule="It equals the number of elements your KVCache's k and v hold together.")
def costs_match_your_cache(api, ctx):
    """kv_cache_floats equals what your own KVCache allocates"""
    for batch, h, max_len, d in [(1, 12, 1024, 64), (3, 4, 100, 16)]:  # batch 3: a batch left out is not a 2
        mine = int(api.kv_cache_numel(batch, h, max_len, d))
        claimed = int(api.kv_cache_floats(max_len, 1, h, d, batch))
        bad = ctx.mistakes.costs_variants(max_len, 1, h, d, batch)  # asked every time: the release records it
        if mine != claimed:
            found = next((m for m, x in bad.items() if claimed == x), None)
            raise diagnosed(found, f"kv_cache_floats({max_len}, 1, {h}, {d}, {batch}) = {claimed}, but your "
                            f"KVCache({batch}, {h}, {max_len}, {d}) holds {mine} numbers")


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    written = api.score_count(4), api.kv_cache_floats(4, 1, 1, 2)  # a stub's defaults earn nothing: the stage must work first
    expect_defaults(api, {"costs:score_count": {"n_heads": "1"}, "costs:kv_cache_floats": {"batch": "1"}}, written)
