"""TF32 for float32 matmuls on the GPU.

CuPy chooses the cuBLAS compute type of a matmul per dtype; for float32 the default is full
float32. CuPy reads the environment variable CUPY_TF32 (1: TF32) once, the first time it needs
the float32 compute type; after that the switch is `cupy._core._routines_linalg.set_compute_type`,
a CuPy-internal function (no public one exists in CuPy 13/14), so it is used defensively: if it
is missing the setting is reported as not applied instead of failing.

bfloat16: NumPy has no bfloat16 dtype and CuPy none of its own (CuPy 14 reaches one only through
the optional ml_dtypes package), so half precision here means float16 with dynamic loss
scaling (nn.amp).
"""
from __future__ import annotations

import os


def set_tf32(enabled: bool) -> bool:
    """Make float32 matmuls use TF32 (True) or full float32 (False). Returns True when applied."""
    os.environ["CUPY_TF32"] = "1" if enabled else "0"   # for a CuPy that has not decided yet
    try:
        from autograd.backend import cupy_module

        cp = cupy_module()
        from cupy._core import _routines_linalg as linalg

        kind = linalg.COMPUTE_TYPE_TF32 if enabled else linalg.COMPUTE_TYPE_DEFAULT
        linalg.set_compute_type(cp.dtype("float32"), kind)
    except (ImportError, AttributeError, RuntimeError):
        return False
    return True


def tf32_enabled() -> bool | None:
    """Whether float32 matmuls currently use TF32; None when it cannot be told."""
    try:
        from autograd.backend import cupy_module

        cp = cupy_module()
        from cupy._core import _routines_linalg as linalg

        return linalg.get_compute_type(cp.dtype("float32")) == linalg.COMPUTE_TYPE_TF32
    except (ImportError, AttributeError, RuntimeError):
        return None
