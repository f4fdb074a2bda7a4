/* tok/chat_template.c: the Jinja subset of Hugging Face chat templates (chat_template.h).
 * Compiling normalizes newlines as jinja2 does (\r\n and \r become \n, one trailing newline is
 * dropped), splits the source into text and tags with trim_blocks and lstrip_blocks and the -/+
 * markers applied to the text, and parses the tags into a tree of nodes (statements and
 * expressions, each with its source offset for messages). Anything it does not know is refused
 * there. Rendering walks the tree with a stack of frames: the template's own frame, then one per
 * for-loop iteration (jinja2's scoping: a `set` inside a loop body lives for that iteration only),
 * and the caller's JSON object below them all. Values follow Python's semantics: truthiness,
 * `==`, `+`, `%`, indexing and slicing by code point, str() of none and booleans; lists and dicts
 * are jansson values shared by reference. jinja2's default Undefined: a missing name or key is
 * empty and false, an attribute or item of it, or arithmetic on it, is an error. Markup (what
 * `tojson` and `safe` return) escapes the plain string `+` adds to it, as markupsafe does. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/chat_template.h"
#include "tok/tok_internal.h"

/* ---- the tree ------------------------------------------------------------------------------ */

enum {
    /* statements */
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SET_ATTR,
    /* expressions */
    E_STR, E_INT, E_BOOL, E_NONE, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_BIN, E_NOT, E_NEG, E_AND, E_OR,
    E_COND, E_CMP, E_FILTER, E_TEST, E_FUNC, E_METHOD, E_LIST, E_DICT
};

enum { OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN };

typedef struct node node;
struct node {
    int kind, op;
    size_t at;       /* offset in the (normalized) source */
    char *s;         /* text, name, string literal, filter/test/function/method name */
    char *s2;        /* N_FOR: the second target of `for k, v in ...`, or NULL */
    size_t n;        /* bytes of s */
    int64_t i;       /* integer literal, boolean; for a test: negated */
    node *a, *b, *c; /* operands: object, index, ...; for N_IF: cond, body, else; N_FOR: iter, body, else */
    node **kids;     /* arguments, list items, dict keys/values (pairs), comparison operands */
    int *ops;        /* comparison operators */
    size_t nkids;
    char **kwnames;  /* keyword argument names, parallel to kids (NULL for positional) */
    node *next;      /* the next statement of a body */
};

struct bt_chat_template {
    char *src;
    size_t len;
    char *name;
    node **all;
    size_t nall, capall;
    node *body;
};

/* ---- compile-time state -------------------------------------------------------------------- */

enum { T_END, T_NAME, T_STR, T_INT, T_OP, T_EOF };

typedef struct tok {
    int kind;
    size_t at, n; /* source span */
    char op[3];
    char *str; /* decoded string literal (T_STR) */
    size_t strn;
    int64_t ival;
    int endmod; /* T_END: '-', '+' or 0 */
} tok;

typedef struct parser {
    bt_chat_template *t;
    const char *s;
    size_t len, pos;
    int in_block; /* the tag being lexed is {% %} (else {{ }}) */
    int depth;    /* bracket balance */
    tok cur;
    int have;
    int line_starting;
    int nest; /* recursion depth of the parser */
} parser;

#define MAX_NEST 200

