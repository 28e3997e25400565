/* Fused CPU kernels for training (see fused_cpu.py, which compiles this file with the system's C
 * compiler and calls it through ctypes):
 *
 *   dropout:                       y = x * keep * scale
 *   dropout + residual + LayerNorm: h = x + sub * keep * scale,  y = LayerNorm(h) * gamma + beta
 *   label-smoothed NLL (training/loss.py): per row of logits, lse - z_y, lse - mean(z) and the
 *                                  gradient softmax(z) - (1 - eps) onehot(y) - eps / V
 *
 * each with its backward pass. keep is 0 with probability threshold / 32768, else 1, and
 * scale = 1 / (1 - p). The random bits are not stored: element i of a tensor uses the 16-bit lane
 * i % 4 of the 64-bit word splitmix64(seed, i / 4), the (i / 4)-th output of a SplitMix64
 * generator started at `seed`, so the backward pass recomputes the mask from the seed, and any
 * thread can compute any part of it (PyTorch's CPU generator, a Mersenne twister, is serial).
 * A lane is dropped when its low 15 bits are below the threshold, as in dropout.py's keep_mask.
 *
 * Tensors are contiguous; "sub" (the sub-layer output) and the dropout tensors are float32
 * ("f32" functions) or bfloat16 stored as uint16 ("bf16" functions); the residual stream x, the
 * LayerNorm's output and parameters and all gradients of float tensors are float32. Rows are
 * split across the OpenMP threads PyTorch uses (the process's one libgomp).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ULL
#define BLOCK 1024 /* elements per block of the plain dropout: 256 words of random bits */

