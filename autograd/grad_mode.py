"""Whether operations record a graph. `no_grad()` turns recording off inside a `with` block."""
from __future__ import annotations

import contextlib
import threading

class _State(threading.local):
    enabled = True  # the default in every thread; set_grad_enabled overrides it per thread


_state = _State()


def is_grad_enabled() -> bool:
    return _state.enabled


def set_grad_enabled(mode: bool) -> None:
    _state.enabled = bool(mode)


@contextlib.contextmanager
def no_grad():
    """Build no graph inside the block (inference, optimizer updates)."""
    previous = is_grad_enabled()
    set_grad_enabled(False)
    try:
        yield
    finally:
        set_grad_enabled(previous)


@contextlib.contextmanager
def enable_grad():
    previous = is_grad_enabled()
    set_grad_enabled(True)
    try:
        yield
    finally:
        set_grad_enabled(previous)