static void line_col(const char *s, size_t at, int *line, int *col)
{
    int l = 1, c = 1;
    for (size_t i = 0; i < at; i++) {
        if (s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static bt_status errat(bt_status st, const bt_chat_template *t, size_t at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static bt_status errat(bt_status st, const bt_chat_template *t, size_t at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(t->src, at, &line, &col);
    return bt_error(st, "%s:%d:%d: %s", t->name, line, col, msg);
}

static node *new_node(bt_chat_template *t, int kind, size_t at)
{
    if (t->nall == t->capall) {
        size_t cap = t->capall ? 2 * t->capall : 64;
        node **all = realloc(t->all, cap * sizeof *all);
        if (!all) return NULL;
        t->all = all;
        t->capall = cap;
    }
    node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    n->at = at;
    t->all[t->nall++] = n;
    return n;
}

static bt_status add_kid(node *n, node *kid, int op, char *kwname)
{
    node **kids = realloc(n->kids, (n->nkids + 1) * sizeof *kids);
    if (!kids) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");
    n->kids = kids;
    int *ops = realloc(n->ops, (n->nkids + 1) * sizeof *ops);
    if (!ops) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");
    n->ops = ops;
    char **kw = realloc(n->kwnames, (n->nkids + 1) * sizeof *kw);
    if (!kw) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");
    n->kwnames = kw;
    n->kids[n->nkids] = kid;
    n->ops[n->nkids] = op;
    n->kwnames[n->nkids] = kwname;
    n->nkids++;
    return BT_OK;
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Python's str.isspace() for one code point. */
static int py_space(uint32_t cp)
{
    return tok_is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

/* Length in bytes of the whitespace run at s[0..n) (forward). */
static size_t space_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = tok_utf8_decode(s + i, &cp);
        if (i + k > n || !py_space(cp)) break;
        i += k;
    }
    return i;
}

/* Bytes of s[0..n) left after stripping trailing whitespace. */
static size_t rstrip_len(const char *s, size_t n)
{
    while (n > 0) {
        size_t b = n - 1;
        while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        uint32_t cp;
        tok_utf8_decode(s + b, &cp);
        if (!py_space(cp)) break;
        n = b;
    }
    return n;
}

/* ---- the expression lexer ------------------------------------------------------------------ */

static int is_name_start(unsigned char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_name_char(unsigned char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

static bt_status lex_string(parser *p, tok *k)
{
    const char *s = p->s;
    char q = s[p->pos];
    size_t i = p->pos + 1;
    tok_buf b = {0};
    bt_status st = BT_OK;
    while (i < p->len && s[i] != q) {
        char c = s[i];
        if (c != '\\' || i + 1 >= p->len) {
            BT_TRY_GOTO(st, tok_buf_put(&b, &c, 1), fail);
            i++;
            continue;
        }
        char e = s[i + 1];
        const char *simple = NULL;
        switch (e) {
        case 'n': simple = "\n"; break;
        case 't': simple = "\t"; break;
        case 'r': simple = "\r"; break;
        case '\\': simple = "\\"; break;
        case '\'': simple = "'"; break;
        case '"': simple = "\""; break;
        case 'a': simple = "\a"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'v': simple = "\v"; break;
        case '\n': simple = ""; break;
        default: break;
        }
        if (simple) {
            BT_TRY_GOTO(st, tok_buf_put(&b, simple, strlen(simple)), fail);
            i += 2;
            continue;
        }
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            for (int d = 0; d < digits; d++) {
                char h = i + 2 + (size_t)d < p->len ? s[i + 2 + d] : 0;
                int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (v < 0) {
                    st = errat(BT_ERR_MODEL, p->t, i, "malformed \\%c escape in a string literal", e);
                    goto fail;
                }
                cp = cp * 16 + (uint32_t)v;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                st = errat(BT_ERR_MODEL, p->t, i, "escape \\%c of a surrogate or beyond U+10FFFF is not supported", e);
                goto fail;
            }
            char u[4];
            BT_TRY_GOTO(st, tok_buf_put(&b, u, tok_utf8_encode(cp, u)), fail);
            i += 2 + (size_t)digits;
            continue;
        }
        if ((e >= '0' && e <= '7') || e == 'N') {
            st = errat(BT_ERR_MODEL, p->t, i, "escape \\%c in a string literal is not supported", e);
            goto fail;
        }
        /* Python keeps an unknown escape as it is */
        BT_TRY_GOTO(st, tok_buf_put(&b, s + i, 2), fail);
        i += 2;
    }
    if (i >= p->len) {
        st = errat(BT_ERR_MODEL, p->t, p->pos, "unterminated string literal");
        goto fail;
    }
    BT_TRY_GOTO(st, tok_buf_put(&b, "", 1), fail);
    k->kind = T_STR;
    k->str = b.s;
    k->strn = b.n - 1;
    p->pos = i + 1;
    return BT_OK;
fail:
    free(b.s);
    return st;
}

/* Reads the next token at p->pos into p->cur. */
static bt_status lex(parser *p)
{
    const char *s = p->s;
    tok *k = &p->cur;
    memset(k, 0, sizeof *k);
    for (;;) {
        size_t sp = space_prefix(s + p->pos, p->len - p->pos);
        if (!sp) break;
        p->pos += sp;
    }
    k->at = p->pos;
    if (p->pos >= p->len) {
        k->kind = T_EOF;
        return BT_OK;
    }
    const char *c = s + p->pos;
    size_t left = p->len - p->pos;
    if (p->depth == 0) {
        const char *end = p->in_block ? "%}" : "}}";
        if (left >= 3 && (c[0] == '-' || (p->in_block && c[0] == '+')) && memcmp(c + 1, end, 2) == 0) {
            k->kind = T_END;
            k->endmod = c[0];
            p->pos += 3;
            return BT_OK;
        }
        if (left >= 2 && memcmp(c, end, 2) == 0) {
            k->kind = T_END;
            p->pos += 2;
            return BT_OK;
        }
    }
    if (is_name_start((unsigned char)c[0])) {
        size_t n = 1;
        while (n < left && is_name_char((unsigned char)c[n])) n++;
        k->kind = T_NAME;
        k->n = n;
        p->pos += n;
        return BT_OK;
    }
    if (c[0] >= '0' && c[0] <= '9') {
        size_t n = 0;
        int64_t v = 0;
        while (n < left && ((c[n] >= '0' && c[n] <= '9') || c[n] == '_')) {
            if (c[n] != '_' && (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c[n] - '0', &v)))
                return errat(BT_ERR_MODEL, p->t, p->pos, "integer literal out of range");
            n++;
        }
        if (n < left && (c[n] == '.' || c[n] == 'e' || c[n] == 'E') && n + 1 < left && c[n + 1] >= '0' && c[n + 1] <= '9')
            return errat(BT_ERR_MODEL, p->t, p->pos, "float literals are not supported");
        k->kind = T_INT;
        k->ival = v;
        k->n = n;
        p->pos += n;
        return BT_OK;
    }
    if (c[0] == '\'' || c[0] == '"') return lex_string(p, k);
    static const char *const ops2[] = {"==", "!=", "<=", ">=", "//", "**"};
    for (size_t i = 0; i < sizeof ops2 / sizeof *ops2; i++)
        if (left >= 2 && memcmp(c, ops2[i], 2) == 0) {
            k->kind = T_OP;
            memcpy(k->op, c, 2);
            p->pos += 2;
            return BT_OK;
        }
    if (strchr("+-*/%~<>=.,:|()[]{}", c[0])) {
        if (c[0] == '(' || c[0] == '[' || c[0] == '{') p->depth++;
        if (c[0] == ')' || c[0] == ']' || c[0] == '}') {
            if (p->depth == 0) return errat(BT_ERR_MODEL, p->t, p->pos, "unexpected '%c'", c[0]);
            p->depth--;
        }
        k->kind = T_OP;
        k->op[0] = c[0];
        p->pos++;
        return BT_OK;
    }
    return errat(BT_ERR_MODEL, p->t, p->pos, "unexpected character '%c'", c[0]);
}

static bt_status next(parser *p)
{
    free(p->cur.str);
    p->cur.str = NULL;
    return lex(p);
}

static int is_op(const parser *p, const char *op) { return p->cur.kind == T_OP && strcmp(p->cur.op, op) == 0; }
static int is_word(const parser *p, const char *w)
{
    return p->cur.kind == T_NAME && p->cur.n == strlen(w) && memcmp(p->s + p->cur.at, w, p->cur.n) == 0;
}

static bt_status expect_op(parser *p, const char *op)
{
    if (!is_op(p, op)) return errat(BT_ERR_MODEL, p->t, p->cur.at, "expected '%s'", op);
    return next(p);
}

static bt_status take_name(parser *p, char **out)
{
    if (p->cur.kind != T_NAME) return errat(BT_ERR_MODEL, p->t, p->cur.at, "expected a name");
    *out = dupn(p->s + p->cur.at, p->cur.n);
    if (!*out) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");
    return next(p);
}

/* ---- the expression parser (jinja2's precedence) ------------------------------------------- */

static bt_status parse_expr(parser *p, node **out);
static bt_status parse_cond(parser *p, node **out);
static bt_status parse_unary(parser *p, int with_filter, node **out);
static bt_status parse_unary_nested(parser *p, int with_filter, node **out);

static const char *const known_filters[] = {"trim", "length", "count", "upper", "lower", "tojson", "string",
                                            "default", "d", "first", "last", "join", "safe", "items", "list",
                                            "select", "reject", "selectattr", "rejectattr", NULL};
static const char *const known_tests[] = {"defined", "undefined", "none", "string", "number", "integer", "boolean",
                                          "mapping", "sequence", "iterable", "true", "false", "even", "odd",
                                          "equalto", "eq", "==", "ne", "!=", "sameas", NULL};
/* the tests that take an argument */
static const char *const arg_tests[] = {"equalto", "eq", "==", "ne", "!=", "sameas", NULL};
static const char *const known_methods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "upper",
                                            "lower", "split", "replace", "get", "items", NULL};
static const char *const known_funcs[] = {"raise_exception", "range", "namespace", NULL};

static int in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0) return 1;
    return 0;
}

static node *mk(parser *p, int kind, size_t at) { return new_node(p->t, kind, at); }
#define MK(var, kind, at)                                                                      \
    do {                                                                                       \
        (var) = mk(p, (kind), (at));                                                           \
        if (!(var)) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");            \
    } while (0)

/* Arguments of a call after its '(' up to and with ')'. */
static bt_status parse_args(parser *p, node *call, int allow_kw)
{
    while (!is_op(p, ")")) {
        char *kw = NULL;
        if (p->cur.kind == T_NAME) {
            /* a keyword argument is NAME '=' (not '==') */
            size_t save_pos = p->pos;
            int save_depth = p->depth;
            tok save = p->cur;
            size_t k = p->pos;
            while (k < p->len && (p->s[k] == ' ' || p->s[k] == '\t' || p->s[k] == '\n')) k++;
            if (k < p->len && p->s[k] == '=' && (k + 1 >= p->len || p->s[k + 1] != '=')) {
                if (!allow_kw) return errat(BT_ERR_MODEL, p->t, p->cur.at, "keyword arguments are not supported here");
                BT_TRY(take_name(p, &kw));
                bt_status st = expect_op(p, "=");
                if (st != BT_OK) {
                    free(kw);
                    return st;
                }
            } else {
                p->pos = save_pos;
                p->depth = save_depth;
                p->cur = save;
            }
        }
        node *arg;
        bt_status st = parse_expr(p, &arg);
        if (st == BT_OK) st = add_kid(call, arg, 0, kw);
        if (st != BT_OK) {
            free(kw);
            return st;
        }
        if (!is_op(p, ",")) break;
        BT_TRY(next(p));
    }
    return expect_op(p, ")");
}

static bt_status parse_primary(parser *p, node **out)
{
    node *n;
    size_t at = p->cur.at;
    if (p->cur.kind == T_NAME) {
        static const char *const t_words[] = {"true", "True", NULL}, *const f_words[] = {"false", "False", NULL},
                                 *const n_words[] = {"none", "None", NULL};
        char w[8] = "";
        if (p->cur.n < sizeof w) memcpy(w, p->s + at, p->cur.n), w[p->cur.n] = '\0';
        if (in_list(t_words, w) || in_list(f_words, w)) {
            MK(n, E_BOOL, at);
            n->i = in_list(t_words, w);
            *out = n;
            return next(p);
        }
        if (in_list(n_words, w)) {
            MK(n, E_NONE, at);
            *out = n;
            return next(p);
        }
        MK(n, E_NAME, at);
        n->n = p->cur.n;
        *out = n;
        return take_name(p, &n->s);
    }
    if (p->cur.kind == T_STR) {
        MK(n, E_STR, at);
        tok_buf b = {0};
        bt_status st = BT_OK;
        while (p->cur.kind == T_STR) { /* adjacent literals are one string */
            BT_TRY_GOTO(st, tok_buf_put(&b, p->cur.str, p->cur.strn), fail);
            BT_TRY_GOTO(st, next(p), fail);
        }
        BT_TRY_GOTO(st, tok_buf_put(&b, "", 1), fail);
        n->s = b.s;
        n->n = b.n - 1;
        *out = n;
        return BT_OK;
    fail:
        free(b.s);
        return st;
    }
    if (p->cur.kind == T_INT) {
        MK(n, E_INT, at);
        n->i = p->cur.ival;
        *out = n;
        return next(p);
    }
    if (is_op(p, "(")) {
        BT_TRY(next(p));
        BT_TRY(parse_expr(p, out));
        if (is_op(p, ",")) return errat(BT_ERR_MODEL, p->t, p->cur.at, "tuples are not supported");
        return expect_op(p, ")");
    }
    if (is_op(p, "[")) {
        MK(n, E_LIST, at);
        BT_TRY(next(p));
        while (!is_op(p, "]")) {
            node *item;
            BT_TRY(parse_expr(p, &item));
            BT_TRY(add_kid(n, item, 0, NULL));
            if (!is_op(p, ",")) break;
            BT_TRY(next(p));
        }
        *out = n;
        return expect_op(p, "]");
    }
    if (is_op(p, "{")) {
        MK(n, E_DICT, at);
        BT_TRY(next(p));
        while (!is_op(p, "}")) {
            node *key, *val;
            BT_TRY(parse_expr(p, &key));
            BT_TRY(expect_op(p, ":"));
            BT_TRY(parse_expr(p, &val));
            BT_TRY(add_kid(n, key, 0, NULL));
            BT_TRY(add_kid(n, val, 0, NULL));
            if (!is_op(p, ",")) break;
            BT_TRY(next(p));
        }
        *out = n;
        return expect_op(p, "}");
    }
    if (p->cur.kind == T_END || p->cur.kind == T_EOF) return errat(BT_ERR_MODEL, p->t, at, "expected an expression");
    return errat(BT_ERR_MODEL, p->t, at, "unexpected '%.*s'", (int)(p->cur.kind == T_OP ? strlen(p->cur.op) : p->cur.n),
                 p->cur.kind == T_OP ? p->cur.op : p->s + at);
}

static bt_status parse_subscript(parser *p, node *obj, node **out)
{
    size_t at = p->cur.at;
    BT_TRY(next(p)); /* '[' */
    node *parts[3] = {NULL, NULL, NULL};
    int colons = 0;
    for (;;) {
        if (is_op(p, ":")) {
            if (++colons > 2) return errat(BT_ERR_MODEL, p->t, p->cur.at, "unexpected ':'");
            BT_TRY(next(p));
            continue;
        }
        if (is_op(p, "]")) break;
        if (parts[colons]) return errat(BT_ERR_MODEL, p->t, p->cur.at, "expected ']'");
        BT_TRY(parse_expr(p, &parts[colons]));
        if (is_op(p, ",")) return errat(BT_ERR_MODEL, p->t, p->cur.at, "tuple subscripts are not supported");
    }
    BT_TRY(next(p));
    node *n;
    if (colons == 0) {
        if (!parts[0]) return errat(BT_ERR_MODEL, p->t, at, "empty subscript");
        MK(n, E_ITEM, at);
        n->a = obj;
        n->b = parts[0];
    } else {
        MK(n, E_SLICE, at);
        n->a = obj;
        BT_TRY(add_kid(n, parts[0], 0, NULL));
        BT_TRY(add_kid(n, parts[1], 0, NULL));
        BT_TRY(add_kid(n, parts[2], 0, NULL));
    }
    *out = n;
    return BT_OK;
}

static bt_status parse_call(parser *p, node *callee, node **out)
{
    node *n;
    size_t at = p->cur.at;
    if (callee->kind == E_NAME) {
        if (!in_list(known_funcs, callee->s))
            return errat(BT_ERR_MODEL, p->t, callee->at, "function '%s' is not supported", callee->s);
        MK(n, E_FUNC, callee->at);
        n->s = callee->s;
        callee->s = NULL;
    } else if (callee->kind == E_ATTR) {
        if (!in_list(known_methods, callee->s))
            return errat(BT_ERR_MODEL, p->t, callee->at, "method '%s' is not supported", callee->s);
        MK(n, E_METHOD, callee->at);
        n->s = callee->s;
        callee->s = NULL;
        n->a = callee->a;
    } else {
        return errat(BT_ERR_MODEL, p->t, at, "calling this expression is not supported");
    }
    BT_TRY(next(p)); /* '(' */
    BT_TRY(parse_args(p, n, n->kind == E_FUNC && strcmp(n->s, "namespace") == 0));
    *out = n;
    return BT_OK;
}

static bt_status parse_postfix(parser *p, node **io)
{
    for (;;) {
        if (is_op(p, ".")) {
            BT_TRY(next(p));
            node *n;
            MK(n, E_ATTR, p->cur.at);
            n->a = *io;
            if (p->cur.kind == T_INT) {
                return errat(BT_ERR_MODEL, p->t, p->cur.at, "numeric attributes (x.0) are not supported");
            }
            BT_TRY(take_name(p, &n->s));
            *io = n;
        } else if (is_op(p, "[")) {
            BT_TRY(parse_subscript(p, *io, io));
        } else if (is_op(p, "(")) {
            BT_TRY(parse_call(p, *io, io));
        } else {
            return BT_OK;
        }
    }
}

/* select/reject(test[, arg]) and selectattr/rejectattr(attr[, test[, arg]]): the test must be a
 * string literal naming a test this evaluator has, with its argument when it takes one. */
static bt_status check_select(parser *p, const node *n)
{
    int attr = strcmp(n->s, "selectattr") == 0 || strcmp(n->s, "rejectattr") == 0;
    if (!attr && strcmp(n->s, "select") != 0 && strcmp(n->s, "reject") != 0) return BT_OK;
    size_t ti = attr ? 1 : 0;
    if (attr && (n->nkids < 1 || n->kids[0]->kind != E_STR || strchr(n->kids[0]->s, '.')))
        return errat(BT_ERR_MODEL, p->t, n->at, "'%s' needs an attribute name (a string literal without dots)", n->s);
    if (n->nkids <= ti) return BT_OK;
    const node *tn = n->kids[ti];
    if (tn->kind != E_STR) return errat(BT_ERR_MODEL, p->t, tn->at, "'%s' needs the test's name as a string literal", n->s);
    if (!in_list(known_tests, tn->s)) return errat(BT_ERR_MODEL, p->t, tn->at, "test '%s' is not supported", tn->s);
    size_t want = ti + 1 + (size_t)in_list(arg_tests, tn->s);
    if (n->nkids != want) return errat(BT_ERR_MODEL, p->t, n->at, "'%s' with test '%s' takes %zu arguments", n->s, tn->s, want);
    return BT_OK;
}

/* Filters and tests after a unary expression: `x|f(args)`, `x is [not] t(args)`. */
static bt_status parse_filter_expr(parser *p, node **io)
{
    for (;;) {
        if (is_op(p, "|")) {
            BT_TRY(next(p));
            node *n;
            MK(n, E_FILTER, p->cur.at);
            BT_TRY(take_name(p, &n->s));
            if (!in_list(known_filters, n->s)) return errat(BT_ERR_MODEL, p->t, n->at, "filter '%s' is not supported", n->s);
            if (is_op(p, ".")) return errat(BT_ERR_MODEL, p->t, n->at, "dotted filter names are not supported");
            n->a = *io;
            if (is_op(p, "(")) {
                BT_TRY(next(p));
                BT_TRY(parse_args(p, n, strcmp(n->s, "tojson") == 0));
            }
            BT_TRY(check_select(p, n));
            *io = n;
        } else if (is_word(p, "is")) {
            BT_TRY(next(p));
            node *n;
            MK(n, E_TEST, p->cur.at);
            if (is_word(p, "not")) {
                n->i = 1;
                BT_TRY(next(p));
            }
            n->at = p->cur.at;
            BT_TRY(take_name(p, &n->s));
            if (!in_list(known_tests, n->s)) return errat(BT_ERR_MODEL, p->t, n->at, "test '%s' is not supported", n->s);
            n->a = *io;
            int has_arg = is_op(p, "(") || p->cur.kind == T_STR || p->cur.kind == T_INT ||
                          (p->cur.kind == T_NAME && !is_word(p, "else") && !is_word(p, "or") && !is_word(p, "and")) ||
                          is_op(p, "[") || is_op(p, "{");
            int takes_arg = in_list(arg_tests, n->s);
            if (has_arg != takes_arg)
                return errat(BT_ERR_MODEL, p->t, p->cur.at, takes_arg ? "test '%s' needs one argument" : "arguments to test '%s' are not supported", n->s);
            if (takes_arg && is_op(p, "(")) {
                BT_TRY(next(p));
                BT_TRY(parse_args(p, n, 0));
                if (n->nkids != 1) return errat(BT_ERR_MODEL, p->t, n->at, "test '%s' needs one argument", n->s);
            } else if (takes_arg) {
                node *arg;
                BT_TRY(parse_primary(p, &arg));
                BT_TRY(parse_postfix(p, &arg));
                BT_TRY(add_kid(n, arg, 0, NULL));
            }
            *io = n;
        } else {
            return BT_OK;
        }
    }
}

static bt_status parse_unary(parser *p, int with_filter, node **out)
{
    if (p->nest >= MAX_NEST) return errat(BT_ERR_MODEL, p->t, p->cur.at, "nesting deeper than %d", MAX_NEST);
    p->nest++;
    bt_status st = parse_unary_nested(p, with_filter, out);
    p->nest--;
    return st;
}

static bt_status parse_unary_nested(parser *p, int with_filter, node **out)
{
    size_t at = p->cur.at;
    if (is_op(p, "-")) {
        BT_TRY(next(p));
        node *n;
        MK(n, E_NEG, at);
        BT_TRY(parse_unary(p, 0, &n->a));
        *out = n;
    } else if (is_op(p, "+")) {
        BT_TRY(next(p));
        BT_TRY(parse_unary(p, 0, out));
    } else {
        BT_TRY(parse_primary(p, out));
    }
    BT_TRY(parse_postfix(p, out));
    if (with_filter) BT_TRY(parse_filter_expr(p, out));
    return BT_OK;
}

static bt_status bin(parser *p, int op, size_t at, node *l, node *r, node **out)
{
    node *n;
    MK(n, E_BIN, at);
    n->op = op;
    n->a = l;
    n->b = r;
    *out = n;
    return BT_OK;
}

static bt_status parse_pow(parser *p, node **out)
{
    BT_TRY(parse_unary(p, 1, out));
    while (is_op(p, "**")) {
        size_t at = p->cur.at;
        node *r;
        BT_TRY(next(p));
        BT_TRY(parse_unary(p, 1, &r));
        BT_TRY(bin(p, OP_POW, at, *out, r, out));
    }
    return BT_OK;
}

static bt_status parse_math2(parser *p, node **out)
{
    BT_TRY(parse_pow(p, out));
    for (;;) {
        int op;
        if (is_op(p, "*")) op = OP_MUL;
        else if (is_op(p, "//")) op = OP_FLOORDIV;
        else if (is_op(p, "%")) op = OP_MOD;
        else if (is_op(p, "/")) return errat(BT_ERR_MODEL, p->t, p->cur.at, "operator '/' (a float) is not supported");
        else return BT_OK;
        size_t at = p->cur.at;
        node *r;
        BT_TRY(next(p));
        BT_TRY(parse_pow(p, &r));
        BT_TRY(bin(p, op, at, *out, r, out));
    }
}

static bt_status parse_concat(parser *p, node **out)
{
    BT_TRY(parse_math2(p, out));
    while (is_op(p, "~")) {
        size_t at = p->cur.at;
        node *r;
        BT_TRY(next(p));
        BT_TRY(parse_math2(p, &r));
        BT_TRY(bin(p, OP_CONCAT, at, *out, r, out));
    }
    return BT_OK;
}

static bt_status parse_math1(parser *p, node **out)
{
    BT_TRY(parse_concat(p, out));
    for (;;) {
        int op;
        if (is_op(p, "+")) op = OP_ADD;
        else if (is_op(p, "-")) op = OP_SUB;
        else return BT_OK;
        size_t at = p->cur.at;
        node *r;
        BT_TRY(next(p));
        BT_TRY(parse_concat(p, &r));
        BT_TRY(bin(p, op, at, *out, r, out));
    }
}

static bt_status parse_compare(parser *p, node **out)
{
    node *first;
    BT_TRY(parse_math1(p, &first));
    node *cmp = NULL;
    for (;;) {
        int op;
        size_t at = p->cur.at;
        if (is_op(p, "==")) op = OP_EQ;
        else if (is_op(p, "!=")) op = OP_NE;
        else if (is_op(p, "<")) op = OP_LT;
        else if (is_op(p, ">")) op = OP_GT;
        else if (is_op(p, "<=")) op = OP_LE;
        else if (is_op(p, ">=")) op = OP_GE;
        else if (is_word(p, "in")) op = OP_IN;
        else if (is_word(p, "not")) {
            /* `not in`: look at the word after */
            size_t k = p->pos;
            k += space_prefix(p->s + k, p->len - k);
            if (!(k + 2 <= p->len && memcmp(p->s + k, "in", 2) == 0 && (k + 2 == p->len || !is_name_char((unsigned char)p->s[k + 2]))))
                return errat(BT_ERR_MODEL, p->t, at, "expected 'in' after 'not'");
            BT_TRY(next(p));
            op = OP_NOTIN;
        } else break;
        BT_TRY(next(p));
        if (!cmp) {
            MK(cmp, E_CMP, first->at);
            BT_TRY(add_kid(cmp, first, 0, NULL));
        }
        node *r;
        BT_TRY(parse_math1(p, &r));
        BT_TRY(add_kid(cmp, r, op, NULL));
    }
    *out = cmp ? cmp : first;
    return BT_OK;
}

static bt_status parse_not(parser *p, node **out)
{
    if (is_word(p, "not")) {
        if (p->nest >= MAX_NEST) return errat(BT_ERR_MODEL, p->t, p->cur.at, "nesting deeper than %d", MAX_NEST);
        node *n;
        MK(n, E_NOT, p->cur.at);
        BT_TRY(next(p));
        p->nest++;
        bt_status st = parse_not(p, &n->a);
        p->nest--;
        BT_TRY(st);
        *out = n;
        return BT_OK;
    }
    return parse_compare(p, out);
}

static bt_status parse_and(parser *p, node **out)
{
    BT_TRY(parse_not(p, out));
    while (is_word(p, "and")) {
        node *n;
        MK(n, E_AND, p->cur.at);
        BT_TRY(next(p));
        n->a = *out;
        BT_TRY(parse_not(p, &n->b));
        *out = n;
    }
    return BT_OK;
}

static bt_status parse_or(parser *p, node **out)
{
    BT_TRY(parse_and(p, out));
    while (is_word(p, "or")) {
        node *n;
        MK(n, E_OR, p->cur.at);
        BT_TRY(next(p));
        n->a = *out;
        BT_TRY(parse_and(p, &n->b));
        *out = n;
    }
    return BT_OK;
}

static bt_status parse_expr(parser *p, node **out)
{
    if (p->nest >= MAX_NEST) return errat(BT_ERR_MODEL, p->t, p->cur.at, "nesting deeper than %d", MAX_NEST);
    p->nest++;
    bt_status st = parse_cond(p, out);
    p->nest--;
    return st;
}

static bt_status parse_cond(parser *p, node **out)
{
    BT_TRY(parse_or(p, out));
    while (is_word(p, "if")) {
        node *n;
        MK(n, E_COND, p->cur.at);
        BT_TRY(next(p));
        n->a = *out;
        BT_TRY(parse_or(p, &n->b));
        if (is_word(p, "else")) {
            BT_TRY(next(p));
            BT_TRY(parse_expr(p, &n->c));
        }
        *out = n;
    }
    return BT_OK;
}

/* ---- the template: text, tags, statements -------------------------------------------------- */

/* The end of the tag: T_END, then trim_blocks / the '-' marker on the text after it. */
static bt_status end_tag(parser *p)
{
    if (p->cur.kind != T_END) {
        if (p->cur.kind == T_EOF) return errat(BT_ERR_MODEL, p->t, p->cur.at, "unterminated tag");
        return errat(BT_ERR_MODEL, p->t, p->cur.at, "expected the end of the tag");
    }
    if (p->cur.endmod == '-') {
        p->pos += space_prefix(p->s + p->pos, p->len - p->pos);
    } else if (p->in_block && p->cur.endmod != '+' && p->pos < p->len && p->s[p->pos] == '\n') {
        p->pos++;
    }
    p->line_starting = p->pos > 0 && p->s[p->pos - 1] == '\n';
    return BT_OK;
}

/* The opening of a tag at p->pos ({{ {% {#}: 0 when none starts there. */
static int tag_at(const parser *p, size_t i)
{
    if (i + 1 >= p->len || p->s[i] != '{') return 0;
    char c = p->s[i + 1];
    return c == '{' || c == '%' || c == '#' ? c : 0;
}

static bt_status emit_text(parser *p, node ***tail, size_t from, size_t to)
{
    if (to <= from) return BT_OK;
    node *n;
    MK(n, N_TEXT, from);
    n->s = dupn(p->s + from, to - from);
    if (!n->s) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");
    n->n = to - from;
    **tail = n;
    *tail = &n->next;
    return BT_OK;
}

static bt_status parse_body(parser *p, const char *const *stops, char **stopped);

/* Text up to the next tag, with the tag's left marker and lstrip_blocks applied. Returns the tag
 * kind in *kind (0 at the end of the source) with p->pos after its opening and marker. */
static bt_status scan_text(parser *p, node ***tail, int *kind, size_t *tag_start)
{
    size_t from = p->pos, i = p->pos;
    while (i < p->len && !tag_at(p, i)) i++;
    if (i >= p->len) {
        *kind = 0;
        p->pos = p->len;
        return emit_text(p, tail, from, p->len);
    }
    int k = tag_at(p, i);
    char mod = i + 2 < p->len && (p->s[i + 2] == '-' || p->s[i + 2] == '+') ? p->s[i + 2] : 0;
    size_t to = i;
    if (mod == '-') {
        to = from + rstrip_len(p->s + from, i - from);
    } else if (mod != '+' && k != '{') {
        size_t l = i;
        while (l > from && p->s[l - 1] != '\n') l--;
        int at_line_start = l > from || p->line_starting;
        if (at_line_start && i > l && space_prefix(p->s + l, i - l) == i - l) to = l;
    }
    BT_TRY(emit_text(p, tail, from, to));
    *kind = k;
    *tag_start = i;
    p->pos = i + 2 + (mod ? 1 : 0);
    return BT_OK;
}

static bt_status skip_comment(parser *p, size_t start)
{
    const char *s = p->s;
    for (size_t i = p->pos; i + 1 < p->len; i++) {
        if (s[i] == '#' && s[i + 1] == '}') {
            char mod = i > p->pos && (s[i - 1] == '-' || s[i - 1] == '+') ? s[i - 1] : 0;
            p->pos = i + 2;
            if (mod == '-') p->pos += space_prefix(s + p->pos, p->len - p->pos);
            else if (mod != '+' && p->pos < p->len && s[p->pos] == '\n') p->pos++;
            p->line_starting = s[p->pos - 1] == '\n';
            return BT_OK;
        }
    }
    return errat(BT_ERR_MODEL, p->t, start, "unterminated comment");
}

/* After a body that stopped at *stopped ("else" or the end tag): an else body into *c up to
 * {% end %}, then the end tag itself. *stopped stays the caller's to free. */
static bt_status parse_else_end(parser *p, const char *end, char **stopped, node **c)
{
    if (strcmp(*stopped, "else") == 0) {
        const char *const ends[] = {end, NULL};
        BT_TRY(next(p));
        BT_TRY(end_tag(p));
        free(*stopped);
        *stopped = NULL;
        BT_TRY(parse_body(p, ends, stopped));
        *c = p->t->body;
    }
    BT_TRY(next(p));
    return end_tag(p);
}

static bt_status parse_if(parser *p, node **out, size_t at)
{
    node *n;
    MK(n, N_IF, at);
    BT_TRY(next(p));
    BT_TRY(parse_expr(p, &n->a));
    BT_TRY(end_tag(p));
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    char *stopped = NULL;
    BT_TRY(parse_body(p, stops, &stopped));
    n->b = p->t->body; /* parse_body leaves its list in t->body */
    *out = n;
    if (strcmp(stopped, "elif") == 0) {
        free(stopped);
        return parse_if(p, &n->c, p->cur.at);
    }
    const bt_status st = parse_else_end(p, "endif", &stopped, &n->c);
    free(stopped);
    return st;
}

static bt_status parse_for(parser *p, node **out, size_t at)
{
    node *n;
    MK(n, N_FOR, at);
    BT_TRY(next(p));
    BT_TRY(take_name(p, &n->s));
    if (is_op(p, ",")) {
        BT_TRY(next(p));
        BT_TRY(take_name(p, &n->s2));
        if (is_op(p, ",")) return errat(BT_ERR_MODEL, p->t, p->cur.at, "for with more than two targets is not supported");
    }
    if (!is_word(p, "in")) return errat(BT_ERR_MODEL, p->t, p->cur.at, "expected 'in'");
    BT_TRY(next(p));
    /* the iterable: no conditional expression here, as jinja2 parses it */
    BT_TRY(parse_or(p, &n->a));
    if (is_word(p, "if")) {
        node *cond;
        BT_TRY(next(p));
        BT_TRY(parse_expr(p, &cond));
        BT_TRY(add_kid(n, cond, 0, NULL));
    }
    if (is_word(p, "recursive")) return errat(BT_ERR_MODEL, p->t, p->cur.at, "recursive loops are not supported");
    BT_TRY(end_tag(p));
    static const char *const stops[] = {"else", "endfor", NULL};
    char *stopped = NULL;
    bt_status st;
    BT_TRY_GOTO(st, parse_body(p, stops, &stopped), done);
    n->b = p->t->body;
    st = parse_else_end(p, "endfor", &stopped, &n->c);
done:
    free(stopped);
    *out = n;
    return st;
}

static bt_status parse_set(parser *p, node **out, size_t at)
{
    node *n;
    MK(n, N_SET, at);
    BT_TRY(next(p));
    BT_TRY(take_name(p, &n->s));
    if (is_op(p, ".")) {
        n->kind = N_SET_ATTR;
        BT_TRY(next(p));
        node *attr;
        MK(attr, E_STR, p->cur.at);
        BT_TRY(take_name(p, &attr->s));
        n->b = attr;
    }
    if (is_op(p, ",")) return errat(BT_ERR_MODEL, p->t, p->cur.at, "set with several targets is not supported");
    if (p->cur.kind == T_END) return errat(BT_ERR_MODEL, p->t, at, "block set ({%% set x %%}...{%% endset %%}) is not supported");
    BT_TRY(expect_op(p, "="));
    BT_TRY(parse_expr(p, &n->a));
    *out = n;
    return end_tag(p);
}

/* A body up to one of stops (a block tag whose keyword is in it; NULL at top level: to the end).
 * Leaves the list in p->t->body, the stopping keyword in *stopped (malloc'ed) and p->cur on it. */
static bt_status parse_body_nested(parser *p, const char *const *stops, char **stopped);

static bt_status parse_body(parser *p, const char *const *stops, char **stopped)
{
    if (p->nest >= MAX_NEST) return errat(BT_ERR_MODEL, p->t, p->pos, "nesting deeper than %d", MAX_NEST);
    p->nest++;
    bt_status st = parse_body_nested(p, stops, stopped);
    p->nest--;
    return st;
}

static bt_status parse_body_nested(parser *p, const char *const *stops, char **stopped)
{
    node *head = NULL, **tail = &head;
    for (;;) {
        int kind;
        size_t start = 0;
        BT_TRY(scan_text(p, &tail, &kind, &start));
        if (!kind) {
            if (stops) {
                size_t last = 0;
                while (stops[last + 1]) last++;
                return errat(BT_ERR_MODEL, p->t, p->len, "unexpected end of template: expected '%s'", stops[last]);
            }
            p->t->body = head;
            return BT_OK;
        }
        if (kind == '#') {
            BT_TRY(skip_comment(p, start));
            continue;
        }
        p->in_block = kind == '%';
        p->depth = 0;
        BT_TRY(next(p));
        if (kind == '{') {
            node *n;
            MK(n, N_OUT, start);
            BT_TRY(parse_expr(p, &n->a));
            BT_TRY(end_tag(p));
            *tail = n;
            tail = &n->next;
            continue;
        }
        if (p->cur.kind != T_NAME) return errat(BT_ERR_MODEL, p->t, p->cur.at, "expected a tag name");
        char *word = dupn(p->s + p->cur.at, p->cur.n);
        if (!word) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");
        if (stops && in_list(stops, word)) {
            *stopped = word;
            p->t->body = head;
            return BT_OK;
        }
        node *n = NULL;
        size_t at = p->cur.at;
        bt_status st;
        if (strcmp(word, "if") == 0) st = parse_if(p, &n, at);
        else if (strcmp(word, "for") == 0) st = parse_for(p, &n, at);
        else if (strcmp(word, "set") == 0) st = parse_set(p, &n, at);
        else if (in_list((const char *const[]){"elif", "else", "endif", "endfor", "endset", NULL}, word))
            st = errat(BT_ERR_MODEL, p->t, at, "unexpected '%s'", word);
        else st = errat(BT_ERR_MODEL, p->t, at, "tag '%s' is not supported", word);
        free(word);
        if (st != BT_OK) return st;
        *tail = n;
        tail = &n->next;
    }
}

void bt_chat_template_destroy(bt_chat_template *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->nall; i++) {
        node *n = t->all[i];
        free(n->s);
        free(n->s2);
        for (size_t k = 0; k < n->nkids; k++) free(n->kwnames[k]);
        free(n->kids);
        free(n->ops);
        free(n->kwnames);
        free(n);
    }
    free(t->all);
    free(t->src);
    free(t->name);
    free(t);
}

bt_status bt_chat_template_compile(const char *src, size_t len, const char *name, bt_chat_template **out)
{
    *out = NULL;
    bt_chat_template *t = calloc(1, sizeof *t);
    if (!t) return bt_error(BT_ERR_NOMEM, "chat template: out of memory");
    bt_status st = BT_OK;
    t->name = dupn(name ? name : "chat_template", strlen(name ? name : "chat_template"));
    t->src = malloc(len + 1);
    if (!t->name || !t->src) {
        st = bt_error(BT_ERR_NOMEM, "chat template: out of memory");
        goto fail;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\0') {
            t->len = n;
            st = errat(BT_ERR_MODEL, t, n, "NUL byte in the template");
            goto fail;
        }
        if (src[i] == '\r') {
            t->src[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            t->src[n++] = src[i];
        }
    }
    if (n > 0 && t->src[n - 1] == '\n') n--;
    t->src[n] = '\0';
    t->len = n;
    size_t bad = tok_utf8_check(t->src, n);
    if (bad != n) {
        st = errat(BT_ERR_MODEL, t, bad, "the template is not UTF-8");
        goto fail;
    }
    parser p = {.t = t, .s = t->src, .len = n, .line_starting = 1};
    st = parse_body(&p, NULL, NULL);
    free(p.cur.str);
    if (st != BT_OK) goto fail;
    *out = t;
    return BT_OK;
fail:
    bt_chat_template_destroy(t);
    return st;
}

/* ---- values -------------------------------------------------------------------------------- */

enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_STR, V_LIST, V_DICT, V_LOOP, V_NS };

