/* tests/fuzz/fuzz_safetensors.c: libFuzzer harness for the safetensors reader. The input is a
 * whole file: bt_st_open maps and validates it, then every tensor baton can compute with is read
 * (bt_st_read copies it out, so every byte the reader vouched for is touched) and every metadata
 * pair is walked. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_st_file *f = NULL;
    if (bt_st_open(fuzz_input_path(data, size), &f) != BT_OK) return 0;
    for (int i = 0; i < bt_st_count(f); i++) {
        const bt_st_tensor *t = bt_st_at(f, i);
        if (bt_st_find(f, t->name) != t) abort(); /* names are unique */
        if (!t->known) continue;
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf) continue;
        if (bt_st_read(f, t->name, t->dtype, &t->shape, buf, t->nbytes) != BT_OK) abort();
        free(buf);
    }
    for (int i = 0; i < bt_st_metadata_count(f); i++) {
        const char *key, *value;
        bt_st_metadata_at(f, i, &key, &value);
        if (bt_st_metadata(f, key) != value) abort();
    }
    bt_st_close(f);
    return 0;
}
