/* tests/fuzz/fuzz_chat_template.c: libFuzzer harness for chat templates (src/tok/chat_template.c):
 * the input is a template, then a NUL byte and a JSON object of variables (no NUL, or JSON that
 * does not parse: fixed variables with a system, user and assistant message). A template that
 * compiles renders with add_generation_prompt false and true; every refusal and render error is
 * a status, never a crash, and a rendering is as long as it says. Seeds
 * (tests/fuzz/corpus/fuzz_chat_template/): the templates of tests/chat_templates/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tok/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fixed_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi \\u00e9 {{ x }}\"}, "
    "{\"role\": \"assistant\", \"content\": \" Hello. \"}], \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3, "
    "\"tools\": null, \"d\": {\"b\": [1, true, null], \"a\": \"<&>\"}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t src_n = nul ? (size_t)(nul - data) : size;
    json_t *vars = nul ? json_loadb((const char *)nul + 1, size - src_n - 1, 0, NULL) : NULL;
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_loads(fixed_vars, 0, NULL);
    }
    bt_chat_template *t = NULL;
    if (vars && bt_chat_template_compile((const char *)data, src_n, "fuzz.jinja", &t) == BT_OK) {
        for (int gen = 0; gen < 2; gen++) {
            json_object_set_new(vars, "add_generation_prompt", json_boolean(gen));
            char *text = NULL;
            size_t len = 0;
            if (bt_chat_template_render(t, vars, &text, &len) == BT_OK && strlen(text) > len) abort();
            free(text);
        }
    }
    bt_chat_template_destroy(t);
    json_decref(vars);
    return 0;
}
