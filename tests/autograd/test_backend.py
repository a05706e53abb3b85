"""autograd.backend: moving arrays to where another array lives."""
import numpy as np
import pytest

from autograd import backend


def test_to_device_of_keeps_a_host_array_beside_a_host_array():
    a, like = np.arange(3), np.zeros(2)
    assert backend.to_device_of(a, like) is a
    assert backend.to_device_of(a, like) is backend.to_device(a, backend.device_of(like))


@pytest.mark.skipif(not backend.cuda_available(), reason="needs CuPy and an NVIDIA GPU")
def test_to_device_of_moves_between_host_and_gpu():
    cp = backend.cupy_module()
    host, gpu = np.arange(3.0), cp.zeros(2)
    moved = backend.to_device_of(host, gpu)
    assert backend.device_of(moved) == backend.device_of(gpu) and cp.asnumpy(moved).tolist() == host.tolist()
    back = backend.to_device_of(moved, host)
    assert type(back) is np.ndarray and back.tolist() == host.tolist()
