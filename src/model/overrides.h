/* model/overrides.h: "dotted.key=value" overrides applied to a parsed model document before it is
 * interpreted, so an overridden value is checked exactly like one written in the file. */
#ifndef BT_MODEL_OVERRIDES_H
#define BT_MODEL_OVERRIDES_H

#include "baton/status.h"
#include "model/yaml_tree.h"

/* Applies one override to *root (created as an empty mapping when the document was empty).
 * The key is split at '.'; each part names a mapping key (created when missing, and a null value
 * on the way becomes a mapping) or, inside a sequence, an item by index ("layers.0") or by its
 * `name:` ("layers.fc1.args.out=64"). The value is parsed as YAML ("3e-4", "[cpu:0, cpu:1]",
 * "{type: sgd}"); every node it creates carries the override text as its origin for messages.
 * file prefixes messages. Errors: BT_ERR_MODEL naming the override. */
bt_status bt_yaml_apply_override(const char *file, bt_ynode **root, const char *override);

#endif
