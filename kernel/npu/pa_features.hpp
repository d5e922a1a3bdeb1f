/*
 * The decode features' device halves that the softmax's output (pa_vector.hpp) and the split-KV combine
 * (pa_combine.hpp) share: the sinks of a run of heads loaded and widened to fp32, and where a row's lse goes.
 * The window needs nothing here: the task's key range starts at the first token's window's first page
 * (pa_tiling.hpp, FirstToken) and each token's keys outside its window are masked in the softmax (VisibleKeys).
 */
#ifndef PA_FEATURES_HPP
#define PA_FEATURES_HPP

#include "pa_tiling.hpp"

namespace pa {

/* MTE2: the sinks of heads [head, head + n) into `f32` (fp32 sinks) or into the 16-bit staging row of the
 * sinks' own type (`h16` / `b16`, views of one UB buffer), which WidenSinks turns into fp32 after the load's
 * flag.  The sinks' type is the launch's (PA_TW_SINKS_DTYPE), not the query's. */
template <typename RowF, typename RowH, typename RowB>
AICORE inline void LoadSinks(const Tiling &t, __gm__ uint8_t *sinks, uint32_t head, uint32_t n, RowF &f32, RowH &h16,
                             RowB &b16)
{
    if (t.sinksDtype == PA_SINKS_FP32) {
        LoadNd(f32, BindGm<float>(sinks, PA_ARG_SINKS), head, 1, n, n, kTrafficOther);
    } else if (t.sinksDtype == PA_SINKS_FP16) {
        LoadNd(h16, BindGm<half>(sinks, PA_ARG_SINKS), head, 1, n, n, kTrafficOther);
    } else {
        LoadNd(b16, BindGm<bfloat16_t>(sinks, PA_ARG_SINKS), head, 1, n, n, kTrafficOther);
    }
}

/* V: a 16-bit sink row widened to fp32 (exact); false, and nothing issued, for fp32 sinks. */
template <typename RowF, typename RowH, typename RowB>
AICORE inline bool WidenSinks(const Tiling &t, RowF &f32, RowH &h16, RowB &b16)
{
    if (t.sinksDtype == PA_SINKS_FP16) {
        Cvt(f32, h16, RoundMode::CAST_NONE);
        return true;
    }
    if (t.sinksDtype == PA_SINKS_BF16) {
        Cvt(f32, b16, RoundMode::CAST_NONE);
        return true;
    }
    return false;
}

/* Element index in PA_ARG_LSE of query row `row` (token t, head h: t * Hq + h) of slot `slot`: [B, q_len, Hq] fp32. */
AICORE inline uint64_t LseIndex(const Tiling &t, uint32_t slot, uint64_t row)
{
    return uint64_t(slot) * t.qLen * t.numHeads + row;
}

}  // namespace pa

#endif /* PA_FEATURES_HPP */
