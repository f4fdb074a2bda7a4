/* profile/profile_file.c: the profile file, one JSON object (format "baton-profile", version 1;
 * docs/profiling.md shows it). bt_profile_save writes atomically; bt_profile_load checks every
 * field's presence, type and range and rejects unknown keys with a message naming the file and
 * the field ("layers[2].times.cpu.fwd_ms"), so a profile that loads is one the planner can use
 * without further checks. "Range" is a sane one, not merely a representable one: finite is not
 * enough (1e308 ms per layer sums to inf ms in a plan), so times are at most BT_PROFILE_MAX_MS,
 * rates within [BT_PROFILE_MIN_GBPS, BT_PROFILE_MAX_GBPS] and byte counts at most
 * BT_PROFILE_MAX_BYTES: any sum or product the planner forms over 64 stages, 10000 layers and
 * 4096 micro-batches stays finite and far inside 64 bits.
 *
 * Data flow: bt_profile (plan/profile.h) <-> file. Never prints, never opens a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/strutil.h"
#include "io/atomic_file.h"
#include "plan/profile.h"

#define PROFILE_FORMAT "baton-profile"
#define PROFILE_VERSION 1

/* Sets obj[key] = v (stealing v); returns 1 on failure so callers can OR the results. */
static int put(json_t *obj, const char *key, json_t *v)
{
    return !obj || !v || json_object_set_new(obj, key, v) != 0;
}

static int append(json_t *arr, json_t *v)
{
    return !arr || !v || json_array_append_new(arr, v) != 0;
}

/* A measured number, or null when it is not finite (JSON has no NaN or infinity; jansson's
 * json_real refuses them, which failed the whole save as "out of memory"). */
