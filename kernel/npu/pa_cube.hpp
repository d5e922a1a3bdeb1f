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
        uint32_t pendingUnit = 0, pendingParity = 0;
        bool havePending = false;
        ForEachTask(st.t, st.core, blockNum, [&](const Task &tk) {
            if (tk.empty) return;
            Count(kCountTask);
            const uint32_t units = UnitsOf(st.t, tk), parity = st.taskCounter++ % 2;
            for (uint32_t u = 0; u < units; ++u) {
                const uint32_t stage = st.unitCounter % kStages;
                SetUnit(u);
                QkUnit<Path>(tk, u, stage);
                Count(kCountUnit);
                if (havePending) {
                    NameUnit(pending, pendingUnit);
                    st.pvParity = pendingParity;
                    PvUnit<Path>(pending, pendingUnit, (st.unitCounter + kStages - 1) % kStages);
                    NameUnit(tk, u);
                }
                pending = tk;
                pendingUnit = u;
                pendingParity = parity;
                havePending = true;
                ++st.unitCounter;
            }
        });
        if (havePending) {
            NameUnit(pending, pendingUnit);
            st.pvParity = pendingParity;
            PvUnit<Path>(pending, pendingUnit, (st.unitCounter + kStages - 1) % kStages);
        }
    }

    /* A unit whose Q.K^T is issued and whose P.V is not: its task, index in the task and the core's counter. */
    struct InFlight {
        Task tk;
        uint32_t u, ctr, parity; /* parity: the task's, among the core's tasks with work */
    };

    /* P.V of unit pv fused with Q.K^T of unit qk (two units later, in the tile pv frees in halves): the P.V's slices
     * up to the first one past the first half, then the Q.K^T's chunks, each before one of the remaining slices, then
     * the load of the second half (its wait follows the last slice's free in program order) and the rest of the
     * chunks.  The same matmuls, loads and flags as P.V then Q.K^T; M and MTE1, which run in program order, have
     * Q.K^T's first chunks between the last slices, so those chunks no longer wait for the P.V's last matmul, and the
     * S store follows the last atomic add sooner (kernel/npu/PERFORMANCE.md, change 18).  The chunks between the
     * slices read the first half only: each wait follows its set. */
    template <typename Path>
    AICORE inline void FusedStep(const InFlight &pv, const InFlight &qk)
    {
        static_assert(Path::kSlices - Path::kHalfSlices - 1 <= Path::kHalfChunks,
                      "the chunks between the slices read the first half of the tile only");
        const uint32_t pvStage = pv.ctr % kStages;
        NameUnit(pv.tk, pv.u);
        WaitFromVectors(SoftmaxReady(pvStage));
        st.pvParity = pv.parity;
        const auto p = Path::PvBegin(st, pv.tk, pv.u, pv.ctr);
        uint32_t sl = 0, k = 0;
        for (; sl <= Path::kHalfSlices; ++sl) Path::PvSlice(st, p, sl);
        NameUnit(qk.tk, qk.u);
        const auto q = Path::QkBegin(st, qk.tk, qk.u, qk.ctr);
        for (; sl < Path::kSlices; ++sl, ++k) {
            NameUnit(qk.tk, qk.u);
            Path::QkChunk(st, q, k);
            NameUnit(pv.tk, pv.u);
            Path::PvSlice(st, p, sl);
        }
        SignalVectors(UpdateReady(pvStage));
        NameUnit(qk.tk, qk.u);
        Path::QkRest(st, q);
        for (; k < Path::kChunks; ++k) Path::QkChunk(st, q, k);
        Path::QkEnd(st, q);
        SignalVectors(QkReady(qk.ctr % kStages));
    }

    /* P.V of a unit in flight, alone (the last two units of the core). */
    template <typename Path>
    AICORE inline void PvInFlight(const InFlight &pv)
    {
        const uint32_t stage = pv.ctr % kStages;
        NameUnit(pv.tk, pv.u);
        WaitFromVectors(SoftmaxReady(stage));
        st.pvParity = pv.parity;
        const auto p = Path::PvBegin(st, pv.tk, pv.u, pv.ctr);
        for (uint32_t sl = 0; sl < Path::kSlices; ++sl) Path::PvSlice(st, p, sl);
        SignalVectors(UpdateReady(stage));
    }

    /* RunTasks' pipeline with each P.V fused with the Q.K^T after it (FusedStep): QK(0), QK(1), [PV(0) + QK(2)],
     * [PV(1) + QK(3)], ..., PV(n - 2), PV(n - 1), across task boundaries as in RunTasks. */
    template <typename Path>
    AICORE inline void RunFusedTasks(uint32_t blockNum)
    {
        InFlight ring[2];
        uint32_t n = 0;
        ForEachTask(st.t, st.core, blockNum, [&](const Task &tk) {
            if (tk.empty) return;
            Count(kCountTask);
            const uint32_t units = UnitsOf(st.t, tk), parity = st.taskCounter++ % 2;
            for (uint32_t u = 0; u < units; ++u) {
                const InFlight next{tk, u, st.unitCounter, parity};
                if (n == 2) {
                    FusedStep<Path>(ring[0], next);
                    ring[0] = ring[1];
                    ring[1] = next;
                } else {
                    NameUnit(tk, u);
                    QkUnit<Path>(tk, u, st.unitCounter % kStages);
                    ring[n++] = next;
                }
                Count(kCountUnit);
                ++st.unitCounter;
            }
        });
        for (uint32_t i = 0; i < n; ++i) PvInFlight<Path>(ring[i]);
    }

    /* An MLA path's run between its own free flags (the two paths give some event ids different buffers). */
    template <typename Path>
    AICORE inline void RunMla(uint32_t blockNum)
    {
        Path::ForEachOwnFreeFlag([](auto f) { SetFlag(f); });
        if constexpr (Path::kFusedStep) {
            RunFusedTasks<Path>(blockNum);
        } else {
            RunTasks<Path>(blockNum);
        }
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
