/* kernels/attention.cu: the fused attention op (src/ops/attention.c) on the GPU. Simple and
 * exact rather than fast: one block per (sample, query head, query row) for the forward and the
 * query gradient, one per (sample, kv head, key row) for the key and value gradients (which sum
 * over the query heads of the kv head's group, in ascending order), so every sum is
 * taken in a fixed order by one block (no atomics, the same result every run). Query head h reads
 * kv head h / (heads / kv_heads); a causal query i sees keys (i - window, i] where a window is
 * given, so a key j is seen by queries [j, j + window). Scores are
 * recomputed in chunks of the block's width and never stored beyond one chunk: the forward
 * finds the row's maximum and sum first, saves the log-sum-exp (as the CPU kernels do), then
 * accumulates p v; the backward reads it back with D = rowsum(dO * O), which the query-row
 * kernel writes into the workspace for the key-row kernel. Dots accumulate in double. Decoding
 * (one position with a KV cache of kv_heads heads, bt_generate) has its own kernel: one block per
 * kv head, which appends its row to the cache and then attends for each query head of its group
 * over the cached rows with an online softmax (k_att_decode). */
#include "kernel_util.cuh"

#include "cuda/op_glue.h"

#define BT_ATT_THREADS 128
#define BT_ATT_PER_THREAD 8 /* output columns a thread owns: hd <= 1024 */

struct att_dims {
    int64_t t, c, heads, hd, rows; /* rows = batch * heads * t */
    int causal;
    double scale;
    int64_t kv_heads, group, ld, kvw; /* group = heads / kv_heads; kvw = kv_heads * hd */
    int64_t window;                   /* 0: none */
};

/* The first key query i sees (bt_attention_first_key), and one past the last query key j is
 * seen by. */
__device__ __forceinline__ int64_t att_first_key(const att_dims &d, int64_t i)
{
    return d.window > 0 && i - d.window + 1 > 0 ? i - d.window + 1 : 0;
}
__device__ __forceinline__ int64_t att_last_query(const att_dims &d, int64_t j)
{
    return d.window > 0 && j + d.window < d.t ? j + d.window : d.t;
}

/* q_i . k_j (or any two hd-vectors) in double */
template <typename T>
__device__ __forceinline__ double att_dot(const T *a, const T *b, int64_t hd)
{
    double s = 0;
    for (int64_t c = 0; c < hd; c++) s += (double)a[c] * (double)b[c];
    return s;
}

template <typename T>
__global__ void k_att_forward(const T *x, T *y, double *lse, att_dims d)
{
    __shared__ double shm[32];
    __shared__ double sp[BT_ATT_THREADS];
    const int64_t ld = d.ld;
    BT_K_FOR_BLOCK(r, d.rows) {
        const int64_t i = r % d.t, h = (r / d.t) % d.heads, n = r / (d.t * d.heads);
        const int64_t g = h / d.group;
        const T *xs = x + n * d.t * ld;
        const T *q = xs + i * ld + h * d.hd, *k = xs + d.c + g * d.hd, *v = xs + d.c + d.kvw + g * d.hd;
        const int64_t keys = d.causal ? i + 1 : d.t, first = att_first_key(d, i);
        double mx = -INFINITY;
        for (int64_t j = first + threadIdx.x; j < keys; j += blockDim.x)
            mx = fmax(mx, d.scale * att_dot(q, k + j * ld, d.hd));
        mx = bt_k_block_max(mx, -(double)INFINITY, shm);
        double z = 0;
        for (int64_t j = first + threadIdx.x; j < keys; j += blockDim.x)
            z += exp(d.scale * att_dot(q, k + j * ld, d.hd) - mx);
        const double l = mx + log(bt_k_block_sum(z, shm));
        double acc[BT_ATT_PER_THREAD] = {0};
        for (int64_t j0 = first; j0 < keys; j0 += blockDim.x) {
            const int64_t j = j0 + threadIdx.x;
            __syncthreads();
            sp[threadIdx.x] = j < keys ? exp(d.scale * att_dot(q, k + j * ld, d.hd) - l) : 0.0;
            __syncthreads();
            const int64_t nk = keys - j0 < (int64_t)blockDim.x ? keys - j0 : blockDim.x;
            for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
                const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
                if (c >= d.hd) break;
                for (int64_t t = 0; t < nk; t++) acc[u] += sp[t] * (double)v[(j0 + t) * ld + c];
            }
        }
        T *yr = y + (n * d.t + i) * d.c + h * d.hd;
        for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
            const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
            if (c < d.hd) yr[c] = (T)acc[u];
        }
        if (lse && threadIdx.x == 0) lse[(n * d.heads + h) * d.t + i] = l;
    }
}