typedef struct loopinfo {
    int64_t index0, length;
} loopinfo;

typedef struct val {
    int k;
    int markup;         /* V_STR: markupsafe's Markup (tojson, safe) */
    int gen;            /* V_LIST: a Python generator (what `items` gives): no len(), no index, true */
    int64_t i;          /* V_BOOL, V_INT */
    char *s;            /* V_STR: owned, NUL-terminated */
    size_t n;           /* V_STR: bytes */
    json_t *j;          /* V_LIST, V_DICT, V_NS: a reference held */
    const loopinfo *loop;
    const char *uname;  /* V_UNDEF: what was missing (s, owned), or NULL */
} val;

typedef struct var {
    const char *name;
    val v;
} var;

typedef struct frame {
    var *vars;
    size_t n, cap;
    struct frame *up;
} frame;

typedef struct rctx {
    const bt_chat_template *t;
    const json_t *vars;
    frame *top;
    tok_buf out;
    int64_t steps; /* expressions and statements evaluated, against MAX_STEPS */
} rctx;

/* A render that evaluates more than this many expressions and statements fails (a template that
 * loops over range(100000) twice nested, say), as does one whose text outgrows MAX_OUTPUT. */
#define MAX_STEPS 20000000
#define MAX_OUTPUT ((size_t)1 << 28)

