/*
 * Cube side (AIC): S = Q.K^T and O_tmp = P.V for every hand-off unit of every task of this core.
 *
 * The cube runs a one-unit-ahead pipeline over all units of all its tasks: QK(0), QK(1), PV(0), QK(2), PV(1),
 * ..., with the next task's QK(0) before the current task's last PV, so while the vectors turn S(u) into P(u)
 * the cube already computes S(u+1), across task boundaries too; it waits on the vectors only when it needs P(u).  The data path of a unit is chosen once per launch by the rows of a KV group (its q heads x the
 * query tokens): at most 16 take the chunk path (pa_cube_chunk.hpp: several KV heads per load, long bursts), larger groups
 * the head path (pa_cube_head.hpp: one KV head per load); MLA has its own (pa_cube_mla.hpp: the latent kept on chip
 * from Q.K^T to P.V).  Both use the same buffers' flags (pa_sync.hpp).
 */
#ifndef PA_CUBE_HPP
#define PA_CUBE_HPP

#include "pa_cube_chunk.hpp"
#include "pa_cube_head.hpp"
#include "pa_cube_mla.hpp"

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
        fn(OAccFree(1));
        fn(kPLeftFree);
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

    /* One pipeline over all of the core's units, task after task: the next task's first S = Q.K^T is issued
     * before the current task's last P.V, so the vectors never wait for the cube at a task boundary (no drain
     * between tasks).  Stages alternate by the global unit counter, as on the vectors. */
    template <typename Path>
    AICORE inline void RunTasks(uint32_t blockNum)
    {
        Task pending{};
        uint32_t pendingUnit = 0;
        bool havePending = false;
        ForEachTask(st.t, st.core, blockNum, [&](const Task &tk) {
            if (tk.empty) return;
            Count(kCountTask);
            const uint32_t units = UnitsOf(st.t, tk);
            for (uint32_t u = 0; u < units; ++u) {
                const uint32_t stage = st.unitCounter % kStages;
                SetUnit(u);
                QkUnit<Path>(tk, u, stage);
                Count(kCountUnit);
                if (havePending) {
                    SetWorkItem(int32_t(pending.slot), int32_t(pending.headStart), int32_t(pending.split));
                    SetUnit(pendingUnit);
                    PvUnit<Path>(pending, pendingUnit, (st.unitCounter + kStages - 1) % kStages);
                    SetWorkItem(int32_t(tk.slot), int32_t(tk.headStart), int32_t(tk.split));
                }
                pending = tk;
                pendingUnit = u;
                havePending = true;
                ++st.unitCounter;
            }
        });
        if (havePending) {
            SetWorkItem(int32_t(pending.slot), int32_t(pending.headStart), int32_t(pending.split));
            SetUnit(pendingUnit);
            PvUnit<Path>(pending, pendingUnit, (st.unitCounter + kStages - 1) % kStages);
        }
    }

    /* An MLA path's run between its own free flags (the two paths give some event ids different buffers). */
    template <typename Path>
    AICORE inline void RunMla(uint32_t blockNum)
    {
        Path::ForEachOwnFreeFlag([](auto f) { SetFlag(f); });
        RunTasks<Path>(blockNum);
        Path::ForEachOwnFreeFlag([](auto f) { DrainFlag(f); });
    }

    AICORE inline void Run(uint32_t blockNum)
    {
        ForEachFreeFlag([](auto f) { SetFlag(f); });
        if constexpr (DCap == kMlaD) {
            /* the MLA instantiation (pa_kernel.cpp): a task's rows pick the prefetching path when they fit it */
            if (MaxTaskRows(st.t) <= uint32_t(kMlaPrefetchRows)) {
                RunMla<MlaPrefetchPath<T>>(blockNum);
            } else {
                RunMla<MlaWidePath<T>>(blockNum);
            }
        } else if (st.t.group * st.t.qLen <= uint32_t(kSlotRows)) { /* a run's heads x query tokens in one slot */
            RunTasks<ChunkPath<T, DCap>>(blockNum);
        } else {
            RunTasks<HeadPath<T, DCap>>(blockNum);
        }
        ForEachFreeFlag([](auto f) { DrainFlag(f); });
    }
};

}  // namespace pa

#endif /* PA_CUBE_HPP */