/* Per query row i: D_i = dO_i . O_i (kept in dd), dq_i += scale sum_j ds_ij k_j,
 * ds_ij = p_ij (dO_i . v_j - D_i). */
template <typename T>
__global__ void k_att_backward_dq(const T *x, const T *y, const T *dy, const double *lse,
                                  double *dd, T *dx, att_dims d)
{
    __shared__ double shm[32];
    __shared__ double sp[BT_ATT_THREADS];
    const int64_t ld = d.ld;
    BT_K_FOR_BLOCK(r, d.rows) {
        const int64_t i = r % d.t, h = (r / d.t) % d.heads, n = r / (d.t * d.heads);
        const int64_t g = h / d.group;
        const T *xs = x + n * d.t * ld;
        const T *q = xs + i * ld + h * d.hd, *k = xs + d.c + g * d.hd, *v = xs + d.c + d.kvw + g * d.hd;
        const T *o = y + (n * d.t + i) * d.c + h * d.hd, *go = dy + (n * d.t + i) * d.c + h * d.hd;
        double part = 0;
        for (int64_t c = threadIdx.x; c < d.hd; c += blockDim.x) part += (double)go[c] * (double)o[c];
        const double di = bt_k_block_sum(part, shm);
        const int64_t row = (n * d.heads + h) * d.t + i;
        if (threadIdx.x == 0) dd[row] = di;
        const double l = lse[row];
        const int64_t keys = d.causal ? i + 1 : d.t;
        double acc[BT_ATT_PER_THREAD] = {0};
        for (int64_t j0 = att_first_key(d, i); j0 < keys; j0 += blockDim.x) {
            const int64_t j = j0 + threadIdx.x;
            __syncthreads();
            double ds = 0;
            if (j < keys) {
                const double p = exp(d.scale * att_dot(q, k + j * ld, d.hd) - l);
                ds = p * (att_dot(go, v + j * ld, d.hd) - di);
            }
            sp[threadIdx.x] = ds;
            __syncthreads();
            const int64_t nk = keys - j0 < (int64_t)blockDim.x ? keys - j0 : blockDim.x;
            for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
                const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
                if (c >= d.hd) break;
                for (int64_t t = 0; t < nk; t++) acc[u] += sp[t] * (double)k[(j0 + t) * ld + c];
            }
        }
        T *gq = dx + (n * d.t + i) * ld + h * d.hd;
        for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
            const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
            if (c < d.hd) gq[c] += (T)(d.scale * acc[u]);
        }
    }
}

/* Per key row j of kv head g: dv_j += sum_h sum_i p_ij dO_i, dk_j += scale sum_h sum_i ds_ij q_i,
 * over the query heads h of g's group (ascending) and the queries i that see key j. */
template <typename T>
__global__ void k_att_backward_dkdv(const T *x, const T *dy, const double *lse, const double *dd,
                                    T *dx, att_dims d)
{
    __shared__ double sp[BT_ATT_THREADS], sd[BT_ATT_THREADS];
    const int64_t ld = d.ld, kv_rows = d.rows / d.group;
    BT_K_FOR_BLOCK(r, kv_rows) {
        const int64_t j = r % d.t, g = (r / d.t) % d.kv_heads, n = r / (d.t * d.kv_heads);
        const T *xs = x + n * d.t * ld;
        const T *k = xs + j * ld + d.c + g * d.hd, *v = xs + j * ld + d.c + d.kvw + g * d.hd;
        const int64_t first = d.causal ? j : 0, last = att_last_query(d, j);
        double av[BT_ATT_PER_THREAD] = {0}, ak[BT_ATT_PER_THREAD] = {0};
        for (int64_t h = g * d.group; h < (g + 1) * d.group; h++) {
            const T *q = xs + h * d.hd;
            const T *go = dy + n * d.t * d.c + h * d.hd;
            const double *lr = lse + (n * d.heads + h) * d.t, *dr = dd + (n * d.heads + h) * d.t;
            for (int64_t i0 = first; i0 < last; i0 += blockDim.x) {
                const int64_t i = i0 + threadIdx.x;
                __syncthreads();
                double p = 0, ds = 0;
                if (i < last) {
                    p = exp(d.scale * att_dot(q + i * ld, k, d.hd) - lr[i]);
                    ds = p * (att_dot(go + i * d.c, v, d.hd) - dr[i]);
                }
                sp[threadIdx.x] = p;
                sd[threadIdx.x] = ds;
                __syncthreads();
                const int64_t nq = last - i0 < (int64_t)blockDim.x ? last - i0 : blockDim.x;
                for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
                    const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
                    if (c >= d.hd) break;
                    for (int64_t t = 0; t < nq; t++) {
                        av[u] += sp[t] * (double)go[(i0 + t) * d.c + c];
                        ak[u] += sd[t] * (double)q[(i0 + t) * ld + c];
                    }
                }
            }
        }
        T *gk = dx + (n * d.t + j) * ld + d.c + g * d.hd, *gv = gk + d.kvw;
        for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
            const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
            if (c >= d.hd) break;
            gk[c] += (T)(d.scale * ak[u]);
            gv[c] += (T)av[u];
        }
    }
}