#define RERR(n, ...) errat(BT_ERR_INVALID_ARG, r->t, (n)->at, __VA_ARGS__)
#define OOM() bt_error(BT_ERR_NOMEM, "chat template: out of memory")

static void val_free(val *v)
{
    free(v->s);
    if (v->j) json_decref(v->j);
    memset(v, 0, sizeof *v);
}

static bt_status val_str(val *v, const char *s, size_t n, int markup)
{
    memset(v, 0, sizeof *v);
    v->s = dupn(s, n);
    if (!v->s) return OOM();
    v->k = V_STR;
    v->n = n;
    v->markup = markup;
    return BT_OK;
}

static void val_undef(val *v, const char *what);

static bt_status val_copy(const val *from, val *to)
{
    *to = *from;
    if (from->k == V_STR) return val_str(to, from->s, from->n, from->markup);
    if (from->k == V_UNDEF) {
        val_undef(to, from->uname);
        return BT_OK;
    }
    if (from->j) json_incref(from->j);
    return BT_OK;
}

static void val_int(val *v, int k, int64_t i)
{
    memset(v, 0, sizeof *v);
    v->k = k;
    v->i = i;
}

/* An undefined value; its own copy of what was missing names it in messages. */
static void val_undef(val *v, const char *what)
{
    memset(v, 0, sizeof *v);
    v->k = V_UNDEF;
    v->s = what ? dupn(what, strlen(what)) : NULL;
    v->uname = v->s;
}

static const char *kind_name(const val *v)
{
    static const char *const names[] = {"undefined", "none", "bool", "int", "str", "list", "dict", "loop", "namespace"};
    return names[v->k];
}

static bt_status from_json(rctx *r, const node *at, json_t *j, val *v)
{
    memset(v, 0, sizeof *v);
    switch (json_typeof(j)) {
    case JSON_STRING: return val_str(v, json_string_value(j), json_string_length(j), 0);
    case JSON_INTEGER: val_int(v, V_INT, json_integer_value(j)); return BT_OK;
    case JSON_TRUE: val_int(v, V_BOOL, 1); return BT_OK;
    case JSON_FALSE: val_int(v, V_BOOL, 0); return BT_OK;
    case JSON_NULL: v->k = V_NONE; return BT_OK;
    case JSON_ARRAY: v->k = V_LIST; v->j = json_incref(j); return BT_OK;
    case JSON_OBJECT: v->k = V_DICT; v->j = json_incref(j); return BT_OK;
    default: return RERR(at, "a float value (%g) is not supported", json_real_value(j));
    }
}

/* A new reference to the JSON form of v. */
static bt_status to_json(rctx *r, const node *at, const val *v, json_t **out)
{
    if (v->gen) return RERR(at, "a generator (what items gives) cannot be stored or serialized here");
    switch (v->k) {
    case V_NONE: *out = json_null(); break;
    case V_BOOL: *out = json_boolean(v->i); break;
    case V_INT: *out = json_integer(v->i); break;
    case V_STR: *out = json_stringn(v->s, v->n); break;
    case V_LIST:
    case V_DICT: *out = json_incref(v->j); break;
    case V_UNDEF: return RERR(at, "'%s' is undefined", v->uname ? v->uname : "value");
    default: return RERR(at, "a %s cannot be stored in a list, dict or namespace", kind_name(v));
    }
    return *out ? BT_OK : OOM();
}

static int truthy(const val *v)
{
    switch (v->k) {
    case V_UNDEF:
    case V_NONE: return 0;
    case V_BOOL:
    case V_INT: return v->i != 0;
    case V_STR: return v->n > 0;
    case V_LIST: return v->gen || json_array_size(v->j) > 0;
    case V_DICT: return json_object_size(v->j) > 0;
    default: return 1;
    }
}

/* Appends Python's str(v). */
static bt_status put_str(rctx *r, const node *at, const val *v, tok_buf *b)
{
    char num[32];
    switch (v->k) {
    case V_UNDEF: return BT_OK;
    case V_NONE: return tok_buf_put(b, "None", 4);
    case V_BOOL: return v->i ? tok_buf_put(b, "True", 4) : tok_buf_put(b, "False", 5);
    case V_INT: snprintf(num, sizeof num, "%lld", (long long)v->i); return tok_buf_put(b, num, strlen(num));
    case V_STR: return tok_buf_put(b, v->s, v->n);
    default: return RERR(at, "printing a %s (Python's repr) is not supported", kind_name(v));
    }
}

static bt_status str_of(rctx *r, const node *at, const val *v, val *out)
{
    if (v->k == V_STR) return val_copy(v, out);
    tok_buf b = {0};
    bt_status st = put_str(r, at, v, &b);
    if (st == BT_OK) st = val_str(out, b.s ? b.s : "", b.n, 0);
    free(b.s);
    return st;
}

/* Byte offsets of the code points of s[0..n), and n at the end: *count code points. */
static bt_status cp_offsets(const char *s, size_t n, size_t **offs, size_t *count)
{
    size_t *o = malloc((n + 1) * sizeof *o), c = 0;
    if (!o) return OOM();
    for (size_t i = 0; i < n; i += tok_utf8_len((unsigned char)s[i])) o[c++] = i;
    o[c] = n;
    *offs = o;
    *count = c;
    return BT_OK;
}

static int py_eq(const val *a, const val *b)
{
    int an = a->k == V_INT || a->k == V_BOOL, bn = b->k == V_INT || b->k == V_BOOL;
    if (an && bn) return a->i == b->i;
    if (a->k != b->k) return 0;
    switch (a->k) {
    case V_UNDEF:
    case V_NONE: return 1;
    case V_STR: return a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
    case V_LIST:
    case V_DICT:
    case V_NS: return json_equal(a->j, b->j);
    case V_LOOP: return a->loop == b->loop;
    default: return 0;
    }
}

/* ---- frames -------------------------------------------------------------------------------- */

