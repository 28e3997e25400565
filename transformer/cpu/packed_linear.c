/* Linear layers for inference on CPU: y = x W^T + b (optionally ReLU'd), float32, from a weight
 * packed once, and a decoder layer's decoding step built on them (see packed_linear.py, which
 * calls this through ctypes; fused_cpu.py compiles it).
 *
 * W (N x K, rows at a stride) is packed into panels of PANEL output features (16, or 32 with
 * AVX-512: panel_width()): panel p holds W[PANEL p .. PANEL p + PANEL - 1][k] for k = 0 .. K-1,
 * PANEL consecutive floats per k, zero past N. A block of up to 6 rows of x times one panel is
 * summed in 12 vector registers (of 8 floats, or 16 with AVX-512; x's element broadcast, the
 * panel's floats loaded once per k for all rows), the usual register-blocked
 * outer product of GEMM kernels. Rows of x are taken in blocks of at most ROW_BLOCK_BYTES, so a
 * block stays in the core's cache while the panels stream past it. (Row block, panel) pairs are
 * split across `threads` OpenMP threads (PyTorch's count; the process's one libgomp).
 *
 * Sums run over k in float32 (one row alone: even and odd k in two sums), with fused multiply-adds
 * where the machine has them.
 *
 * Weights may instead be packed as int8 (pack_s8: the same panels, one byte per weight, each
 * output feature n scaled by its own scale[n] = max_k |W[n][k]| / 127): the products convert the
 * bytes to float32 as they load them and multiply each sum by its feature's scale, so activations
 * and sums stay float32 (weight-only quantisation: a quarter of the memory traffic).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

/* The vector width: 16 floats (one 512-bit register) with AVX-512, else 8. A panel is two vectors
 * wide, so a block of 6 rows keeps 12 sums in registers either way. */
#ifdef __AVX512F__
#define VW 16
#else
#define VW 8
#endif
#define PANEL (2 * VW)
#define ROW_BLOCK_BYTES (128 * 1024)

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int vi __attribute__((vector_size(VW * 4)));

static inline vf loadv(const float *p) {
    vf v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void storev(float *p, vf v) { memcpy(p, &v, sizeof(v)); }

/* VW int8 weights as floats */
static inline vf loadv_s8(const signed char *p) {
#if defined(__AVX512F__)
    return (vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
#elif defined(__AVX2__)
    return (vf)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
#else
    vf v;
    for (int j = 0; j < VW; j++) v[j] = (float)p[j];
    return v;
#endif
}

int panel_width(void) { return PANEL; }

/* W (N x K, rows at stride w_stride) -> `packed`, ceil(N / PANEL) * PANEL * K floats */
void pack_f32(const float *W, long N, long K, long w_stride, float *packed, int threads) {
    long panels = (N + PANEL - 1) / PANEL;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long p = 0; p < panels; p++)
        for (long k = 0; k < K; k++)
            for (long j = 0; j < PANEL; j++) {
                long n = p * PANEL + j;
                packed[(p * K + k) * PANEL + j] = n < N ? W[n * w_stride + k] : 0.0f;
            }
}

/* W (N x K) -> int8 `packed` (the panels of pack_f32, one byte per weight) and scale[n] */
void pack_s8(const float *W, long N, long K, long w_stride, signed char *packed, float *scale, int threads) {
    long panels = (N + PANEL - 1) / PANEL;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long p = 0; p < panels; p++) {
        float inv[PANEL];
        for (long j = 0; j < PANEL; j++) {
            long n = p * PANEL + j;
            float most = 0.0f;
            int nan = 0;
            for (long k = 0; n < N && k < K; k++) {
                float w = W[n * w_stride + k];
                nan |= isnan(w);
                most = fmaxf(most, fabsf(w));
            }
            if (n < N) scale[n] = nan ? NAN : most / 127.0f; /* a NaN weight: NaN outputs, as in float32 */
            inv[j] = most > 0.0f && isfinite(127.0f / most) ? 127.0f / most : 0.0f; /* rows below ~1e-37: 0 */
        }
        for (long k = 0; k < K; k++)
            for (long j = 0; j < PANEL; j++) {
                long n = p * PANEL + j;
                float q = n < N ? W[n * w_stride + k] * inv[j] : 0.0f;
                packed[(p * K + k) * PANEL + j] = isfinite(q) ? (signed char)lrintf(q) : 0;
            }
    }
}

