/*
 * The AMX path of the mock's arithmetic (AMX-TILE + AMX-BF16 on AVX-512): Q.K and P.V of bf16 launches as
 * TDPBF16PS tile products, 16 x 16 x 32 multiply-adds per instruction where the AVX-512 path does 16.
 * Everything else, fp16 launches (no AMX-FP16 on the CPUs this was written for) and head dims that are not a
 * multiple of 32 run the AVX-512 path's code.
 *
 *  - Q.K computes S^T = K . Q^T: the A tile is 16 K rows (32 dims each) loaded straight from the page with the
 *    cache's row stride; the B tile is Q^T in AMX's pair layout, packed once per task (pack_q) for 16 q rows
 *    at a time (a call's rows use their group's tile whole: its other columns are computed and dropped).
 *  - P.V computes O = P . V: the A tile is 16 P rows of 32 tokens (bf16: P is bf16 already, its narrowing is
 *    exact); the B tile is V with token pairs interleaved (vpunpck{l,h}wd, which leaves the columns in the
 *    order the AVX512-BF16 path puts back the same way).
 *  - One tile configuration (palette 1, every tile 16 rows x 64 bytes) is checked on entry to each call and
 *    loaded when the thread's differs (~6 ns against ~40 for a load): other code on the thread (torch's
 *    oneDNN uses AMX too) may configure the tiles between launches.
 *
 * Not bit-identical with the exact paths: products of bf16 values are exact in fp32, the sums run in the
 * unit's order, and TDPBF16PS treats bf16 subnormal inputs (and fp32 subnormal results) as zero.  It is tested
 * against the float64 golden.
 */
#include "mock_math.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c,amx-tile,amx-bf16")
#include <string.h>

#include "mock_avx512_prims.h"

static int amx_pack_q(const float *q, int32_t rows, int32_t d, int bf16, uint16_t *packed);
static void amx_qk_packed(const uint16_t *packed, int32_t row0, int32_t rows, int32_t d, const uint16_t *k,
                          int64_t k_stride, int32_t ntok, float *s, int32_t s_stride, const uint16_t *const *pf);
static void amx_pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
                   int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
                   const uint16_t *const *vpf);

#define PA_SIMD_PACK_Q amx_pack_q
#define PA_SIMD_QK_PACKED amx_qk_packed
#define PA_SIMD_PV_ENTRY amx_pv
#define PA_SIMD_TABLE pa_math_amx
#define PA_SIMD_NAME "amx"
#include "mock_simd_body.h"

#define T_ROWS PA_AMX_TILE_ROWS    /* rows of every tile: tokens of a Q.K block, q rows of a P.V block       */
#define T_BF16 PA_AMX_TILE_K       /* bf16 values of one tile row: dims of a Q.K chunk, tokens of a P.V block */
#define T_PAIRS (T_BF16 / 2)       /* rows of a B tile: bf16 pairs                                           */
#define T_COLS 16                  /* fp32 columns of a C tile                                               */
#define T_BYTES 64                 /* bytes of every tile row                                                */
#define PV_COL_TILES 4             /* C tiles of one P.V pass: 64 output columns                             */
#define PV_BLOCKS 8                /* P.V token blocks whose P is narrowed at once                           */

/* Tiles (numbers, not enumerators: the intrinsics paste them into the register name; the wrappers below let
 * these names expand first).  Q.K uses C 0-1, A 2, B 3-4; P.V uses C 0-3, A 4, B 5-6. */
#define QK_C0 0
#define QK_C1 1
#define QK_A 2
#define QK_B0 3
#define QK_B1 4
#define PV_C0 0
#define PV_C1 1
#define PV_C2 2
#define PV_C3 3
#define PV_A 4
#define PV_B0 5
#define PV_B1 6
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_LOAD(t, src, stride) _tile_loadd(t, src, stride)
#define TILE_STORE(t, dst, stride) _tile_stored(t, dst, stride)
#define TILE_DP(c, a, b) _tile_dpbf16ps(c, a, b)

typedef struct amx_tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tile_config;

static void configure_tiles(void) {
    static const amx_tile_config want = {
        .palette = 1,
        .colsb = {T_BYTES, T_BYTES, T_BYTES, T_BYTES, T_BYTES, T_BYTES, T_BYTES, T_BYTES},
        .rows = {T_ROWS, T_ROWS, T_ROWS, T_ROWS, T_ROWS, T_ROWS, T_ROWS, T_ROWS},
    };
    amx_tile_config have __attribute__((aligned(64)));
    _tile_storeconfig(&have);
    if (memcmp(&have, &want, sizeof want) != 0) {
        _tile_loadconfig(&want);
    }
}

