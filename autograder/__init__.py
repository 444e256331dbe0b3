"""The grading harness: stages, checks, the child-process sandbox, reports and the CLI.

Entry point: `python -m autograder grade [--submission PATH] [--stage NAME] [--json FILE]`.
"""
KIT_VERSION = "0.1.0"
