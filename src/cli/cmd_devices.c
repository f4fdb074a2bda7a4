/* cli/cmd_devices.c: `baton devices`: lists what a run can be placed on: the CPU (cores, the
 * BLAS baton loaded, how `precision: bf16` multiplies: AMX, AVX512-BF16 or f32) and every CUDA GPU with its name, compute capability, memory and the
 * peer-access matrix between GPUs. A machine without a GPU, or a baton built without CUDA, is
 * said so and is not an error (exit 0); only a failing CUDA query is (exit 1). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cpu/blas.h"
#ifdef BATON_HAVE_CUDA
#include "cuda/devices.h"
#endif


static void print_cpu(void)
{
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const bt_status st = bt_blas_init();
    printf("cpu      %ld core%s, BLAS: %s%s\n", cores, cores == 1 ? "" : "s", bt_blas_describe(),
           st == BT_OK ? "" : " (OpenBLAS failed to load)");
    printf("         precision bf16: %s\n", bt_cpu_bf16_describe());
}

#ifdef BATON_HAVE_CUDA
/* Prints the n x n peer-access matrix: row a, column b says whether cuda:a can read cuda:b. */
static int print_peers(int n)
{
    int *can = calloc((size_t)n * (size_t)n, sizeof *can);
    if (!can) {
        fprintf(stderr, "baton devices: out of memory\n");
        return BT_EXIT_RUNTIME;
    }
    bt_status st = bt_gpu_peer_matrix(n, can);
    if (st != BT_OK) {
        free(can);
        return bt_cli_fail("devices", st);
    }
    printf("peer access (row reads column directly):\n%-9s", "");
    for (int b = 0; b < n; b++) printf(" cuda:%-3d", b);
    printf("\n");
    for (int a = 0; a < n; a++) {
        printf("  cuda:%-3d", a);
        for (int b = 0; b < n; b++) printf(" %-8s", a == b ? "-" : can[a * n + b] ? "yes" : "no");
        printf("\n");
    }
    free(can);
    return BT_EXIT_OK;
}

static int print_gpus(void)
{
    int n = 0;
    bt_status st = bt_gpu_count(&n);
    if (st == BT_ERR_UNSUPPORTED) {
        printf("cuda     %s\n", bt_last_error());
        return BT_EXIT_OK;
    }
    if (st != BT_OK) return bt_cli_fail("devices", st);
    for (int i = 0; i < n; i++) {
        bt_gpu_info info;
        char total[32], free_now[32];
        if ((st = bt_gpu_info_get(i, &info)) != BT_OK) return bt_cli_fail("devices", st);
        printf("cuda:%-3d %s, sm_%d%d, %d SMs, %s (%s free), PCI %s, %s\n", i, info.name,
               info.cc_major, info.cc_minor, info.multiprocessors,
               bt_cli_bytes((double)info.total_bytes, total, sizeof total),
               bt_cli_bytes((double)info.free_bytes, free_now, sizeof free_now), info.pci_bus_id,
               info.cudnn);
    }
    return n > 1 ? print_peers(n) : BT_EXIT_OK;
}
#endif

int bt_cmd_devices(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: baton devices\n\n"
               "Lists the devices a model can run on: the CPU (cores, BLAS) and each CUDA GPU\n"
               "(name, compute capability, memory, and which GPUs can access each other's\n"
               "memory directly).\n");
        return BT_EXIT_OK;
    }
    if (argc > 1) {
        fprintf(stderr, "baton devices: unexpected argument '%s'\n", argv[1]);
        return BT_EXIT_USAGE;
    }
    print_cpu();
#ifdef BATON_HAVE_CUDA
    return print_gpus();
#else
    printf("cuda     not available: this baton was built without CUDA\n");
    return BT_EXIT_OK;
#endif
}
