/*
 * Vector side of MLA (ABI v5): the softmax of pa_vector.hpp over a task's rows in groups of at most kVecRows, with the
 * output accumulating in GM, where the cube adds each unit's P.V (pa_cube_mla.hpp): the core's o_tmp holds two
 * accumulators of a task's rows x 512 in fp32, one per task parity (MlaAcc).  Per unit u (stage = global unit % 2):
 *   softmax(u): S -> P (GM) against each row's lazy running max (pa_amla.hpp), P held in UB;
 *   the units whose P.V must have landed are waited for;
 *   rescale(u), only when unit u moved some row's max: the accumulator's rows times dm, between P.V(u - 1) and
 *   P.V(u);
 *   then the cube is told P(u) is in GM; then l = dm * l + l_u from the held P (off the cube's path), and one group
 *   of a finished task's output is written from GM.
 * The cube computes Q.K^T(u + 1) meanwhile; its P.V(u) waits for the hand-over only.
 * The rescale (PA_TW_MLA_RESCALE):
 *   PA_MLA_RESCALE_PLAIN: the rows are read, multiplied by dm and written back.
 *   PA_MLA_RESCALE_POW2 (AMLA): the max is kept on the grid of multiples of ln 2, so dm = 2^n for an integer n <= 0,
 *   and the rows are rescaled by adding n * 2^23 to their fp32 bits: one int32 store-atomic add into GM per row run,
 *   nothing read back.  Exact for fp32 values whose exponent stays normal, like the multiply; an accumulator element
 *   that is exactly 0 (or would fall below 2^-126) is not: adding to the bits of +0 gives a negative number.  P.V of
 *   dense latents is never exactly 0; a latent column that is 0 in every token is (docs/API.md, mla_rescale).
 */
#ifndef PA_VECTOR_MLA_HPP
#define PA_VECTOR_MLA_HPP

#include "pa_vector.hpp"

namespace pa {

template <typename T>
struct MlaVectorCore : VectorCore<T, kMlaD> {
    using Base = VectorCore<T, kMlaD>;
    using typename Base::Col;
    using typename Base::OF;
    using typename Base::Row;
    using typename Base::Pending;
    using typename Base::TokenSlot;
    using Base::t;
    using Base::core;
    using Base::sub;
    using Base::otmp;
    using Base::unitCounter;

    /* A task's fp32 output accumulator, scratch rows of 512: the first or second of the core's two by the task's
     * parity (MlaAcc), so that a task's output is read while the next task's P.V adds into the other. */
    AICORE inline uint64_t AccBase(uint32_t parity) const { return MlaAcc(core, parity); }

    /* A round trip of a group's accumulator rows through UB (the O_tmp buffer): it starts when V knows the previous
     * round trip's (or output's) stores have read UB, and MTE2 that the previous round trip's stores are done with
     * the buffer; it ends with its own stores (EndRoundTrip). */
    AICORE inline void BeginRoundTrip()
    {
        WaitFlag(kOutUbFree);
        WaitFlag(kAccUbFree);
    }
    AICORE inline void EndRoundTrip()
    {
        SetFlag(kAccUbFree);
        SetFlag(kOutUbFree);
    }

    /* A group's accumulator rows gathered into the O_tmp UB buffer (a round trip's first half). */
    AICORE inline OF LoadAcc(const Task &tk, uint32_t parity, const TokenRows &g)
    {
        OF oA(g.r, kMlaD);
        Assign(oA, Base::kUbOtmp);
        BeginRoundTrip();
        this->template GatherRows<OF>(tk, g, otmp, AccBase(parity), kMlaD, kMlaD, Base::kUbOtmp);
        Handoff(kOtmpLoaded);
        return oA;
    }

    /* l = dm * l + l_u of a group after its softmax(u) (MLA keeps no O in UB, so l is updated here). */
    AICORE inline void UpdateL(uint32_t u, uint32_t stage, uint32_t parity, const TokenRows &g)
    {
        Row glRow = this->RowAt(Base::LSlot(parity), g);
        Row dmRow = this->RowAt(TokenSlot(Base::kColDm0 + stage), g);
        Row llRow = this->RowAt(TokenSlot(Base::kColLl0 + stage), g);
        VecBarrier(kEdgeBarUpdate);
        if (u == 0) {
            AddS(glRow, llRow, 0.0f);
            return;
        }
        Mul(glRow, glRow, dmRow);
        VecBarrier(kEdgeBarRescale);
        Add(glRow, glRow, llRow);
    }

