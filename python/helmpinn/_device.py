"""Where a model's arrays live: ``device="cpu"`` (NumPy) or ``device="cuda"`` / ``"cuda:N"``
(:class:`helmpinn.DeviceArray`, memory the library owns on GPU N).

:func:`check` parses a device name and, for CUDA, says before any work why it cannot be used,
with the wording of ``Workspace(device="cuda")``: "helmpinn was built without CUDA support
(device='cuda' unavailable)" or "<caller>(device='cuda'): CUDA device N is not available: <why>".
Every copy between host and device memory that the Python layer makes goes through
:func:`upload`, :func:`to_host` and :func:`write`, each of them one copy.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _core

__all__ = ["check", "parse", "name_of", "index_of", "is_device_array", "is_foreign_device_array",
           "upload", "to_host", "write", "zeros"]

DeviceArray = _core.DeviceArray


def parse(device: Any) -> tuple[str, int]:
    """``("cpu", -1)`` or ``("cuda", N)`` for "cpu", "cuda" (device 0) or "cuda:N"; ValueError
    (TypeError for a non-string) naming anything else. Checks nothing about the machine. The
    parser is the core's, the one ``Workspace(device=...)`` uses (``_core.parse_device``)."""
    return _core.parse_device(device)


def check(device: Any, caller: str) -> str:
    """The canonical name ("cpu" or "cuda:N") of ``device`` after checking that it can be used:
    RuntimeError without CUDA support or without that GPU, ValueError for an unknown name."""
    kind, index = parse(device)
    if kind == "cpu":
        return "cpu"
    if not _core.has_cuda():
        raise RuntimeError("helmpinn was built without CUDA support (device='cuda' unavailable)")
    count = _core.cuda_device_count()
    if index >= count:
        # the Workspace's words: "no CUDA device found[: <the runtime's error>]" or the count
        error = _core.cuda_device_error()
        if count:
            why = f"{count} CUDA device(s) visible"
        elif error and error != "no CUDA device found":
            why = f"no CUDA device found: {error}"
        else:
            why = "no CUDA device found"
        raise RuntimeError(f"{caller}(device={device!r}): CUDA device {index} is not available: {why}")
    return f"cuda:{index}"


def is_device_array(a: Any) -> bool:
    """True for helmpinn's own device arrays (:class:`helmpinn.DeviceArray`)."""
    return isinstance(a, DeviceArray)


def is_foreign_device_array(a: Any) -> bool:
    """True for GPU memory that is not a helmpinn DeviceArray (CuPy, PyTorch CUDA tensors, ...):
    ``__cuda_array_interface__``, or DLPack naming a CUDA device."""
    if isinstance(a, np.ndarray) or is_device_array(a):
        return False
    if hasattr(a, "__cuda_array_interface__"):
        return True
    try:
        return int(a.__dlpack_device__()[0]) in (2, 13)   # kDLCUDA, kDLCUDAManaged
    except Exception:  # noqa: BLE001 - no (usable) __dlpack_device__: not a device array
        return False


def name_of(a: Any) -> str:
    """"cuda:N" for a DeviceArray, "cpu" for anything else."""
    return f"cuda:{a.device}" if is_device_array(a) else "cpu"


def index_of(device: str) -> int:
    """N of a canonical "cuda:N"."""
    return parse(device)[1]


def upload(a: np.ndarray, device: str) -> Any:
    """A new DeviceArray on ``device`` ("cuda:N") holding a copy of the host array ``a``."""
    return DeviceArray.from_host(np.ascontiguousarray(a), index_of(device))


def zeros(n: int, dtype: Any, device: str) -> Any:
    """``n`` zeros of ``dtype``: a NumPy array on "cpu", a DeviceArray on "cuda:N"."""
    z = np.zeros(int(n), dtype=dtype)
    return z if device == "cpu" else upload(z, device)


def to_host(a: Any) -> Any:
    """A NumPy copy of a DeviceArray; anything else is returned as it is."""
    return a.copy_to_host() if is_device_array(a) else a


def write(dst: Any, values: Any) -> None:
    """``dst[...] = values`` in place, for a NumPy array or a DeviceArray (one upload; the
    device memory stays the same)."""
    if is_device_array(dst):
        src = to_host(values)
        dst.copy_from_host(np.ascontiguousarray(np.asarray(src), dtype=dst.dtype))
    else:
        dst[...] = to_host(values)
