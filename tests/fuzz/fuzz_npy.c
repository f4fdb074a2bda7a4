/* tests/fuzz/fuzz_npy.c: libFuzzer harness for the .npy reader. The input is a whole file:
 * bt_npy_read parses the header and reads the data; on success every element is read back, so
 * the invariant nbytes == numel * element size (npy.c) is checked by ASan on the buffer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "io/npy.h"

/* every byte is read into this, so the reads cannot be optimised away */
volatile uint8_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_npy a;
    if (bt_npy_read(fuzz_input_path(data, size), &a) != BT_OK) return 0;
    if (a.nbytes != (size_t)a.numel * bt_npy_type_size(a.type)) abort();
    for (size_t i = 0; i < a.nbytes; i++) fuzz_sink += ((const uint8_t *)a.data)[i];
    bt_npy_free(&a);
    return 0;
}
