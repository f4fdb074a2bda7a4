/* cuda/ops_cuda.c: attaching the built-in ops' CUDA kernels to the op registry, once per process
 * (bt_cuda_attach_kernels, called from the backend's open). The table is expanded from
 * ops/builtin_ops.def and keyed by each op's definition, not its name: a row there without
 * bt_cuda_<op>_forward / _backward in kernels/<family>.cu fails the link; a built-in with a decode
 * kernel (cpu_decode) gets its CUDA decode from a second, short table, checked against the ops at
 * attach time (a missing row is an error, not a silent CPU-only op). The kernels themselves
 * live beside the launchers they queue (kernels/<family>.cu), their shared helpers in
 * cuda/op_glue.c and cuDNN's convolution in cuda/conv_cudnn.c. */
#include <pthread.h>
#include <stdio.h>

#include "core/error.h"
#include "cuda/ops_cuda.h"
#include "graph/op_registry.h"
#include "ops/ops.h"

typedef struct cuda_kernels {
    const bt_op_def *op;
    bt_op_fn forward, backward;
} cuda_kernels;

static const cuda_kernels builtin_cuda_kernels[] = {
#define BT_BUILTIN_OP(op) {&bt_op_##op, bt_cuda_##op##_forward, bt_cuda_##op##_backward},
#include "ops/builtin_ops.def"
};

/* The built-ins with a decode kernel of their own (op->cpu_decode): their CUDA decode. Every
 * built-in with cpu_decode needs a row here; attach_all fails naming one that has none. */
typedef struct cuda_decoder {
    const bt_op_def *op;
    bt_op_fn decode;
} cuda_decoder;

static const cuda_decoder builtin_cuda_decoders[] = {
    {&bt_op_attention, bt_cuda_attention_decode},
    {&bt_op_pos_embedding, bt_cuda_pos_embedding_decode},
    {&bt_op_rope, bt_cuda_rope_decode},
};

static bt_op_fn decoder_of(const bt_op_def *op)
{
    const int n = (int)(sizeof builtin_cuda_decoders / sizeof builtin_cuda_decoders[0]);
    for (int i = 0; i < n; i++)
        if (builtin_cuda_decoders[i].op == op) return builtin_cuda_decoders[i].decode;
    return NULL;
}

static pthread_once_t attach_once = PTHREAD_ONCE_INIT;
static bt_status attach_status;
static char attach_message[512];

static void attach_all(void)
{
    const int n = (int)(sizeof builtin_cuda_kernels / sizeof builtin_cuda_kernels[0]);
    for (int i = 0; i < n; i++) {
        const cuda_kernels *k = &builtin_cuda_kernels[i];
        bt_op_fn decode = decoder_of(k->op);
        bt_status st = BT_OK;
        if (!decode != !k->op->cpu_decode)
            st = bt_error(BT_ERR_INTERNAL, "built-in op '%s' has %s CPU decode kernel but %s CUDA one", k->op->name,
                          k->op->cpu_decode ? "a" : "no", decode ? "a" : "no");
        if (st == BT_OK) st = bt_op_registry_set_cuda(k->op, k->forward, k->backward, decode);
        if (st != BT_OK) {
            attach_status = st;
            snprintf(attach_message, sizeof attach_message, "%s", bt_last_error());
            return;
        }
    }
}

bt_status bt_cuda_attach_kernels(void)
{
    pthread_once(&attach_once, attach_all);
    if (attach_status != BT_OK)
        return bt_error(attach_status, "attaching the CUDA kernels: %s", attach_message);
    return BT_OK;
}
