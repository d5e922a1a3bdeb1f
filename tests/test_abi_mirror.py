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
DEFINE = re.compile(r"^#define\s+PA_(\w+)\s+(0x[0-9A-Fa-f]+|\d+)\b", re.MULTILINE)
KEY_LIST_COMMENT = re.compile(r"PA_KEY_LIST\[i\] in this order:\s*([\d,\s]+)")

#: Header prefix -> the IntEnum that mirrors that family of defines.
ENUM_PREFIXES: dict[str, type[IntEnum]] = {
    "ARG_": abi.ArgSlot, "TW_": abi.TilingWord, "BF_": abi.BatchField, "ERR_": abi.ErrorCode,
    "FEATURE_": abi.Feature,
}
#: Header names whose Python mirror is not ``abi.<NAME>``.
RENAMED = {"OK": "ErrorCode.OK", "NUM_KEYS": "len(KEY_LIST)"}


def parse_defines(text: str) -> dict[str, int]:
    """``PA_NAME value`` for every integer ``#define`` (the include guard has no value and is skipped)."""
    return {name: int(value, 0) for name, value in DEFINE.findall(text)}


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


PTR_ARGS = re.compile(r"#define PA_PTR_ARGS\(X\)((?:[^\n]*\\\n)*[^\n]*)")


def ptr_arg_names(text: str) -> list[str]:
    """The names the header's ``PA_PTR_ARGS`` X-macro lists, in order."""
    match = PTR_ARGS.search(text)
    assert match, "the header no longer defines PA_PTR_ARGS(X)"
    return re.findall(r"X\((\w+)\)", match.group(1))


def test_pointer_argument_names_match_the_slots(header_text: str) -> None:
    assert ptr_arg_names(header_text) == list(abi.PTR_ARG_NAMES)


def test_negative_control_swapped_pointer_arguments_are_caught(header_text: str) -> None:
    altered = header_text.replace("X(o_core) X(l)", "X(l) X(o_core)")
    assert altered != header_text
    assert ptr_arg_names(altered) != list(abi.PTR_ARG_NAMES)


def test_supported_block_sizes_follow_the_header_limits() -> None:
    sizes = abi.SUPPORTED_BLOCK_SIZES
    assert sizes[0] == abi.MIN_BLOCK_SIZE and sizes[-1] == abi.MAX_BLOCK_SIZE
    assert all(b & (b - 1) == 0 for b in sizes)
    assert len(sizes) == (abi.MAX_BLOCK_SIZE // abi.MIN_BLOCK_SIZE).bit_length()


def built_libraries() -> list[str]:
    from launcher.library import library_path

    return [backend for backend in ("mock", "sim") if library_path(backend).is_file()]


#: (kv_len, block_size, kv_split): empty, one token, page edges, split edges, a 128K context, uint32 extremes.
SPLIT_CASES = [(n, bs, split) for n in (0, 1, 15, 16, 17, 255, 256, 257, 4095, 131072, 2**32 - 1)
               for bs in (16, 128, 512) for split in (bs, 4 * bs, 2048 if 2048 % bs == 0 else bs)]


@pytest.mark.parametrize("backend", ["mock", "sim"])
def test_split_count_formula_matches_the_library(backend: str) -> None:
    """``abi.kv_splits`` against the header's ``pa_kv_splits`` as each compiled library computes it."""
    from launcher.library import library_path, load_library

    if backend not in built_libraries():
        pytest.skip(f"{library_path(backend)} not built")
    handle = load_library(library_path(backend)).handle
    assert [abi.kv_splits(*case) for case in SPLIT_CASES] == [handle.pa_abi_kv_splits(*case) for case in SPLIT_CASES]


#: (kv_len, q_len, window_left, block_size): no window, windows inside the first page, on a page boundary,
#: wider than the context, several query tokens
FIRST_TOKEN_CASES = [(1000, 1, -1, 128), (1000, 1, 127, 128), (1000, 4, 127, 128), (1000, 1, 0, 16), (129, 1, 0, 128),
                     (128, 1, 0, 128), (300, 16, 1000, 64), (5000, 2, 128, 512), (1, 1, 0, 16), (0, 1, 5, 16)]


@pytest.mark.parametrize("backend", ["mock", "sim"])
def test_first_token_formula_matches_the_library(backend: str) -> None:
    """``abi.kv_first_token`` against the header's ``pa_kv_first_token`` as each compiled library computes it."""
    from launcher.library import library_path, load_library

    if backend not in built_libraries():
        pytest.skip(f"{library_path(backend)} not built")
    handle = load_library(library_path(backend)).handle
    c_cases = [(n, q, w & 0xFFFFFFFF, bs) for n, q, w, bs in FIRST_TOKEN_CASES]
    assert [abi.kv_first_token(*case) for case in FIRST_TOKEN_CASES] == [
        handle.pa_abi_kv_first_token(*case) for case in c_cases]


def test_negative_control_a_window_one_token_short_is_caught() -> None:
    """A formula that keeps W keys instead of W + 1 (window_left off by one) disagrees on a page boundary."""
    def short(n: int, q: int, w: int, bs: int) -> int:
        return 0 if w < 0 or n <= q + w - 1 else (n - q - w + 1) // bs * bs
    assert any(short(*case) != abi.kv_first_token(*case) for case in FIRST_TOKEN_CASES)


def test_negative_control_a_different_split_formula_is_caught() -> None:
    """A formula that drops a partial page (rounds down, not up) disagrees with the ABI's on some case."""
    def rounds_down(n: int, bs: int, split: int) -> int:
        return -(-(n // bs * bs) // split)
    assert any(rounds_down(*case) != abi.kv_splits(*case) for case in SPLIT_CASES)


@pytest.mark.parametrize("backend", ["mock", "sim"])
def test_struct_mirrors_match_the_library_layout(backend: str) -> None:
    """``launcher/mock_api.py`` (and, on sim, ``launcher/sim_api.py``) against the layouts the library exports."""
    from launcher import mock_api, sim_api
    from launcher.library import library_path, load_library

    if backend not in built_libraries():
        pytest.skip(f"{library_path(backend)} not built")
    handle = load_library(library_path(backend)).handle
    assert mock_api.layout_mismatches(handle) == []
    if backend == "sim":
        assert sim_api.layout_mismatches(handle) == []
