/*
 * pa-kit paged-attention decode kernel, device entry (the kernel ABI, kernel/pa_kernel_abi.h).
 *
 * One mixed kernel: each launched block is a cluster of one cube core (AIC) and two vector sub-cores (AIV).
 * The entry reads the tiling key and the head dimension and runs the matching instantiation:
 * input dtype (fp16 / bf16, key bit 0) x head-dim capacity class (64 / 128 / 256).  Split-KV (bit 4) and
 * split-block (bit 7) need no separate code: split-KV is kvCN > 1 in the tiling, and level-2 sub-tiles
 * never cross a page, so a tile that divides the page is just more sub-tiles.
 *
 * Built per role (cube, vec) from this source: for the NPU by CANN's bisheng (build_npu.sh), against pto-isa's
 * A2/A3 cost model by clang++ (check_a2a3.sh) and against the A2/A3 intrinsic emulator (emu/build_emu.sh: sim).
 */
#include "pa_cube.hpp"
#include "pa_vector_mla.hpp"

namespace pa {

struct KernelArgs {
    __gm__ uint8_t *ptr[PA_NUM_PTR_ARGS];
};

/* kCube picks the core's role at compile time: the cube binary holds no vector instruction and the vector
 * binary no cube instruction (on the device they are two separate binaries, dav-c220-cube and -vec). */
template <typename T, int DCap, bool kCube>
AICORE inline void RunCore(const KernelArgs &a, const Tiling &t, uint32_t core, uint32_t blockNum, uint32_t sub)
{
    if constexpr (kCube) {
        (void)sub;
        CubeCore<T, DCap> c{{t,
                             core,
                             BindGm<T>(a.ptr[PA_ARG_Q], PA_ARG_Q),
                             BindGm<T>(a.ptr[PA_ARG_K], PA_ARG_K),
                             BindGm<T>(a.ptr[PA_ARG_V], PA_ARG_V),
                             BindGm<T>(a.ptr[PA_ARG_P], PA_ARG_P),
                             BindGm<int32_t>(a.ptr[PA_ARG_BLOCK_TABLES], PA_ARG_BLOCK_TABLES),
                             BindGm<T>(a.ptr[PA_ARG_Q_ROPE], PA_ARG_Q_ROPE),
                             BindGm<T>(a.ptr[PA_ARG_K_ROPE], PA_ARG_K_ROPE),
                             BindGm<float>(a.ptr[PA_ARG_S], PA_ARG_S),
                             BindGm<float>(a.ptr[PA_ARG_O_TMP], PA_ARG_O_TMP)}};
        c.Run(blockNum);
    } else {
        VectorCore<T, DCap> v{t,
                              core,
                              sub,
                              BindGm<T>(a.ptr[PA_ARG_P], PA_ARG_P),
                              BindGm<T>(a.ptr[PA_ARG_O], PA_ARG_O),
                              BindGm<float>(a.ptr[PA_ARG_S], PA_ARG_S),
                              BindGm<float>(a.ptr[PA_ARG_O_TMP], PA_ARG_O_TMP),
                              BindGm<float>(a.ptr[PA_ARG_O_CORE], PA_ARG_O_CORE),
                              BindGm<float>(a.ptr[PA_ARG_L], PA_ARG_L),
                              BindGm<float>(a.ptr[PA_ARG_LSE], PA_ARG_LSE),
                              a.ptr[PA_ARG_SINKS]};
        if constexpr (DCap == kMlaD) {
            MlaVectorCore<T> mla{v};
            mla.Run(blockNum);
        } else {
            v.Run(blockNum);
        }
    }
}

template <typename T, bool kCube>
AICORE inline void RunDtype(const KernelArgs &a, const Tiling &t, uint32_t core, uint32_t blockNum, uint32_t sub)
{
    if (t.ropeDim != 0) {
        RunCore<T, kMlaD, kCube>(a, t, core, blockNum, sub);
    } else if (t.headDim <= uint32_t(kDCapSmall)) {
        RunCore<T, kDCapSmall, kCube>(a, t, core, blockNum, sub);
    } else if (t.headDim <= uint32_t(kDCapMedium)) {
        RunCore<T, kDCapMedium, kCube>(a, t, core, blockNum, sub);
    } else {
        RunCore<T, kDCapLarge, kCube>(a, t, core, blockNum, sub);
    }
}

/* Keys this kernel executes; anything else does nothing on the NPU (the simulation host rejects it first). */
AICORE inline bool KeyKnown(uint32_t key)
{
    const uint32_t known = PA_KEY_BF16_BIT | PA_KEY_SPLIT_KV_BIT | PA_KEY_SPLIT_BLOCK_BIT;
    return (key & ~known) == 0;
}

/* Launches this kernel executes: up to PA_MAX_Q_LEN query tokens; MLA of the ABI's shape with its task (the
 * hosts refuse the rest first). */
AICORE inline bool FeaturesKnown(const Tiling &t)
{
    const bool mla = t.ropeDim == uint32_t(kMlaRope) && t.headDim == uint32_t(kMlaD) && t.kvHeads == 1 &&
                     t.handoff == uint32_t(kMlaTok) && MaxTaskRows(t) <= uint32_t(kMlaRows) &&
                     t.mlaRescale <= PA_MLA_RESCALE_PLAIN;
    return t.qLen >= 1 && t.qLen <= PA_MAX_Q_LEN && (t.ropeDim == 0 || mla);
}

template <bool kCube>
AICORE inline void Dispatch(const KernelArgs &a, uint32_t core, uint32_t blockNum, uint32_t sub)
{
    const Tiling t = ReadTiling(a.ptr[PA_ARG_TILING]);
    if (!KeyKnown(t.key) || !FeaturesKnown(t)) return;
    if (t.key & PA_KEY_BF16_BIT) {
        RunDtype<bfloat16_t, kCube>(a, t, core, blockNum, sub);
    } else {
        RunDtype<half, kCube>(a, t, core, blockNum, sub);
    }
}

}  // namespace pa

