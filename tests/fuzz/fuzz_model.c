/* tests/fuzz/fuzz_model.c: libFuzzer harness for the model loader. The input is a model file's
 * text, loaded with bt_model_load_string (YAML parse, interpretation, graph build, shape
 * inference). Any status is fine; a crash, a sanitizer report or a leak is a finding. */
#include <stddef.h>
#include <stdint.h>

#include "baton/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_model *m = NULL;
    if (bt_model_load_string((const char *)data, size, "fuzz.yaml", NULL, 0, &m) == BT_OK)
        bt_model_destroy(m);
    return 0;
}