static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *layer_to_json(const bt_profile *p, int l)
{
    const bt_profile_layer *pl = &p->layers[l];
    json_t *o = json_object(), *times = json_object();
    int bad = 0;
    bad |= put(o, "name", json_string(pl->name));
    bad |= put(o, "op", json_string(pl->op));
    if (pl->act) bad |= put(o, "act", json_string(pl->act));
    bad |= put(o, "params", json_integer(pl->params));
    bad |= put(o, "param_bytes", json_integer((json_int_t)pl->param_bytes));
    bad |= put(o, "grad_bytes", json_integer((json_int_t)pl->grad_bytes));
    bad |= put(o, "optimizer_bytes", json_integer((json_int_t)pl->optimizer_bytes));
    bad |= put(o, "activation_bytes_per_sample", json_integer((json_int_t)pl->activation_bytes_per_sample));
    bad |= put(o, "output_bytes_per_sample", json_integer((json_int_t)pl->output_bytes_per_sample));
    bad |= put(o, "cut_bytes_per_sample", json_integer((json_int_t)pl->cut_bytes_per_sample));
    for (int k = 0; k < p->n_kinds; k++) {
        const bt_profile_time *t = bt_profile_time_at(p, l, k);
        json_t *tk = json_object();
        bad |= put(tk, "fwd_ms", number(t->fwd_ms));
        bad |= put(tk, "bwd_ms", number(t->bwd_ms));
        bad |= put(tk, "step_ms", number(t->step_ms));
        bad |= put(tk, "b_ms", number(t->b_ms));
        bad |= put(tk, "w_ms", number(t->w_ms));
        bad |= put(times, p->kinds[k], tk);
    }
    bad |= put(o, "times", times);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *profile_to_json(const bt_profile *p)
{
    json_t *root = json_object(), *devices = json_array(), *measured = json_object();
    json_t *layers = json_array(), *transfers = json_array();
    int bad = 0;
    bad |= put(root, "format", json_string(PROFILE_FORMAT));
    bad |= put(root, "version", json_integer(PROFILE_VERSION));
    bad |= put(root, "model", json_string(p->model));
    for (int d = 0; d < p->n_devices; d++) bad |= append(devices, json_string(p->devices[d]));
    bad |= put(root, "devices", devices);
    bad |= put(root, "batch", json_integer(p->batch));
    bad |= put(root, "microbatches", json_integer(p->microbatches));
    bad |= put(root, "microbatch_size", json_integer(p->microbatch_size));
    bad |= put(root, "dtype", json_string("f32"));
    bad |= put(root, "precision", json_string(bt_dtype_name(p->precision)));
    bad |= put(root, "training", json_boolean(p->training));
    bad |= put(root, "optimizer", json_string(p->optimizer));
    bad |= put(root, "threads", json_integer(p->threads));
    bad |= put(root, "repeats", json_integer(p->repeats));
    bad |= put(root, "warmup", json_integer(p->warmup));
    for (int k = 0; k < p->n_kinds; k++) bad |= put(measured, p->kinds[k], json_string(p->measured_on[k]));
    bad |= put(root, "measured_on", measured);
    for (int l = 0; l < p->n_layers; l++) bad |= append(layers, layer_to_json(p, l));
    bad |= put(root, "layers", layers);
    for (int i = 0; i < p->n_transfers; i++) {
        const bt_profile_transfer *t = &p->transfers[i];
        json_t *o = json_object();
        bad |= put(o, "from", json_string(t->from));
        bad |= put(o, "to", json_string(t->to));
        bad |= put(o, "bytes", json_integer((json_int_t)t->bytes));
        bad |= put(o, "gb_per_s", number(t->gb_per_s));
        bad |= append(transfers, o);
    }
    bad |= put(root, "transfers", transfers);
    bad |= put(root, "handoff_ms", number(p->handoff_ms));
    if (p->n_links > 0) { /* measured under mpirun only */
        json_t *links = json_array();
        for (int i = 0; i < p->n_links; i++) {
            const bt_profile_link *k = &p->links[i];
            json_t *o = json_object();
            bad |= put(o, "from_rank", json_integer(k->from_rank));
            bad |= put(o, "to_rank", json_integer(k->to_rank));
            bad |= put(o, "bytes", json_integer((json_int_t)k->bytes));
            bad |= put(o, "oneway_ms", number(k->oneway_ms));
            bad |= append(links, o);
        }
        bad |= put(root, "links", links);
    }
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

bt_status bt_profile_save(const bt_profile *p, const char *path)
{
    if (!p || !path) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_save: NULL argument");
    json_t *root = profile_to_json(p);
    char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(root);
    if (!text) return bt_error(BT_ERR_NOMEM, "profile: out of memory writing %s", path);
    bt_atomic_file *f = NULL;
    bt_status st = bt_atomic_file_open(path, &f);
    if (st == BT_OK) st = bt_atomic_file_write(f, text, strlen(text));
    if (st == BT_OK) st = bt_atomic_file_write(f, "\n", 1);
    if (st == BT_OK) st = bt_atomic_file_commit(f);
    else bt_atomic_file_abort(f);
    free(text);
    return st;
}

/* ---- loading ---------------------------------------------------------------------------------- */

typedef struct reader {
    const char *file;
} reader;

static const char *field_name(char *buf, size_t size, const char *prefix, const char *key)
{
    if (*prefix) snprintf(buf, size, "%s.%s", prefix, key);
    else snprintf(buf, size, "%s", key);
    return buf;
}

static bt_status bad_field(const reader *r, const char *prefix, const char *key, const char *what)
{
    char f[256];
    return bt_error(BT_ERR_IO, "%s: field '%s': %s", r->file, field_name(f, sizeof f, prefix, key), what);
}

static bt_status member(const reader *r, const json_t *obj, const char *prefix, const char *key,
                        json_t **out)
{
    char f[256];
    *out = json_object_get(obj, key);
    if (!*out)
        return bt_error(BT_ERR_IO, "%s: missing field '%s'", r->file, field_name(f, sizeof f, prefix, key));
    return BT_OK;
}

static bt_status only_keys(const reader *r, json_t *obj, const char *prefix, const char *const *keys)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int known = 0;
        for (const char *const *k = keys; *k; k++) known |= strcmp(*k, key) == 0;
        if (!known) return bad_field(r, prefix, key, "unknown field");
    }
    return BT_OK;
}

static bt_status read_string(const reader *r, const json_t *obj, const char *prefix, const char *key,
                             size_t max_len, const char **out)
{
    json_t *v;
    BT_TRY(member(r, obj, prefix, key, &v));
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= max_len)
        return bad_field(r, prefix, key, "expected a non-empty string");
    *out = json_string_value(v);
    return BT_OK;
}

static bt_status read_int(const reader *r, const json_t *obj, const char *prefix, const char *key,
                          int64_t min, int64_t max, int64_t *out)
{
    json_t *v;
    char what[96];
    BT_TRY(member(r, obj, prefix, key, &v));
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        snprintf(what, sizeof what, "expected an integer from %lld to %lld", (long long)min, (long long)max);
        return bad_field(r, prefix, key, what);
    }
    *out = json_integer_value(v);
    return BT_OK;
}