static inline uint64_t splitmix64(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * GOLDEN_GAMMA;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* words[w] = splitmix64(seed, first + w) for w < n */
static inline void random_words(uint64_t *words, uint64_t seed, uint64_t first, long n) {
    for (long w = 0; w < n; w++) words[w] = splitmix64(seed, first + w);
}

/* scale if element j (lane j % 4 of words[j / 4]) is kept, else 0 */
static inline float keep_scale(const uint64_t *words, long j, uint32_t threshold, float scale) {
    uint32_t lane = (uint32_t)(words[j >> 2] >> (16 * (j & 3))) & 0x7fff;
    return lane >= threshold ? scale : 0.0f;
}

static inline float bf16_load(const uint16_t *p, long j) {
    uint32_t u = (uint32_t)p[j] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float32 -> bfloat16, rounding to nearest even (as PyTorch does); NaN stays NaN */
static inline uint16_t bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float f32_load(const float *p, long j) { return p[j]; }
static inline float f32_round(float f) { return f; }

/* ---------------------------------------------------------------------------------- dropout */
#define DEFINE_DROPOUT(NAME, T, LOAD, ROUND)                                                      \
    void NAME(const T *x, T *y, long n, uint64_t seed, uint32_t threshold, float scale) {        \
        long blocks = (n + BLOCK - 1) / BLOCK;                                                   \
        _Pragma("omp parallel for schedule(static)")                                             \
        for (long b = 0; b < blocks; b++) {                                                      \
            uint64_t words[BLOCK / 4];                                                           \
            long start = b * BLOCK, len = n - start < BLOCK ? n - start : BLOCK;                 \
            random_words(words, seed, (uint64_t)start / 4, (len + 3) / 4);                       \
            const T *xb = x + start;                                                             \
            T *yb = y + start;                                                                   \
            for (long j = 0; j < len; j++) yb[j] = ROUND(LOAD(xb, j) * keep_scale(words, j, threshold, scale)); \
        }                                                                                        \
    }

DEFINE_DROPOUT(dropout_f32, float, f32_load, f32_round)
DEFINE_DROPOUT(dropout_bf16, uint16_t, bf16_load, bf16_round)

/* ------------------------------------------------------------ dropout + residual + LayerNorm */
#define DEFINE_DROPOUT_ADD_LN_FORWARD(NAME, T, LOAD)                                             \
    void NAME(const float *x, const T *sub, const float *gamma, const float *beta, float *y,      \
              float *h, float *mean, float *rstd, long rows, long E, uint64_t seed,               \
              uint32_t threshold, float scale, float eps) {                                      \
        _Pragma("omp parallel")                                                                  \
        {                                                                                        \
            uint64_t words[E / 4]; /* E <= MAX_FEATURES (fused_cpu.py): at most 32 KiB */         \
            _Pragma("omp for schedule(static)")                                                  \
            for (long r = 0; r < rows; r++) {                                                    \
                const float *xr = x + r * E;                                                     \
                const T *sr = sub + r * E;                                                       \
                float *hr = h + r * E, *yr = y + r * E;                                          \
                random_words(words, seed, (uint64_t)(r * E / 4), E / 4);                         \
                float sum = 0.0f;                                                                \
                for (long j = 0; j < E; j++) {                                                   \
                    float v = xr[j] + LOAD(sr, j) * keep_scale(words, j, threshold, scale);      \
                    hr[j] = v;                                                                   \
                    sum += v;                                                                    \
                }                                                                                \
                float m = sum / (float)E, var = 0.0f;                                            \
                for (long j = 0; j < E; j++) {                                                   \
                    float d = hr[j] - m;                                                         \
                    var += d * d;                                                                \
                }                                                                                \
                float rs = 1.0f / sqrtf(var / (float)E + eps);                                   \
                mean[r] = m;                                                                     \
                rstd[r] = rs;                                                                    \
                for (long j = 0; j < E; j++) yr[j] = (hr[j] - m) * rs * gamma[j] + beta[j];      \
            }                                                                                    \
        }                                                                                        \
    }

/* dh = rstd * (dy*gamma - mean_j(dy*gamma) - xhat * mean_j(dy*gamma*xhat)); dx = dh;
 * dsub = dh * keep * scale; dgamma = sum_rows dy * xhat; dbeta = sum_rows dy (per-thread sums,
 * added up at the end). dgamma and dbeta are overwritten. */
#define DEFINE_DROPOUT_ADD_LN_BACKWARD(NAME, T, ROUND)                                           \
    void NAME(const float *dy, const float *h, const float *mean, const float *rstd,             \
              const float *gamma, float *dx, T *dsub, float *dgamma, float *dbeta, long rows,    \
              long E, uint64_t seed, uint32_t threshold, float scale) {                          \
        memset(dgamma, 0, sizeof(float) * (size_t)E);                                            \
        memset(dbeta, 0, sizeof(float) * (size_t)E);                                             \
        _Pragma("omp parallel")                                                                  \
        {                                                                                        \
            uint64_t words[E / 4];                                                               \
            float g_acc[E], b_acc[E]; /* this thread's share of dgamma and dbeta */              \
            memset(g_acc, 0, sizeof(g_acc));                                                     \
            memset(b_acc, 0, sizeof(b_acc));                                                     \
            _Pragma("omp for schedule(static)")                                                  \
            for (long r = 0; r < rows; r++) {                                                    \
                const float *dyr = dy + r * E, *hr = h + r * E;                                  \
                float *dxr = dx + r * E;                                                         \
                T *dsr = dsub + r * E;                                                           \
                float m = mean[r], rs = rstd[r], a = 0.0f, c = 0.0f;                             \
                for (long j = 0; j < E; j++) {                                                   \
                    float xhat = (hr[j] - m) * rs, g = dyr[j] * gamma[j];                        \
                    a += g * xhat;                                                               \
                    c += g;                                                                      \
                    g_acc[j] += dyr[j] * xhat;                                                   \
                    b_acc[j] += dyr[j];                                                          \
                }                                                                                \
                a /= (float)E;                                                                   \
                c /= (float)E;                                                                   \
                random_words(words, seed, (uint64_t)(r * E / 4), E / 4);                         \
                for (long j = 0; j < E; j++) {                                                   \
                    float xhat = (hr[j] - m) * rs;                                               \
                    float d = rs * (dyr[j] * gamma[j] - c - xhat * a);                           \
                    dxr[j] = d;                                                                  \
                    dsr[j] = ROUND(d * keep_scale(words, j, threshold, scale));                  \
                }                                                                                \
            }                                                                                    \
            _Pragma("omp critical")                                                              \
            for (long j = 0; j < E; j++) {                                                       \
                dgamma[j] += g_acc[j];                                                           \
                dbeta[j] += b_acc[j];                                                            \
            }                                                                                    \
        }                                                                                        \
    }

DEFINE_DROPOUT_ADD_LN_FORWARD(dropout_add_layer_norm_f32, float, f32_load)
DEFINE_DROPOUT_ADD_LN_FORWARD(dropout_add_layer_norm_bf16, uint16_t, bf16_load)
DEFINE_DROPOUT_ADD_LN_BACKWARD(dropout_add_layer_norm_backward_f32, float, f32_round)
DEFINE_DROPOUT_ADD_LN_BACKWARD(dropout_add_layer_norm_backward_bf16, uint16_t, bf16_round)

/* ---------------------------------------------------------------------- label-smoothed NLL */
/* exp(x) for x <= 0, to about 2 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor
 * polynomial to degree 7, 2^n put into the exponent bits; below -87 (e^x < 2^-125) it is 0.
 * Written out so that the loop vectorises (libm's expf is a scalar call without -ffast-math). */
static inline float exp_nonpositive(float x) {
    if (x < -87.0f) return 0.0f;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693147180559945309f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666667e-1f + r * (4.16666667e-2f
              + r * (8.33333333e-3f + r * (1.38888889e-3f + r * 1.98412698e-4f))))));
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, 4);
    return p * two_n;
}

