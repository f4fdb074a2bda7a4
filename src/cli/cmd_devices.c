/* cli/cmd_devices.c: `baton devices [--json]`: lists what a run can be placed on: the CPU (cores
 * and the BLAS baton loaded, how `precision: bf16` multiplies: AMX, AVX512-BF16 or f32, how
 * conv2d is chosen: cpu/conv_onednn.h) and every
 * CUDA GPU with its name, compute capability, memory and the
 * peer-access matrix between GPUs. A machine without a GPU says "no CUDA device" (the driver's
 * own words, such as "CUDA driver version is insufficient", only as the reason in --json), and
 * a baton built without CUDA says so; neither is an error (exit 0); only a failing CUDA query is
 * (exit 1). --json prints one JSON object (jansson) instead of the table. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/cpu_isa.h"
#include "cli/cli.h"
#include "cpu/blas.h"
#include "cpu/conv_onednn.h"
#ifdef BATON_HAVE_CUDA
#include "cuda/devices.h"
#endif

static json_t *cpu_info(int json)
{
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const bt_status st = bt_blas_init();
    if (json)
        return json_pack("{s:I, s:s, s:s, s:b, s:s, s:s, s:s}", "cores", (json_int_t)cores,
                         "kernels", bt_cpu_isa_describe(), "blas", bt_blas_describe(),
                         "blas_loaded", st == BT_OK, "f32", bt_cpu_f32_describe(), "bf16",
                         bt_cpu_bf16_describe(), "conv2d", bt_cpu_conv_describe());
    printf("cpu      %ld core%s, BLAS: %s%s\n", cores, cores == 1 ? "" : "s", bt_blas_describe(),
           st == BT_OK ? "" : " (OpenBLAS failed to load)");
    printf("         kernels: %s\n", bt_cpu_isa_describe());
    printf("         precision f32: %s\n", bt_cpu_f32_describe());
    printf("         precision bf16: %s\n", bt_cpu_bf16_describe());
    printf("         conv2d: %s\n", bt_cpu_conv_describe());
    return NULL;
}

#ifdef BATON_HAVE_CUDA
/* The n x n peer-access matrix (row a reads column b directly): printed, or into *out. */
static int peers(int n, int json, json_t **out)
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
    if (json) {
        json_t *rows = json_array();
        for (int a = 0; a < n; a++) {
            json_t *row = json_array();
            for (int b = 0; b < n; b++) json_array_append_new(row, json_boolean(a != b && can[a * n + b]));
            json_array_append_new(rows, row);
        }
        *out = rows;
    } else {
        printf("peer access (row reads column directly):\n%-9s", "");
        for (int b = 0; b < n; b++) printf(" cuda:%-3d", b);
        printf("\n");
        for (int a = 0; a < n; a++) {
            printf("  cuda:%-3d", a);
            for (int b = 0; b < n; b++) printf(" %-8s", a == b ? "-" : can[a * n + b] ? "yes" : "no");
            printf("\n");
        }
    }
    free(can);
    return BT_EXIT_OK;
}

static int gpus(int json, json_t *root)
{
    int n = 0;
    bt_status st = bt_gpu_count(&n);
    json_t *list = json_array();
    json_object_set_new(root, "gpus", list);
    if (st == BT_ERR_UNSUPPORTED) {
        if (json) json_object_set_new(root, "cuda", json_pack("{s:b, s:s}", "available", 0, "reason", bt_last_error()));
        else printf("cuda     no CUDA device\n");
        return BT_EXIT_OK;
    }
    if (st != BT_OK) return bt_cli_fail("devices", st);
    if (json) json_object_set_new(root, "cuda", json_pack("{s:b}", "available", 1));
    for (int i = 0; i < n; i++) {
        bt_gpu_info info;
        char total[32], free_now[32];
        if ((st = bt_gpu_info_get(i, &info)) != BT_OK) return bt_cli_fail("devices", st);
        if (json) {
            char dev[16];
            snprintf(dev, sizeof dev, "cuda:%d", i);
            json_array_append_new(list, json_pack("{s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:s, s:s}", "device", dev, "name",
                                                  info.name, "cc_major", info.cc_major, "cc_minor", info.cc_minor,
                                                  "multiprocessors", info.multiprocessors, "total_bytes",
                                                  (json_int_t)info.total_bytes, "free_bytes",
                                                  (json_int_t)info.free_bytes, "pci_bus_id", info.pci_bus_id,
                                                  "cudnn", info.cudnn));
        } else
            printf("cuda:%-3d %s, sm_%d%d, %d SMs, %s (%s free), PCI %s, %s\n", i, info.name, info.cc_major,
                   info.cc_minor, info.multiprocessors, bt_cli_bytes((double)info.total_bytes, total, sizeof total),
                   bt_cli_bytes((double)info.free_bytes, free_now, sizeof free_now), info.pci_bus_id, info.cudnn);
    }
    if (n < 2) return BT_EXIT_OK;
    json_t *matrix = NULL;
    int rc = peers(n, json, &matrix);
    if (matrix) json_object_set_new(root, "peer_access", matrix);
    return rc;
}
#endif

int bt_cmd_devices(int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: baton devices [--json]\n\n"
                   "Lists the devices a model can run on: the CPU (cores, BLAS) and each CUDA GPU\n"
                   "(name, compute capability, memory, and which GPUs can access each other's\n"
                   "memory directly). --json prints one JSON object instead.\n");
            return BT_EXIT_OK;
        }
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
            continue;
        }
        char shown[256];
        fprintf(stderr, "baton devices: unknown option '%s'\n", bt_cli_escape(argv[i], shown, sizeof shown));
        bt_cli_hint("devices");
        return BT_EXIT_USAGE;
    }
    json_t *root = json_object();
    if (!root) {
        fprintf(stderr, "baton devices: out of memory\n");
        return BT_EXIT_RUNTIME;
    }
    json_t *cpu = cpu_info(json);
    if (cpu) json_object_set_new(root, "cpu", cpu);
    int rc = BT_EXIT_OK;
#ifdef BATON_HAVE_CUDA
    rc = gpus(json, root);
#else
    if (json) {
        json_object_set_new(root, "gpus", json_array());
        json_object_set_new(root, "cuda", json_pack("{s:b, s:s}", "available", 0, "reason",
                                                    "this baton was built without CUDA"));
    } else
        printf("cuda     no CUDA device: this baton was built without CUDA\n");
#endif
    if (json && rc == BT_EXIT_OK) {
        json_dumpf(root, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        printf("\n");
    }
    json_decref(root);
    return rc;
}