/* One layer on one device, per micro-batch: 1e9 ms is eleven days. */
#define BT_PROFILE_MAX_MS 1e9
/* A transfer rate: 1 kB/s to 1 PB/s. */
#define BT_PROFILE_MIN_GBPS 1e-6
#define BT_PROFILE_MAX_GBPS 1e6
/* Bytes (and parameter counts) of one layer, or per sample: 1 PiB. */
#define BT_PROFILE_MAX_BYTES (INT64_C(1) << 50)

static bt_status read_bytes(const reader *r, const json_t *obj, const char *prefix, const char *key,
                            uint64_t *out)
{
    int64_t v;
    BT_TRY(read_int(r, obj, prefix, key, 0, BT_PROFILE_MAX_BYTES, &v));
    *out = (uint64_t)v;
    return BT_OK;
}

/* A finite number in [lo, hi]. */
static bt_status read_real(const reader *r, const json_t *obj, const char *prefix, const char *key,
                           double lo, double hi, double *out)
{
    json_t *v;
    char what[96];
    BT_TRY(member(r, obj, prefix, key, &v));
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(x) || x < lo || x > hi) {
        snprintf(what, sizeof what, "expected a number from %g to %g", lo, hi);
        return bad_field(r, prefix, key, what);
    }
    *out = x;
    return BT_OK;
}

static bt_status read_devices(const reader *r, const json_t *root, bt_profile *p)
{
    json_t *arr;
    BT_TRY(member(r, root, "", "devices", &arr));
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > BT_MAX_STAGES)
        return bad_field(r, "", "devices", "expected a list of 1 to 64 devices");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *v = json_array_get(arr, i);
        char key[32], kind[16];
        int index;
        snprintf(key, sizeof key, "devices[%zu]", i);
        if (!json_is_string(v) || json_string_length(v) >= BT_PROFILE_DEVICE_LEN ||
            bt_device_parse(json_string_value(v), kind, sizeof kind, &index) != BT_OK)
            return bad_field(r, "", key, "expected a device like cpu:0");
        snprintf(p->devices[p->n_devices++], BT_PROFILE_DEVICE_LEN, "%s", json_string_value(v));
    }
    return BT_OK;
}

static int listed_device(const bt_profile *p, const char *device)
{
    for (int d = 0; d < p->n_devices; d++)
        if (strcmp(p->devices[d], device) == 0) return 1;
    return 0;
}

static bt_status read_measured_on(const reader *r, const json_t *root, bt_profile *p)
{
    json_t *obj, *v;
    const char *kind;
    BT_TRY(member(r, root, "", "measured_on", &obj));
    if (!json_is_object(obj) || json_object_size(obj) == 0 || json_object_size(obj) > BT_PROFILE_MAX_KINDS)
        return bad_field(r, "", "measured_on", "expected an object {kind: device} with 1 to 4 kinds");
    json_object_foreach(obj, kind, v) {
        char dk[16];
        if (!json_is_string(v) || !listed_device(p, json_string_value(v)))
            return bad_field(r, "measured_on", kind, "expected one of the profile's devices");
        bt_profile_device_kind(json_string_value(v), dk, sizeof dk);
        if (strcmp(dk, kind) != 0) return bad_field(r, "measured_on", kind, "the device is of another kind");
        snprintf(p->kinds[p->n_kinds], sizeof p->kinds[0], "%s", kind);
        snprintf(p->measured_on[p->n_kinds], sizeof p->measured_on[0], "%s", json_string_value(v));
        p->n_kinds++;
    }
    return BT_OK;
}

