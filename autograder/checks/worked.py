"""One check per worked number of the articles (autograder.worked)."""
from ..compare import check_printed, check_within
from ..registry import CHECKS, check
from ..worked import WORKED

def _worked_check(w, points: float):
    def fn(api, ctx):
        got = w.compute(api)
        what = f"{w.quantity} (Article {w.article}, '{w.section}')"
        if isinstance(w.precision, dict):
            check_within(got, w.expected, w.precision["sampling_error"], what)
        else:
            check_printed(got, w.expected, w.precision, what)

    fn.__name__ = "worked_" + w.id.replace("-", "_").lower()
    fn.__doc__ = f"Article {w.article}, {w.section}: {w.quantity}"
    reg = check(w.stage, points, "worked", "public", cite=f"Article {w.article}, '{w.section}'")(fn)
    CHECKS[-1].worked_id = w.id
    return reg


WORKED_POINTS = {"softmax": 0.5, "dot_products": 1.0, "projections": 1.0, "scaling": 0.5, "masking": 0.5,
                 "heads": 1.0, "kv_cache": 1.0, "fused": 1.0, "tiled": 1.0, "costs": 1.0}
for _w in WORKED:
    _worked_check(_w, WORKED_POINTS[_w.stage])

