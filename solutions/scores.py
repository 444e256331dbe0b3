"""Stage 2: dot products as scores, and attention with no learned weights.

Article B, "The one idea" and "Simple self-attention".
"""
import numpy as np

from .softmax import softmax


def dot_scores(x: np.ndarray) -> np.ndarray:
    """Every token's dot product with every token: x [n, d] -> [n, n], entry (i, j) = x_i . x_j."""
    # BEGIN SOLUTION
    return x @ x.T  # [n, d] @ [d, n] -> [n, n]
    # END SOLUTION


def simple_self_attention(x: np.ndarray) -> np.ndarray:
    """softmax(x x^T) x: each row becomes a weighted average of all rows. x [n, d] -> [n, d].

    Permuting the rows of x permutes the rows of the output the same way.
    """
    # BEGIN SOLUTION
    weights = softmax(dot_scores(x), axis=-1)  # [n, n], each row sums to 1
    return weights @ x  # [n, n] @ [n, d] -> [n, d]
    # END SOLUTION