/* R rows of x (at stride xs) times one panel -> out[2r], out[2r + 1]: row r's PANEL sums */
#define DECLARE(r) vf lo##r = {0}, hi##r = {0};
#define MULTIPLY_ADD(r)                                                                          \
    {                                                                                            \
        float s = x[(r) * xs + k];                                                               \
        lo##r += s * w_lo;                                                                       \
        hi##r += s * w_hi;                                                                       \
    }
#define STORE(r)                                                                                 \
    out[2 * (r)] = lo##r;                                                                        \
    out[2 * (r) + 1] = hi##r;

/* blockR_f32 / blockR_s8: float32 or int8 panels (T, loaded by LOAD) */
#define DEFINE_BLOCK(R, T, LOAD)                                                                 \
    static inline void block##R##_##T(const float *x, long xs, const T *panel, long K, vf *out) { \
        FOR_ROWS##R(DECLARE)                                                                     \
        for (long k = 0; k < K; k++) {                                                           \
            vf w_lo = LOAD(panel + k * PANEL), w_hi = LOAD(panel + k * PANEL + VW);              \
            FOR_ROWS##R(MULTIPLY_ADD)                                                            \
        }                                                                                        \
        FOR_ROWS##R(STORE)                                                                       \
    }

/* one row: even and odd k in separate sums (two dependency chains instead of one) */
#define DEFINE_BLOCK1(T, LOAD)                                                                   \
    static inline void block1_##T(const float *x, long xs, const T *panel, long K, vf *out) {   \
        (void)xs;                                                                                \
        vf lo0 = {0}, hi0 = {0}, lo1 = {0}, hi1 = {0};                                          \
        long k = 0;                                                                              \
        for (; k + 2 <= K; k += 2) {                                                             \
            const T *w = panel + k * PANEL;                                                      \
            lo0 += x[k] * LOAD(w);                                                               \
            hi0 += x[k] * LOAD(w + VW);                                                           \
            lo1 += x[k + 1] * LOAD(w + PANEL);                                                   \
            hi1 += x[k + 1] * LOAD(w + PANEL + VW);                                               \
        }                                                                                        \
        if (k < K) {                                                                             \
            lo0 += x[k] * LOAD(panel + k * PANEL);                                               \
            hi0 += x[k] * LOAD(panel + k * PANEL + VW);                                           \
        }                                                                                        \
        out[0] = lo0 + lo1;                                                                      \
        out[1] = hi0 + hi1;                                                                      \
    }
#define FOR_ROWS2(F) F(0) F(1)
#define FOR_ROWS4(F) F(0) F(1) F(2) F(3)
#define FOR_ROWS6(F) F(0) F(1) F(2) F(3) F(4) F(5)
typedef float f32;
typedef signed char s8;
DEFINE_BLOCK(2, f32, loadv)
DEFINE_BLOCK(4, f32, loadv)
DEFINE_BLOCK(6, f32, loadv)
DEFINE_BLOCK1(f32, loadv)
DEFINE_BLOCK(2, s8, loadv_s8)
DEFINE_BLOCK(4, s8, loadv_s8)
DEFINE_BLOCK(6, s8, loadv_s8)
DEFINE_BLOCK1(s8, loadv_s8)

/* R rows (6, 4, 2 or 1) of x times panel p of float32 weights, or of int8 weights if scale */
static inline void block(const float *x, long xs, long R, const void *packed, const float *scale, long p, long K,
                         vf *out) {
    if (scale) {
        const s8 *panel = (const s8 *)packed + p * K * PANEL;
        if (R == 6) block6_s8(x, xs, panel, K, out);
        else if (R == 4) block4_s8(x, xs, panel, K, out);
        else if (R == 2) block2_s8(x, xs, panel, K, out);
        else block1_s8(x, xs, panel, K, out);
    } else {
        const f32 *panel = (const f32 *)packed + p * K * PANEL;
        if (R == 6) block6_f32(x, xs, panel, K, out);
        else if (R == 4) block4_f32(x, xs, panel, K, out);
        else if (R == 2) block2_f32(x, xs, panel, K, out);
        else block1_f32(x, xs, panel, K, out);
    }
}

