"""Attention, stage by stage: the complete student modules (instructor copy).

`exercises/` is generated from this package by `make exercises`: every
`# BEGIN SOLUTION` ... `# END SOLUTION` block becomes a stub that raises
NotImplementedError. Mask convention everywhere: boolean, True = may attend.
"""
