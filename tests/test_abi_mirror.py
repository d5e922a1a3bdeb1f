"""``kernel/pa_kernel_abi.h`` and ``tiling/abi.py`` must agree on every number, in both directions.

The header is the single source of truth; a value changed on one side only would make the host and the
kernel disagree on where an argument or a tiling word lives, silently.  The parser is checked against a
deliberately altered copy of the header (negative control), and the mock API's ctypes structures against
the layout the compiled mock library reports.
"""

from __future__ import annotations

import re
from enum import IntEnum
from pathlib import Path

import pytest

from tiling import abi

HEADER = Path(__file__).resolve().parent.parent / "kernel" / "pa_kernel_abi.h"
DEFINE = re.compile(r"^#define\s+PA_(\w+)\s+(\d+)\b", re.MULTILINE)
KEY_LIST_COMMENT = re.compile(r"PA_KEY_LIST\[i\] in this order:\s*([\d,\s]+)")

#: Header prefix -> the IntEnum that mirrors that family of defines.
ENUM_PREFIXES: dict[str, type[IntEnum]] = {
    "ARG_": abi.ArgSlot, "TW_": abi.TilingWord, "BF_": abi.BatchField, "ERR_": abi.ErrorCode,
}
#: Header names whose Python mirror is not ``abi.<NAME>``.
RENAMED = {"OK": "ErrorCode.OK", "NUM_KEYS": "len(KEY_LIST)"}


def parse_defines(text: str) -> dict[str, int]:
    """``PA_NAME value`` for every integer ``#define`` (the include guard has no value and is skipped)."""
    return {name: int(value) for name, value in DEFINE.findall(text)}


def python_value(name: str) -> int | None:
    """The value ``tiling/abi.py`` gives the header's ``PA_<name>``, or None if it has no mirror."""
    if name == "OK":
        return int(abi.ErrorCode.OK)
    if name == "NUM_KEYS":
        return len(abi.KEY_LIST)
    for prefix, enum in ENUM_PREFIXES.items():
        if name.startswith(prefix):
            member = name[len(prefix):]
            return int(enum[member]) if member in enum.__members__ else None
    if name.startswith("KEY_") and name[len("KEY_"):] in abi.TilingKey.__members__:
        return int(abi.TilingKey[name[len("KEY_"):]])
    value = getattr(abi, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def header_to_python_mismatches(defines: dict[str, int]) -> list[str]:
    problems = []
    for name, value in defines.items():
        mirrored = python_value(name)
        if mirrored is None:
            problems.append(f"PA_{name} = {value} has no mirror in tiling/abi.py")
        elif mirrored != value:
            problems.append(f"PA_{name}: header {value}, tiling/abi.py {mirrored}")
    return problems


def python_names() -> dict[str, int]:
    """Every number ``tiling/abi.py`` defines, under the header name it must have."""
    names: dict[str, int] = {}
    for prefix, enum in ENUM_PREFIXES.items():
        for member in enum:
            names["OK" if enum is abi.ErrorCode and member.name == "OK" else prefix + member.name] = int(member)
    for key in abi.TilingKey:
        names["KEY_" + key.name] = int(key)
    for attr, value in vars(abi).items():
        if attr.isupper() and isinstance(value, int) and not isinstance(value, bool):
            names[attr] = value
    return names


def python_to_header_mismatches(defines: dict[str, int]) -> list[str]:
    problems = []
    for name, value in python_names().items():
        if name not in defines:
            problems.append(f"tiling/abi.py {name} = {value} has no PA_{name} in the header")
        elif defines[name] != value:
            problems.append(f"{name}: tiling/abi.py {value}, header {defines[name]}")
    return problems


@pytest.fixture(scope="module")
def header_text() -> str:
    return HEADER.read_text()


def test_parser_finds_every_family(header_text: str) -> None:
    defines = parse_defines(header_text)
    assert len([n for n in defines if n.startswith("ARG_")]) == abi.NUM_PTR_ARGS
    assert len([n for n in defines if n.startswith("TW_")]) == abi.TILING_HEADER_WORDS
    assert len([n for n in defines if n.startswith("BF_")]) == abi.TILING_BATCH_WORDS
    assert "ABI_VERSION" in defines and "OK" in defines


def test_header_values_match_python(header_text: str) -> None:
    assert header_to_python_mismatches(parse_defines(header_text)) == []


def test_python_values_match_header(header_text: str) -> None:
    assert python_to_header_mismatches(parse_defines(header_text)) == []


def test_key_list_order_matches_header_comment(header_text: str) -> None:
    match = KEY_LIST_COMMENT.search(header_text)
    assert match, "the header no longer states the order of pa_supported_keys() bits"
    order = [int(word) for word in match.group(1).replace(",", " ").split()]
    assert order == [int(key) for key in abi.KEY_LIST]


def test_slot_and_word_families_are_dense() -> None:
    """No gaps or duplicates: slot i and word i are all present exactly once."""
    assert sorted(int(s) for s in abi.ArgSlot) == list(range(abi.NUM_PTR_ARGS))
    assert sorted(int(w) for w in abi.TilingWord) == list(range(abi.TILING_HEADER_WORDS))
    assert sorted(int(f) for f in abi.BatchField) == list(range(abi.TILING_BATCH_WORDS))


@pytest.mark.parametrize(("define", "replacement"), [
    ("#define PA_ARG_O 13", "#define PA_ARG_O 14"),
    ("#define PA_TW_KVSPLIT 23", "#define PA_TW_KVSPLIT 24"),
    ("#define PA_COMBINE_UB_FLOATS 8192", "#define PA_COMBINE_UB_FLOATS 4096"),
])
def test_negative_control_changed_header_value_is_caught(header_text: str, define: str, replacement: str) -> None:
    assert define in header_text
    altered = parse_defines(header_text.replace(define, replacement))
    assert header_to_python_mismatches(altered)
    assert python_to_header_mismatches(altered)


def test_negative_control_missing_define_is_caught(header_text: str) -> None:
    altered = parse_defines(header_text.replace("#define PA_BF_GATHER 13", ""))
    assert any("BF_GATHER" in problem for problem in python_to_header_mismatches(altered))


def test_negative_control_extra_define_is_caught(header_text: str) -> None:
    altered = parse_defines(header_text + "\n#define PA_TW_NEW_WORD 44\n")
    assert any("TW_NEW_WORD" in problem for problem in header_to_python_mismatches(altered))


def test_mock_api_structs_match_the_library_layout() -> None:
    """``launcher/mock_api.py`` Structures vs the layout the compiled mock reports (``pa_mock_struct_layout``)."""
    from launcher import mock_api
    from launcher.library import library_path, load_library

    library = load_library(library_path("mock"))
    assert mock_api.python_layout() == mock_api.c_layout(library.handle)
