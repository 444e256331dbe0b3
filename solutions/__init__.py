"""Attention, stage by stage: one module per stage, softmax.py through fused.py.

Grade with `make grade`; the stage table and the next step tell you where to go.
Mask convention everywhere: boolean, True = may attend.
"""