static bt_status frame_set(frame *f, const char *name, val *v)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->vars[i].name, name) == 0) {
            val_free(&f->vars[i].v);
            f->vars[i].v = *v;
            memset(v, 0, sizeof *v);
            return BT_OK;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        var *vars = realloc(f->vars, cap * sizeof *vars);
        if (!vars) return OOM();
        f->vars = vars;
        f->cap = cap;
    }
    f->vars[f->n].name = name;
    f->vars[f->n].v = *v;
    f->n++;
    memset(v, 0, sizeof *v);
    return BT_OK;
}

static void frame_clear(frame *f)
{
    for (size_t i = 0; i < f->n; i++) val_free(&f->vars[i].v);
    free(f->vars);
    memset(f, 0, sizeof *f);
}

static bt_status lookup(rctx *r, const node *n, const char *name, val *out)
{
    for (frame *f = r->top; f; f = f->up)
        for (size_t i = 0; i < f->n; i++)
            if (strcmp(f->vars[i].name, name) == 0) return val_copy(&f->vars[i].v, out);
    json_t *j = r->vars ? json_object_get(r->vars, name) : NULL;
    if (j) return from_json(r, n, j, out);
    val_undef(out, name);
    return BT_OK;
}

/* ---- evaluation ---------------------------------------------------------------------------- */

static bt_status eval(rctx *r, const node *n, val *out);

static const char *const dict_methods[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem",
                                           "setdefault", "update", "values", NULL};
static const char *const str_methods[] = {"capitalize", "casefold", "center", "count", "encode", "endswith",
                                          "expandtabs", "find", "format", "format_map", "index", "isalnum",
                                          "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
                                          "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join",
                                          "ljust", "lower", "lstrip", "maketrans", "partition", "removeprefix",
                                          "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition",
                                          "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
                                          "swapcase", "title", "translate", "upper", "zfill", NULL};
static const char *const list_methods[] = {"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                                           "remove", "reverse", "sort", NULL};

/* obj.name and obj[name] for a string name (jinja2's getattr, then getitem, or the reverse). */
static bt_status get_named(rctx *r, const node *n, const val *obj, const char *name, val *out)
{
    switch (obj->k) {
    case V_UNDEF: return RERR(n, "'%s' is undefined", obj->uname ? obj->uname : "value");
    case V_DICT: {
        if (in_list(dict_methods, name)) return RERR(n, "'%s' names a method of a mapping here; not supported", name);
        json_t *j = json_object_get(obj->j, name);
        if (j) return from_json(r, n, j, out);
        break;
    }
    case V_NS: {
        json_t *j = json_object_get(obj->j, name);
        if (j) return from_json(r, n, j, out);
        break;
    }
    case V_LOOP: {
        const loopinfo *l = obj->loop;
        if (strcmp(name, "index") == 0) val_int(out, V_INT, l->index0 + 1);
        else if (strcmp(name, "index0") == 0) val_int(out, V_INT, l->index0);
        else if (strcmp(name, "revindex") == 0) val_int(out, V_INT, l->length - l->index0);
        else if (strcmp(name, "revindex0") == 0) val_int(out, V_INT, l->length - l->index0 - 1);
        else if (strcmp(name, "first") == 0) val_int(out, V_BOOL, l->index0 == 0);
        else if (strcmp(name, "last") == 0) val_int(out, V_BOOL, l->index0 == l->length - 1);
        else if (strcmp(name, "length") == 0) val_int(out, V_INT, l->length);
        else return RERR(n, "loop.%s is not supported", name);
        return BT_OK;
    }
    case V_STR:
        if (in_list(str_methods, name)) return RERR(n, "'%s' names a method of a string here; not supported", name);
        break;
    case V_LIST:
        if (in_list(list_methods, name)) return RERR(n, "'%s' names a method of a list here; not supported", name);
        break;
    default: break;
    }
    val_undef(out, name);
    return BT_OK;
}

static bt_status get_index(rctx *r, const node *n, const val *obj, const val *key, val *out)
{
    if (obj->k == V_UNDEF) return RERR(n, "'%s' is undefined", obj->uname ? obj->uname : "value");
    if (key->k == V_STR) return get_named(r, n, obj, key->s, out);
    if (key->k == V_INT || key->k == V_BOOL) {
        int64_t i = key->i;
        if (obj->k == V_LIST && !obj->gen) {
            int64_t len = (int64_t)json_array_size(obj->j);
            if (i < 0) i += len;
            if (i >= 0 && i < len) return from_json(r, n, json_array_get(obj->j, (size_t)i), out);
        } else if (obj->k == V_STR) {
            size_t *o = NULL, c = 0;
            BT_TRY(cp_offsets(obj->s, obj->n, &o, &c));
            if (i < 0) i += (int64_t)c;
            bt_status st = BT_OK;
            if (i >= 0 && i < (int64_t)c) st = val_str(out, obj->s + o[i], o[i + 1] - o[i], 0);
            else val_undef(out, "index");
            free(o);
            return st;
        }
    }
    val_undef(out, "item");
    return BT_OK;
}

static bt_status slice_bound(rctx *r, const node *n, const node *e, int64_t *v, int *given)
{
    *given = 0;
    if (!e) return BT_OK;
    val x;
    BT_TRY(eval(r, e, &x));
    bt_status st = BT_OK;
    if (x.k == V_INT || x.k == V_BOOL) {
        *v = x.i;
        *given = 1;
    } else if (x.k != V_NONE) {
        st = RERR(n, "a slice index must be an integer or none, not a %s", kind_name(&x));
    }
    val_free(&x);
    return st;
}

/* Python's slice indices for a sequence of len items: start, stop, step. */
static void slice_indices(int64_t len, int64_t *start, int gs, int64_t *stop, int gt, int64_t step)
{
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? len - 1 : len;
    if (!gs) *start = step < 0 ? hi : lo;
    else {
        if (*start < 0) *start += len;
        if (*start < lo) *start = lo;
        if (*start > hi) *start = hi;
    }
    if (!gt) *stop = step < 0 ? lo : hi;
    else {
        if (*stop < 0) *stop += len;
        if (*stop < lo) *stop = lo;
        if (*stop > hi) *stop = hi;
    }
}

static bt_status eval_slice(rctx *r, const node *n, val *out)
{
    val obj;
    BT_TRY(eval(r, n->a, &obj));
    int64_t start = 0, stop = 0, step = 1;
    int gs, gt, gp;
    bt_status st;
    BT_TRY_GOTO(st, slice_bound(r, n, n->kids[0], &start, &gs), done);
    BT_TRY_GOTO(st, slice_bound(r, n, n->kids[1], &stop, &gt), done);
    BT_TRY_GOTO(st, slice_bound(r, n, n->kids[2], &step, &gp), done);
    if (!gp) step = 1;
    if (step == 0) {
        st = RERR(n, "slice step cannot be zero");
        goto done;
    }
    if (obj.k == V_LIST && obj.gen) {
        val_undef(out, "slice");
    } else if (obj.k == V_LIST) {
        json_t *a = json_array();
        if (!a) {
            st = OOM();
            goto done;
        }
        slice_indices((int64_t)json_array_size(obj.j), &start, gs, &stop, gt, step);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) json_array_append(a, json_array_get(obj.j, (size_t)i));
        memset(out, 0, sizeof *out);
        out->k = V_LIST;
        out->j = a;
    } else if (obj.k == V_STR) {
        size_t *o = NULL, c = 0;
        BT_TRY_GOTO(st, cp_offsets(obj.s, obj.n, &o, &c), done);
        tok_buf b = {0};
        slice_indices((int64_t)c, &start, gs, &stop, gt, step);
        for (int64_t i = start; st == BT_OK && (step > 0 ? i < stop : i > stop); i += step)
            st = tok_buf_put(&b, obj.s + o[i], o[i + 1] - o[i]);
        if (st == BT_OK) st = val_str(out, b.s ? b.s : "", b.n, 0);
        free(b.s);
        free(o);
    } else if (obj.k == V_UNDEF) {
        st = RERR(n, "'%s' is undefined", obj.uname ? obj.uname : "value");
    } else {
        st = RERR(n, "slicing a %s is not supported", kind_name(&obj));
    }
done:
    val_free(&obj);
    return st;
}

/* markupsafe's escape of s[0..n). */
static bt_status put_escaped(tok_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *e = s[i] == '&' ? "&amp;" : s[i] == '<' ? "&lt;" : s[i] == '>' ? "&gt;" : s[i] == '\'' ? "&#39;" : s[i] == '"' ? "&#34;" : NULL;
        BT_TRY(e ? tok_buf_put(b, e, strlen(e)) : tok_buf_put(b, s + i, 1));
    }
    return BT_OK;
}

static bt_status undef_err(rctx *r, const node *n, const val *a, const val *b)
{
    const val *u = a->k == V_UNDEF ? a : b;
    return RERR(n, "'%s' is undefined", u->uname ? u->uname : "value");
}

static bt_status arith(rctx *r, const node *n, int op, const val *a, const val *b, val *out)
{
    if (a->k == V_UNDEF || b->k == V_UNDEF) return undef_err(r, n, a, b);
    int an = a->k == V_INT || a->k == V_BOOL, bn = b->k == V_INT || b->k == V_BOOL;
    static const char *const opname[] = {"+", "-", "*", "//", "%", "**"};
    if (an && bn) {
        int64_t x = a->i, y = b->i, z = 0;
        int ovf = 0;
        switch (op) {
        case OP_ADD: ovf = __builtin_add_overflow(x, y, &z); break;
        case OP_SUB: ovf = __builtin_sub_overflow(x, y, &z); break;
        case OP_MUL: ovf = __builtin_mul_overflow(x, y, &z); break;
        case OP_FLOORDIV:
        case OP_MOD:
            if (y == 0) return RERR(n, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) { ovf = 1; break; }
            z = op == OP_MOD ? x % y : x / y;
            if (x % y != 0 && ((x % y < 0) != (y < 0))) z = op == OP_MOD ? z + y : z - 1;
            break;
        case OP_POW:
            if (y < 0) return RERR(n, "a negative power (a float) is not supported");
            z = 1;
            for (int64_t k = 0; k < y && !ovf; k++) ovf = __builtin_mul_overflow(z, x, &z);
            break;
        default: break;
        }
        if (ovf) return RERR(n, "integer overflow in '%s'", opname[op]);
        val_int(out, V_INT, z);
        return BT_OK;
    }
    if (op == OP_ADD && a->k == V_STR && b->k == V_STR) {
        tok_buf s = {0};
        bt_status st = BT_OK;
        if (a->markup == b->markup) {
            st = tok_buf_put(&s, a->s, a->n);
            if (st == BT_OK) st = tok_buf_put(&s, b->s, b->n);
        } else {
            st = a->markup ? tok_buf_put(&s, a->s, a->n) : put_escaped(&s, a->s, a->n);
            if (st == BT_OK) st = b->markup ? tok_buf_put(&s, b->s, b->n) : put_escaped(&s, b->s, b->n);
        }
        if (st == BT_OK) st = val_str(out, s.s ? s.s : "", s.n, a->markup || b->markup);
        free(s.s);
        return st;
    }
    if (op == OP_ADD && a->k == V_LIST && b->k == V_LIST) {
        json_t *l = json_copy(a->j);
        if (!l || json_array_extend(l, b->j)) {
            json_decref(l);
            return OOM();
        }
        memset(out, 0, sizeof *out);
        out->k = V_LIST;
        out->j = l;
        return BT_OK;
    }
    if (op == OP_MUL && ((a->k == V_STR && bn) || (an && b->k == V_STR))) {
        const val *s = a->k == V_STR ? a : b;
        int64_t times = a->k == V_STR ? b->i : a->i;
        if (times > 0 && s->n > 0 && (uint64_t)times > (1u << 24) / s->n) return RERR(n, "string repetition too long");
        tok_buf t = {0};
        bt_status st = BT_OK;
        for (int64_t k = 0; k < times && st == BT_OK; k++) st = tok_buf_put(&t, s->s, s->n);
        if (st == BT_OK) st = val_str(out, t.s ? t.s : "", t.n, s->markup);
        free(t.s);
        return st;
    }
    if (op == OP_MOD && a->k == V_STR) return RERR(n, "string formatting with '%%' is not supported");
    return RERR(n, "unsupported operand types for %s: %s and %s", opname[op], kind_name(a), kind_name(b));
}

