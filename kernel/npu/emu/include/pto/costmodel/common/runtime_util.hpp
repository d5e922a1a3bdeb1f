/*
 * Emulator build only: stands in for pto-isa's cost-model runtime helpers, so that get_subblockid() is the
 * emulator's (the current vector core's index) and trap() is a fault, not an abort.
 */
#ifndef PTO_MOCKER_COMMON_RUNTIME_UTIL_HPP
#define PTO_MOCKER_COMMON_RUNTIME_UTIL_HPP

#include <cstdint>
#include <type_traits>

#include <pto/costmodel/common/qualifiers.hpp>

#include "emu_intrinsics.hpp"

namespace pa::emu {
[[noreturn]] void Trap();
}

inline CceEventIdType __pto_set_flag(pipe_t, pipe_t) { return EVENT_ID0; }
inline void __pto_wait_flag(pipe_t, pipe_t, CceEventIdType) {}
[[noreturn]] inline void trap() { pa::emu::Trap(); }
inline int get_rsvd_cnt() { return 0; }

template <typename T, typename U>
inline constexpr std::common_type_t<T, U> max(T lhs, U rhs)
{
    using Result = std::common_type_t<T, U>;
    return (lhs < rhs) ? static_cast<Result>(rhs) : static_cast<Result>(lhs);
}

template <typename T, typename U>
inline constexpr std::common_type_t<T, U> min(T lhs, U rhs)
{
    using Result = std::common_type_t<T, U>;
    return (lhs < rhs) ? static_cast<Result>(lhs) : static_cast<Result>(rhs);
}

#endif
