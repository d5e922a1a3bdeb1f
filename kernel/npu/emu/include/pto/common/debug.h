/*
 * Emulator build only: stands in for pto-isa's common/debug.h, whose host printing helpers pull two headers
 * of the CPU implementations' tree (pto/cpu/) into cost-model builds.  Kept: the assertion macros, with the
 * emulator's trap() (a fault) behind them; the printing helpers are not used by the kernel.
 */
#ifndef PTO_DEBUG_H
#define PTO_DEBUG_H

#define DEBUG_CHECK(condition, message)                                                                     \
    do {                                                                                                    \
        if (!(condition)) {                                                                                 \
            cce::printf("[PTO][ASSERT] %s\n  Condition: %s\n  Location: %s:%d\n", (message), #condition,    \
                        __FILE__, __LINE__);                                                                \
            trap();                                                                                         \
        }                                                                                                   \
    } while (0)

#ifdef _DEBUG
#define PTO_ASSERT(condition, message) DEBUG_CHECK(condition, message)
#else
#define PTO_ASSERT(condition, message) ((void)0)
#endif

#endif /* PTO_DEBUG_H */
