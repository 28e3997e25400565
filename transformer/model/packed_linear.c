/* Linear layers for inference on CPU: y = x W^T + b (optionally ReLU'd), float32, from a weight
 * packed once (see packed_linear.py, which calls this through ctypes; fused_cpu.py compiles it).
 *
 * W (N x K, rows at a stride) is packed into panels of 16 output features: panel p holds
 * W[16p .. 16p + 15][k] for k = 0 .. K-1, 16 consecutive floats per k, zero past N. A block of
 * up to 6 rows of x times one panel is summed in 12 vector registers of 8 floats (x's element
 * broadcast, the panel's 16 floats loaded once per k for all rows), the usual register-blocked
 * outer product of GEMM kernels. Rows of x are taken in blocks of at most ROW_BLOCK_BYTES, so a
 * block stays in the core's cache while the panels stream past it. (Row block, panel) pairs are
 * split across `threads` OpenMP threads (PyTorch's count; the process's one libgomp).
 *
 * Sums run over k in order in float32, with fused multiply-adds where the machine has them.
 */
#include <string.h>

#define PANEL 16
#define ROW_BLOCK_BYTES (128 * 1024)

typedef float v8f __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));

static inline v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof(v)); }

/* W (N x K, rows at stride w_stride) -> `packed`, ceil(N / 16) * 16 * K floats */
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

/* R rows of x (at stride xs) times one panel -> out[2r], out[2r + 1]: row r's 16 sums */
#define DECLARE(r) v8f lo##r = {0}, hi##r = {0};
#define MULTIPLY_ADD(r)                                                                          \
    {                                                                                            \
        float s = x[(r) * xs + k];                                                               \
        lo##r += s * w_lo;                                                                       \
        hi##r += s * w_hi;                                                                       \
    }
#define STORE(r)                                                                                 \
    out[2 * (r)] = lo##r;                                                                        \
    out[2 * (r) + 1] = hi##r;

#define DEFINE_BLOCK(R)                                                                          \
    static inline void block##R(const float *x, long xs, const float *panel, long K, v8f *out) { \
        FOR_ROWS##R(DECLARE)                                                                     \
        for (long k = 0; k < K; k++) {                                                           \
            v8f w_lo = load8(panel + k * PANEL), w_hi = load8(panel + k * PANEL + 8);            \
            FOR_ROWS##R(MULTIPLY_ADD)                                                            \
        }                                                                                        \
        FOR_ROWS##R(STORE)                                                                       \
    }
#define FOR_ROWS2(F) F(0) F(1)
#define FOR_ROWS4(F) F(0) F(1) F(2) F(3)
#define FOR_ROWS6(F) F(0) F(1) F(2) F(3) F(4) F(5)
DEFINE_BLOCK(2)
DEFINE_BLOCK(4)
DEFINE_BLOCK(6)

/* one row: even and odd k in separate sums (two dependency chains instead of one) */
static inline void block1(const float *x, long xs, const float *panel, long K, v8f *out) {
    (void)xs;
    v8f lo0 = {0}, hi0 = {0}, lo1 = {0}, hi1 = {0};
    long k = 0;
    for (; k + 2 <= K; k += 2) {
        const float *w = panel + k * PANEL;
        lo0 += x[k] * load8(w);
        hi0 += x[k] * load8(w + 8);
        lo1 += x[k + 1] * load8(w + PANEL);
        hi1 += x[k + 1] * load8(w + PANEL + 8);
    }
    if (k < K) {
        lo0 += x[k] * load8(panel + k * PANEL);
        hi0 += x[k] * load8(panel + k * PANEL + 8);
    }
    out[0] = lo0 + lo1;
    out[1] = hi0 + hi1;
}

/* rows [i0, i1) of y, columns of panel p: bias, ReLU, and the last panel's partial width */
static void panel_rows(const float *x, long xs, long i0, long i1, const float *packed, long p, long K,
                       const float *bias, long N, float *y, long ys, int relu) {
    const float *panel = packed + p * K * PANEL;
    long n0 = p * PANEL, width = N - n0 < PANEL ? N - n0 : PANEL;
    float b[PANEL] = {0};
    if (bias)
        for (long j = 0; j < width; j++) b[j] = bias[n0 + j];
    v8f b_lo = load8(b), b_hi = load8(b + 8), zero = {0};
    for (long i = i0; i < i1;) {
        v8f out[12];
        long left = i1 - i, rows = left >= 6 ? 6 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const float *xi = x + i * xs;
        if (rows == 6)
            block6(xi, xs, panel, K, out);
        else if (rows == 4)
            block4(xi, xs, panel, K, out);
        else if (rows == 2)
            block2(xi, xs, panel, K, out);
        else
            block1(xi, xs, panel, K, out);
        for (long r = 0; r < rows; r++) {
            v8f lo = out[2 * r] + b_lo, hi = out[2 * r + 1] + b_hi;
            if (relu) { /* max(v, 0), NaN kept */
                lo = (v8f)((v8i)lo & ~(lo < zero));
                hi = (v8f)((v8i)hi & ~(hi < zero));
            }
            float *yr = y + (i + r) * ys + n0;
            if (width == PANEL) {
                store8(yr, lo);
                store8(yr + 8, hi);
            } else {
                float t[PANEL];
                store8(t, lo);
                store8(t + 8, hi);
                memcpy(yr, t, width * sizeof(float));
            }
        }
        i += rows;
    }
}

/* y (M x N, rows at stride ys) = x (M x K, rows at stride xs) W^T + bias (or none), ReLU'd if relu;
 * `packed` from pack_f32 */
void linear_f32(const float *x, long M, long K, long xs, const float *packed, const float *bias, long N,
                float *y, long ys, int relu, int threads) {
    if (M <= 0 || N <= 0 || K <= 0) return; /* the callers pass none of these */
    long panels = (N + PANEL - 1) / PANEL;
    long most = ROW_BLOCK_BYTES / (K * (long)sizeof(float)); /* rows per block at most */
    long row_blocks = (M + most - 1) / (most > 0 ? most : 1);
    long block = (M + row_blocks - 1) / row_blocks; /* blocks of (nearly) equal size */
    block = (block + 5) / 6 * 6;
    row_blocks = (M + block - 1) / block;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
    for (long rb = 0; rb < row_blocks; rb++)
        for (long p = 0; p < panels; p++) {
            long i0 = rb * block, i1 = i0 + block < M ? i0 + block : M;
            panel_rows(x, xs, i0, i1, packed, p, K, bias, N, y, ys, relu);
        }
}