static bt_status read_times(const reader *r, const json_t *layer, const char *prefix, bt_profile *p, int l)
{
    static const char *const keys[] = {"fwd_ms", "bwd_ms", "step_ms", "b_ms", "w_ms", NULL};
    char tp[96];
    json_t *times;
    BT_TRY(member(r, layer, prefix, "times", &times));
    snprintf(tp, sizeof tp, "%s.times", prefix);
    if (!json_is_object(times)) return bad_field(r, prefix, "times", "expected an object {kind: {...}}");
    const char *kind;
    json_t *v;
    json_object_foreach(times, kind, v) {
        if (bt_profile_kind_index(p, kind) < 0)
            return bad_field(r, tp, kind, "a device kind measured_on does not name");
    }
    for (int k = 0; k < p->n_kinds; k++) {
        char kp[128];
        json_t *tk;
        bt_profile_time *t = &p->times[(size_t)l * p->n_kinds + k];
        BT_TRY(member(r, times, tp, p->kinds[k], &tk));
        snprintf(kp, sizeof kp, "%s.%s", tp, p->kinds[k]);
        if (!json_is_object(tk)) return bad_field(r, tp, p->kinds[k], "expected an object {fwd_ms, bwd_ms, step_ms}");
        BT_TRY(only_keys(r, tk, kp, keys));
        BT_TRY(read_real(r, tk, kp, "fwd_ms", 0, BT_PROFILE_MAX_MS, &t->fwd_ms));
        BT_TRY(read_real(r, tk, kp, "bwd_ms", 0, BT_PROFILE_MAX_MS, &t->bwd_ms));
        BT_TRY(read_real(r, tk, kp, "step_ms", 0, BT_PROFILE_MAX_MS, &t->step_ms));
        /* the split backward: optional (older files), as one fused B then */
        t->b_ms = t->bwd_ms;
        t->w_ms = 0;
        if (json_object_get(tk, "b_ms") || json_object_get(tk, "w_ms")) {
            BT_TRY(read_real(r, tk, kp, "b_ms", 0, BT_PROFILE_MAX_MS, &t->b_ms));
            BT_TRY(read_real(r, tk, kp, "w_ms", 0, BT_PROFILE_MAX_MS, &t->w_ms));
        }
    }
    return BT_OK;
}

static bt_status read_layer(const reader *r, json_t *o, int l, bt_profile *p)
{
    static const char *const keys[] = {"name", "op", "act", "params", "param_bytes", "grad_bytes",
                                       "optimizer_bytes", "activation_bytes_per_sample",
                                       "output_bytes_per_sample", "cut_bytes_per_sample", "times", NULL};
    char prefix[48];
    const char *name, *op, *act = NULL;
    bt_profile_layer *pl = &p->layers[l];
    snprintf(prefix, sizeof prefix, "layers[%d]", l);
    if (!json_is_object(o)) return bt_error(BT_ERR_IO, "%s: field '%s': expected an object", r->file, prefix);
    BT_TRY(only_keys(r, o, prefix, keys));
    BT_TRY(read_string(r, o, prefix, "name", 256, &name));
    BT_TRY(read_string(r, o, prefix, "op", 256, &op));
    if (json_object_get(o, "act")) BT_TRY(read_string(r, o, prefix, "act", 64, &act));
    for (int k = 0; k < l; k++)
        if (strcmp(p->layers[k].name, name) == 0)
            return bad_field(r, prefix, "name", "repeats an earlier layer's name");
    BT_TRY(read_int(r, o, prefix, "params", 0, BT_PROFILE_MAX_BYTES, &pl->params));
    BT_TRY(read_bytes(r, o, prefix, "param_bytes", &pl->param_bytes));
    BT_TRY(read_bytes(r, o, prefix, "grad_bytes", &pl->grad_bytes));
    BT_TRY(read_bytes(r, o, prefix, "optimizer_bytes", &pl->optimizer_bytes));
    BT_TRY(read_bytes(r, o, prefix, "activation_bytes_per_sample", &pl->activation_bytes_per_sample));
    BT_TRY(read_bytes(r, o, prefix, "output_bytes_per_sample", &pl->output_bytes_per_sample));
    BT_TRY(read_bytes(r, o, prefix, "cut_bytes_per_sample", &pl->cut_bytes_per_sample));
    BT_TRY(read_times(r, o, prefix, p, l));
    pl->name = bt_strdup(name);
    pl->op = bt_strdup(op);
    pl->act = act ? bt_strdup(act) : NULL;
    if (!pl->name || !pl->op || (act && !pl->act)) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    return BT_OK;
}

static bt_status read_layers(const reader *r, const json_t *root, bt_profile *p)
{
    json_t *arr;
    BT_TRY(member(r, root, "", "layers", &arr));
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 1000000)
        return bad_field(r, "", "layers", "expected a non-empty list of layers");
    size_t n = json_array_size(arr);
    p->layers = calloc(n, sizeof *p->layers);
    p->times = calloc(n * (size_t)p->n_kinds, sizeof *p->times);
    if (!p->layers || !p->times) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (size_t l = 0; l < n; l++) {
        p->n_layers = (int)l + 1; /* so destroy frees what read_layer copied */
        BT_TRY(read_layer(r, json_array_get(arr, l), (int)l, p));
    }
    return BT_OK;
}