/* rows [i0, i1) of y, columns of panel p: scales, bias, ReLU, and the last panel's partial width */
static void panel_rows(const float *x, long xs, long i0, long i1, const void *packed, const float *scale, long p,
                       long K, const float *bias, long N, float *y, long ys, int relu) {
    long n0 = p * PANEL, width = N - n0 < PANEL ? N - n0 : PANEL;
    float b[PANEL] = {0}, c[PANEL] = {0};
    for (long j = 0; j < width; j++) {
        b[j] = bias ? bias[n0 + j] : 0.0f;
        c[j] = scale ? scale[n0 + j] : 1.0f;
    }
    vf b_lo = loadv(b), b_hi = loadv(b + VW), c_lo = loadv(c), c_hi = loadv(c + VW), zero = {0};
    for (long i = i0; i < i1;) {
        vf out[12];
        long left = i1 - i, rows = left >= 6 ? 6 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        block(x + i * xs, xs, rows, packed, scale, p, K, out);
        for (long r = 0; r < rows; r++) {
            vf lo = out[2 * r], hi = out[2 * r + 1];
            if (scale) {
                lo *= c_lo;
                hi *= c_hi;
            }
            lo += b_lo;
            hi += b_hi;
            if (relu) { /* max(v, 0), NaN kept */
                lo = (vf)((vi)lo & ~(lo < zero));
                hi = (vf)((vi)hi & ~(hi < zero));
            }
            float *yr = y + (i + r) * ys + n0;
            if (width == PANEL) {
                storev(yr, lo);
                storev(yr + VW, hi);
            } else {
                float t[PANEL];
                storev(t, lo);
                storev(t + VW, hi);
                memcpy(yr, t, width * sizeof(float));
            }
        }
        i += rows;
    }
}

/* y (M x N, rows at stride ys) = x (M x K, rows at stride xs) W^T + bias (or none), ReLU'd if relu;
 * `packed` from pack_f32, or from pack_s8 with its `scale` (NULL for float32 weights) */
void linear_f32(const float *x, long M, long K, long xs, const void *packed, const float *scale, const float *bias,
                long N, float *y, long ys, int relu, int threads) {
    if (M <= 0 || N <= 0 || K <= 0) return; /* the callers pass none of these */
    long panels = (N + PANEL - 1) / PANEL;
    long most = ROW_BLOCK_BYTES / (K * (long)sizeof(float)); /* rows per block at most */
    if (most < 1) most = 1;                                  /* rows wider than a block */
    long row_blocks = (M + most - 1) / most;
    long block = (M + row_blocks - 1) / row_blocks; /* blocks of (nearly) equal size */
    block = (block + 5) / 6 * 6;
    row_blocks = (M + block - 1) / block;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
    for (long rb = 0; rb < row_blocks; rb++)
        for (long p = 0; p < panels; p++) {
            long i0 = rb * block, i1 = i0 + block < M ? i0 + block : M;
            panel_rows(x, xs, i0, i1, packed, scale, p, K, bias, N, y, ys, relu);
        }
}

/* ------------------------------------------------------------------ one decoder layer, one step */
void attend_f32(const float *q, long q_sb, long q_sh, long q_st, const float *k, long k_sb, long k_sh,
                long k_ss, const float *v, long v_sb, long v_sh, long v_ss, const unsigned char *mask, long m_sb,
                long m_ss, int causal, float *out, long B, long H, long T, long S, long D, long G,
                float scale); /* fused_cpu.c */

/* x = LayerNorm(x + y) (y may be NULL: x = LayerNorm(x)), or with out != NULL: out = LayerNorm(x) */
static void add_layer_norm(float *x, const float *y, float *out, long B, long E, const float *gamma,
                           const float *beta, float eps) {
    for (long b = 0; b < B; b++) {
        float *r = x + b * E, *o = out ? out + b * E : r;
        if (y)
            for (long e = 0; e < E; e++) r[e] += y[b * E + e];
        float mean = 0.0f, var = 0.0f;
        for (long e = 0; e < E; e++) mean += r[e];
        mean /= (float)E;
        for (long e = 0; e < E; e++) var += (r[e] - mean) * (r[e] - mean);
        float rstd = 1.0f / sqrtf(var / (float)E + eps);
        for (long e = 0; e < E; e++) o[e] = (r[e] - mean) * rstd * gamma[e] + beta[e];
    }
}

