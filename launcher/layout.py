"""Checking a ctypes mirror of a C struct against the layout the compiled library reports.

A ctypes ``Structure`` that disagrees with its C struct (a field missing, reordered or of another width) makes
the library read or write past the Python buffer, silently.  Every library that shares a struct with the host
therefore exports its layout as a list of int64 words, ``sizeof`` then each field's offset in declaration
order, and the launcher compares that list with the mirror once, when it loads the library.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence


def layout_of(structure: type[ctypes.Structure]) -> list[int]:
    """``sizeof`` and each field's offset in ``_fields_`` order: the words a library's layout export writes."""
    fields = [field[0] for field in structure._fields_]
    return [ctypes.sizeof(structure)] + [getattr(structure, name).offset for name in fields]


def layout_words(export: Callable[..., int], words: int) -> list[int]:
    """Call a library's layout export ``int32 f(int64 *out, int32 n)``; it returns how many words it has."""
    out = (ctypes.c_int64 * words)()
    count = int(export(out, words))
    if count != words:
        raise RuntimeError(f"the library's layout export reports {count} words, the mirror expects {words}")
    return list(out)


def mismatches(structures: Sequence[type[ctypes.Structure]], library_words: Sequence[int]) -> list[str]:
    """Where ``structures`` (laid out one after another as the export lists them) differ from the library."""
    names: list[str] = []
    mirror: list[int] = []
    for structure in structures:
        names += [f"sizeof({structure.__name__})"] + [f"{structure.__name__}.{f[0]}" for f in structure._fields_]
        mirror += layout_of(structure)
    if len(mirror) != len(library_words):
        return [f"the mirror has {len(mirror)} layout words ({', '.join(names)}), the library {len(library_words)}"]
    return [f"{name}: library {lib}, mirror {own}"
            for name, lib, own in zip(names, library_words, mirror, strict=True) if lib != own]