    /* The accumulator's rows of a group times dm (plain): read, multiply, write back. */
    AICORE inline void RescalePlain(const Task &tk, uint32_t stage, uint32_t parity, const TokenRows &g)
    {
        OF oA = LoadAcc(tk, parity, g);
        Col dm = this->ColAt(TokenSlot(Base::kColDm0 + stage), g);
        RowExpandMul(oA, oA, dm);
        Handoff(kOutReady);
        ForEachScratchRows(t, tk, g.token, g.head, g.r, [&](uint32_t ub, uint32_t row, uint32_t rows) {
            OF part(rows, kMlaD);
            Assign(part, Base::kUbOtmp + ub * uint32_t(OF::Cols * sizeof(float)));
            StoreNd(otmp, AccBase(parity) + uint64_t(row) * kMlaD, rows, kMlaD, kMlaD, part, kTrafficScratch);
        });
        EndRoundTrip();
    }

    /* The accumulator's rows of a group times 2^n (AMLA): n * 2^23 added to their fp32 bits in GM by one int32
     * store-atomic add per row run, nothing read back.  The shift row broadcast over the 512 columns as fp32 (exact
     * integers), converted to int32 in place, in the shift buffer (no gather waits for these stores: V's next write
     * of the buffer waits for them through kOutUbFree). */
    AICORE inline void RescalePow2(const Task &tk, uint32_t parity, const TokenRows &g)
    {
        using OI = Tile<TileType::Vec, int32_t, kVecRows, kMlaD, BLayout::RowMajor, DYNAMIC, DYNAMIC>;
        OF shift(g.r, kMlaD);
        OI bits(g.r, kMlaD);
        Assign(shift, Base::kUbShift);
        Assign(bits, Base::kUbShift);
        Col negShift = this->ColAt(Base::kColShift, g);
        WaitFlag(kOutUbFree); /* V: the previous stores from UB are done */
        Fill(shift, 0.0f);
        VecBarrier(kEdgeBarGrid);
        RowExpandSub(shift, shift, negShift);
        VecBarrier(kEdgeBarGrid);
        Cvt(bits, shift, RoundMode::CAST_RINT);
        Handoff(kOutReady);
        const Gm<int32_t> accBits{reinterpret_cast<__gm__ int32_t *>(otmp.ptr), otmp.slot};
        ForEachScratchRows(t, tk, g.token, g.head, g.r, [&](uint32_t ub, uint32_t row, uint32_t rows) {
            OI part(rows, kMlaD);
            Assign(part, Base::kUbShift + ub * uint32_t(OI::Cols * sizeof(int32_t)));
            StoreNdAdd(accBits, AccBase(parity) + uint64_t(row) * kMlaD, rows, kMlaD, kMlaD, part, kTrafficScratch);
        });
        SetFlag(kOutUbFree);
    }

    /* The rows of a task this sub-core rescales before the cube adds P.V(u). */
    AICORE inline void Rescale(const Task &tk, uint32_t stage, uint32_t parity, uint32_t row0, uint32_t r)
    {
        this->ForEachGroup(tk, row0, r, [&](const TokenRows &g) {
            if (this->PowerOfTwoMax()) {
                RescalePow2(tk, parity, g);
            } else {
                RescalePlain(tk, stage, parity, g);
            }
        });
    }

    /* A task whose last P.V is in GM and whose output is still to be written from its accumulator: one group after
     * each later unit's hand-over (off the cube's path), the rest before the task two later starts (it takes the
     * same parity's l, max and accumulator).  Writing it all before the next task's first hand-over kept the cube
     * waiting at every task boundary (kernel/npu/PERFORMANCE.md, change 20). */
    struct Finishing {
        Pending pd;
        uint32_t group;
        bool active;
    };
    Finishing fin{};

    /* The next group of the task being finished, if any. */
    AICORE inline void FinishNextGroup()
    {
        if (!fin.active) return;
        const Pending pd = fin.pd;
        uint32_t i = 0;
        bool more = false;
        this->ForEachGroup(pd.tk, pd.row0, pd.r, [&](const TokenRows &g) {
            if (i == fin.group) {
                NameUnit(pd.tk, pd.u);
                OF oA = LoadAcc(pd.tk, pd.parity, g);
                this->FinishRows(pd.tk, pd.parity, g, oA);
                EndRoundTrip();
            } else if (i > fin.group) {
                more = true;
            }
            ++i;
        });
        ++fin.group;
        fin.active = more;
    }
    AICORE inline void FinishAll()
    {
        while (fin.active) FinishNextGroup();
    }

    /* A unit's P.V is in GM (its UpdateReady consumed); after its task's last unit the task is to be finished. */
    AICORE inline void Retire(const Pending &pd)
    {
        NameUnit(pd.tk, pd.u);
        WaitFromCube(UpdateReady(pd.stage));
        if (pd.u + 1 != pd.units) return;
        FinishAll();
        fin = Finishing{pd, 0, true};
    }