static bt_status read_transfers(const reader *r, const json_t *root, bt_profile *p)
{
    static const char *const keys[] = {"from", "to", "bytes", "gb_per_s", NULL};
    json_t *arr;
    BT_TRY(member(r, root, "", "transfers", &arr));
    if (!json_is_array(arr) || json_array_size(arr) > (size_t)(BT_MAX_STAGES * BT_MAX_STAGES))
        return bad_field(r, "", "transfers", "expected a list of {from, to, bytes, gb_per_s}");
    size_t n = json_array_size(arr);
    p->transfers = calloc(n + 1, sizeof *p->transfers);
    if (!p->transfers) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        bt_profile_transfer *t = &p->transfers[i];
        const char *from, *to;
        char prefix[48];
        snprintf(prefix, sizeof prefix, "transfers[%zu]", i);
        if (!json_is_object(o)) return bt_error(BT_ERR_IO, "%s: field '%s': expected an object", r->file, prefix);
        BT_TRY(only_keys(r, o, prefix, keys));
        BT_TRY(read_string(r, o, prefix, "from", BT_PROFILE_DEVICE_LEN, &from));
        BT_TRY(read_string(r, o, prefix, "to", BT_PROFILE_DEVICE_LEN, &to));
        if (!listed_device(p, from)) return bad_field(r, prefix, "from", "not one of the profile's devices");
        if (!listed_device(p, to)) return bad_field(r, prefix, "to", "not one of the profile's devices");
        snprintf(t->from, sizeof t->from, "%s", from);
        snprintf(t->to, sizeof t->to, "%s", to);
        BT_TRY(read_bytes(r, o, prefix, "bytes", &t->bytes));
        BT_TRY(read_real(r, o, prefix, "gb_per_s", BT_PROFILE_MIN_GBPS, BT_PROFILE_MAX_GBPS, &t->gb_per_s));
        p->n_transfers++;
    }
    return BT_OK;
}

/* "links" (optional: profiles measured in one process have none). */
static bt_status read_links(const reader *r, const json_t *root, bt_profile *p)
{
    static const char *const keys[] = {"from_rank", "to_rank", "bytes", "oneway_ms", NULL};
    json_t *arr = json_object_get(root, "links");
    if (!arr) return BT_OK;
    if (!json_is_array(arr) || json_array_size(arr) > BT_PROFILE_MAX_LINKS)
        return bad_field(r, "", "links", "expected a list of {from_rank, to_rank, bytes, oneway_ms}");
    size_t n = json_array_size(arr);
    p->links = calloc(n + 1, sizeof *p->links);
    if (!p->links) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        bt_profile_link *k = &p->links[i];
        char prefix[48];
        int64_t v;
        snprintf(prefix, sizeof prefix, "links[%zu]", i);
        if (!json_is_object(o)) return bt_error(BT_ERR_IO, "%s: field '%s': expected an object", r->file, prefix);
        BT_TRY(only_keys(r, o, prefix, keys));
        BT_TRY(read_int(r, o, prefix, "from_rank", 0, INT32_MAX, &v));
        k->from_rank = (int)v;
        BT_TRY(read_int(r, o, prefix, "to_rank", 0, INT32_MAX, &v));
        k->to_rank = (int)v;
        if (k->from_rank == k->to_rank) return bad_field(r, prefix, "to_rank", "must differ from from_rank");
        BT_TRY(read_bytes(r, o, prefix, "bytes", &k->bytes));
        BT_TRY(read_real(r, o, prefix, "oneway_ms", 1e-9, 1e9, &k->oneway_ms));
        p->n_links++;
    }
    return BT_OK;
}