/* One position p of one sequence (decoding with a KV cache; the CPU's attention_decode): block g
 * (one per kv head) first appends the kv head's k and v of row p to the cache (kc, vc: (T, kv_heads
 * hd) each), then for each query head of its group attends query p over the keys its window sees
 * (0..p, or the last `window`) with an online softmax, one chunk of blockDim.x keys at a
 * time: each thread scores one key (a dot in double), the chunk's maximum raises the running
 * maximum m, the running sum z and each thread's output columns are rescaled by exp(m_old -
 * m_new), and the chunk's weights exp(s - m) accumulate the value rows. Only one chunk's scores
 * exist at any time. Everything sums in double, in an order fixed by the chunking. */
template <typename T>
__global__ void k_att_decode(const T *x, T *kc, T *vc, T *y, att_dims d, int64_t p)
{
    __shared__ double shm[32];
    __shared__ double sp[BT_ATT_THREADS];
    BT_K_FOR_BLOCK(g, d.kv_heads) {
        T *krow = kc + p * d.kvw + g * d.hd, *vrow = vc + p * d.kvw + g * d.hd;
        for (int64_t c = threadIdx.x; c < d.hd; c += blockDim.x) {
            krow[c] = x[d.c + g * d.hd + c];
            vrow[c] = x[d.c + d.kvw + g * d.hd + c];
        }
        __syncthreads();
        const int64_t keys = p + 1, first = att_first_key(d, p);
        for (int64_t h = g * d.group; h < (g + 1) * d.group; h++) {
            const T *q = x + h * d.hd;
            double m = -INFINITY, z = 0, acc[BT_ATT_PER_THREAD] = {0};
            for (int64_t j0 = first; j0 < keys; j0 += blockDim.x) {
                const int64_t j = j0 + threadIdx.x;
                const double s = j < keys ? d.scale * att_dot(q, kc + j * d.kvw + g * d.hd, d.hd) : -INFINITY;
                const double mn = fmax(m, bt_k_block_max(s, -(double)INFINITY, shm)); /* finite: key j0 exists */
                const double corr = exp(m - mn); /* 0 on the first chunk, where z and acc are 0 */
                const double e = j < keys ? exp(s - mn) : 0.0;
                sp[threadIdx.x] = e; /* the previous chunk's readers passed bt_k_block_max's barriers */
                z = z * corr + bt_k_block_sum(e, shm); /* its barriers also publish sp */
                m = mn;
                const int64_t nk = keys - j0 < (int64_t)blockDim.x ? keys - j0 : blockDim.x;
                for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
                    const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
                    if (c >= d.hd) break;
                    double a = acc[u] * corr;
                    for (int64_t t = 0; t < nk; t++) a += sp[t] * (double)vc[(j0 + t) * d.kvw + g * d.hd + c];
                    acc[u] = a;
                }
            }
            for (int u = 0; u < BT_ATT_PER_THREAD; u++) {
                const int64_t c = threadIdx.x + (int64_t)u * blockDim.x;
                if (c < d.hd) y[h * d.hd + c] = (T)(acc[u] / z);
            }
            __syncthreads(); /* the next head (or block: a grid smaller than kv_heads) reuses sp */
        }
    }
}

static att_dims att_dims_of(const bt_attention_config *cf, int64_t batch)
{
    att_dims d = {cf->t, cf->c, cf->heads, cf->hd, batch * cf->heads * cf->t, cf->causal,
                  cf->scale, cf->kv_heads, cf->heads / cf->kv_heads, cf->ld,
                  cf->kv_heads * cf->hd, cf->window};
    return d;
}

