/*
 * Cube side (AIC): S = Q.K^T and O_tmp = P.V for every hand-off unit of every task of this core.
 *
 * Per task the cube runs a one-unit-ahead pipeline: QK(0), QK(1), PV(0), QK(2), PV(1), ..., PV(U-1), so
 * while the vectors turn S(u) into P(u) the cube already computes S(u+1); it waits on the vectors only when
 * it needs P(u).  The data path of a unit is chosen once per launch by the KV group size: groups of at most
 * 16 q heads take the chunk path (pa_cube_chunk.hpp: several KV heads per load, long bursts), larger groups
 * the head path (pa_cube_head.hpp: one KV head per load).  Both use the same buffers' flags (pa_sync.hpp).
 */
#ifndef PA_CUBE_HPP
#define PA_CUBE_HPP

#include "pa_cube_chunk.hpp"
#include "pa_cube_head.hpp"

namespace pa {

template <typename T, int DCap>
struct CubeCore {
    CubeState<T> st;

    /* The write-after-read flags: set once at core start ("buffer free"), drained before the core exits. */
    template <typename Fn>
    static AICORE inline void ForEachFreeFlag(Fn &&fn)
    {
        fn(kQL1Free);
        fn(kQLeftFree);
        fn(kPL1Free);
        fn(kOAccFree);
        for (uint32_t b = 0; b < 2; ++b) {
            fn(KvL1Free(b));
            fn(L0Free(b));
            fn(SAccFree(b));
        }
    }

    /* A unit's S = Q.K^T, then the vectors are told S is in GM. */
    template <typename Path>
    AICORE inline void QkUnit(const Task &tk, uint32_t u, uint32_t stage)
    {
        Path::Qk(st, tk, u, stage);
        SignalVectors(QkReady(stage));
    }

    /* A unit's O_tmp = P.V once the vectors have written P, then the vectors are told O_tmp is in GM. */
    template <typename Path>
    AICORE inline void PvUnit(const Task &tk, uint32_t u, uint32_t stage)
    {
        WaitFromVectors(SoftmaxReady(stage));
        Path::Pv(st, tk, u, stage);
        SignalVectors(UpdateReady(stage));
    }

    template <typename Path>
    AICORE inline void RunTasks(uint32_t blockNum)
    {
        ForEachTask(st.t, st.core, blockNum, [&](const Task &tk) {
            if (tk.empty) return;
            Count(kCountTask);
            const uint32_t units = UnitsOf(tk);
            const uint32_t base = st.unitCounter;
            for (uint32_t u = 0; u < units; ++u) {
                SetUnit(u);
                QkUnit<Path>(tk, u, (base + u) % kStages);
                Count(kCountUnit);
                if (u >= 1) {
                    SetUnit(u - 1);
                    PvUnit<Path>(tk, u - 1, (base + u - 1) % kStages);
                }
            }
            SetUnit(units - 1);
            PvUnit<Path>(tk, units - 1, (base + units - 1) % kStages);
            st.unitCounter = base + units;
        });
    }

    AICORE inline void Run(uint32_t blockNum)
    {
        ForEachFreeFlag([](auto f) { SetFlag(f); });
        if (st.t.group <= uint32_t(kSlotRows)) {
            RunTasks<ChunkPath<T, DCap>>(blockNum);
        } else {
            RunTasks<HeadPath<T, DCap>>(blockNum);
        }
        ForEachFreeFlag([](auto f) { WaitFlag(f); });
    }
};

}  // namespace pa

#endif /* PA_CUBE_HPP */