static bt_status read_header(const reader *r, const json_t *root, bt_profile *p)
{
    const char *s;
    int64_t v;
    json_t *b;
    BT_TRY(read_string(r, root, "", "format", 64, &s));
    if (strcmp(s, PROFILE_FORMAT) != 0) return bad_field(r, "", "format", "expected \"" PROFILE_FORMAT "\"");
    BT_TRY(read_int(r, root, "", "version", PROFILE_VERSION, PROFILE_VERSION, &v));
    BT_TRY(read_string(r, root, "", "model", 256, &s));
    if (!(p->model = bt_strdup(s))) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    BT_TRY(read_int(r, root, "", "batch", 1, INT32_MAX, &p->batch));
    BT_TRY(read_int(r, root, "", "microbatches", 1, 4096, &v));
    p->microbatches = (int)v;
    BT_TRY(read_int(r, root, "", "microbatch_size", 1, INT32_MAX, &p->microbatch_size));
    if (p->batch % p->microbatches != 0 || p->batch / p->microbatches != p->microbatch_size)
        return bad_field(r, "", "microbatch_size", "must equal batch / microbatches");
    BT_TRY(read_string(r, root, "", "dtype", 8, &s));
    if (strcmp(s, "f32") != 0) return bad_field(r, "", "dtype", "expected \"f32\"");
    p->precision = BT_F32; /* files written before profiles recorded it were measured in f32 */
    if (json_object_get(root, "precision")) {
        BT_TRY(read_string(r, root, "", "precision", 32, &s));
        if (strcmp(s, "f32") == 0) p->precision = BT_F32;
        else if (strcmp(s, "bf16") == 0) p->precision = BT_BF16;
        else if (strcmp(s, "f16") == 0) p->precision = BT_F16;
        else return bad_field(r, "", "precision", "expected \"f32\", \"bf16\" or \"f16\"");
    }
    BT_TRY(member(r, root, "", "training", &b));
    if (!json_is_boolean(b)) return bad_field(r, "", "training", "expected true or false");
    p->training = json_is_true(b);
    BT_TRY(read_string(r, root, "", "optimizer", sizeof p->optimizer, &s));
    if (strcmp(s, "adamw") && strcmp(s, "sgd") && strcmp(s, "sgd-momentum") && strcmp(s, "none"))
        return bad_field(r, "", "optimizer", "expected adamw, sgd, sgd-momentum or none");
    snprintf(p->optimizer, sizeof p->optimizer, "%s", s);
    BT_TRY(read_int(r, root, "", "threads", 1, 4096, &v));
    p->threads = (int)v;
    BT_TRY(read_int(r, root, "", "repeats", 1, 1000000, &v));
    p->repeats = (int)v;
    BT_TRY(read_int(r, root, "", "warmup", 0, 1000000, &v));
    p->warmup = (int)v;
    return BT_OK;
}

bt_status bt_profile_load(const char *path, bt_profile **out)
{
    static const char *const keys[] = {"format", "version", "model", "devices", "batch",
                                       "microbatches", "microbatch_size", "dtype", "precision", "training",
                                       "optimizer", "threads", "repeats", "warmup", "measured_on",
                                       "layers", "transfers", "links", "handoff_ms", NULL};
    bt_status st = BT_OK;
    if (!path || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_load: NULL argument");
    reader r = {path};
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (err.line < 1) return bt_error(BT_ERR_IO, "%s: %s", path, err.text);
        return bt_error(BT_ERR_IO, "%s:%d:%d: %s", path, err.line, err.column, err.text);
    }
    bt_profile *p = calloc(1, sizeof *p);
    if (!p) {
        json_decref(root);
        return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    }
    if (!json_is_object(root)) {
        st = bt_error(BT_ERR_IO, "%s: expected a JSON object at the top", path);
        goto fail;
    }
    BT_TRY_GOTO(st, only_keys(&r, root, "", keys), fail);
    BT_TRY_GOTO(st, read_header(&r, root, p), fail);
    BT_TRY_GOTO(st, read_devices(&r, root, p), fail);
    BT_TRY_GOTO(st, read_measured_on(&r, root, p), fail);
    BT_TRY_GOTO(st, read_layers(&r, root, p), fail);
    BT_TRY_GOTO(st, read_transfers(&r, root, p), fail);
    BT_TRY_GOTO(st, read_links(&r, root, p), fail);
    if (json_object_get(root, "handoff_ms")) /* older files: 0 */
        BT_TRY_GOTO(st, read_real(&r, root, "", "handoff_ms", 0, BT_PROFILE_MAX_MS, &p->handoff_ms), fail);
    json_decref(root);
    *out = p;
    return BT_OK;
fail:
    json_decref(root);
    bt_profile_destroy(p);
    return st;
}
