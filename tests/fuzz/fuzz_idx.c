/* tests/fuzz/fuzz_idx.c: libFuzzer harness for the IDX reader. The input is a whole file, plain
 * or gzipped (zlib reads both): bt_idx_read parses the magic and dims and reads the data; on
 * success every byte is read back. A header that claims more memory than the fuzzer allows
 * (-malloc_limit_mb, default 2 GiB) is a finding: memory must follow the file, not the header. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "io/idx.h"

/* every byte is read into this, so the reads cannot be optimised away */
volatile uint8_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_idx idx;
    if (bt_idx_read(fuzz_input_path(data, size), &idx) != BT_OK) return 0;
    int64_t numel = 1;
    for (int d = 0; d < idx.ndim; d++) numel *= idx.dim[d];
    if (numel != idx.numel) abort();
    for (int64_t i = 0; i < idx.numel; i++) fuzz_sink += idx.data[i];
    bt_idx_free(&idx);
    return 0;
}