#define PA_PARAM_DECL(name) __gm__ uint8_t *name,
#define PA_PARAM_INIT(name) name,

/* block_num: clusters launched (the task loop's stride); ffts_base: the cross-core flag (FFTS) control
 * address the NPU host wrapper obtains from the runtime (unused in the simulation). */
extern "C" __global__ AICORE void pa_decode_kernel(PA_PTR_ARGS(PA_PARAM_DECL) uint32_t block_num,
                                                   uint64_t ffts_base)
{
    const pa::KernelArgs args{{PA_PTR_ARGS(PA_PARAM_INIT)}};
    set_ffts_base_addr(ffts_base);
    /* Mode state a previous kernel on this core may have left otherwise: CTRL[48] = 1 turns off the vector
     * unit's and FIX's float saturation, so a NaN or inf in the inputs reaches the output as NaN or inf (with
     * saturation on, the conversions to fp16/bf16 would turn NaN into 0 and inf into the largest finite value). */
    set_ctrl(sbitset1(get_ctrl(), 48));
    /* The store-atomic mode (set_atomic_add/max/min) also outlives a kernel: left on, every GM store of this one
     * would add into (or keep the max of) what GM holds.  pto-isa sets it only around its atomic stores. */
#if defined(PA_DEVICE_SIM)
    if (!pa::devsim::KeepInheritedAtomics())
#endif
        set_atomic_none();
#if defined(__DAV_C220_CUBE__)
    pa::Dispatch<true>(args, get_block_idx(), block_num, 0);
#elif defined(__DAV_C220_VEC__)
    set_mask_norm();
    set_vector_mask((uint64_t)-1, (uint64_t)-1);
    pa::Dispatch<false>(args, get_block_idx(), block_num, get_subblockid());
#endif
}
