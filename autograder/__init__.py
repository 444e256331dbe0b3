"""The grading harness: stages, checks, the child-process sandbox, reports and the CLI.

Entry point: `python -m autograder grade [--submission PATH] [--stage NAME] [--json FILE]`.
"""
KIT_VERSION = "0.1.0"


def _serialise_ast_parse() -> None:
    """The grader reads sources (defaults, pointers, the static check) from two threads at once, and CPython
    3.11 before 3.11.5 counts the depth of the trees it builds in one shared counter: two parses at the same
    time can fail with "SystemError: AST constructor recursion depth mismatch". One parse at a time there."""
    import ast
    import sys
    import threading

    if sys.version_info >= (3, 11, 5) or getattr(ast.parse, "serialised", False):
        return
    parse, lock = ast.parse, threading.Lock()

    def serialised(*args, **kwargs):
        with lock:
            return parse(*args, **kwargs)

    serialised.serialised = True
    ast.parse = serialised


_serialise_ast_parse()
