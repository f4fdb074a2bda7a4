/* cli/cmd_ops.c: `baton ops`: lists every op a model can use, built-in and registered, with the
 * arguments each accepts. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int bt_cmd_ops(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: baton ops\n\nLists the ops a model's layers can use, with their arguments.\n");
        return BT_EXIT_OK;
    }
    if (argc > 1) {
        fprintf(stderr, "baton ops: unexpected argument '%s'\n", argv[1]);
        return BT_EXIT_USAGE;
    }
    for (int i = 0; i < bt_op_count(); i++) {
        const bt_op_def *op = bt_op_at(i);
        printf("%-16s inputs %d", op->name, op->min_inputs);
        if (op->max_inputs != op->min_inputs) printf("-%d", op->max_inputs);
        printf("  args:");
        if (op->n_args == 0) printf(" none");
        for (int k = 0; k < op->n_args; k++)
            printf(" %s%s", op->args[k].name, op->args[k].required ? "*" : "");
        printf("%s%s\n", op->help ? "  - " : "", op->help ? op->help : "");
    }
    printf("(* = required)\n");
    return BT_EXIT_OK;
}
