/* tests/op_cases.c: the shared table of op test cases (see op_cases.h). Sizes: the small rows
 * cover strides, padding, ranks and batches > 1 for finite differences; the `big` rows go past
 * one GPU block (rows of 1000, 5000-element samples, 1200-row column sums) to reach the
 * multi-warp and multi-chunk kernels. */
#include <stdio.h>
#include <string.h>

#include "op_cases.h"

const op_case op_cases[] = {
    {"linear", "linear", "out=3", 1, {SH(2, 4)}, {F}, 3, 0, 0},
    {"linear rank1 no bias", "linear", "out=2 bias=false", 1, {SH(5)}, {F}, 2, 0, 0},
    {"linear big", "linear", "out=70", 1, {SH(5, 130)}, {F}, 4, 0, 1},
    {"linear many rows", "linear", "out=33", 1, {SH(300, 16)}, {F}, 4, 0, 1},
    {"linear act relu", "linear", "out=3 act=relu", 1, {SH(2, 4)}, {F}, 3, 0, 0},
    {"linear big act relu", "linear", "out=70 act=relu", 1, {SH(5, 130)}, {F}, 4, 0, 1},
    {"add", "add", "", 2, {SH(3, 2), SH(3, 2)}, {F, F}, 2, 0, 0},
    {"mul", "mul", "", 2, {SH(3, 2), SH(3, 2)}, {F, F}, 2, 0, 0},
    {"add big", "add", "", 2, {SH(1000), SH(1000)}, {F, F}, 3, 0, 1},
    {"relu", "relu", "", 1, {SH(7)}, {F}, 3, 0, 0},
    {"gelu", "gelu", "", 1, {SH(2, 3)}, {F}, 2, 0, 0},
    {"tanh", "tanh", "", 1, {SH(2, 3)}, {F}, 2, 0, 0},
    {"sigmoid", "sigmoid", "", 1, {SH(2, 3)}, {F}, 2, 0, 0},
    {"silu", "silu", "", 1, {SH(2, 3)}, {F}, 2, 0, 0},
    {"gelu big", "gelu", "", 1, {SH(999)}, {F}, 3, 0, 1},
    {"gelu approx=tanh", "gelu", "approx=tanh", 1, {SH(2, 5)}, {F}, 2, 0, 0},
    {"gelu approx=tanh big", "gelu", "approx=tanh", 1, {SH(999)}, {F}, 3, 0, 1},
    {"swiglu", "swiglu", "", 1, {SH(3, 8)}, {F}, 2, 0, 0},
    {"swiglu rank1", "swiglu", "", 1, {SH(6)}, {F}, 3, 0, 0},
    {"swiglu big", "swiglu", "", 1, {SH(300, 70)}, {F}, 2, 0, 1},
    {"softmax", "softmax", "", 1, {SH(2, 5)}, {F}, 2, 0, 0},
    {"softmax axis=1", "softmax", "axis=1", 1, {SH(3, 4)}, {F}, 2, 0, 0},
    {"softmax d=1000", "softmax", "", 1, {SH(3, 1000)}, {F}, 2, 0, 1},
    {"layernorm", "layernorm", "eps=0.001", 1, {SH(3, 6)}, {F}, 2, 0, 0},
    {"layernorm d=777 600 rows", "layernorm", "", 1, {SH(300, 777)}, {F}, 2, 0, 1},
    {"flatten", "flatten", "", 1, {SH(2, 3, 2)}, {F}, 2, 0, 0},
    {"reshape", "reshape", "shape=2,-1", 1, {SH(6)}, {F}, 2, 0, 0},
    {"conv2d k(3,2) s(2,1) p(1,0)", "conv2d", "out=3 kernel=3,2 stride=2,1 padding=1,0", 1,
     {SH(2, 5, 6)}, {F}, 2, 0, 0},
    {"conv2d k3 s2 p2 no bias", "conv2d", "out=2 kernel=3 stride=2 padding=2 bias=false", 1,
     {SH(1, 4, 5)}, {F}, 2, 0, 0},
    {"conv2d k(2,3) s(3,2) p(0,1)", "conv2d", "out=2 kernel=2,3 stride=3,2 padding=0,1", 1,
     {SH(2, 7, 6)}, {F}, 2, 0, 0},
    {"conv2d k3 p1", "conv2d", "out=3 kernel=3 padding=1", 1, {SH(2, 5, 4)}, {F}, 2, 0, 0},
    {"conv2d k(5,3) p(2,1) no bias", "conv2d", "out=2 kernel=5,3 padding=2,1 bias=false", 1,
     {SH(2, 4, 3)}, {F}, 2, 0, 0},
    {"conv2d k3 p1 width 1", "conv2d", "out=2 kernel=3 padding=1", 1, {SH(2, 3, 1)}, {F}, 2, 0,
     0},
    {"conv2d k3 p1 batch 9", "conv2d", "out=2 kernel=3 padding=1", 1, {SH(1, 3, 4)}, {F}, 9, 0,
     0},
    {"conv2d 1x1", "conv2d", "out=4 kernel=1", 1, {SH(3, 3, 2)}, {F}, 2, 0, 0},
    {"conv2d 1x1 act relu", "conv2d", "out=4 kernel=1 act=relu", 1, {SH(3, 3, 2)}, {F}, 2, 0, 0},
    {"conv2d k3 p1 act relu", "conv2d", "out=3 kernel=3 padding=1 act=relu", 1, {SH(2, 5, 4)}, {F}, 2, 0, 0},
    {"conv2d 1x1 s2", "conv2d", "out=2 kernel=1 stride=2", 1, {SH(2, 5, 4)}, {F}, 2, 0, 0},
    {"conv2d big", "conv2d", "out=16 kernel=3 padding=1", 1, {SH(8, 12, 12)}, {F}, 3, 0, 1},
    {"maxpool2d k3 s2 p1", "maxpool2d", "kernel=3 stride=2 padding=1", 1, {SH(2, 5, 6)}, {F}, 2,
     0, 0},
    {"maxpool2d k2", "maxpool2d", "kernel=2", 1, {SH(2, 4, 5)}, {F}, 2, 0, 0},
    {"maxpool2d k(2,3) s(1,2) p(1,1)", "maxpool2d", "kernel=2,3 stride=1,2 padding=1,1", 1,
     {SH(1, 4, 5)}, {F}, 2, 0, 0},
    {"maxpool2d big", "maxpool2d", "kernel=3 stride=2 padding=1", 1, {SH(3, 17, 19)}, {F}, 3, 0,
     1},
    {"avgpool2d k3 s2 p1", "avgpool2d", "kernel=3 stride=2 padding=1", 1, {SH(2, 5, 6)}, {F}, 2,
     0, 0},
    {"avgpool2d k2", "avgpool2d", "kernel=2", 1, {SH(2, 4, 5)}, {F}, 2, 0, 0},
    {"avgpool2d k(2,3) s(1,2) p(1,1)", "avgpool2d", "kernel=2,3 stride=1,2 padding=1,1", 1,
     {SH(1, 4, 5)}, {F}, 2, 0, 0},
    {"embedding", "embedding", "num=5 dim=3", 1, {SH(4)}, {I}, 3, 5, 0},
    {"embedding scalar index", "embedding", "num=4 dim=2", 1, {SCALAR}, {I}, 3, 4, 0},
    {"embedding repeats", "embedding", "num=7 dim=40", 1, {SH(50)}, {I}, 3, 7, 1},
    {"dropout", "dropout", "p=0.3", 1, {SH(4, 5)}, {F}, 2, 0, 0},
    {"dropout odd", "dropout", "p=0.5", 1, {SH(1001)}, {F}, 3, 0, 1},
    {"mse", "mse", "", 2, {SH(2, 3), SH(2, 3)}, {F, F}, 3, 0, 0},
    {"mse big", "mse", "", 2, {SH(5000), SH(5000)}, {F, F}, 3, 0, 1},
    {"cross_entropy", "cross_entropy", "", 2, {SH(5), SCALAR}, {F, I}, 4, 5, 0},
    {"cross_entropy [T, C]", "cross_entropy", "", 2, {SH(3, 4), SH(3)}, {F, I}, 2, 4, 0},
    {"cross_entropy C=1000", "cross_entropy", "", 2, {SH(3, 1000), SH(3)}, {F, I}, 2, 1000, 1},
    /* attention: lengths that are not multiples of the tile (7 = 3 + 3 + 1, 5 = 2 + 2 + 1) */
    {"attention causal T=7 block=3", "attention", "heads=2 block=3", 1, {SH(7, 12)}, {F}, 2, 0,
     0},
    {"attention full T=5 block=2", "attention", "heads=1 causal=false block=2", 1, {SH(5, 9)},
     {F}, 2, 0, 0},
    {"attention one tile", "attention", "heads=3", 1, {SH(4, 18)}, {F}, 2, 0, 0},
    {"attention T=130 big", "attention", "heads=4", 1, {SH(130, 192)}, {F}, 2, 0, 1},
    {"attention full T=100 big", "attention", "heads=2 causal=false", 1, {SH(100, 96)}, {F}, 2,
     0, 1},
    /* grouped-query (query head h reads kv head h / (heads / kv_heads)), multi-query, windows
     * smaller than T crossing tiles, an explicit head_dim */
    {"attention gqa H=4 KVH=2 T=7 block=3", "attention", "heads=4 kv_heads=2 block=3", 1,
     {SH(7, 24)}, {F}, 2, 0, 0},
    {"attention mqa H=4 KVH=1 T=6 block=4", "attention", "heads=4 kv_heads=1 block=4", 1,
     {SH(6, 24)}, {F}, 2, 0, 0},
    {"attention window=3 T=9 block=2", "attention", "heads=2 window=3 block=2", 1, {SH(9, 18)},
     {F}, 2, 0, 0},
    {"attention window=1 T=5", "attention", "heads=1 window=1 block=2", 1, {SH(5, 6)}, {F}, 2, 0,
     0},
    {"attention gqa window=4 head_dim=2 T=8 block=3", "attention",
     "heads=4 kv_heads=2 head_dim=2 window=4 block=3", 1, {SH(8, 16)}, {F}, 2, 0, 0},
    {"attention gqa window=50 T=130 big", "attention", "heads=4 kv_heads=2 window=50", 1,
     {SH(130, 192)}, {F}, 2, 0, 1},
    {"attention mqa T=130 big", "attention", "heads=3 kv_heads=1 block=32", 1, {SH(130, 160)},
     {F}, 2, 0, 1},
    /* rope: q and k rotated, v copied; llama3 scaling with frequencies in all three of its bands
     * (hd 8, theta 1e4: wavelengths 6.3, 63, 628, 6283 against 64 / 4 and 64 / 1) */
    {"rope", "rope", "heads=2 kv_heads=1", 1, {SH(5, 16)}, {F}, 2, 0, 0},
    {"rope llama3", "rope",
     "heads=2 head_dim=8 scaling=llama3 factor=8.0 low_freq_factor=1.0 high_freq_factor=4.0 "
     "original_max_position_embeddings=64",
     1, {SH(6, 48)}, {F}, 2, 0, 0},
    {"rope llama3 T=130 big", "rope",
     "heads=4 kv_heads=2 theta=500000 scaling=llama3 factor=8.0 low_freq_factor=1.0 "
     "high_freq_factor=4.0 original_max_position_embeddings=8192",
     1, {SH(130, 512)}, {F}, 2, 0, 1},
    {"pos_embedding", "pos_embedding", "num=6", 1, {SH(4, 3)}, {F}, 2, 0, 0},
    {"matmul", "matmul", "", 2, {SH(2, 3, 4), SH(2, 4, 5)}, {F, F}, 2, 0, 0},
    {"matmul 2-D", "matmul", "", 2, {SH(3, 4), SH(4, 2)}, {F, F}, 3, 0, 0},
    {"matmul big", "matmul", "", 2, {SH(4, 70, 33), SH(4, 33, 50)}, {F, F}, 2, 0, 1},
    {"transpose", "transpose", "", 1, {SH(2, 3, 4)}, {F}, 2, 0, 0},
    {"transpose big", "transpose", "", 1, {SH(300, 77)}, {F}, 2, 0, 1},
    {"split", "split", "parts=3 index=1", 1, {SH(2, 6)}, {F}, 2, 0, 0},
    {"split big", "split", "parts=3 index=2", 1, {SH(130, 192)}, {F}, 2, 0, 1},
    {"concat", "concat", "", 2, {SH(2, 3), SH(2, 2)}, {F, F}, 2, 0, 0},
    {"concat big", "concat", "", 2, {SH(130, 64), SH(130, 77)}, {F, F}, 2, 0, 1},
    {"rmsnorm", "rmsnorm", "eps=0.001", 1, {SH(3, 6)}, {F}, 2, 0, 0},
    {"rmsnorm d=777 600 rows", "rmsnorm", "", 1, {SH(300, 777)}, {F}, 2, 0, 1},
};
const int op_cases_count = (int)(sizeof op_cases / sizeof op_cases[0]);

const op_case *op_case_named(const char *label)
{
    for (int k = 0; k < op_cases_count; k++)
        if (strcmp(op_cases[k].label, label) == 0) return &op_cases[k];
    printf("\n  no case '%s'\n", label);
    return NULL;
}
