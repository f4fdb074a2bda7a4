/* graph/op_registry.c: the table every op lookup goes through. Built-in definitions come from
 * src/ops/builtin.c and are copied in once, each entry remembering the definition it copies so a
 * backend attaches kernels to the op itself, not to a name; custom ops are deep-copied on
 * registration. Lookups
 * take a lock, so registration from one thread while others build graphs is safe. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "graph/op_registry.h"
#include "ops/ops.h"

#define BT_MAX_OPS 256

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static bt_op_def *registry[BT_MAX_OPS];
static const bt_op_def *registry_builtin[BT_MAX_OPS]; /* the built-in each entry copies; NULL: custom */
static int registry_count;
static int registry_ready;

static void def_free(bt_op_def *d)
{
    if (!d) return;
    free((char *)d->name);
    free((char *)d->help);
    for (int i = 0; i < d->n_args; i++) {
        free((char *)d->args[i].name);
        free((char *)d->args[i].help);
    }
    free((bt_arg_spec *)d->args);
    free(d);
}

/* Deep copy of src (name, help and argument specs included). */
static bt_op_def *def_copy(const bt_op_def *src)
{
    bt_op_def *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    *d = *src;
    d->name = bt_strdup(src->name);
    d->help = src->help ? bt_strdup(src->help) : NULL;
    d->args = NULL;
    d->n_args = 0;
    if (!d->name || (src->help && !d->help)) goto fail;
    if (src->n_args > 0) {
        bt_arg_spec *args = calloc((size_t)src->n_args, sizeof *args);
        if (!args) goto fail;
        d->args = args;
        for (int i = 0; i < src->n_args; i++) {
            args[i] = src->args[i];
            args[i].name = bt_strdup(src->args[i].name);
            args[i].help = src->args[i].help ? bt_strdup(src->args[i].help) : NULL;
            d->n_args = i + 1;
            if (!args[i].name) goto fail;
        }
    }
    return d;
fail:
    def_free(d);
    return NULL;
}

static int find_index_locked(const char *name)
{
    for (int i = 0; i < registry_count; i++)
        if (strcmp(registry[i]->name, name) == 0) return i;
    return -1;
}

bt_status bt_op_registry_init(void)
{
    bt_status st = BT_OK;
    pthread_mutex_lock(&registry_lock);
    if (!registry_ready) {
        int n = 0;
        const bt_op_def *const *builtins = bt_builtin_ops(&n);
        for (int i = 0; i < n && st == BT_OK; i++) {
            if (registry_count >= BT_MAX_OPS) {
                st = bt_error(BT_ERR_INTERNAL, "op registry full");
            } else if (!(registry[registry_count] = def_copy(builtins[i]))) {
                st = bt_error(BT_ERR_NOMEM, "op registry: out of memory");
            } else {
                registry_builtin[registry_count] = builtins[i];
                registry_count++;
            }
        }
        if (st == BT_OK) registry_ready = 1;
    }
    pthread_mutex_unlock(&registry_lock);
    return st;
}

