/* tests/fuzz/fuzz_ckpt_index.c: libFuzzer harness for the index of a sharded checkpoint
 * (train/ckpt_index.c): the input is the index's JSON, parsed by bt_ckpt_index_parse (every check
 * of the reader: the top-level keys, metadata types, total_size, shard names, duplicates), then
 * looked up by every tensor it lists. Seeds (tests/fuzz/corpus/fuzz_ckpt_index/): an index baton
 * wrote for a 4-stage model, and one in Hugging Face's own form. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_ckpt_index x;
    if (bt_ckpt_index_parse("fuzz.index.json", (const char *)data, size, &x) == BT_OK) {
        for (int i = 0; i < x.n; i++)
            if (!bt_ckpt_index_file_of(&x, x.map[i].tensor) || strchr(x.map[i].file, '/')) abort();
        for (int i = 0; i < x.n_meta; i++)
            if (!bt_ckpt_index_meta(&x, x.keys[i])) abort();
    }
    bt_ckpt_index_free(&x);
    return 0;
}
