"""What crosses between the grader and a child process: JSON lines, arrays as raw bytes.

Never pickle: a child can only send back data (numbers, strings, lists, arrays).
"""
import base64
import json
from typing import Any

import numpy as np

_FLOAT_KINDS = "fciub"


def encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in _FLOAT_KINDS:
            raise TypeError(f"cannot send an array of dtype {obj.dtype}")
        a = obj if obj.flags.c_contiguous else np.array(obj, order="C")  # (ascontiguousarray makes 0-d 1-d)
        return {"__nd__": [a.dtype.str, list(a.shape), base64.b64encode(a.tobytes()).decode("ascii")]}
    if isinstance(obj, np.generic):
        return encode(np.asarray(obj)) if obj.dtype.kind in _FLOAT_KINDS else str(obj)
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(x) for x in obj]}
    if isinstance(obj, list):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot send a {type(obj).__name__}")


def decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        if "__nd__" in obj:
            dtype, shape, data = obj["__nd__"]
            dt = np.dtype(dtype)
            if dt.kind not in _FLOAT_KINDS or dt.hasobject:
                raise TypeError(f"refusing dtype {dtype}")
            a = np.frombuffer(base64.b64decode(data), dtype=dt).reshape(tuple(shape)).copy()
            return a[()] if a.ndim == 0 else a  # a numpy scalar (np.float64 is a float) comes back as one
        if "__tuple__" in obj:
            return tuple(decode(x) for x in obj["__tuple__"])
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(x) for x in obj]
    return obj


def dumps(obj: Any) -> bytes:
    return (json.dumps(encode(obj)) + "\n").encode()


def loads(line: bytes) -> Any:
    return decode(json.loads(line))