static bt_status compare(rctx *r, const node *n, int op, const val *a, const val *b, int *res)
{
    if (op == OP_EQ || op == OP_NE) {
        *res = py_eq(a, b) == (op == OP_EQ);
        return BT_OK;
    }
    if (op == OP_IN || op == OP_NOTIN) {
        int found = 0;
        if (b->k == V_STR) {
            if (a->k != V_STR) return RERR(n, "'in <string>' requires a string on the left, not a %s", kind_name(a));
            if (a->n == 0) found = 1;
            for (size_t i = 0; !found && a->n <= b->n && i <= b->n - a->n; i++) found = memcmp(b->s + i, a->s, a->n) == 0;
        } else if (b->k == V_LIST) {
            for (size_t i = 0; !found && i < json_array_size(b->j); i++) {
                val e;
                BT_TRY(from_json(r, n, json_array_get(b->j, i), &e));
                found = py_eq(a, &e);
                val_free(&e);
            }
        } else if (b->k == V_DICT) {
            found = a->k == V_STR && json_object_get(b->j, a->s) != NULL;
        } else if (b->k != V_UNDEF) {
            return RERR(n, "'in' a %s is not supported", kind_name(b));
        }
        *res = found == (op == OP_IN);
        return BT_OK;
    }
    int c;
    int an = a->k == V_INT || a->k == V_BOOL, bn = b->k == V_INT || b->k == V_BOOL;
    if (an && bn) c = a->i < b->i ? -1 : a->i > b->i;
    else if (a->k == V_STR && b->k == V_STR) {
        int m = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n);
        c = m ? m : a->n < b->n ? -1 : a->n > b->n;
    } else {
        if (a->k == V_UNDEF || b->k == V_UNDEF) return undef_err(r, n, a, b);
        return RERR(n, "ordering a %s and a %s is not supported", kind_name(a), kind_name(b));
    }
    *res = op == OP_LT ? c < 0 : op == OP_GT ? c > 0 : op == OP_LE ? c <= 0 : c >= 0;
    return BT_OK;
}

/* Python's json.dumps(v, sort_keys=True[, indent]) with jinja2's htmlsafe replacements. */
static bt_status dump_json(rctx *r, const node *n, json_t *j, int indent, int level, tok_buf *b);

static bt_status dump_string(const char *s, size_t len, tok_buf *b)
{
    BT_TRY(tok_buf_put(b, "\"", 1));
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = tok_utf8_decode(s + i, &cp);
        i += k;
        char e[16];
        const char *simple = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : cp == '\t' ? "\\t"
                           : cp == '\b' ? "\\b" : cp == '\f' ? "\\f" : NULL;
        if (simple) {
            BT_TRY(tok_buf_put(b, simple, strlen(simple)));
        } else if (cp < 0x20 || cp > 0x7E || cp == '<' || cp == '>' || cp == '&' || cp == '\'') {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                snprintf(e, sizeof e, "\\u%04x", cp);
            }
            BT_TRY(tok_buf_put(b, e, strlen(e)));
        } else {
            char c = (char)cp;
            BT_TRY(tok_buf_put(b, &c, 1));
        }
    }
    return tok_buf_put(b, "\"", 1);
}

static bt_status dump_newline(int indent, int level, tok_buf *b)
{
    BT_TRY(tok_buf_put(b, "\n", 1));
    for (int i = 0; i < indent * level; i++) BT_TRY(tok_buf_put(b, " ", 1));
    return BT_OK;
}