/* Q^T in AMX's pair layout, per group of 16 rows and chunk of 32 dims: 16 pair rows x 16 columns of 32-bit
 * words, word (p, n) = (q[16 g + n][32 c + 2 p], q[16 g + n][32 c + 2 p + 1]); rows past `rows` are zero. */
static int amx_pack_q(const float *q, int32_t rows, int32_t d, int bf16, uint16_t *packed) {
    if (!bf16 || d % T_BF16 != 0) {
        return 0;
    }
    const int32_t chunks = d / T_BF16, groups = (rows + T_ROWS - 1) / T_ROWS;
    uint32_t *words = (uint32_t *)packed;
    for (int32_t g = 0; g < groups; ++g) {
        for (int32_t c = 0; c < chunks; ++c) {
            uint32_t *tile = words + ((int64_t)g * chunks + c) * T_PAIRS * T_COLS;
            for (int32_t n = 0; n < T_COLS; ++n) {
                const int32_t r = g * T_ROWS + n;
                uint16_t row[T_BF16] __attribute__((aligned(PA_SIMD_ALIGN))) = {0};
                if (r < rows) {
                    v_narrow_store(row, v_loadu(q + (int64_t)r * d + c * T_BF16), 1);
                    v_narrow_store(row + PA_LANES, v_loadu(q + (int64_t)r * d + c * T_BF16 + PA_LANES), 1);
                }
                for (int32_t p = 0; p < T_PAIRS; ++p) {
                    tile[p * T_COLS + n] = (uint32_t)row[2 * p] | (uint32_t)row[2 * p + 1] << 16;
                }
            }
        }
    }
    return 1;
}

/* S^T of 16 tokens for q-row groups g and g + 1 (if two): C tiles QK_C0/QK_C1. */
static inline __attribute__((always_inline)) void qk_tokens(const uint16_t *krows, int64_t k_bytes,
                                                             const uint32_t *b0, const uint32_t *b1, int32_t chunks,
                                                             int two) {
    TILE_ZERO(QK_C0);
    TILE_ZERO(QK_C1);
    for (int32_t c = 0; c < chunks; ++c) {
        TILE_LOAD(QK_A, krows + (int64_t)c * T_BF16, k_bytes);
        TILE_LOAD(QK_B0, b0 + (int64_t)c * T_PAIRS * T_COLS, T_BYTES);
        TILE_DP(QK_C0, QK_A, QK_B0);
        if (two) {
            TILE_LOAD(QK_B1, b1 + (int64_t)c * T_PAIRS * T_COLS, T_BYTES);
            TILE_DP(QK_C1, QK_A, QK_B1);
        }
    }
}

/* s[r][j] for the call's rows [row0, row0 + rows) of a group's S^T block (16 tokens x 16 rows): the
 * transposed store, one 16-token row at a time from the tile's columns. */
static void put_scores(const float *st, int32_t g, int32_t row0, int32_t rows, int32_t nt, float *s,
                       int32_t s_stride) {
    const int32_t lo = g * T_ROWS > row0 ? g * T_ROWS : row0;
    const int32_t hi = (g + 1) * T_ROWS < row0 + rows ? (g + 1) * T_ROWS : row0 + rows;
    const __m512i by_token = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                                   14, 15), _mm512_set1_epi32(T_COLS));
    const __mmask16 valid = (__mmask16)((1u << nt) - 1u);
    for (int32_t r = lo; r < hi; ++r) {
        __m512 col = _mm512_i32gather_ps(by_token, st + (r - g * T_ROWS), 4);
        _mm512_mask_storeu_ps(s + (int64_t)(r - row0) * s_stride, valid, col);
    }
}