extern "C" cudaError_t bt_k_attention_forward(cudaStream_t s, bt_dtype dt, const void *x, void *y,
                                              double *lse, const bt_attention_config *cf,
                                              int64_t batch)
{
    const att_dims d = att_dims_of(cf, batch);
    if (d.rows <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_att_forward<T><<<bt_k_blocks_per_item(d.rows), BT_ATT_THREADS, 0, s>>>(
                          (const T *)x, (T *)y, lse, d););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_attention_backward(cudaStream_t s, bt_dtype dt, const void *x,
                                               const void *y, const void *dy,
                                               const double *lse, double *dd, void *dx,
                                               const bt_attention_config *cf, int64_t batch)
{
    const att_dims d = att_dims_of(cf, batch);
    if (d.rows <= 0) return cudaSuccess;
    BT_K_DISPATCH(dt, k_att_backward_dq<T><<<bt_k_blocks_per_item(d.rows), BT_ATT_THREADS, 0, s>>>(
                          (const T *)x, (const T *)y, (const T *)dy, lse, dd, (T *)dx, d););
    BT_K_DISPATCH(dt, k_att_backward_dkdv<T><<<bt_k_blocks_per_item(d.rows / d.group), BT_ATT_THREADS, 0,
                                                s>>>((const T *)x, (const T *)dy, lse, dd,
                                                     (T *)dx, d););
    return cudaGetLastError();
}

extern "C" cudaError_t bt_k_attention_decode(cudaStream_t s, bt_dtype dt, const void *x, void *cache,
                                             void *y, const bt_attention_config *cf, int64_t pos)
{
    const att_dims d = att_dims_of(cf, 1);
    const size_t plane = (size_t)(cf->t * d.kvw) * (dt == BT_F64 ? sizeof(double) : sizeof(float));
    BT_K_DISPATCH(dt, k_att_decode<T><<<bt_k_blocks_per_item(cf->kv_heads), BT_ATT_THREADS, 0, s>>>(
                          (const T *)x, (T *)cache, (T *)((char *)cache + plane), (T *)y, d, pos););
    return cudaGetLastError();
}

/* ---- glue: the op's CUDA forward, backward and decode (bt_op_call -> launchers), C linkage --- */

extern "C" bt_status bt_cuda_attention_forward(const bt_op_call *call)
{
    const bt_attention_config *cf = (const bt_attention_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "attention", call->out->dtype, &x));
    if (cf->hd > BT_ATT_THREADS * BT_ATT_PER_THREAD)
        return bt_op_error(BT_ERR_UNSUPPORTED,
                           "attention: the CUDA kernel takes heads of at most %d channels, got %lld",
                           BT_ATT_THREADS * BT_ATT_PER_THREAD, (long long)cf->hd);
    BT_K_TRY(bt_k_attention_forward, x->stream, call->out->dtype, call->in[0].data,
             call->out->data, (double *)call->saved, cf, call->batch);
    return BT_OK;
}

extern "C" bt_status bt_cuda_attention_backward(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_attention_config *cf = (const bt_attention_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "attention", call->out_grad->dtype, &x));
    if (!call->saved || !call->workspace)
        return bt_op_error(BT_ERR_INTERNAL,
                           "attention: backward without the forward's saved statistics");
    BT_K_TRY(bt_k_attention_backward, x->stream, call->out_grad->dtype, call->in[0].data,
             call->out->data, call->out_grad->data, (const double *)call->saved,
             (double *)call->workspace, call->in_grad[0].data, cf, call->batch);
    return BT_OK;
}

/* One position with the sequence's KV cache (call->cache, device memory: keys then values, T rows
 * of kv_heads * hd each); the CPU's attention_decode, refusing what it refuses with its words. */
extern "C" bt_status bt_cuda_attention_decode(const bt_op_call *call)
{
    const bt_attention_config *cf = (const bt_attention_config *)call->config;
    bt_cuda_exec *x;
    BT_TRY(bt_cuda_begin(call, "attention", call->out->dtype, &x));
    if (!cf->causal)
        return bt_op_error(BT_ERR_UNSUPPORTED, "attention: causal: false cannot decode one position at a time");
    if (call->position < 0 || call->position >= cf->t)
        return bt_op_error(BT_ERR_INVALID_ARG, "attention: position %lld is outside the context of %lld",
                           (long long)call->position, (long long)cf->t);
    if (cf->hd > BT_ATT_THREADS * BT_ATT_PER_THREAD)
        return bt_op_error(BT_ERR_UNSUPPORTED, "attention: decoding takes heads of at most %d channels",
                           BT_ATT_THREADS * BT_ATT_PER_THREAD);
    if (!call->cache)
        return bt_op_error(BT_ERR_INTERNAL, "attention: decode without the sequence's cache");
    BT_K_TRY(bt_k_attention_decode, x->stream, call->out->dtype, call->in[0].data, call->cache,
             call->out->data, cf, call->position);
    return BT_OK;
}
