"""The hidden reference: an independent float64 implementation of every stage.

Never shipped to students and never imported by `solutions/` (nor the reverse).
It is written differently on purpose (einsum, log-sum-exp, a loop over heads) so
that agreement between the two is evidence, not an echo.
Mask convention: bool, True = may attend; causal alignment bottom-right.
The grader finds each function by the "module:function" name its stage declares.
"""
