/* cuda/ops_cuda.c: attaching the built-in ops' CUDA kernels to the op registry, once per process
 * (bt_cuda_attach_kernels, called from the backend's open). The table is expanded from
 * ops/builtin_ops.def and keyed by each op's definition, not its name: a row there without
 * bt_cuda_<op>_forward / _backward in kernels/<family>.cu fails the link. The kernels themselves
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

static pthread_once_t attach_once = PTHREAD_ONCE_INIT;
static bt_status attach_status;
static char attach_message[512];

static void attach_all(void)
{
    const int n = (int)(sizeof builtin_cuda_kernels / sizeof builtin_cuda_kernels[0]);
    for (int i = 0; i < n; i++) {
        const cuda_kernels *k = &builtin_cuda_kernels[i];
        bt_status st = bt_op_registry_set_cuda(k->op, k->forward, k->backward);
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
