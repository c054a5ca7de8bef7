"""`quick`: frozen, slotted dataclasses built at the cost of mutable ones (PERF-1).

A frozen dataclass's `__init__` sets each field through `object.__setattr__`, which
CPython 3.11 neither specialises nor inlines: counted with callgrind, a nine-field record
cost 14,300 instructions to build against 2,900 for a mutable slotted one, and the loop
builds a few dozen records a durable step. `quick` keeps everything the dataclass
declares (its fields, equality, hash, repr, `dataclasses.replace`, `FrozenInstanceError`
on any later assignment) and only changes how an instance is born: as its class's
mutable twin (the same slots, ordinary attribute stores, which the interpreter
specialises), which then takes the frozen class as its own. Nothing can hold the instance
before that switch, so no one ever sees it mutable; after it, the instance is exactly one
the dataclass's own `__init__` would have built (tests/loop/test_frozen_records.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick(cls: type[T]) -> type[T]:
    """Build `cls`, a `@dataclass(frozen=True, slots=True)`, through its mutable twin.
    A subclass that is a dataclass itself needs `quick` too (its own fields, its own
    twin). A `__post_init__` runs on the twin, so it may still set fields."""
    params = getattr(cls, "__dataclass_params__", None)
    assert params is not None and params.frozen, f"{cls.__name__}: not a frozen dataclass"
    assert "__slots__" in cls.__dict__, f"{cls.__name__}: not slotted"
    # The twin's `__setattr__` and `__delattr__` are object's own (one slot serves both:
    # with either left frozen, every store would still call into Python), so its slot
    # stores are the plain, specialised ones; it adds no slots, so an instance may switch
    # between the two classes.
    twin = type(
        cls.__name__,
        (cls,),
        {
            "__slots__": (),
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
        },
    )
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"_new": object.__new__, "_twin": twin}
    parameters, stores = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            parameters.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            namespace["_NOTHING"] = _NOTHING
            parameters.append(f"{f.name}=_NOTHING")
            stores.append(f"    if {f.name} is _NOTHING: {f.name} = _factory_{f.name}()")
        else:
            parameters.append(f.name)
        stores.append(f"    self.{f.name} = {f.name}")
    if hasattr(cls, "__post_init__"):
        stores.append("    self.__post_init__()")
    source = (
        f"def __new__(cls, {', '.join(parameters)}):\n"
        "    self = _new(_twin)\n"
        + "\n".join(stores)
        + "\n    self.__class__ = cls\n    return self\n"
    )
    exec(source, namespace)  # as dataclasses builds its own __init__
    new = namespace["__new__"]
    new.__qualname__ = f"{cls.__qualname__}.__new__"
    cls.__new__ = new  # type: ignore[method-assign]
    # `__new__` built the instance whole; object's `__init__` accepts the same arguments.
    cls.__init__ = object.__init__  # type: ignore[method-assign]
    names = tuple(f.name for f in fields)

    def __reduce__(self: Any) -> tuple[type[T], tuple[Any, ...]]:
        # copy and pickle rebuild the instance through `__new__`, with its fields.
        return cls, tuple(getattr(self, name) for name in names)

    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    return cls


class _Nothing:
    """A field with a default factory was not given."""


_NOTHING = _Nothing()
