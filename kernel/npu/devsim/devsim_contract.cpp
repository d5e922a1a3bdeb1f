/*
 * The shared kernel contract checker (kernel/contract, written in C) compiled into the simulation: the same
 * source the mock device links, so both libraries judge every launch alike.  This file exists only because
 * emu/build_emu.sh compiles C++ sources with clang++, which no longer accepts .c inputs without a warning.
 */
#include "contract/pa_contract.c"
#include "contract/pa_abi_exports.c"
