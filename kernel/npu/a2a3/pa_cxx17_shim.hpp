/*
 * The C++17 check of the kernel sources (kernel/npu/check_a2a3.sh): pto-isa's device builds use C++17, and so
 * must our sources.  The check compiles against pto-isa's CPU headers (its cost-model headers need C++20).  Those
 * call std::bit_cast (C++20) in a few places and lack some CCE intrinsics (pa_cpu_stub_shim.hpp) and the cube's
 * bias-buffer qualifier; this supplies them for that check only, so the errors left are ours.
 */
#ifndef PA_CXX17_SHIM_HPP
#define PA_CXX17_SHIM_HPP

#if __cplusplus < 202002L
#include <cstring>
#include <type_traits>
namespace std {
template <class To, class From>
To bit_cast(const From &from) noexcept
{
    static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
    To to;
    std::memcpy(&to, &from, sizeof(To));
    return to;
}
}  // namespace std
#endif

/* pto-isa's CPU headers lack the cube's bias-buffer qualifier under __DAV_C220_CUBE__ (this check's cube role). */
#define __biasbuf__
#include "pa_cpu_stub_shim.hpp"

#endif /* PA_CXX17_SHIM_HPP */
