"""Attention, stage by stage: one module per stage (`make grade` lists them, the bonus stages last).

Grade with `make grade`; the stage table and the next step tell you where to go.
Mask convention everywhere: boolean, True = may attend.
"""
