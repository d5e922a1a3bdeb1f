"""Exceptions the launcher raises beyond ``ValueError``/``TypeError`` for bad user input.

A :class:`KernelContractError` means the *host* broke the kernel contract (a tiling word, a workspace size,
a gather map) and the mock device or the simulation caught it before it could corrupt memory.  It carries
every coordinate the device reported as a named attribute, so a test can assert on the buffer and offset
instead of parsing a message.
"""

from __future__ import annotations

from tiling.abi import ABI_VERSION, ArgSlot, ErrorCode

#: What the device reports when a coordinate does not apply (no core, no sequence, ...).
NOT_APPLICABLE = -1


class KernelContractError(RuntimeError):
    """A kernel call returned an error code: the launch broke the kernel ABI's contract (``kernel/pa_kernel_abi.h``;
    the message names its version from the mirror, ``tiling.abi.ABI_VERSION``, never a copy of the number).

    Attributes (``None`` when the device did not report them):

    * ``code``: the :class:`~tiling.abi.ErrorCode` (or the raw int if the library returned an unknown one)
    * ``slot``: the :class:`~tiling.abi.ArgSlot` of the buffer involved; ``buffer`` is its lower-case name
    * ``element_offset``, ``extent``: the offending offset and the buffer's extent, in that buffer's elements
    * ``core``, ``seq``, ``head``, ``split``: logical core (block_idx), sequence slot, q head and KV split
    * ``message``: the device's own description
    """

    def __init__(
        self,
        code: int,
        *,
        slot: int | None = None,
        element_offset: int | None = None,
        extent: int | None = None,
        core: int | None = None,
        seq: int | None = None,
        head: int | None = None,
        split: int | None = None,
        message: str = "",
        library: str = "",
    ) -> None:
        self.code: ErrorCode | int = _known(ErrorCode, code)
        self.slot: ArgSlot | None = _known(ArgSlot, slot) if _given(slot) else None  # type: ignore[assignment]
        self.buffer: str | None = self.slot.name.lower() if isinstance(self.slot, ArgSlot) else None
        self.element_offset = element_offset if _given(element_offset) else None
        self.extent = extent if _given(extent) else None
        self.core = core if _given(core) else None
        self.seq = seq if _given(seq) else None
        self.head = head if _given(head) else None
        self.split = split if _given(split) else None
        self.message = message
        self.library = library
        super().__init__(self._describe())

    def _describe(self) -> str:
        code = self.code.name if isinstance(self.code, ErrorCode) else f"unknown error code {self.code}"
        parts = [f"kernel contract (ABI v{ABI_VERSION}) violated: {code}"]
        where = {
            "buffer": self.buffer, "element offset": self.element_offset, "extent": self.extent,
            "core": self.core, "seq": self.seq, "head": self.head, "split": self.split,
        }
        details = ", ".join(f"{name} {value}" for name, value in where.items() if value is not None)
        if details:
            parts.append(f"({details})")
        if self.message:
            parts.append(f"- {self.message}")
        if self.library:
            parts.append(f"[{self.library}]")
        return " ".join(parts)


class KernelLibraryNotFoundError(FileNotFoundError):
    """A kernel library (``.so``) is not where the launcher looks; the message says how to build it."""


def _given(value: int | None) -> bool:
    return value is not None and value != NOT_APPLICABLE


def _known(enum: type, value: int | None) -> object:
    try:
        return enum(value)
    except ValueError:
        return value


class DefaultOutputReusedWarning(UserWarning):
    """A second ``run()`` of one decode step wrote the runner's default output again, so the tensor the first
    returned now holds the second's result.  An engine that keeps each layer's output passes ``out=`` per layer
    (docs/API.md, "The default output"); the warning is given once per runner."""
