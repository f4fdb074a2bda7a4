/* tests/chat_template_drv.c: renders a chat template with src/tok/chat_template.c for
 * tests/chat_template_ref.py. usage: chat_template_drv TEMPLATE_FILE VARS_JSON_FILE
 * Writes the rendering to stdout, bytes exact; a refusal at compile time exits 2 and a failed
 * render exits 1, each with the message on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "core/error.h"
#include "tok/chat_template.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 > cap) {
            cap = 2 * cap + 4096;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: chat_template_drv TEMPLATE_FILE VARS_JSON_FILE\n");
        return 2;
    }
    size_t len = 0;
    char *src = slurp(argv[1], &len);
    if (!src) {
        fprintf(stderr, "%s: cannot read\n", argv[1]);
        return 2;
    }
    json_error_t jerr;
    json_t *vars = json_load_file(argv[2], 0, &jerr);
    if (!vars) {
        fprintf(stderr, "%s:%d:%d: %s\n", argv[2], jerr.line, jerr.column, jerr.text);
        free(src);
        return 2;
    }
    bt_chat_template *t = NULL;
    int rc = 0;
    if (bt_chat_template_compile(src, len, argv[1], &t) != BT_OK) {
        fprintf(stderr, "%s\n", bt_last_error());
        rc = 2;
        goto done;
    }
    char *text = NULL;
    size_t n = 0;
    if (bt_chat_template_render(t, vars, &text, &n) != BT_OK) {
        fprintf(stderr, "%s\n", bt_last_error());
        rc = 1;
        goto done;
    }
    fwrite(text, 1, n, stdout);
    free(text);
done:
    bt_chat_template_destroy(t);
    json_decref(vars);
    free(src);
    return rc;
}