static void amx_qk_packed(const uint16_t *packed, int32_t row0, int32_t rows, int32_t d, const uint16_t *k,
                          int64_t k_stride, int32_t ntok, float *s, int32_t s_stride, const uint16_t *const *pf) {
    configure_tiles();
    const int32_t chunks = d / T_BF16, g_first = row0 / T_ROWS, g_last = (row0 + rows - 1) / T_ROWS;
    const uint32_t *words = (const uint32_t *)packed;
    float st[2][T_ROWS * T_COLS] __attribute__((aligned(PA_SIMD_ALIGN)));
    uint16_t tail[T_ROWS * PA_MLA_LATENT_DIM] __attribute__((aligned(PA_SIMD_ALIGN)));
    for (int32_t j = 0; j < ntok; j += T_ROWS) {
        const int32_t nt = ntok - j < T_ROWS ? ntok - j : T_ROWS;
        if (pf) {
            for (int32_t t = 0; t < nt; ++t) {
                pa_prefetch_row(pf[j + t], d);
            }
        }
        const uint16_t *krows = k + (int64_t)j * k_stride;
        int64_t k_bytes = k_stride * PA_IN_ELEM_BYTES;
        if (nt < T_ROWS) { /* the segment's last rows: the A tile may not read past them; rows past nt unused */
            for (int32_t t = 0; t < nt; ++t) {
                memcpy(tail + (int64_t)t * d, krows + (int64_t)t * k_stride, (size_t)d * PA_IN_ELEM_BYTES);
            }
            memset(tail + (int64_t)nt * d, 0, (size_t)(T_ROWS - nt) * d * PA_IN_ELEM_BYTES);
            krows = tail;
            k_bytes = (int64_t)d * PA_IN_ELEM_BYTES;
        }
        for (int32_t g = g_first; g <= g_last; g += 2) {
            const int two = g + 1 <= g_last;
            const uint32_t *b0 = words + (int64_t)g * chunks * T_PAIRS * T_COLS;
            qk_tokens(krows, k_bytes, b0, b0 + (int64_t)chunks * T_PAIRS * T_COLS, chunks, two);
            TILE_STORE(QK_C0, st[0], T_BYTES);
            put_scores(st[0], g, row0, rows, nt, s + j, s_stride);
            if (two) {
                TILE_STORE(QK_C1, st[1], T_BYTES);
                put_scores(st[1], g + 1, row0, rows, nt, s + j, s_stride);
            }
        }
    }
}

/* P rows [r0, r0 + 16) x tokens [j0, j0 + n) as bf16 A tiles of 32 tokens; missing rows and tokens zero. */
static void narrow_p(const float *pf, int32_t p_stride, int32_t nr, int32_t n, uint16_t *pa) {
    for (int32_t b = 0; b * T_BF16 < n; ++b) {
        uint16_t *tile = pa + (int64_t)b * T_ROWS * T_BF16;
        const int32_t m = n - b * T_BF16 < T_BF16 ? n - b * T_BF16 : T_BF16;
        for (int32_t r = 0; r < T_ROWS; ++r) {
            uint16_t *row = tile + (int64_t)r * T_BF16;
            if (r >= nr) {
                memset(row, 0, T_BYTES);
                continue;
            }
            const float *src = pf + (int64_t)r * p_stride + b * T_BF16;
            const __mmask16 m0 = (__mmask16)(m >= PA_LANES ? 0xffffu : (1u << m) - 1u);
            const __mmask16 m1 = (__mmask16)(m >= T_BF16 ? 0xffffu : m > PA_LANES ? (1u << (m - PA_LANES)) - 1u : 0u);
            v_narrow_store(row, _mm512_maskz_loadu_ps(m0, src), 1);
            v_narrow_store(row + PA_LANES, _mm512_maskz_loadu_ps(m1, src + PA_LANES), 1);
        }
    }
}

/* V rows [j, j + m) of columns [c0, c0 + 64) as the B tiles of one 32-token block: tile 2 h + x holds pair rows
 * (tokens 2 p, 2 p + 1) of columns c0 + 32 h + (x ? hi : lo) unpack order; tokens past m are zero. */
static void pair_v(const uint16_t *v, int64_t v_stride, int32_t m, int32_t c0, uint32_t *vb,
                   const uint16_t *const *vpf, int32_t d) {
    for (int32_t p = 0; p < T_PAIRS; ++p) {
        const int32_t t = 2 * p;
        if (vpf && t < m) {
            pa_prefetch_row(vpf[t], d);
            pa_prefetch_row(t + 1 < m ? vpf[t + 1] : 0, d);
        }
        for (int32_t h = 0; h < 2; ++h) {
            const uint16_t *col = v + c0 + h * T_BF16;
            __m512i a = t < m ? _mm512_loadu_si512((const void *)(col + (int64_t)t * v_stride)) : _mm512_setzero_si512();
            __m512i b = t + 1 < m ? _mm512_loadu_si512((const void *)(col + (int64_t)(t + 1) * v_stride))
                                  : _mm512_setzero_si512();
            _mm512_storeu_si512((void *)(vb + ((int64_t)(2 * h) * T_PAIRS + p) * T_COLS), _mm512_unpacklo_epi16(a, b));
            _mm512_storeu_si512((void *)(vb + ((int64_t)(2 * h + 1) * T_PAIRS + p) * T_COLS),
                                _mm512_unpackhi_epi16(a, b));
        }
    }
}