static bt_status check_def(const bt_op_def *def)
{
    if (!def || !def->name) return bt_error(BT_ERR_INVALID_ARG, "bt_op_register: NULL definition");
    if (!strchr(def->name, '.') || def->name[0] == '.' || strchr(def->name, ' '))
        return bt_error(BT_ERR_INVALID_ARG,
                        "bt_op_register: custom op name '%s' must be dotted, like 'myproj.swish'",
                        def->name);
    if (!def->infer || !def->cpu_forward || !def->cpu_backward)
        return bt_error(BT_ERR_INVALID_ARG,
                        "bt_op_register: op '%s' needs infer, cpu_forward and cpu_backward",
                        def->name);
    if (def->cuda_backward_weight && !def->cpu_backward_weight)
        return bt_error(BT_ERR_INVALID_ARG,
                        "bt_op_register: op '%s' gives a CUDA weight-gradient kernel but no CPU one "
                        "(cpu_backward_weight is the reference)", def->name);
    if (def->cuda_decode && !def->cpu_decode)
        return bt_error(BT_ERR_INVALID_ARG,
                        "bt_op_register: op '%s' gives a CUDA decode kernel but no CPU one "
                        "(cpu_decode is the reference)", def->name);
    if (def->min_inputs < 1 || def->max_inputs < def->min_inputs || def->max_inputs > BT_MAX_INPUTS)
        return bt_error(BT_ERR_INVALID_ARG, "bt_op_register: op '%s' has inputs %d..%d (1..%d)",
                        def->name, def->min_inputs, def->max_inputs, BT_MAX_INPUTS);
    if (def->n_args < 0 || (def->n_args > 0 && !def->args))
        return bt_error(BT_ERR_INVALID_ARG, "bt_op_register: op '%s' has a bad argument list",
                        def->name);
    return BT_OK;
}

bt_status bt_op_register(const bt_op_def *def)
{
    BT_TRY(bt_op_registry_init());
    BT_TRY(check_def(def));
    bt_status st = BT_OK;
    pthread_mutex_lock(&registry_lock);
    if (find_index_locked(def->name) >= 0) {
        st = bt_error(BT_ERR_INVALID_ARG, "bt_op_register: op '%s' is already registered",
                      def->name);
    } else if (registry_count >= BT_MAX_OPS) {
        st = bt_error(BT_ERR_NOMEM, "bt_op_register: more than %d ops", BT_MAX_OPS);
    } else if (!(registry[registry_count] = def_copy(def))) {
        st = bt_error(BT_ERR_NOMEM, "bt_op_register: out of memory");
    } else {
        registry_count++;
    }
    pthread_mutex_unlock(&registry_lock);
    return st;
}

int bt_op_is_custom(const bt_op_def *op) { return op && op->name && strchr(op->name, '.') != NULL; }

const bt_op_def *bt_op_find(const char *name)
{
    if (!name || bt_op_registry_init() != BT_OK) return NULL;
    pthread_mutex_lock(&registry_lock);
    int i = find_index_locked(name);
    const bt_op_def *d = i >= 0 ? registry[i] : NULL;
    pthread_mutex_unlock(&registry_lock);
    return d;
}

int bt_op_count(void)
{
    if (bt_op_registry_init() != BT_OK) return 0;
    pthread_mutex_lock(&registry_lock);
    int n = registry_count;
    pthread_mutex_unlock(&registry_lock);
    return n;
}

const bt_op_def *bt_op_at(int i)
{
    if (bt_op_registry_init() != BT_OK) return NULL;
    pthread_mutex_lock(&registry_lock);
    const bt_op_def *d = (i >= 0 && i < registry_count) ? registry[i] : NULL;
    pthread_mutex_unlock(&registry_lock);
    return d;
}

bt_status bt_op_registry_set_cuda(const bt_op_def *builtin, bt_op_fn forward, bt_op_fn backward,
                                  bt_op_fn decode)
{
    BT_TRY(bt_op_registry_init());
    bt_status st = BT_ERR_INTERNAL;
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < registry_count && st != BT_OK; i++) {
        if (registry_builtin[i] != builtin) continue;
        registry[i]->cuda_forward = forward;
        registry[i]->cuda_backward = backward;
        registry[i]->cuda_decode = decode;
        /* a built-in's W is its backward called with no input gradients (op.h), and every
         * built-in CUDA backward skips the gradients it is not given, as the CPU's do */
        if (registry[i]->cpu_backward_weight) registry[i]->cuda_backward_weight = backward;
        st = BT_OK;
    }
    pthread_mutex_unlock(&registry_lock);
    if (st != BT_OK)
        return bt_error(st, "no built-in op '%s' to attach CUDA kernels to",
                        builtin && builtin->name ? builtin->name : "(null)");
    return BT_OK;
}