    /* Units handed to the cube whose P.V this sub-core has not yet waited for, oldest first: at most two (the one
     * before the current unit may stay outstanding while no rescale needs it). */
    struct Queue {
        Pending unit[2];
        uint32_t count = 0;
    };
    AICORE inline void RetireOldest(Queue &q)
    {
        Retire(q.unit[0]);
        q.unit[0] = q.unit[1];
        --q.count;
    }

    /* Whether unit u moved the max of any of this sub-core's rows (so the accumulator needs its rescale): the
     * largest rise over the groups (pa_amla.hpp), read by the scalar unit.  Its groups' rises were folded in by
     * FoldRise. */
    AICORE inline bool RowsMoved(uint32_t u, uint32_t r)
    {
        if (u == 0 || r == 0) return false;
        typename Base::Row decision(1);
        Assign(decision, Base::SlotAddr(Base::kColDecision, TokenRows{}));
        Handoff(kRiseToScalar);
        return ScalarRead(decision, 0) > 0.0f;
    }
    /* The largest rise of group g folded into the sub-core's (group 0 starts it). */
    AICORE inline void FoldRise(const TokenRows &g)
    {
        Row rise = this->RowAt(Base::kColRise, g), tmp = this->RowAt(Base::kColHm, g);
        Col first(1), next(1);
        Assign(first, Base::SlotAddr(Base::kColDecision, g));
        Assign(next, Base::SlotAddr(Base::kColPiece, g));
        VecBarrier(kEdgeBarRise);
        if (g.group == 0) {
            RowMax(first, rise, tmp);
            return;
        }
        RowMax(next, rise, tmp);
        typename Base::Row acc(1), one(1);
        Assign(acc, Base::SlotAddr(Base::kColDecision, g));
        Assign(one, Base::SlotAddr(Base::kColPiece, g));
        VecBarrier(kEdgeBarRise);
        Max(acc, acc, one);
    }

    /* The mirror of the cube's pipeline.  Per unit: at a task's first unit, the task two before it (the same parity)
     * retired and finished; softmax(u) of every group, then the units whose P.V must be in GM: the unit before last,
     * and the last one only when unit u moved some row's max (the rescale goes between that P.V and the next); then
     * the rescale; then P(u) is handed over; then l's update from the held P (SumHeldP: the row sums, a fifth of the
     * softmax's vector time, off the chain from S(u) to P.V(u)); then one group of a finished task's output.  Without
     * a rescale the cube's P.V(u) follows P.V(u - 1) without waiting for the vectors' view of it: in steady state the
     * cube never waits for a rescale, nor for a task's output. */
    AICORE inline void Run(uint32_t blockNum)
    {
        Base::ForEachFreeFlag([](auto f) { SetFlag(f); });
        Queue queue;
        this->ForEachUnit(
            blockNum,
            [&] {
                while (queue.count != 0) RetireOldest(queue);
                FinishAll();
            },
            [&](const Pending &next) {
                const Task &tk = next.tk;
                const uint32_t u = next.u, stage = next.stage, parity = next.parity;
                if (u == 0) {
                    while (queue.count != 0 && queue.unit[0].parity == parity) RetireOldest(queue);
                    FinishAll();
                }
                WaitFromCube(QkReady(stage));
                uint32_t held = Base::kUbPHeld;
                this->ForEachGroup(tk, next.row0, next.r, [&](const TokenRows &g) {
                    this->SoftmaxRows(tk, u, stage, parity, g, held, true);
                    if (u != 0) FoldRise(g);
                    held += g.r * uint32_t(Base::kPiece * sizeof(T));
                });
                const bool moved = RowsMoved(u, next.r);
                while (queue.count != 0 && (queue.count == 2 || moved)) RetireOldest(queue);
                NameUnit(tk, u);
                if (moved) Rescale(tk, stage, parity, next.row0, next.r);
                SignalCube(SoftmaxReady(stage));
                held = Base::kUbPHeld; /* l's update is off the cube's path: after the hand-over */
                this->ForEachGroup(tk, next.row0, next.r, [&](const TokenRows &g) {
                    this->SumHeldP(tk, u, stage, g, held);
                    UpdateL(u, stage, parity, g);
                    held += g.r * uint32_t(Base::kPiece * sizeof(T));
                });
                queue.unit[queue.count++] = next;
                FinishNextGroup();
            });
        Base::ForEachFreeFlag([](auto f) { DrainFlag(f); });
        this->CombineSplits(blockNum);
    }
};

}  // namespace pa

#endif /* PA_VECTOR_MLA_HPP */
