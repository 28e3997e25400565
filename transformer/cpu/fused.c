/* Fused CPU kernels for training (see fused_cpu.py, which compiles this file with the system's C
 * compiler and calls it through ctypes):
 *
 *   dropout:                       y = x * keep * scale
 *   dropout + residual + LayerNorm: h = x + sub * keep * scale,  y = LayerNorm(h) * gamma + beta
 *   label-smoothed NLL (training/loss.py): per row of logits, lse - z_y, lse - mean(z) and the
 *                                  gradient softmax(z) - (1 - eps) onehot(y) - eps / V
 *   attention over short rows:     O = dropout(softmax(Q K^T * scale + mask)) V, per (batch, head)
 *
 * each with its backward pass, and for inference attention over a few queries per row (decoding
 * steps, attend_f32). keep is 0 with probability threshold / 32768, else 1, and scale = 1 / (1 - p). The random bits are not stored: element i of a tensor uses the 16-bit lane
 * i % 4 of the 64-bit word splitmix64(seed, i / 4), the (i / 4)-th output of a SplitMix64
 * generator started at `seed`, so the backward pass recomputes the mask from the seed, and any
 * thread can compute any part of it (PyTorch's CPU generator, a Mersenne twister, is serial).
 * A lane is dropped when its low 15 bits are below the threshold, as in dropout.py's keep_mask.
 *
 * Tensors are contiguous (attention's Q, K, V and their gradients: rows at a stride); "sub" (the
 * sub-layer output), the dropout tensors and attention's inputs and outputs are float32 ("f32"
 * functions) or bfloat16 stored as uint16 ("bf16" functions); the residual stream x, the
 * LayerNorm's output and parameters, attention's weights and all gradients of float tensors are
 * float32. Rows (attention: batch-and-head pairs) are split across the OpenMP threads PyTorch
 * uses (the process's one libgomp).
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

/* ------------------------------------------------------------------ attention (short rows) */
/* Scaled dot-product attention for the short sequences of a training step, one (batch, head)
 * pair at a time in a thread's own float32 buffers: P = softmax(Q K^T * scale + mask),
 * O = dropout(P) V, and backwards dV = dropout(P)^T dO, dS = P * (dP - rowsum(P * dP)) * scale
 * with dP = dropout'(dO V^T), dQ = dS K, dK = dS^T Q. Q, K and V are read where the projections
 * wrote them (row t of head h at q + b * q_sb + t * q_st + h * D, likewise k and v), O is
 * written as (B, T, H * D) ready for the output projection, and dQ, dK, dV go back to the same
 * layout as Q, K, V, so no head is ever copied into (B, H, T, D) order. P (float32, (B, H, T, S))
 * is kept for the backward pass; the dropout mask is that of the dropout kernel applied to P
 * (element i of (B, H, T, S) uses lane i % 4 of splitmix64(seed, i / 4)) and is recomputed. */

#define ROUND16(n) (((n) + 15) & ~15L)

/* 16 floats, with GCC's vector extensions (the compiler maps it onto the machine's vectors);
 * loaded and stored with memcpy, which allows any alignment */
typedef float v16f __attribute__((vector_size(64)));

