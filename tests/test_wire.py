"""What crosses between a child and the grader keeps its shape: a numpy scalar (np.var's answer) is a
scalar on arrival, not a one-element array, so correct code that returns one keeps its points."""
import numpy as np
import pytest
from conftest import SOLUTIONS, grade, variant

from autograder.child import wire


@pytest.mark.parametrize("value", [np.float64(2.01), np.float32(1.5), np.int64(3), np.array(2.0)])
def test_a_scalar_arrives_as_a_scalar(value):
    got = wire.loads(wire.dumps({"v": value}))["v"]
    assert np.shape(got) == () and float(got) == float(value) and np.asarray(got).dtype == np.asarray(value).dtype


def test_arrays_keep_shape_dtype_and_values():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(2, 0, 1)  # not contiguous
    got = wire.loads(wire.dumps(a))
    assert got.shape == a.shape and got.dtype == a.dtype and np.array_equal(got, a)


def test_a_variance_returned_as_a_numpy_float_keeps_its_points(tmp_path):
    """score_variance ending in `return np.var(s)` (a np.float64, not a float) is correct code."""
    text = (SOLUTIONS / "scaling.py").read_text()
    returns = [line for line in text.splitlines() if line.strip().startswith("return float(")]
    assert returns, "the solution returns float(...) somewhere in scaling.py"
    old = returns[0]
    new = old.replace("return float(", "return np.asarray(", 1)
    res = grade(variant(tmp_path, {"scaling.py": [(old, new)]}), stages=["scaling"])
    st = res.stages["scaling"]
    assert st.score == st.max_score, [(r.check.name, r.message[:200]) for r in st.checks if not r.passed]
