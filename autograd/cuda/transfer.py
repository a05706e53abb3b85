"""Host-to-GPU copies that do not stall the host: pinned staging buffers and async copies.

A copy from ordinary (pageable) host memory makes the host wait until the GPU has the data.
From page-locked ("pinned") memory the copy is queued on the current stream and the host goes
on preparing the next step; being on the compute stream, the copy is ordered before the
kernels that read it. Staging buffers are reused in a ring; before a buffer is overwritten
its previous copy is waited for (an event), which by then has long finished.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class HostToDevice:
    """Callable: host array -> the same values in a new CuPy array on `device`, copied async.

    slots: staging buffers in the ring (copies in flight at once).
    """

    def __init__(self, device: str = "cuda", slots: int = 4):
        from autograd.backend import cupy_module, parse_device

        self.cp = cupy_module()
        _, self.index = parse_device(device)
        self.slots: list[dict] = [{"buf": None, "event": None} for _ in range(max(1, slots))]
        self.next = 0

    def __call__(self, host: np.ndarray) -> Any:
        cp = self.cp
        host = np.ascontiguousarray(host)
        slot = self.slots[self.next]
        self.next = (self.next + 1) % len(self.slots)
        with cp.cuda.Device(self.index):
            if slot["event"] is not None:
                slot["event"].synchronize()          # the last copy out of this buffer is done
            buf = slot["buf"]
            if buf is None or buf.nbytes < host.nbytes:
                import cupyx

                buf = slot["buf"] = cupyx.empty_pinned((max(host.nbytes, 1),), dtype=np.uint8)
            staged = buf[:host.nbytes].view(host.dtype).reshape(host.shape)
            staged[...] = host
            out = cp.empty(host.shape, dtype=host.dtype)
            stream = cp.cuda.get_current_stream()
            out.set(staged, stream=stream)
            event = slot["event"] = cp.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
        return out