static inline v16f v16_load(const float *p) {
    v16f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* C[i][j] = sum_k A(i, k) * B[k][j] for i < M, j < N16 (a multiple of 16; B's rows are that
 * long, zero past the real columns), A(i, k) = A[i * am + k * ak]. Blocks of 4 rows x 16
 * columns are summed in four vector registers. */
static void small_mm(long M, long N16, long K, const float *A, long am, long ak, const float *B, float *C) {
    long i = 0;
    for (; i + 4 <= M; i += 4)
        for (long j = 0; j < N16; j += 16) {
            v16f c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
            const float *a = A + i * am;
            for (long k = 0; k < K; k++) {
                v16f b = v16_load(B + k * N16 + j);
                c0 += a[k * ak] * b;
                c1 += a[am + k * ak] * b;
                c2 += a[2 * am + k * ak] * b;
                c3 += a[3 * am + k * ak] * b;
            }
            memcpy(C + i * N16 + j, &c0, sizeof(c0));
            memcpy(C + (i + 1) * N16 + j, &c1, sizeof(c1));
            memcpy(C + (i + 2) * N16 + j, &c2, sizeof(c2));
            memcpy(C + (i + 3) * N16 + j, &c3, sizeof(c3));
        }
    for (; i < M; i++)
        for (long j = 0; j < N16; j += 16) {
            v16f c0 = {0};
            for (long k = 0; k < K; k++) c0 += A[i * am + k * ak] * v16_load(B + k * N16 + j);
            memcpy(C + i * N16 + j, &c0, sizeof(c0));
        }
}

/* rows x D of a strided source -> rows x D16 float32, zero past D */
#define DEFINE_LOAD_ROWS(NAME, T, LOAD)                                                          \
    static void NAME(const T *src, long stride, long rows, long D, float *dst) {                 \
        long D16 = ROUND16(D);                                                                   \
        for (long r = 0; r < rows; r++) {                                                        \
            for (long d = 0; d < D; d++) dst[r * D16 + d] = LOAD(src + r * stride, d);           \
            for (long d = D; d < D16; d++) dst[r * D16 + d] = 0.0f;                              \
        }                                                                                        \
    }

DEFINE_LOAD_ROWS(load_rows_f32, float, f32_load)
DEFINE_LOAD_ROWS(load_rows_bf16, uint16_t, bf16_load)

/* the float32 rows x D16 buffer into a strided destination, rounded to its dtype */
#define DEFINE_STORE_ROWS(NAME, T, ROUND)                                                        \
    static void NAME(const float *src, long rows, long D, T *dst, long stride) {                 \
        long D16 = ROUND16(D);                                                                   \
        for (long r = 0; r < rows; r++)                                                          \
            for (long d = 0; d < D; d++) dst[r * stride + d] = ROUND(src[r * D16 + d]);          \
    }

DEFINE_STORE_ROWS(store_rows_f32, float, f32_round)
DEFINE_STORE_ROWS(store_rows_bf16, uint16_t, bf16_round)

/* rows x D16 -> D x R16 (R16 = ROUND16(rows)), zero past rows */
static void transpose_rows(const float *src, long rows, long D, float *dst) {
    long D16 = ROUND16(D), R16 = ROUND16(rows);
    for (long d = 0; d < D; d++) {
        for (long r = 0; r < rows; r++) dst[d * R16 + r] = src[r * D16 + d];
        for (long r = rows; r < R16; r++) dst[d * R16 + r] = 0.0f;
    }
}

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "keep_factors reads the 16-bit lanes of the random words in little-endian order"
#endif

/* keep[i] = scale, or 0 with probability threshold / 32768, for the n elements from flat index
 * `first` of a dropped tensor: the mask of the dropout kernels (lane (first + i) % 4 of word
 * (first + i) / 4), via a buffer of n + 8 16-bit lanes */
static void keep_factors(float *keep, uint16_t *lanes, uint64_t seed, uint64_t first, long n,
                         uint32_t threshold, float scale) {
    long off = (long)(first % 4), words = (off + n + 3) / 4;
    for (long w = 0; w < words; w++) {
        uint64_t z = splitmix64(seed, first / 4 + (uint64_t)w);
        memcpy(lanes + 4 * w, &z, sizeof(z));
    }
    for (long i = 0; i < n; i++) keep[i] = (uint32_t)(lanes[off + i] & 0x7fff) >= threshold ? scale : 0.0f;
}

/* bias[s] = 0 where the query row may attend key s, -inf where not: key s < S with mask byte
 * mrow[s * m_ss] set (if mrow) and s <= last */
static void mask_bias(float *bias, const uint8_t *mrow, long m_ss, long S, long last) {
    for (long s = 0; s < S; s++) bias[s] = (s <= last && (!mrow || mrow[s * m_ss])) ? 0.0f : -INFINITY;
}

/* row = softmax(row * scale + bias) over S entries; a row with no allowed key becomes zeros */
static void softmax_row(float *row, const float *bias, long S, float scale) {
    for (long s = 0; s < S; s++) row[s] = row[s] * scale + bias[s];
    float m = row_max_f32(row, S), sum = 0.0f;
    if (m == -INFINITY) {
        memset(row, 0, sizeof(float) * (size_t)S);
        return;
    }
    for (long s = 0; s < S; s++) {
        row[s] = exp_nonpositive(row[s] - m);
        sum += row[s];
    }
    float inv = 1.0f / sum;
    for (long s = 0; s < S; s++) row[s] *= inv;
}

/* per-thread float32 buffers of one (batch, head) pair */
typedef struct {
    float *a, *b, *c, *d, *e, *f, *g, *keep, *bias;
    uint16_t *lanes;
} pair_buffers;

static pair_buffers pair_buffers_new(long T, long S, long D) {
    long D16 = ROUND16(D), S16 = ROUND16(S), L = T > S ? T : S, big = L * D16 > D * S16 ? L * D16 : D * S16;
    big = big > T * S16 ? big : T * S16;
    pair_buffers p;
    p.a = malloc(sizeof(float) * (size_t)(7 * big + T * S + S16) + sizeof(uint16_t) * (size_t)(T * S + 8));
    p.b = p.a + big, p.c = p.b + big, p.d = p.c + big, p.e = p.d + big, p.f = p.e + big, p.g = p.f + big;
    p.keep = p.g + big, p.bias = p.keep + T * S;
    p.lanes = (uint16_t *)(p.bias + S16);
    return p;
}

/* Pd = P * keep (rows of S16, zero past S) from P's T x S block */
static void dropped_probs(float *Pd, const float *P, const float *keep, long T, long S) {
    long S16 = ROUND16(S);
    for (long t = 0; t < T; t++) {
        for (long s = 0; s < S; s++) Pd[t * S16 + s] = keep ? P[t * S + s] * keep[t * S + s] : P[t * S + s];
        for (long s = S; s < S16; s++) Pd[t * S16 + s] = 0.0f;
    }
}

/* ask for the rows x D elements of `size` bytes at src (row stride `stride` elements) to be
 * brought into the cache while the current pair is computed */
static inline void prefetch_rows(const void *src, long stride, long rows, long D, long size) {
    const char *p = src;
    for (long r = 0; r < rows; r++)
        for (long off = 0; off < D * size; off += 64) __builtin_prefetch(p + r * stride * size + off);
}

#define DEFINE_ATTENTION_FORWARD(NAME, T_, LOAD_ROWS, STORE_ROWS)                               \
    void NAME(const T_ *q, long q_sb, long q_st, const T_ *k, long k_sb, long k_st, const T_ *v,  \
              long v_sb, long v_st, const uint8_t *mask, long m_sb, long m_sh, long m_st,        \
              long m_ss, int causal, T_ *out, float *probs, long B, long H, long T, long S,      \
              long D, float scale, uint64_t seed, uint32_t threshold, float drop_scale) {        \
        long S16 = ROUND16(S);                                                                   \
        _Pragma("omp parallel")                                                                  \
        {                                                                                        \
            pair_buffers w = pair_buffers_new(T, S, D);                                          \
            float *Q = w.a, *K = w.b, *Kt = w.c, *V = w.d, *Sc = w.e, *O = w.f;                  \
            _Pragma("omp for schedule(static)")                                                  \
            for (long pair = 0; pair < B * H; pair++) {                                          \
                long b = pair / H, h = pair % H, nb = (pair + 1) / H, nh = (pair + 1) % H;       \
                if (pair + 1 < B * H) {                                                          \
                    prefetch_rows(q + nb * q_sb + nh * D, q_st, T, D, sizeof(T_));               \
                    prefetch_rows(k + nb * k_sb + nh * D, k_st, S, D, sizeof(T_));               \
                    prefetch_rows(v + nb * v_sb + nh * D, v_st, S, D, sizeof(T_));               \
                }                                                                                \
                LOAD_ROWS(q + b * q_sb + h * D, q_st, T, D, Q);                                  \
                LOAD_ROWS(k + b * k_sb + h * D, k_st, S, D, K);                                  \
                transpose_rows(K, S, D, Kt);                                                     \
                LOAD_ROWS(v + b * v_sb + h * D, v_st, S, D, V);                                  \
                small_mm(T, S16, D, Q, ROUND16(D), 1, Kt, Sc);                                   \
                float *P = probs + pair * T * S;                                                 \
                for (long t = 0; t < T; t++) {                                                   \
                    const uint8_t *mrow = mask ? mask + b * m_sb + h * m_sh + t * m_st : NULL;   \
                    if (t == 0 || m_st || causal)                                                \
                        mask_bias(w.bias, mrow, m_ss, S, causal ? t + S - T : S - 1);            \
                    float *row = Sc + t * S16;                                                   \
                    softmax_row(row, w.bias, S, scale);                                          \
                    memcpy(P + t * S, row, sizeof(float) * (size_t)S);                           \
                }                                                                                \
                if (threshold)                                                                   \
                    keep_factors(w.keep, w.lanes, seed, (uint64_t)(pair * T * S), T * S,         \
                                 threshold, drop_scale);                                         \
                dropped_probs(Sc, P, threshold ? w.keep : NULL, T, S);                           \
                small_mm(T, ROUND16(D), S, Sc, S16, 1, V, O);                                    \
                STORE_ROWS(O, T, D, out + b * T * H * D + h * D, H * D);                         \
            }                                                                                    \
            free(w.a);                                                                           \
        }                                                                                        \
    }

/* dq, dk, dv: the layout of q, k, v (strides dq_sb, dq_st, ...); dout: (B, T, H * D) */
#define DEFINE_ATTENTION_BACKWARD(NAME, T_, LOAD_ROWS, STORE_ROWS)                              \
    void NAME(const T_ *dout, const T_ *q, long q_sb, long q_st, const T_ *k, long k_sb,         \
              long k_st, const T_ *v, long v_sb, long v_st, const float *probs, T_ *dq,          \
              long dq_sb, long dq_st, T_ *dk, long dk_sb, long dk_st, T_ *dv, long dv_sb,        \
              long dv_st, long B, long H, long T, long S, long D, float scale, uint64_t seed,    \
              uint32_t threshold, float drop_scale) {                                            \
        long D16 = ROUND16(D), S16 = ROUND16(S);                                                 \
        _Pragma("omp parallel")                                                                  \
        {                                                                                        \
            pair_buffers w = pair_buffers_new(T, S, D);                                          \
            float *Q = w.a, *K = w.b, *Vt = w.c, *dO = w.d, *Pd = w.e, *dP = w.f, *G = w.g;      \
            _Pragma("omp for schedule(static)")                                                  \
            for (long pair = 0; pair < B * H; pair++) {                                          \
                long b = pair / H, h = pair % H, nb = (pair + 1) / H, nh = (pair + 1) % H;       \
                if (pair + 1 < B * H) {                                                          \
                    prefetch_rows(q + nb * q_sb + nh * D, q_st, T, D, sizeof(T_));               \
                    prefetch_rows(k + nb * k_sb + nh * D, k_st, S, D, sizeof(T_));               \
                    prefetch_rows(v + nb * v_sb + nh * D, v_st, S, D, sizeof(T_));               \
                    prefetch_rows(dout + nb * T * H * D + nh * D, H * D, T, D, sizeof(T_));      \
                }                                                                                \
                const float *P = probs + pair * T * S;                                           \
                LOAD_ROWS(q + b * q_sb + h * D, q_st, T, D, Q);                                  \
                LOAD_ROWS(v + b * v_sb + h * D, v_st, S, D, K); /* V first, via K's buffer */    \
                transpose_rows(K, S, D, Vt);                                                     \
                LOAD_ROWS(k + b * k_sb + h * D, k_st, S, D, K);                                  \
                LOAD_ROWS(dout + b * T * H * D + h * D, H * D, T, D, dO);                        \
                if (threshold)                                                                   \
                    keep_factors(w.keep, w.lanes, seed, (uint64_t)(pair * T * S), T * S,         \
                                 threshold, drop_scale);                                         \
                const float *keep = threshold ? w.keep : NULL;                                   \
                dropped_probs(Pd, P, keep, T, S);                                                \
                small_mm(S, D16, T, Pd, 1, S16, dO, G); /* dV = Pd^T dO */                       \
                STORE_ROWS(G, S, D, dv + b * dv_sb + h * D, dv_st);                              \
                small_mm(T, S16, D, dO, D16, 1, Vt, dP); /* d(Pd) = dO V^T */                    \
                for (long t = 0; t < T; t++) { /* dS = P * (dP - rowsum(P * dP)) * scale */      \
                    float *dp = dP + t * S16, dot = 0.0f;                                        \
                    const float *p = P + t * S, *kp = keep ? keep + t * S : NULL;                \
                    if (kp)                                                                      \
                        for (long s = 0; s < S; s++) dp[s] *= kp[s];                             \
                    for (long s = 0; s < S; s++) dot += p[s] * dp[s];                            \
                    for (long s = 0; s < S; s++) dp[s] = p[s] * (dp[s] - dot) * scale;           \
                    for (long s = S; s < S16; s++) dp[s] = 0.0f;                                 \
                }                                                                                \
                small_mm(T, D16, S, dP, S16, 1, K, G); /* dQ = dS K */                           \
                STORE_ROWS(G, T, D, dq + b * dq_sb + h * D, dq_st);                              \
                small_mm(S, D16, T, dP, 1, S16, Q, G); /* dK = dS^T Q */                         \
                STORE_ROWS(G, S, D, dk + b * dk_sb + h * D, dk_st);                              \
            }                                                                                    \
            free(w.a);                                                                           \
        }                                                                                        \
    }

DEFINE_ATTENTION_FORWARD(attention_forward_f32, float, load_rows_f32, store_rows_f32)
DEFINE_ATTENTION_FORWARD(attention_forward_bf16, uint16_t, load_rows_bf16, store_rows_bf16)
DEFINE_ATTENTION_BACKWARD(attention_backward_f32, float, load_rows_f32, store_rows_f32)
DEFINE_ATTENTION_BACKWARD(attention_backward_bf16, uint16_t, load_rows_bf16, store_rows_bf16)

/* Attention for inference with few queries per row (decoding steps), all heads at once, no
 * dropout: out[b][t][h * D + d] = sum_j p_j v[m][h][j][d], p = softmax_j(q[b][h][t] . k[m][h][j] *
 * scale) over the allowed keys (mask byte mask[m * m_sb + j * m_ss] set, or no mask; with
 * `causal`, j <= S - T + t), m = b / G (G consecutive query rows share a key row: the beams of
 * a sentence). A row with no allowed key gets zeros. q, k, v: float32 with unit stride along d;
 * out: B x T x (H * D), contiguous, as the output projection reads it. */
void attend_f32(const float *q, long q_sb, long q_sh, long q_st, const float *k, long k_sb, long k_sh,
                long k_ss, const float *v, long v_sb, long v_sh, long v_ss, const uint8_t *mask, long m_sb,
                long m_ss, int causal, float *out, long B, long H, long T, long S, long D, long G,
                float scale) {
    _Pragma("omp parallel")
    {
        size_t floats = (size_t)(2 * S + D + 1);
        float small[floats <= 8192 ? floats : 1]; /* on the stack up to 32 KiB */
        float *row = floats <= 8192 ? small : malloc(sizeof(float) * floats), *bias = row + S, *acc = bias + S;
        _Pragma("omp for schedule(static)")
        for (long pair = 0; pair < B * H; pair++) {
            long b = pair / H, h = pair % H, m = b / G;
            const float *kp = k + m * k_sb + h * k_sh, *vp = v + m * v_sb + h * v_sh;
            const uint8_t *mrow = mask ? mask + m * m_sb : NULL;
            long end = S; /* keys from the last allowed one on are padding: not computed */
            while (mrow && end > 0 && !mrow[(end - 1) * m_ss]) end--;
            for (long t = 0; t < T; t++) {
                const float *qp = q + b * q_sb + h * q_sh + t * q_st;
                long n = causal && S - T + t + 1 < end ? S - T + t + 1 : end; /* keys looked at */
                if (n < 0) n = 0;
                long j = 0;
                for (; j + 4 <= n; j += 4) { /* four keys at a time: independent sums */
                    const float *k0 = kp + j * k_ss, *k1 = k0 + k_ss, *k2 = k1 + k_ss, *k3 = k2 + k_ss;
                    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                    for (long d = 0; d < D; d++) {
                        s0 += qp[d] * k0[d];
                        s1 += qp[d] * k1[d];
                        s2 += qp[d] * k2[d];
                        s3 += qp[d] * k3[d];
                    }
                    row[j] = s0, row[j + 1] = s1, row[j + 2] = s2, row[j + 3] = s3;
                }
                for (; j < n; j++) {
                    float s0 = 0.0f;
                    for (long d = 0; d < D; d++) s0 += qp[d] * kp[j * k_ss + d];
                    row[j] = s0;
                }
                mask_bias(bias, mrow, m_ss, n, n - 1);
                softmax_row(row, bias, n, scale);
                for (long d = 0; d < D; d++) acc[d] = 0.0f;
                for (j = 0; j < n; j++) {
                    const float *vr = vp + j * v_ss;
                    float p = row[j];
                    if (p != 0.0f)
                        for (long d = 0; d < D; d++) acc[d] += p * vr[d];
                }
                memcpy(out + (b * T + t) * H * D + h * D, acc, sizeof(float) * (size_t)D);
            }
        }
        if (row != small) free(row);
    }
}

/* Decoding's choice of tokens: for each of N rows of logits (V each, rows at stride `stride`),
 * the k largest log-probabilities log_softmax(z)_j and their token ids j, best first (equal
 * values: the smaller id first), into values (N x k) and ids (N x k, int64). */
void best_tokens_f32(const float *logits, long N, long V, long stride, long k, float *values, int64_t *ids) {
    _Pragma("omp parallel for schedule(static)")
    for (long r = 0; r < N; r++) {
        const float *z = logits + r * stride;
        float m = row_max_f32(z, V), sum = 0.0f;
        for (long j = 0; j < V; j++) sum += exp_nonpositive(z[j] - m);
        float lse = m + logf(sum);
        float *val = values + r * k;
        int64_t *id = ids + r * k;
        long n = 0; /* kept so far, sorted best first */
        for (long j = 0; j < V; j++) {
            float x = z[j];
            if (n == k && !(x > val[k - 1])) continue; /* the usual case: not among the k best */
            long i = n < k ? n++ : k - 1;
            while (i > 0 && x > val[i - 1]) { /* insertion: move worse ones down */
                val[i] = val[i - 1];
                id[i] = id[i - 1];
                i--;
            }
            val[i] = x;
            id[i] = j;
        }
        for (long i = 0; i < n; i++) val[i] -= lse;
    }
}
