"""autograd.memory: an allocation that cannot succeed is refused by name before it is made."""
import pytest

from autograd import memory


def test_available_bytes_reads_the_host():
    free = memory.available_bytes()
    assert free is None or free > 2**20


def test_check_fits_refuses_only_beyond_what_is_free(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 10 * 2**30)
    memory.check_fits(10 * 2**30, "a buffer", "ask for less")  # exactly what is free: allowed
    with pytest.raises(memory.OutOfMemory, match=r"^a buffer needs at least 12.0 GiB, more than the 10.0 GiB "
                                                 r"this machine has free; ask for less$"):
        memory.check_fits(12 * 2**30, "a buffer", "ask for less")
    with pytest.raises(ValueError, match="device cuda:1 has free"):  # an OutOfMemory is a ValueError
        memory.check_fits(12 * 2**30, "a buffer", "ask for less", device="cuda:1")


def test_a_machine_that_cannot_tell_refuses_nothing(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": None)
    memory.check_fits(1e30, "a buffer", "ask for less")