static void add_rows(float *x, const float *y, long n) {
    for (long i = 0; i < n; i++) x[i] += y[i];
}

/* one sub-layer's "Add & Norm" around out = f(in): in = norm_first ? LN(x) : x, then
 * x = norm_first ? x + out : LN(x + out) */
#define PRE(ln) (norm_first ? (add_layer_norm(x, NULL, h, B, E, w[ln], w[(ln) + 1], eps), h) : x)
#define POST(ln, out) (norm_first ? add_rows(x, out, B * E) : add_layer_norm(x, out, NULL, B, E, w[ln], w[(ln) + 1], eps))
/* linear layer i (0 .. 5) of the step: its packed weight, scales and bias in w */
#define AT(i) (8 * ((i) / 2) + 3 * ((i) % 2))
#define WEIGHT(i) w[AT(i)], w[AT(i) + 1], w[AT(i) + 2]

/* A decoder layer (paper 3.1) for one new position of each of B rows, without dropout:
 * self-attention over the cached positions and the new one, encoder-decoder attention, ReLU
 * feed-forward, each sub-layer in "Add & Norm" (post-LN, or pre-LN with norm_first). The
 * residual stream x (B x E) is updated in place; the new keys and values are written into the
 * self-attention cache at position `pos` (rows b, heads at strides c_sb, c_sh, positions at
 * c_ss). w holds 24 pointers, 8 per sub-layer: packed W_qkv, its scales, b_qkv, packed W_o, its
 * scales, b_o, LayerNorm gamma, beta (self-attention); the same for W_q and W_o (encoder-decoder)
 * and for W_1 and W_2 (feed-forward). Scales are NULL for float32 weights (pack_f32), biases may
 * be NULL. Encoder-decoder attention reads memory row b / G with the key mask (or none), as
 * attend_f32. */
void decoder_layer_step_f32(float *x, long B, long E, long H, long F, const void *const *w, float *cache_k,
                            float *cache_v, long c_sb, long c_sh, long c_ss, long pos, const float *mem_k,
                            const float *mem_v, long k_sb, long k_sh, long k_ss, long v_sb, long v_sh, long v_ss,
                            long S, long G, const unsigned char *mask, long m_sb, long m_ss, int norm_first,
                            float eps, int threads) {
    long D = E / H;
    float scale = 1.0f / sqrtf((float)D);
    float *buf = malloc(sizeof(float) * (size_t)(B * (3 * E + E + E + (F > E ? F : E)))), *qkv = buf,
          *att = qkv + 3 * B * E, *h = att + B * E, *f = h + B * E;
    /* self-attention */
    linear_f32(PRE(6), B, E, E, WEIGHT(0), 3 * E, qkv, 3 * E, 0, threads);
    for (long b = 0; b < B; b++)
        for (long hd = 0; hd < H; hd++) {
            memcpy(cache_k + b * c_sb + hd * c_sh + pos * c_ss, qkv + b * 3 * E + E + hd * D, sizeof(float) * D);
            memcpy(cache_v + b * c_sb + hd * c_sh + pos * c_ss, qkv + b * 3 * E + 2 * E + hd * D, sizeof(float) * D);
        }
    attend_f32(qkv, 3 * E, D, 0, cache_k, c_sb, c_sh, c_ss, cache_v, c_sb, c_sh, c_ss, NULL, 0, 0, 0, att, B, H, 1,
               pos + 1, D, 1, scale);
    linear_f32(att, B, E, E, WEIGHT(1), E, f, E, 0, threads);
    POST(6, f);
    /* encoder-decoder attention */
    linear_f32(PRE(14), B, E, E, WEIGHT(2), E, qkv, E, 0, threads);
    attend_f32(qkv, E, D, 0, mem_k, k_sb, k_sh, k_ss, mem_v, v_sb, v_sh, v_ss, mask, m_sb, m_ss, 0, att, B, H, 1, S,
               D, G, scale);
    linear_f32(att, B, E, E, WEIGHT(3), E, f, E, 0, threads);
    POST(14, f);
    /* feed-forward */
    linear_f32(PRE(22), B, E, E, WEIGHT(4), F, f, F, 1, threads);
    linear_f32(f, B, F, F, WEIGHT(5), E, att, E, 0, threads);
    POST(22, att);
    free(buf);
}
