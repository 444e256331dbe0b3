"""All checks, one module per stage; importing this package registers them in registry.CHECKS."""
from . import worked  # noqa: F401  (first: the articles' numbers lead each stage)
from . import dot_products, fused, heads, kv_cache, masking, projections, scaling, softmax  # noqa: E402,F401
from . import bonus  # noqa: E402,F401