/* o[r][c0 .. c0 + 63] (accumulate ? += : =) the C tiles' rows, columns put back in order (see pair_v). */
static void put_output(const float *ct, int32_t nr, int32_t c0, float *o, int32_t o_stride, int accumulate) {
    for (int32_t r = 0; r < nr; ++r) {
        for (int32_t h = 0; h < 2; ++h) {
            v_store_unpacked(o + (int64_t)r * o_stride + c0 + h * T_BF16,
                             _mm512_loadu_ps(ct + ((int64_t)(2 * h) * T_ROWS + r) * T_COLS),
                             _mm512_loadu_ps(ct + ((int64_t)(2 * h + 1) * T_ROWS + r) * T_COLS), accumulate);
        }
    }
}

static void amx_pv(const float *pf, int32_t p_stride, int32_t rows, const uint16_t *v, int64_t v_stride,
                   int32_t ntok, int32_t d, float *o, int32_t o_stride, int accumulate, int bf16,
                   const uint16_t *const *vpf) {
    if (!bf16 || d % (PV_COL_TILES * T_COLS) != 0) {
        simd_pv(pf, p_stride, rows, v, v_stride, ntok, d, o, o_stride, accumulate, bf16, vpf);
        return;
    }
    configure_tiles();
    uint16_t pa[PV_BLOCKS * T_ROWS * T_BF16] __attribute__((aligned(PA_SIMD_ALIGN)));
    uint32_t vb[PV_COL_TILES * T_PAIRS * T_COLS] __attribute__((aligned(PA_SIMD_ALIGN)));
    float ct[PV_COL_TILES * T_ROWS * T_COLS] __attribute__((aligned(PA_SIMD_ALIGN)));
    for (int32_t r0 = 0; r0 < rows; r0 += T_ROWS) {
        const int32_t nr = rows - r0 < T_ROWS ? rows - r0 : T_ROWS;
        for (int32_t j0 = 0; j0 < ntok; j0 += PV_BLOCKS * T_BF16) {
            const int32_t n = ntok - j0 < PV_BLOCKS * T_BF16 ? ntok - j0 : PV_BLOCKS * T_BF16;
            narrow_p(pf + (int64_t)r0 * p_stride + j0, p_stride, nr, n, pa);
            for (int32_t c0 = 0; c0 < d; c0 += PV_COL_TILES * T_COLS) {
                TILE_ZERO(PV_C0);
                TILE_ZERO(PV_C1);
                TILE_ZERO(PV_C2);
                TILE_ZERO(PV_C3);
                for (int32_t b = 0; b * T_BF16 < n; ++b) {
                    const int32_t m = n - b * T_BF16 < T_BF16 ? n - b * T_BF16 : T_BF16;
                    const int first_pass = r0 == 0 && c0 == 0;
                    pair_v(v + (int64_t)(j0 + b * T_BF16) * v_stride, v_stride, m, c0, vb,
                           first_pass && vpf ? vpf + j0 + b * T_BF16 : 0, d);
                    TILE_LOAD(PV_A, pa + (int64_t)b * T_ROWS * T_BF16, T_BYTES);
                    TILE_LOAD(PV_B0, vb, T_BYTES);
                    TILE_DP(PV_C0, PV_A, PV_B0);
                    TILE_LOAD(PV_B1, vb + T_PAIRS * T_COLS, T_BYTES);
                    TILE_DP(PV_C1, PV_A, PV_B1);
                    TILE_LOAD(PV_B0, vb + 2 * T_PAIRS * T_COLS, T_BYTES);
                    TILE_DP(PV_C2, PV_A, PV_B0);
                    TILE_LOAD(PV_B1, vb + 3 * T_PAIRS * T_COLS, T_BYTES);
                    TILE_DP(PV_C3, PV_A, PV_B1);
                }
                TILE_STORE(PV_C0, ct, T_BYTES);
                TILE_STORE(PV_C1, ct + T_ROWS * T_COLS, T_BYTES);
                TILE_STORE(PV_C2, ct + 2 * T_ROWS * T_COLS, T_BYTES);
                TILE_STORE(PV_C3, ct + 3 * T_ROWS * T_COLS, T_BYTES);
                put_output(ct, nr, c0, o + (int64_t)r0 * o_stride, o_stride, accumulate || j0 > 0);
            }
        }
    }
}

#endif /* __x86_64__ */
