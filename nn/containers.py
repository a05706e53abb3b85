"""Containers: ModuleList (h.0, h.1, ...), ModuleDict (transformer.wte, ...) and Sequential."""
from __future__ import annotations

from typing import Iterable, Iterator

from nn.module import Module


class ModuleList(Module):
    """A list of modules, registered under "0", "1", ... (`h.0.attn...`)."""

    def __init__(self, modules: Iterable[Module] = ()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList holds Modules, got {type(module).__name__}")
        setattr(self, str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx):
        items = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(items[idx])
        if not -len(items) <= idx < len(items):
            raise IndexError(f"ModuleList index {idx} out of range for length {len(items)}")
        return items[idx]

    def forward(self, *args, **kwargs):
        raise TypeError("ModuleList is a container: call its modules, not the list")


class ModuleDict(Module):
    """An ordered mapping name -> module (`transformer.wte`, `transformer.h`, ...)."""

    def __init__(self, modules: dict | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        if modules is not None:
            items = modules.items() if isinstance(modules, dict) else modules
            for name, m in items:
                self[name] = m

    def __setitem__(self, name: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict[{name!r}] must be a Module, got {type(module).__name__}")
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"ModuleDict key must be a non-empty string without '.', got {name!r}")
        setattr(self, name, module)

    def __getitem__(self, name: str) -> Module:
        try:
            return self._modules[name]
        except KeyError:
            raise KeyError(f"ModuleDict has no module {name!r}; it has {list(self._modules)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def forward(self, *args, **kwargs):
        raise TypeError("ModuleDict is a container: call its modules, not the dict")


class Sequential(Module):
    """Modules applied in order: `Sequential(Linear(4, 8), ReLU(), Linear(8, 2))(x)`."""

    def __init__(self, *modules: Module):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], dict):
            for name, m in modules[0].items():
                setattr(self, name, m)
        else:
            for i, m in enumerate(modules):
                if not isinstance(m, Module):
                    raise TypeError(f"Sequential argument {i} must be a Module, got {type(m).__name__}")
                setattr(self, str(i), m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx: int) -> Module:
        return list(self._modules.values())[idx]

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x