static int key_cmp(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

static bt_status dump_json(rctx *r, const node *n, json_t *j, int indent, int level, tok_buf *b)
{
    char num[32];
    const char *sep = indent >= 0 ? "," : ", ";
    switch (json_typeof(j)) {
    case JSON_NULL: return tok_buf_put(b, "null", 4);
    case JSON_TRUE: return tok_buf_put(b, "true", 4);
    case JSON_FALSE: return tok_buf_put(b, "false", 5);
    case JSON_INTEGER: snprintf(num, sizeof num, "%lld", (long long)json_integer_value(j)); return tok_buf_put(b, num, strlen(num));
    case JSON_STRING: return dump_string(json_string_value(j), json_string_length(j), b);
    case JSON_ARRAY: {
        size_t cnt = json_array_size(j);
        BT_TRY(tok_buf_put(b, "[", 1));
        for (size_t i = 0; i < cnt; i++) {
            if (i) BT_TRY(tok_buf_put(b, sep, strlen(sep)));
            if (indent >= 0) BT_TRY(dump_newline(indent, level + 1, b));
            BT_TRY(dump_json(r, n, json_array_get(j, i), indent, level + 1, b));
        }
        if (cnt && indent >= 0) BT_TRY(dump_newline(indent, level, b));
        return tok_buf_put(b, "]", 1);
    }
    case JSON_OBJECT: {
        size_t cnt = json_object_size(j), i = 0;
        const char **keys = malloc((cnt ? cnt : 1) * sizeof *keys);
        if (!keys) return OOM();
        const char *key;
        json_t *v;
        json_object_foreach(j, key, v) keys[i++] = key;
        qsort(keys, cnt, sizeof *keys, key_cmp);
        bt_status st = tok_buf_put(b, "{", 1);
        for (i = 0; i < cnt && st == BT_OK; i++) {
            if (i) st = tok_buf_put(b, sep, strlen(sep));
            if (st == BT_OK && indent >= 0) st = dump_newline(indent, level + 1, b);
            if (st == BT_OK) st = dump_string(keys[i], strlen(keys[i]), b);
            if (st == BT_OK) st = tok_buf_put(b, ": ", 2);
            if (st == BT_OK) st = dump_json(r, n, json_object_get(j, keys[i]), indent, level + 1, b);
        }
        if (st == BT_OK && cnt && indent >= 0) st = dump_newline(indent, level, b);
        if (st == BT_OK) st = tok_buf_put(b, "}", 1);
        free(keys);
        return st;
    }
    default: return RERR(n, "tojson of a float is not supported");
    }
}

/* The items a for loop or join walks: a new JSON array. */
static bt_status items_of(rctx *r, const node *n, const val *v, json_t **out)
{
    json_t *a = NULL;
    if (v->k == V_LIST) {
        *out = json_incref(v->j);
        return BT_OK;
    }
    a = json_array();
    if (!a) return OOM();
    if (v->k == V_DICT) {
        const char *key;
        json_t *x;
        json_object_foreach(v->j, key, x) json_array_append_new(a, json_string(key));
    } else if (v->k == V_STR) {
        for (size_t i = 0; i < v->n;) {
            size_t k = tok_utf8_len((unsigned char)v->s[i]);
            json_array_append_new(a, json_stringn(v->s + i, k));
            i += k;
        }
    } else if (v->k != V_UNDEF) {
        json_decref(a);
        return RERR(n, "a %s is not iterable", kind_name(v));
    }
    *out = a;
    return BT_OK;
}

/* Strips the characters of chars (NULL: whitespace) from the ends of s: which 1 left, 2 right. */
static bt_status strip(const val *s, const val *chars, int which, val *out)
{
    size_t from = 0, to = s->n;
    while (from < to) {
        uint32_t cp;
        size_t k = tok_utf8_decode(s->s + from, &cp);
        int hit = 0;
        if (!chars) hit = py_space(cp);
        else for (size_t i = 0; i < chars->n && !hit;) {
            uint32_t c;
            i += tok_utf8_decode(chars->s + i, &c);
            hit = c == cp;
        }
        if (!(which & 1) || !hit) break;
        from += k;
    }
    while (to > from && (which & 2)) {
        size_t b = to - 1;
        while (b > from && ((unsigned char)s->s[b] & 0xC0) == 0x80) b--;
        uint32_t cp;
        tok_utf8_decode(s->s + b, &cp);
        int hit = 0;
        if (!chars) hit = py_space(cp);
        else for (size_t i = 0; i < chars->n && !hit;) {
            uint32_t c;
            i += tok_utf8_decode(chars->s + i, &c);
            hit = c == cp;
        }
        if (!hit) break;
        to = b;
    }
    return val_str(out, s->s + from, to - from, 0);
}

static bt_status change_case(rctx *r, const node *n, const val *s, int upper, val *out)
{
    BT_TRY(val_str(out, s->s, s->n, 0));
    for (size_t i = 0; i < out->n; i++) {
        unsigned char c = (unsigned char)out->s[i];
        if (c >= 0x80) {
            val_free(out);
            return RERR(n, "upper/lower of non-ASCII text is not supported");
        }
        if (upper && c >= 'a' && c <= 'z') out->s[i] = (char)(c - 32);
        if (!upper && c >= 'A' && c <= 'Z') out->s[i] = (char)(c + 32);
    }
    return BT_OK;
}

typedef struct args {
    val v[4];
    size_t n;
    int kw_indent; /* tojson's indent=, or -1 */
} args;

static void args_free(args *a)
{
    for (size_t i = 0; i < a->n; i++) val_free(&a->v[i]);
}

static bt_status eval_args(rctx *r, const node *n, size_t lo, size_t hi, args *a)
{
    memset(a, 0, sizeof *a);
    a->kw_indent = -1;
    if (n->nkids < lo || n->nkids > hi)
        return RERR(n, "'%s' takes %zu to %zu arguments, not %zu", n->s, lo, hi, n->nkids);
    for (size_t i = 0; i < n->nkids; i++) {
        val v;
        BT_TRY(eval(r, n->kids[i], &v));
        if (n->kwnames[i]) {
            if (strcmp(n->kwnames[i], "indent") != 0 || (v.k != V_INT && v.k != V_NONE) || (v.k == V_INT && (v.i < 0 || v.i > 64))) {
                val_free(&v);
                return RERR(n, "argument %s= of '%s' is not supported", n->kwnames[i], n->s);
            }
            a->kw_indent = v.k == V_INT ? (int)v.i : -1;
            continue;
        }
        a->v[a->n++] = v;
    }
    return BT_OK;
}

static bt_status need_str(rctx *r, const node *n, const val *v, const char *what)
{
    if (v->k == V_STR && !v->markup) return BT_OK;
    if (v->k == V_STR) return RERR(n, "'%s' on markup (the result of tojson or safe) is not supported", what);
    if (v->k == V_UNDEF) return RERR(n, "'%s' is undefined", v->uname ? v->uname : "value");
    return RERR(n, "'%s' needs a string, not a %s", what, kind_name(v));
}

static bt_status filter_select(rctx *r, const node *n, const val *x, const args *a, val *out);

static bt_status apply_filter(rctx *r, const node *n, val *x, const args *a, val *out)
{
    const char *f = n->s;
    if (strcmp(f, "default") == 0 || strcmp(f, "d") == 0) {
        int use = x->k == V_UNDEF || (a->n > 1 && truthy(&a->v[1]) && !truthy(x));
        if (use) {
            if (a->n == 0) return val_str(out, "", 0, 0);
            return val_copy(&a->v[0], out);
        }
        return val_copy(x, out);
    }
    if (strcmp(f, "length") == 0 || strcmp(f, "count") == 0) {
        int64_t len;
        if (x->k == V_STR) {
            len = 0;
            for (size_t i = 0; i < x->n; i++) len += ((unsigned char)x->s[i] & 0xC0) != 0x80;
        } else if (x->k == V_LIST && x->gen) {
            return RERR(n, "length of a generator (what items gives)");
        } else if (x->k == V_LIST) len = (int64_t)json_array_size(x->j);
        else if (x->k == V_DICT) len = (int64_t)json_object_size(x->j);
        else if (x->k == V_UNDEF) len = 0;
        else if (x->k == V_LOOP) len = x->loop->length;
        else return RERR(n, "length of a %s", kind_name(x));
        val_int(out, V_INT, len);
        return BT_OK;
    }
    if (strcmp(f, "tojson") == 0) {
        json_t *j;
        BT_TRY(to_json(r, n, x, &j));
        tok_buf b = {0};
        bt_status st = dump_json(r, n, j, a->kw_indent, 0, &b);
        json_decref(j);
        if (st == BT_OK) st = val_str(out, b.s ? b.s : "", b.n, 1);
        free(b.s);
        return st;
    }
    if (strcmp(f, "last") == 0 && x->gen) return RERR(n, "last of a generator (what items gives)");
    if (strcmp(f, "first") == 0 || strcmp(f, "last") == 0) {
        json_t *items;
        BT_TRY(items_of(r, n, x, &items));
        size_t cnt = json_array_size(items);
        bt_status st = BT_OK;
        if (cnt == 0) val_undef(out, f);
        else st = from_json(r, n, json_array_get(items, f[0] == 'f' ? 0 : cnt - 1), out);
        json_decref(items);
        return st;
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject") || !strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
        return filter_select(r, n, x, a, out);
    if (strcmp(f, "items") == 0) {
        if (x->k != V_DICT && x->k != V_UNDEF) return RERR(n, "items of a %s (not a mapping)", kind_name(x));
        json_t *l = json_array();
        if (!l) return OOM();
        if (x->k == V_DICT) {
            const char *key;
            json_t *v;
            json_object_foreach(x->j, key, v) {
                json_t *pair = json_pack("[sO]", key, v);
                if (!pair || json_array_append_new(l, pair)) {
                    json_decref(l);
                    return OOM();
                }
            }
        }
        memset(out, 0, sizeof *out);
        out->k = V_LIST;
        out->j = l;
        out->gen = 1;
        return BT_OK;
    }
    if (strcmp(f, "list") == 0) {
        json_t *items;
        BT_TRY(items_of(r, n, x, &items));
        json_t *l = json_copy(items);
        json_decref(items);
        if (!l) return OOM();
        memset(out, 0, sizeof *out);
        out->k = V_LIST;
        out->j = l;
        return BT_OK;
    }
    if (strcmp(f, "join") == 0) {
        if (a->n > 0) BT_TRY(need_str(r, n, &a->v[0], "join"));
        json_t *items;
        BT_TRY(items_of(r, n, x, &items));
        tok_buf b = {0};
        bt_status st = BT_OK;
        for (size_t i = 0; i < json_array_size(items) && st == BT_OK; i++) {
            val e;
            if (i && a->n > 0) st = tok_buf_put(&b, a->v[0].s, a->v[0].n);
            if (st == BT_OK) st = from_json(r, n, json_array_get(items, i), &e);
            if (st != BT_OK) break;
            st = put_str(r, n, &e, &b);
            val_free(&e);
        }
        json_decref(items);
        if (st == BT_OK) st = val_str(out, b.s ? b.s : "", b.n, 0);
        free(b.s);
        return st;
    }
    val s = {0};
    BT_TRY(str_of(r, n, x, &s));
    bt_status st;
    if (strcmp(f, "string") == 0) {
        *out = s;
        return BT_OK;
    }
    if (strcmp(f, "safe") == 0) {
        s.markup = 1;
        *out = s;
        return BT_OK;
    }
    if (s.markup) st = RERR(n, "'%s' on markup (the result of tojson or safe) is not supported", f);
    else if (strcmp(f, "trim") == 0) {
        if (a->n > 0 && a->v[0].k != V_NONE) st = need_str(r, n, &a->v[0], "trim");
        else st = BT_OK;
        if (st == BT_OK) st = strip(&s, a->n > 0 && a->v[0].k == V_STR ? &a->v[0] : NULL, 3, out);
    } else st = change_case(r, n, &s, strcmp(f, "upper") == 0, out);
    val_free(&s);
    return st;
}

static bt_status eval_filter(rctx *r, const node *n, val *out)
{
    val x;
    BT_TRY(eval(r, n->a, &x));
    args a;
    size_t hi = strcmp(n->s, "default") == 0 || strcmp(n->s, "d") == 0 ? 2 : strcmp(n->s, "join") == 0 || strcmp(n->s, "trim") == 0 ? 1 : 0;
    if (!strcmp(n->s, "select") || !strcmp(n->s, "reject") || !strcmp(n->s, "selectattr") || !strcmp(n->s, "rejectattr"))
        hi = n->nkids; /* their arguments were checked at compile time */
    bt_status st = eval_args(r, n, 0, hi + (strcmp(n->s, "tojson") == 0), &a);
    if (st == BT_OK && a.n > hi) st = RERR(n, "too many arguments to '%s'", n->s);
    if (st == BT_OK) st = apply_filter(r, n, &x, &a, out);
    args_free(&a);
    val_free(&x);
    return st;
}

/* jinja2's test t of x (arg: its argument for the tests that take one) in *res. */
static bt_status apply_test(rctx *r, const node *n, const char *t, const val *x, const val *arg, int *res)
{
    const int k = x->k;
    if (strcmp(t, "defined") == 0) *res = k != V_UNDEF;
    else if (strcmp(t, "undefined") == 0) *res = k == V_UNDEF;
    else if (strcmp(t, "none") == 0) *res = k == V_NONE;
    else if (strcmp(t, "string") == 0) *res = k == V_STR;
    else if (strcmp(t, "number") == 0) *res = k == V_INT || k == V_BOOL;
    else if (strcmp(t, "integer") == 0) *res = k == V_INT;
    else if (strcmp(t, "boolean") == 0) *res = k == V_BOOL;
    else if (strcmp(t, "mapping") == 0) *res = k == V_DICT;
    else if (strcmp(t, "sequence") == 0) *res = k == V_STR || (k == V_LIST && !x->gen) || k == V_DICT || k == V_UNDEF;
    else if (strcmp(t, "iterable") == 0) *res = k == V_STR || k == V_LIST || k == V_DICT || k == V_UNDEF || k == V_LOOP;
    else if (strcmp(t, "true") == 0) *res = k == V_BOOL && x->i;
    else if (strcmp(t, "false") == 0) *res = k == V_BOOL && !x->i;
    else if (!strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==")) *res = py_eq(x, arg);
    else if (!strcmp(t, "ne") || !strcmp(t, "!=")) *res = !py_eq(x, arg);
    else if (strcmp(t, "sameas") == 0) {
        /* Python's `is`: the singletons none, true and false; small ints are cached too */
        int singleton = k == V_NONE || k == V_BOOL || k == V_UNDEF;
        if (!singleton && !(arg->k == V_NONE || arg->k == V_BOOL))
            return RERR(n, "test 'sameas' of a %s (object identity) is not supported", kind_name(x));
        *res = k == arg->k && (k != V_BOOL || x->i == arg->i) && k != V_UNDEF;
    } else if (k == V_INT || k == V_BOOL) *res = (x->i % 2 != 0) == (strcmp(t, "odd") == 0);
    else return RERR(n, "test '%s' of a %s", t, kind_name(x));
    return BT_OK;
}

static bt_status eval_test(rctx *r, const node *n, val *out)
{
    val x, arg = {0};
    BT_TRY(eval(r, n->a, &x));
    int res = 0;
    bt_status st = n->nkids ? eval(r, n->kids[0], &arg) : BT_OK;
    if (st == BT_OK) st = apply_test(r, n, n->s, &x, &arg, &res);
    val_free(&x);
    val_free(&arg);
    if (st == BT_OK) val_int(out, V_BOOL, res != (int)n->i);
    return st;
}

/* select, reject, selectattr, rejectattr: a generator of the items that pass (or fail) the test;
 * without a test, the item's (or attribute's) truth. */
static bt_status filter_select(rctx *r, const node *n, const val *x, const args *a, val *out)
{
    int attr = n->s[strlen(n->s) - 1] == 'r', keep = n->s[0] == 's';
    size_t ti = attr ? 1 : 0;
    json_t *items;
    BT_TRY(items_of(r, n, x, &items));
    json_t *l = json_array();
    bt_status st = l ? BT_OK : OOM();
    for (size_t i = 0; st == BT_OK && i < json_array_size(items); i++) {
        val item, sub = {0};
        st = from_json(r, n, json_array_get(items, i), &item);
        if (st != BT_OK) break;
        if (attr) st = get_named(r, n, &item, a->v[0].s, &sub);
        const val *subj = attr ? &sub : &item;
        int res = 0;
        if (st == BT_OK && a->n > ti) st = apply_test(r, n, a->v[ti].s, subj, a->n > ti + 1 ? &a->v[ti + 1] : NULL, &res);
        else if (st == BT_OK) res = truthy(subj);
        if (st == BT_OK && res == keep) json_array_append(l, json_array_get(items, i));
        val_free(&item);
        val_free(&sub);
    }
    json_decref(items);
    if (st != BT_OK) {
        json_decref(l);
        return st;
    }
    memset(out, 0, sizeof *out);
    out->k = V_LIST;
    out->j = l;
    out->gen = 1;
    return BT_OK;
}

static bt_status eval_func(rctx *r, const node *n, val *out)
{
    if (strcmp(n->s, "namespace") == 0) {
        json_t *o = json_object();
        if (!o) return OOM();
        for (size_t i = 0; i < n->nkids; i++) {
            if (!n->kwnames[i]) {
                json_decref(o);
                return RERR(n, "namespace() takes keyword arguments only here");
            }
            val v;
            json_t *j = NULL;
            bt_status st = eval(r, n->kids[i], &v);
            if (st == BT_OK) st = to_json(r, n, &v, &j);
            val_free(&v);
            if (st != BT_OK) {
                json_decref(o);
                return st;
            }
            json_object_set_new(o, n->kwnames[i], j);
        }
        memset(out, 0, sizeof *out);
        out->k = V_NS;
        out->j = o;
        return BT_OK;
    }
    args a;
    int is_range = strcmp(n->s, "range") == 0;
    BT_TRY(eval_args(r, n, 1, is_range ? 3 : 1, &a));
    bt_status st = BT_OK;
    if (!is_range) {
        val s = {0};
        st = str_of(r, n, &a.v[0], &s);
        if (st == BT_OK) st = RERR(n, "raise_exception: %s", s.s);
        val_free(&s);
        goto done;
    }
    int64_t lo = 0, hi, step = 1;
    for (size_t i = 0; i < a.n; i++)
        if (a.v[i].k != V_INT && a.v[i].k != V_BOOL) {
            st = RERR(n, "range() takes integers, not a %s", kind_name(&a.v[i]));
            goto done;
        }
    if (a.n == 1) hi = a.v[0].i;
    else lo = a.v[0].i, hi = a.v[1].i;
    if (a.n == 3) step = a.v[2].i;
    if (step == 0) {
        st = RERR(n, "range() step must not be zero");
        goto done;
    }
    json_t *l = json_array();
    if (!l) {
        st = OOM();
        goto done;
    }
    for (int64_t i = lo, k = 0; step > 0 ? i < hi : i > hi; i += step, k++) {
        if (k >= 100000) {
            json_decref(l);
            st = RERR(n, "range() longer than 100000 is not supported");
            goto done;
        }
        json_array_append_new(l, json_integer(i));
        if (++r->steps > MAX_STEPS) {
            json_decref(l);
            st = RERR(n, "the render took more than %d steps", MAX_STEPS);
            goto done;
        }
    }
    memset(out, 0, sizeof *out);
    out->k = V_LIST;
    out->j = l;
done:
    args_free(&a);
    return st;
}

static bt_status split(rctx *r, const node *n, const val *s, const val *sep, val *out)
{
    json_t *l = json_array();
    if (!l) return OOM();
    if (!sep) {
        size_t i = 0;
        for (;;) {
            i += space_prefix(s->s + i, s->n - i);
            if (i >= s->n) break;
            size_t j = i;
            while (j < s->n) {
                uint32_t cp;
                size_t k = tok_utf8_decode(s->s + j, &cp);
                if (py_space(cp)) break;
                j += k;
            }
            json_array_append_new(l, json_stringn(s->s + i, j - i));
            i = j;
        }
    } else {
        if (sep->n == 0) {
            json_decref(l);
            return RERR(n, "split() with an empty separator");
        }
        size_t i = 0, start = 0;
        while (i + sep->n <= s->n) {
            if (memcmp(s->s + i, sep->s, sep->n) == 0) {
                json_array_append_new(l, json_stringn(s->s + start, i - start));
                i += sep->n;
                start = i;
            } else {
                i++;
            }
        }
        json_array_append_new(l, json_stringn(s->s + start, s->n - start));
    }
    memset(out, 0, sizeof *out);
    out->k = V_LIST;
    out->j = l;
    return BT_OK;
}

static bt_status call_method(rctx *r, const node *n, const val *obj, const args *a, val *out)
{
    const char *m = n->s;
    if (obj->k == V_UNDEF) return RERR(n, "'%s' is undefined", obj->uname ? obj->uname : "value");
    if (obj->k == V_DICT && strcmp(m, "get") == 0) {
        if (a->n < 1 || a->n > 2) return RERR(n, "get() takes 1 or 2 arguments");
        json_t *j = a->v[0].k == V_STR ? json_object_get(obj->j, a->v[0].s) : NULL;
        if (j) return from_json(r, n, j, out);
        if (a->n == 2) return val_copy(&a->v[1], out);
        memset(out, 0, sizeof *out);
        out->k = V_NONE;
        return BT_OK;
    }
    if (obj->k == V_DICT && strcmp(m, "items") == 0) {
        if (a->n) return RERR(n, "items() takes no arguments");
        json_t *l = json_array();
        if (!l) return OOM();
        const char *key;
        json_t *v;
        json_object_foreach(obj->j, key, v) json_array_append_new(l, json_pack("[sO]", key, v));
        memset(out, 0, sizeof *out);
        out->k = V_LIST;
        out->j = l;
        return BT_OK;
    }
    if (obj->k != V_STR || !strcmp(m, "get") || !strcmp(m, "items")) return RERR(n, "a %s has no method '%s'", kind_name(obj), m);
    BT_TRY(need_str(r, n, obj, m));
    for (size_t i = 0; i < a->n; i++) BT_TRY(need_str(r, n, &a->v[i], m));
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        if (a->n > 1) return RERR(n, "%s() takes at most 1 argument", m);
        return strip(obj, a->n ? &a->v[0] : NULL, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3, out);
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (a->n != 1) return RERR(n, "%s() takes 1 argument here", m);
        const val *p = &a->v[0];
        int res = p->n <= obj->n && memcmp(m[0] == 's' ? obj->s : obj->s + obj->n - p->n, p->s, p->n) == 0;
        val_int(out, V_BOOL, res);
        return BT_OK;
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower")) {
        if (a->n) return RERR(n, "%s() takes no arguments", m);
        return change_case(r, n, obj, m[0] == 'u', out);
    }
    if (!strcmp(m, "split")) {
        if (a->n > 1) return RERR(n, "split() with maxsplit is not supported");
        return split(r, n, obj, a->n ? &a->v[0] : NULL, out);
    }
    /* replace(old, new) */
    if (a->n != 2) return RERR(n, "replace() takes 2 arguments here");
    const val *o = &a->v[0], *w = &a->v[1];
    if (o->n == 0) return RERR(n, "replace() of an empty string is not supported");
    tok_buf b = {0};
    bt_status st = BT_OK;
    size_t i = 0, start = 0;
    while (st == BT_OK && i + o->n <= obj->n) {
        if (memcmp(obj->s + i, o->s, o->n) == 0) {
            st = tok_buf_put(&b, obj->s + start, i - start);
            if (st == BT_OK) st = tok_buf_put(&b, w->s, w->n);
            i += o->n;
            start = i;
        } else {
            i++;
        }
    }
    if (st == BT_OK) st = tok_buf_put(&b, obj->s + start, obj->n - start);
    if (st == BT_OK) st = val_str(out, b.s ? b.s : "", b.n, 0);
    free(b.s);
    return st;
}

static bt_status eval_method(rctx *r, const node *n, val *out)
{
    val obj;
    BT_TRY(eval(r, n->a, &obj));
    args a;
    bt_status st = eval_args(r, n, 0, 3, &a);
    if (st == BT_OK) st = call_method(r, n, &obj, &a, out);
    args_free(&a);
    val_free(&obj);
    return st;
}

static bt_status eval_container(rctx *r, const node *n, val *out)
{
    json_t *c = n->kind == E_LIST ? json_array() : json_object();
    if (!c) return OOM();
    bt_status st = BT_OK;
    for (size_t i = 0; i < n->nkids && st == BT_OK; i += n->kind == E_LIST ? 1 : 2) {
        val k = {0}, v = {0};
        json_t *j = NULL;
        st = eval(r, n->kids[n->kind == E_LIST ? i : i + 1], &v);
        if (st == BT_OK) st = to_json(r, n->kids[i], &v, &j);
        if (st == BT_OK && n->kind == E_DICT) {
            st = eval(r, n->kids[i], &k);
            if (st == BT_OK && k.k != V_STR) st = RERR(n->kids[i], "dict keys other than strings are not supported");
            if (st == BT_OK) json_object_set_new(c, k.s, j);
            else json_decref(j);
        } else if (st == BT_OK) {
            json_array_append_new(c, j);
        }
        val_free(&k);
        val_free(&v);
    }
    if (st != BT_OK) {
        json_decref(c);
        return st;
    }
    memset(out, 0, sizeof *out);
    out->k = n->kind == E_LIST ? V_LIST : V_DICT;
    out->j = c;
    return BT_OK;
}

static bt_status eval_cmp(rctx *r, const node *n, val *out)
{
    val left;
    BT_TRY(eval(r, n->kids[0], &left));
    int res = 1;
    bt_status st = BT_OK;
    for (size_t i = 1; i < n->nkids && res; i++) {
        val right;
        st = eval(r, n->kids[i], &right);
        if (st != BT_OK) break;
        st = compare(r, n->kids[i], n->ops[i], &left, &right, &res);
        val_free(&left);
        left = right;
        if (st != BT_OK) break;
    }
    val_free(&left);
    if (st == BT_OK) val_int(out, V_BOOL, res);
    return st;
}

static bt_status eval(rctx *r, const node *n, val *out)
{
    memset(out, 0, sizeof *out);
    if (++r->steps > MAX_STEPS) return RERR(n, "the render took more than %d steps", MAX_STEPS);
    val a, b;
    bt_status st = BT_OK;
    switch (n->kind) {
    case E_STR: return val_str(out, n->s, n->n, 0);
    case E_INT: val_int(out, V_INT, n->i); return BT_OK;
    case E_BOOL: val_int(out, V_BOOL, n->i); return BT_OK;
    case E_NONE: out->k = V_NONE; return BT_OK;
    case E_NAME: return lookup(r, n, n->s, out);
    case E_ATTR:
        BT_TRY(eval(r, n->a, &a));
        st = get_named(r, n, &a, n->s, out);
        val_free(&a);
        return st;
    case E_ITEM:
        BT_TRY(eval(r, n->a, &a));
        st = eval(r, n->b, &b);
        if (st == BT_OK) st = get_index(r, n, &a, &b, out);
        val_free(&a);
        val_free(&b);
        return st;
    case E_SLICE: return eval_slice(r, n, out);
    case E_BIN:
        BT_TRY(eval(r, n->a, &a));
        st = eval(r, n->b, &b);
        if (st == BT_OK && n->op == OP_CONCAT) {
            tok_buf s = {0};
            st = put_str(r, n, &a, &s);
            if (st == BT_OK) st = put_str(r, n, &b, &s);
            if (st == BT_OK) st = val_str(out, s.s ? s.s : "", s.n, 0);
            free(s.s);
        } else if (st == BT_OK) {
            st = arith(r, n, n->op, &a, &b, out);
        }
        val_free(&a);
        val_free(&b);
        return st;
    case E_NOT:
        BT_TRY(eval(r, n->a, &a));
        val_int(out, V_BOOL, !truthy(&a));
        val_free(&a);
        return BT_OK;
    case E_NEG:
        BT_TRY(eval(r, n->a, &a));
        if (a.k == V_INT || a.k == V_BOOL) {
            if (a.i == INT64_MIN) st = RERR(n, "integer overflow in '-'");
            else val_int(out, V_INT, -a.i);
        } else if (a.k == V_UNDEF) {
            st = RERR(n, "'%s' is undefined", a.uname ? a.uname : "value");
        } else {
            st = RERR(n, "unary '-' of a %s", kind_name(&a));
        }
        val_free(&a);
        return st;
    case E_AND:
    case E_OR:
        BT_TRY(eval(r, n->a, &a));
        if (truthy(&a) == (n->kind == E_OR)) {
            *out = a;
            return BT_OK;
        }
        val_free(&a);
        return eval(r, n->b, out);
    case E_COND:
        BT_TRY(eval(r, n->b, &a));
        st = truthy(&a);
        val_free(&a);
        if (st) return eval(r, n->a, out);
        if (n->c) return eval(r, n->c, out);
        val_undef(out, "conditional expression");
        return BT_OK;
    case E_CMP: return eval_cmp(r, n, out);
    case E_FILTER: return eval_filter(r, n, out);
    case E_TEST: return eval_test(r, n, out);
    case E_FUNC: return eval_func(r, n, out);
    case E_METHOD: return eval_method(r, n, out);
    case E_LIST:
    case E_DICT: return eval_container(r, n, out);
    default: return RERR(n, "internal: node %d is not an expression", n->kind);
    }
}

/* ---- statements ---------------------------------------------------------------------------- */

static bt_status render_body(rctx *r, const node *n);

/* Binds the loop's target (or its two targets, from a pair) to item in f. */
static bt_status bind_targets(rctx *r, const node *n, frame *f, json_t *item)
{
    val x = {0}, y = {0};
    bt_status st;
    if (!n->s2) {
        st = from_json(r, n->a, item, &x);
        if (st == BT_OK) st = frame_set(f, n->s, &x);
        val_free(&x);
        return st;
    }
    if (!json_is_array(item) || json_array_size(item) != 2)
        return RERR(n, "unpacking an item that is not a pair into '%s, %s' is not supported", n->s, n->s2);
    st = from_json(r, n->a, json_array_get(item, 0), &x);
    if (st == BT_OK) st = from_json(r, n->a, json_array_get(item, 1), &y);
    if (st == BT_OK) st = frame_set(f, n->s, &x);
    if (st == BT_OK) st = frame_set(f, n->s2, &y);
    val_free(&x);
    val_free(&y);
    return st;
}

/* The items of a loop with a filter (`for x in y if c`) that pass it: c sees the targets, not
 * `loop` (jinja2 counts loop.index and loop.length over the items that pass). */
static bt_status filter_items(rctx *r, const node *n, json_t *items, json_t **out)
{
    json_t *kept = json_array();
    if (!kept) return OOM();
    bt_status st = BT_OK;
    for (size_t i = 0; i < json_array_size(items) && st == BT_OK; i++) {
        frame f = {.up = r->top};
        val c = {0};
        st = bind_targets(r, n, &f, json_array_get(items, i));
        r->top = &f;
        if (st == BT_OK) st = eval(r, n->kids[0], &c);
        r->top = f.up;
        if (st == BT_OK && truthy(&c)) json_array_append(kept, json_array_get(items, i));
        val_free(&c);
        frame_clear(&f);
    }
    if (st != BT_OK) {
        json_decref(kept);
        return st;
    }
    *out = kept;
    return BT_OK;
}

static bt_status render_for(rctx *r, const node *n)
{
    val it;
    BT_TRY(eval(r, n->a, &it));
    json_t *items = NULL;
    bt_status st = items_of(r, n->a, &it, &items);
    val_free(&it);
    if (st != BT_OK) return st;
    if (n->nkids) {
        json_t *all = items;
        st = filter_items(r, n, all, &items);
        json_decref(all);
        if (st != BT_OK) return st;
    }
    size_t cnt = json_array_size(items);
    loopinfo info = {0, (int64_t)cnt};
    for (size_t i = 0; i < cnt && st == BT_OK; i++) {
        if (++r->steps > MAX_STEPS) {
            st = RERR(n, "the render took more than %d steps", MAX_STEPS);
            break;
        }
        frame f = {.up = r->top};
        val lv = {.k = V_LOOP, .loop = &info};
        info.index0 = (int64_t)i;
        st = frame_set(&f, "loop", &lv);
        if (st == BT_OK) st = bind_targets(r, n, &f, json_array_get(items, i));
        r->top = &f;
        if (st == BT_OK) st = render_body(r, n->b);
        r->top = f.up;
        frame_clear(&f);
    }
    json_decref(items);
    if (st == BT_OK && cnt == 0 && n->c) {
        frame f = {.up = r->top};
        r->top = &f;
        st = render_body(r, n->c);
        r->top = f.up;
        frame_clear(&f);
    }
    return st;
}

static bt_status render_body(rctx *r, const node *n)
{
    for (; n; n = n->next) {
        val v = {0};
        bt_status st = BT_OK;
        if (++r->steps > MAX_STEPS) return RERR(n, "the render took more than %d steps", MAX_STEPS);
        if (r->out.n > MAX_OUTPUT) return RERR(n, "the rendering is longer than %zu bytes", MAX_OUTPUT);
        switch (n->kind) {
        case N_TEXT: st = tok_buf_put(&r->out, n->s, n->n); break;
        case N_OUT:
            st = eval(r, n->a, &v);
            if (st == BT_OK) st = put_str(r, n->a, &v, &r->out);
            val_free(&v);
            break;
        case N_IF:
            st = eval(r, n->a, &v);
            if (st == BT_OK) {
                int yes = truthy(&v);
                val_free(&v);
                st = render_body(r, yes ? n->b : n->c);
            }
            break;
        case N_FOR: st = render_for(r, n); break;
        case N_SET:
            st = eval(r, n->a, &v);
            if (st == BT_OK) st = frame_set(r->top, n->s, &v);
            val_free(&v);
            break;
        case N_SET_ATTR: {
            val ns;
            st = lookup(r, n, n->s, &ns);
            if (st == BT_OK && ns.k != V_NS) st = RERR(n, "'%s' is not a namespace: cannot set its attribute", n->s);
            json_t *j = NULL;
            if (st == BT_OK) st = eval(r, n->a, &v);
            if (st == BT_OK) st = to_json(r, n->a, &v, &j);
            if (st == BT_OK) json_object_set_new(ns.j, n->b->s, j);
            val_free(&v);
            val_free(&ns);
            break;
        }
        default: st = RERR(n, "internal: node %d is not a statement", n->kind);
        }
        if (st != BT_OK) return st;
    }
    return BT_OK;
}

bt_status bt_chat_template_render(const bt_chat_template *t, const json_t *vars, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (vars && !json_is_object(vars)) return bt_error(BT_ERR_INVALID_ARG, "%s: the variables must be a JSON object", t->name);
    frame top = {0};
    rctx r = {.t = t, .vars = vars, .top = &top};
    bt_status st = render_body(&r, t->body);
    if (st == BT_OK) st = tok_buf_put(&r.out, "", 1);
    frame_clear(&top);
    if (st != BT_OK) {
        free(r.out.s);
        return st;
    }
    *text = r.out.s;
    *len = r.out.n - 1;
    return BT_OK;
}