/* max_j z[j], with 16 running maxima (a plain max loop is not vectorised without
 * -ffinite-math-only, which would also change what NaN does) */
#define DEFINE_ROW_MAX(NAME, T, LOAD)                                                           \
    static inline float NAME(const T *z, long V) {                                               \
        float acc[16], m = -INFINITY;                                                            \
        for (int k = 0; k < 16; k++) acc[k] = -INFINITY;                                         \
        long j = 0;                                                                              \
        for (; j + 16 <= V; j += 16)                                                             \
            for (int k = 0; k < 16; k++) acc[k] = LOAD(z, j + k) > acc[k] ? LOAD(z, j + k) : acc[k]; \
        for (; j < V; j++) m = LOAD(z, j) > m ? LOAD(z, j) : m;                                  \
        for (int k = 0; k < 16; k++) m = acc[k] > m ? acc[k] : m;                                \
        return m;                                                                                \
    }

DEFINE_ROW_MAX(row_max_f32, float, f32_load)
DEFINE_ROW_MAX(row_max_bf16, uint16_t, bf16_load)

/* For each of the N rows of V logits z (reference y = target[r]): nll[r] = lse - z_y and
 * smooth[r] = lse - mean(z) with lse = log sum exp z; if grad is not NULL, grad row =
 * (softmax(z) - eps / V - (1 - eps) onehot(y)) * row_scale[r] in the logits' dtype. */
#define DEFINE_SMOOTHED_NLL(NAME, T, LOAD, ROUND, ROW_MAX)                                       \
    void NAME(const T *logits, const int64_t *target, const float *row_scale, float *nll,        \
              float *smooth, T *grad, long N, long V, float eps) {                               \
        _Pragma("omp parallel")                                                                  \
        {                                                                                        \
            float *e = malloc(sizeof(float) * (size_t)V);                                        \
            _Pragma("omp for schedule(static)")                                                  \
            for (long r = 0; r < N; r++) {                                                       \
                const T *z = logits + r * V;                                                     \
                float m = ROW_MAX(z, V), total = 0.0f, sum = 0.0f;                               \
                for (long j = 0; j < V; j++) total += LOAD(z, j);                                \
                for (long j = 0; j < V; j++) {                                                   \
                    e[j] = exp_nonpositive(LOAD(z, j) - m);                                      \
                    sum += e[j];                                                                 \
                }                                                                                \
                float lse = m + logf(sum);                                                       \
                long y = (long)target[r];                                                        \
                nll[r] = lse - LOAD(z, y);                                                       \
                smooth[r] = lse - total / (float)V;                                              \
                if (grad) {                                                                      \
                    T *g = grad + r * V;                                                         \
                    float s = row_scale[r], inv = s / sum, uniform = s * eps / (float)V;         \
                    for (long j = 0; j < V; j++) g[j] = ROUND(e[j] * inv - uniform);             \
                    g[y] = ROUND(e[y] * inv - uniform + (eps - 1.0f) * s);                       \
                }                                                                                \
            }                                                                                    \
            free(e);                                                                             \
        }                                                                                        \
    }

DEFINE_SMOOTHED_NLL(smoothed_nll_f32, float, f32_load, f32_round, row_max_f32)
DEFINE_SMOOTHED_NLL(smoothed_nll_bf16, uint16_t, bf16_load, bf16_round, row_max_bf16)
