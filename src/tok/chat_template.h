/* tok/chat_template.h: Hugging Face chat templates (tokenizer_config.json's `chat_template`), the
 * Jinja subset they use, rendered as transformers 4.40.2's apply_chat_template renders them (jinja2's
 * sandboxed environment with trim_blocks and lstrip_blocks, `raise_exception` as a global).
 * A template is compiled once: any construct this evaluator does not implement (a tag, filter, test,
 * function or method it does not know) is refused there, BT_ERR_MODEL, naming the construct and its
 * line:column, never guessed at. Rendering takes the variables as one JSON object (messages,
 * add_generation_prompt, bos_token, eos_token and any others); a value it cannot render exactly (a
 * float, a printed list) and `raise_exception(...)` fail the render with BT_ERR_INVALID_ARG and the
 * message. docs/chat-templates.md lists what is supported. A compiled template is read-only: it may
 * render on several threads at once. Plain data: it sees neither the graph nor the engine. */
#ifndef BT_TOK_CHAT_TEMPLATE_H
#define BT_TOK_CHAT_TEMPLATE_H

#include <stddef.h>

#include <jansson.h>

#include "baton/status.h"

typedef struct bt_chat_template bt_chat_template;

/* Compiles src[0..len) (UTF-8); name labels the messages ("name:line:col: ..."). *out is the
 * caller's (bt_chat_template_destroy). */
bt_status bt_chat_template_compile(const char *src, size_t len, const char *name, bt_chat_template **out);
void bt_chat_template_destroy(bt_chat_template *t);

/* Renders with the variables of vars (a JSON object; NULL for none) into *text (malloc'ed,
 * NUL-terminated, *len bytes without the NUL). */
bt_status bt_chat_template_render(const bt_chat_template *t, const json_t *vars, char **text, size_t *len);

#endif
