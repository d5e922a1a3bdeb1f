/*
 * Every synchronisation edge of the kernel, named once.
 *
 * On A2/A3 the pipes of a core (MTE2 GM->L1/UB, MTE1 L1->L0, M cube, FIX L0C->GM, V vector, MTE3 UB->GM,
 * S scalar) are separate in-order queues that run concurrently; nothing orders one pipe after another but
 * set_flag/wait_flag pairs, barriers and, across cores, FFTS flags.  Each on-chip buffer has its own event
 * ("loaded": producer -> consumer, read-after-write; "free": consumer -> producer, write-after-read, pre-armed
 * at core start and drained at core exit), and ping-pong halves have one event each.  An edge id names a
 * set_flag with its wait_flag, a barrier, or a cross-core signal with its wait: the simulation can drop one
 * edge (pa_sim_drop_sync) and its hazard checker must then report the race the edge prevents.
 *
 * Intra-core event ids per (source pipe, destination pipe) pair are 0..7; the ids below never collide
 * within a pair while both are live.
 */
#ifndef PA_SYNC_HPP
#define PA_SYNC_HPP

#include <stdint.h>

#include "pa_config.hpp"

namespace pa {

/* The pipes of one core, numbered as the simulation's hazard checker numbers them. */
enum Pipe : int { kPipeS, kPipeMte2, kPipeMte1, kPipeM, kPipeFix, kPipeV, kPipeMte3, kPipeAll };

enum Edge : int {
    /* ---- cube core ---- */
    kEdgeQLoaded,       /* MTE2 -> MTE1  ev 2: Q rows of a KV group are in L1                               */
    kEdgeQL1Free,       /* MTE1 -> MTE2  ev 2: Q's L1 buffer was moved to L0A, the next Q may load         */
    kEdgeQLeftFree,     /* M -> MTE1     ev 2: the last Q.K^T of a group read L0A's Q                       */
    kEdgeKvLoaded0,     /* MTE2 -> MTE1  ev b: a K^T or V sub-tile is in L1 buffer b (b = 0, 1)             */
    kEdgeKvLoaded1,
    kEdgeKvL1Free0,     /* MTE1 -> MTE2  ev b: L1 buffer b was moved to L0, the next sub-tile may load      */
    kEdgeKvL1Free1,
    kEdgeL0Ready0,      /* MTE1 -> M     ev b: L0B buffer b (and P's L0A buffer b) hold the next operands   */
    kEdgeL0Ready1,
    kEdgeL0Free0,       /* M -> MTE1     ev b: the matmul read L0 buffers b                                 */
    kEdgeL0Free1,
    kEdgeSAccReady0,    /* M -> FIX      ev b: S sub-tile b is in L0C                                       */
    kEdgeSAccReady1,
    kEdgeSAccFree0,     /* FIX -> M      ev b: S sub-tile b reached GM, its L0C half may be overwritten     */
    kEdgeSAccFree1,
    kEdgePL1Free,       /* MTE1 -> MTE2  ev 3: the last P sub-tile was extracted to L0A                     */
    kEdgeOAccReady,     /* M -> FIX      ev 2: P.V of a group is complete in L0C                            */
    kEdgeOAccFree,      /* FIX -> M      ev 2: O_tmp reached GM, the accumulator may restart                */
    kEdgeOAccReady1,    /* M -> FIX      ev 3: MLA: a P.V slice is complete in L0C buffer 1 (buffer 0: kEdgeOAccReady) */
    kEdgeOAccFree1,     /* FIX -> M      ev 3: MLA: P.V slice buffer 1 reached GM (buffer 0: kEdgeOAccFree)         */
    kEdgePLoaded,       /* MTE2 -> MTE1  ev 3: MLA: P of a unit is in L1 (its latent was loaded a unit before)   */
    kEdgePLeftFree,     /* M -> MTE1     ev 3: MLA: the unit's last P.V read L0A's P, the next P may move in    */
    kEdgeKvLoaded2,     /* MTE2 -> MTE1  ev 4: MLA: the third latent tile (and its rope) is in L1              */
    kEdgeKvL1Free2,     /* MTE1 -> MTE2  ev 4: MLA: the third latent tile's P.V moved its last slice out       */
    kEdgeRopeL1Free0,   /* MTE1 -> MTE2  ev 5 + r: MLA: Q.K^T moved rope tile r to L0B, the next rope may load  */
    kEdgeRopeL1Free1,
    kEdgeKvLoadedLo0,   /* MTE2 -> MTE1  ev 5 + b: MLA, two tiles: the first half of latent tile b is in L1       */
    kEdgeKvLoadedLo1,
    kEdgeKvL1FreeLo0,   /* MTE1 -> MTE2  ev 5 + b: MLA, two tiles: P.V moved latent tile b's first half out (the
                                              three-tile path's rope flags take these events; a launch runs one path) */
    kEdgeKvL1FreeLo1,
    /* ---- cross-core (FFTS) ---- */
    kEdgeQkReady0,      /* cube FIX -> vectors: S of a stage-0 unit is in GM                                */
    kEdgeQkReady1,
    kEdgeSoftmaxReady0, /* vectors MTE3 -> cube (both sub-cores): P of a stage-0 unit is in GM              */
    kEdgeSoftmaxReady1,
    kEdgeUpdateReady0,  /* cube FIX -> vectors: O_tmp of a stage-0 unit is in GM                            */
    kEdgeUpdateReady1,
    kEdgeReduceBarrier, /* all vectors MTE3: split partials are in GM before any combine reads them         */
    /* ---- vector sub-core: softmax, update, output ---- */
    kEdgeSLoaded,       /* MTE2 -> V     ev 0: S rows are in UB                                             */
    kEdgeSUbFree,       /* V -> MTE2     ev 0: the vector is done with S's UB buffer                        */
    kEdgePCast,         /* V -> MTE3     ev 0: P in the input dtype is in UB                                */
    kEdgePUbFree,       /* MTE3 -> V     ev 0: P reached GM, its UB buffer may be overwritten               */
    kEdgeOtmpLoaded,    /* MTE2 -> V     ev 1: O_tmp rows are in UB                                         */
    kEdgeOtmpUbFree,    /* V -> MTE2     ev 1: the update read O_tmp's UB buffer                            */
    kEdgeOutReady,      /* V -> MTE3     ev 1: the output rows (or partial and lse) are in UB               */
    kEdgeOutUbFree,     /* MTE3 -> V     ev 1: the output reached GM, the accumulator may restart           */
    kEdgeAccUbFree,     /* MTE3 -> MTE2  ev 0: MLA: a round trip of accumulator rows through UB was stored, the
                                              next may load into its buffer                                    */
    kEdgeBarScaled,     /* V barrier: S * scale -> row max                                                  */
    kEdgeBarRowMax,     /* V barrier: row max -> running max                                                */
    kEdgeBarNewMax,     /* V barrier: new max -> m_old - m_new                                              */
    kEdgeBarExpDiff,    /* V barrier: m_old - m_new -> exp, and the max copy over m_old                     */
    kEdgeBarCentered,   /* V barrier: running max -> S - m                                                  */
    kEdgeBarExp,        /* V barrier: S - m -> exp                                                          */
    kEdgeBarCast,       /* V barrier: exp -> cast to the input dtype                                        */
    kEdgeBarWiden,      /* V barrier: rounded P -> back to fp32                                             */
    kEdgeBarRowSum,     /* V barrier: widened P -> row sum                                                  */
    kEdgeBarPieceMax,   /* V barrier: a later piece's row max -> the unit's running row max                 */
    kEdgeBarPieceScaled, /* V barrier: a reloaded piece of S * scale -> S - m                                   */
    kEdgeBarPieceSum,   /* V barrier: a later piece's row sum -> the unit's running row sum                 */
    kEdgeBarUpdate,     /* V barrier: the last softmax's row sum -> the update that reads it                */
    kEdgeBarRescale,    /* V barrier: O * dm, l * dm -> O + O_tmp, l + l_u                                  */
    kEdgeBarFinal,      /* V barrier: last update -> O / l                                                  */
    kEdgeBarNormed,     /* V barrier: O / l -> cast, or ln l                                                */
    kEdgeBarLog,        /* V barrier: ln l -> ln l + m                                                      */
    kEdgeBarLseSum,     /* V barrier: ln l + m -> spread into one block per row for the strided store       */
    kEdgeBarMask,       /* V barrier: S * scale and the mask's penalty row -> S - penalty                   */
    kEdgeBarMaskFill,   /* V barrier: one fill of the penalty row -> the next fill over its first columns    */
    kEdgeBarGrid,       /* V barrier: MLA's lazy max (pa_amla.hpp), each step -> the next                        */
    kEdgeBarRise,       /* V barrier: MLA: a group's largest rise -> the sub-core's                              */
    kEdgeSinkLoaded,    /* MTE2 -> V     ev 4: the sinks of a task's rows are in UB                         */
    kEdgeSinkUbFree,    /* V -> MTE2     ev 4: the sinks' UB buffers were read                              */
    kEdgeBarSinkWiden,  /* V barrier: 16-bit sinks -> fp32 -> sink - m                                      */
    kEdgeBarSinkShift,  /* V barrier: sink - m -> exp                                                       */
    kEdgeBarSinkExp,    /* V barrier: exp(sink - m) -> l + exp(sink - m)                                    */
    kEdgeBarSinkJoined, /* V barrier: l with the sink -> O / l                                              */
    /* ---- vector sub-core: split-KV combine ---- */
    kEdgeLseLoaded,     /* MTE2 -> V     ev 2: a head's lse row is in UB                                    */
    kEdgeLseUbFree,     /* V -> MTE2     ev 2: the weights (a view of the lse row) were used                */
    kEdgeMaxToScalar,   /* V -> S        ev 0: max lse is in UB for the scalar read                         */
    kEdgeRiseToScalar,  /* V -> S        ev 2: MLA: a unit's largest rise of a row max is in UB for the scalar   */
    kEdgeSumToScalar,   /* V -> S        ev 1: sum of weights is in UB for the scalar read                  */
    kEdgeChunkLoaded,   /* MTE2 -> V     ev 3: a chunk of partial rows is in UB                             */
    kEdgeChunkUbFree,   /* V -> MTE2     ev 3: the chunk was weighted and summed                            */
    kEdgeCombOutReady,  /* V -> MTE3     ev 2: the combined row in the output dtype is in UB                */
    kEdgeCombOutFree,   /* MTE3 -> V     ev 2: the combined row reached GM                                  */
    kEdgeBarCombShift,  /* V barrier: lse - max -> exp                                                      */
    kEdgeBarCombExp,    /* V barrier: exp -> sum                                                            */
    kEdgeBarCombWeights,/* V barrier: weights -> weighted chunk                                             */
    kEdgeBarCombScaled, /* V barrier: weighted chunk -> column sum                                          */
    kEdgeBarCombColSum, /* V barrier: column sum of a later chunk -> accumulate                             */
    kEdgeBarCombAcc,    /* V barrier: accumulated row -> cast to the output dtype                           */
    kEdgeBarCombSink,   /* V barrier: sum of the weights -> + exp(sink - max lse)                           */
    kEdgeBarCombLse,    /* V barrier: ln(sum) -> + max lse, the row's lse                                   */
    kEdgeBarCombStep,   /* V barrier: a step's last reads of its max and sum -> the next step's row max     */
    kEdgeBarCombMax,    /* V barrier: a step's row maxima of the lse -> lse - max                           */
    kEdgeBarCombSum,    /* V barrier: a step's sums of the weights (sinks joined) -> weights / sum          */
    kEdgeBarCombSpread, /* V barrier: a step's weights spread one per block (vbrcb) -> each split's picked  */
    kEdgeBarCombPick,   /* V barrier: each split's picked weight blocks -> its partial rows weighted        */
    kEdgeCount
};

/* An intra-core flag: its pipes are part of the type (the device encodes them in the instruction), the
 * event id and the edge are values (ping-pong halves pick theirs arithmetically, no table lookup). */
template <Pipe Src, Pipe Dst>
struct Flag {
    int event;
    int edge;
};

/* ping-pong helpers: buffer b in {0, 1}; the K/V L1 buffers also b = 2 (MLA's third latent tile, event 4) */
constexpr Flag<kPipeMte2, kPipeMte1> KvLoaded(uint32_t b)
{
    return b < 2 ? Flag<kPipeMte2, kPipeMte1>{int(b), kEdgeKvLoaded0 + int(b)} : Flag<kPipeMte2, kPipeMte1>{4, kEdgeKvLoaded2};
}
constexpr Flag<kPipeMte1, kPipeMte2> KvL1Free(uint32_t b)
{
    return b < 2 ? Flag<kPipeMte1, kPipeMte2>{int(b), kEdgeKvL1Free0 + int(b)} : Flag<kPipeMte1, kPipeMte2>{4, kEdgeKvL1Free2};
}
constexpr Flag<kPipeMte1, kPipeM> L0Ready(uint32_t b) { return {int(b), kEdgeL0Ready0 + int(b)}; }
constexpr Flag<kPipeM, kPipeMte1> L0Free(uint32_t b) { return {int(b), kEdgeL0Free0 + int(b)}; }
constexpr Flag<kPipeM, kPipeFix> SAccReady(uint32_t b) { return {int(b), kEdgeSAccReady0 + int(b)}; }
constexpr Flag<kPipeFix, kPipeM> SAccFree(uint32_t b) { return {int(b), kEdgeSAccFree0 + int(b)}; }

constexpr Flag<kPipeMte1, kPipeMte2> RopeL1Free(uint32_t r) { return {5 + int(r), kEdgeRopeL1Free0 + int(r)}; }
/* MLA's two-tile path loads and frees each latent tile in halves (the first 256 latent columns, then the rest and the
 * rope); the whole-tile flags (KvLoaded, KvL1Free) stand for the second half. */
constexpr Flag<kPipeMte2, kPipeMte1> KvLoadedLo(uint32_t b) { return {5 + int(b), kEdgeKvLoadedLo0 + int(b)}; }
constexpr Flag<kPipeMte1, kPipeMte2> KvL1FreeLo(uint32_t b) { return {5 + int(b), kEdgeKvL1FreeLo0 + int(b)}; }

constexpr Flag<kPipeMte2, kPipeMte1> kQLoaded{2, kEdgeQLoaded};
constexpr Flag<kPipeMte1, kPipeMte2> kQL1Free{2, kEdgeQL1Free};
constexpr Flag<kPipeM, kPipeMte1> kQLeftFree{2, kEdgeQLeftFree};
constexpr Flag<kPipeMte1, kPipeMte2> kPL1Free{3, kEdgePL1Free};
constexpr Flag<kPipeM, kPipeFix> kOAccReady{2, kEdgeOAccReady};
constexpr Flag<kPipeFix, kPipeM> kOAccFree{2, kEdgeOAccFree};
constexpr Flag<kPipeMte2, kPipeMte1> kPLoaded{3, kEdgePLoaded};
/* MLA's two P.V slice accumulators in L0C: buffer 0 takes the one-buffer paths' flags, buffer 1 its own. */
constexpr Flag<kPipeM, kPipeFix> OAccReady(uint32_t b) { return b == 0 ? kOAccReady : Flag<kPipeM, kPipeFix>{3, kEdgeOAccReady1}; }
constexpr Flag<kPipeFix, kPipeM> OAccFree(uint32_t b) { return b == 0 ? kOAccFree : Flag<kPipeFix, kPipeM>{3, kEdgeOAccFree1}; }
constexpr Flag<kPipeM, kPipeMte1> kPLeftFree{3, kEdgePLeftFree};

constexpr Flag<kPipeMte2, kPipeV> kSLoaded{0, kEdgeSLoaded};
constexpr Flag<kPipeV, kPipeMte2> kSUbFree{0, kEdgeSUbFree};
constexpr Flag<kPipeV, kPipeMte3> kPCast{0, kEdgePCast};
constexpr Flag<kPipeMte3, kPipeV> kPUbFree{0, kEdgePUbFree};
constexpr Flag<kPipeMte2, kPipeV> kOtmpLoaded{1, kEdgeOtmpLoaded};
constexpr Flag<kPipeV, kPipeMte2> kOtmpUbFree{1, kEdgeOtmpUbFree};
constexpr Flag<kPipeV, kPipeMte3> kOutReady{1, kEdgeOutReady};
constexpr Flag<kPipeMte3, kPipeV> kOutUbFree{1, kEdgeOutUbFree};
constexpr Flag<kPipeMte3, kPipeMte2> kAccUbFree{0, kEdgeAccUbFree};
constexpr Flag<kPipeMte2, kPipeV> kSinkLoaded{4, kEdgeSinkLoaded};
constexpr Flag<kPipeV, kPipeMte2> kSinkUbFree{4, kEdgeSinkUbFree};

constexpr Flag<kPipeMte2, kPipeV> kLseLoaded{2, kEdgeLseLoaded};
constexpr Flag<kPipeV, kPipeMte2> kLseUbFree{2, kEdgeLseUbFree};
constexpr Flag<kPipeV, kPipeS> kMaxToScalar{0, kEdgeMaxToScalar};
constexpr Flag<kPipeV, kPipeS> kSumToScalar{1, kEdgeSumToScalar};
constexpr Flag<kPipeV, kPipeS> kRiseToScalar{2, kEdgeRiseToScalar};
constexpr Flag<kPipeMte2, kPipeV> kChunkLoaded{3, kEdgeChunkLoaded};
constexpr Flag<kPipeV, kPipeMte2> kChunkUbFree{3, kEdgeChunkUbFree};
constexpr Flag<kPipeV, kPipeMte3> kCombOutReady{2, kEdgeCombOutReady};
constexpr Flag<kPipeMte3, kPipeV> kCombOutFree{2, kEdgeCombOutFree};

/* Cross-core flag ids (FFTS ids 0..15) with their edges; stage = ping-pong half of the GM scratch. */
struct CrossFlag {
    uint16_t id;
    int edge;
};
constexpr CrossFlag QkReady(uint32_t stage) { return {uint16_t(3 + 3 * stage), kEdgeQkReady0 + int(stage)}; }
constexpr CrossFlag SoftmaxReady(uint32_t stage) { return {uint16_t(4 + 3 * stage), kEdgeSoftmaxReady0 + int(stage)}; }
constexpr CrossFlag UpdateReady(uint32_t stage) { return {uint16_t(5 + 3 * stage), kEdgeUpdateReady0 + int(stage)}; }
constexpr CrossFlag kReduceBarrier{kFlagReduceBarrier, kEdgeReduceBarrier};

}  // namespace pa

#endif /* PA_SYNC_HPP */
