/* cli/plugin.c: `--plugin LIB.so` of run, check, plan, predict, generate and profile: loads a
 * shared library and calls its registration function, `bt_status baton_plugin_register(void)`,
 * which registers custom ops with bt_op_register (baton/op.h); the model file can then name them.
 * The library resolves bt_op_register and the other public functions against the baton command
 * itself (linked with -export-dynamic), so its ops land in the registry the model loader reads.
 * Plugins load before the model, in the order given, and stay loaded until the process ends (the
 * ops point into them). Every failure names the option and the library: a file dlopen cannot
 * load, a library without the function, a registration that fails (exit 2), with the library's
 * message or, where it set none, the status it returned. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define BT_PLUGIN_FUNCTION "baton_plugin_register"

int bt_cli_add_plugin(const char *cmd, bt_cli_model_opts *o, const char *path)
{
    if (o->n_plugins == (int)(sizeof o->plugins / sizeof o->plugins[0])) {
        fprintf(stderr, "baton %s: --plugin: at most %d libraries\n", cmd, (int)(sizeof o->plugins / sizeof o->plugins[0]));
        return BT_EXIT_USAGE;
    }
    o->plugins[o->n_plugins++] = path;
    return BT_EXIT_OK;
}

int bt_cli_load_plugins(const char *cmd, const bt_cli_model_opts *o)
{
    for (int i = 0; i < o->n_plugins; i++) {
        char shown[1024];
        const char *path = o->plugins[i];
        bt_cli_escape(path, shown, sizeof shown);
        /* dlopen searches the library path for a bare name; a name with a '/' is a file */
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *why = dlerror();
            char esc[1024];
            fprintf(stderr, "baton %s: --plugin %s: cannot load it: %s\n", cmd, shown,
                    bt_cli_escape(why ? why : "unknown error", esc, sizeof esc));
            return BT_EXIT_USAGE;
        }
        bt_status (*reg)(void);
        void *sym = dlsym(h, BT_PLUGIN_FUNCTION);
        memcpy(&reg, &sym, sizeof reg);
        if (!sym) {
            fprintf(stderr, "baton %s: --plugin %s: the library has no function " BT_PLUGIN_FUNCTION
                            " (bt_status " BT_PLUGIN_FUNCTION "(void), which registers its ops)\n", cmd, shown);
            return BT_EXIT_USAGE;
        }
        bt_clear_error(); /* what the library says, never an older message */
        bt_status st = reg();
        if (st != BT_OK) {
            fprintf(stderr, "baton %s: --plugin %s: " BT_PLUGIN_FUNCTION " failed: ", cmd, shown);
            if (*bt_last_error()) bt_cli_print_escaped(stderr, bt_last_error());
            else fprintf(stderr, "it returned '%s' without a message", bt_status_name(st));
            fputc('\n', stderr);
            return BT_EXIT_USAGE;
        }
    }
    return BT_EXIT_OK;
}
