/* tests/test_chat_template.c: src/tok/chat_template.c's refusals and errors, which the jinja2
 * comparison (tests/chat_template_ref.sh) cannot show: every construct it does not implement is
 * refused at compile time naming it and its line:col; raise_exception fails the render with its
 * message; an attribute of an undefined value, a float, a printed list fail the render; and the
 * renderings that pin jinja2's rules down where the templates of the comparison do not reach
 * (scoping in loops, newline normalization, the trailing newline, lstrip_blocks at the start). */
#include <string.h>

#include "bt_test.h"
#include "core/error.h"
#include "tok/chat_template.h"

/* Compiling src fails with BT_ERR_MODEL and a message containing want. */
static void refused(const char *src, const char *want)
{
    bt_chat_template *t = NULL;
    bt_status st = bt_chat_template_compile(src, strlen(src), "t.jinja", &t);
    CU_ASSERT_EQUAL(st, BT_ERR_MODEL);
    CU_ASSERT_PTR_NULL(t);
    if (st != BT_OK && !strstr(bt_last_error(), want)) printf("\n    %s: got \"%s\", want \"%s\"\n", src, bt_last_error(), want);
    if (st != BT_OK) CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), want));
    bt_chat_template_destroy(t);
}

/* Renders src with vars (JSON text); returns the rendering (static) or NULL, the status in *st. */
static const char *render(const char *src, const char *vars, bt_status *st)
{
    static char out[4096];
    bt_chat_template *t = NULL;
    *st = bt_chat_template_compile(src, strlen(src), "t.jinja", &t);
    if (*st != BT_OK) {
        printf("\n    compile %s: %s\n", src, bt_last_error());
        return NULL;
    }
    json_t *v = json_loads(vars, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    char *text = NULL;
    size_t len = 0;
    *st = bt_chat_template_render(t, v, &text, &len);
    json_decref(v);
    bt_chat_template_destroy(t);
    if (*st != BT_OK) return NULL;
    CU_ASSERT_EQUAL(strlen(text), len);
    snprintf(out, sizeof out, "%s", text);
    free(text);
    return out;
}

static void renders(const char *src, const char *vars, const char *want)
{
    bt_status st;
    const char *got = render(src, vars, &st);
    CU_ASSERT_EQUAL(st, BT_OK);
    if (st != BT_OK) printf("\n    %s: %s\n", src, bt_last_error());
    if (got && strcmp(got, want) != 0) printf("\n    %s: got \"%s\", want \"%s\"\n", src, got, want);
    if (got) CU_ASSERT_STRING_EQUAL(got, want);
}

static void render_fails(const char *src, const char *vars, const char *want)
{
    bt_status st;
    const char *got = render(src, vars, &st);
    CU_ASSERT_PTR_NULL(got);
    CU_ASSERT_EQUAL(st, BT_ERR_INVALID_ARG);
    if (!got && !strstr(bt_last_error(), want)) printf("\n    %s: got \"%s\", want \"%s\"\n", src, bt_last_error(), want);
    if (!got) CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), want));
}

static void test_refusals(void)
{
    refused("a\n  {% macro m() %}{% endmacro %}", "t.jinja:2:6: tag 'macro' is not supported");
    refused("{% include 'x.jinja' %}", "t.jinja:1:4: tag 'include' is not supported");
    refused("{% extends 'base' %}", "tag 'extends' is not supported");
    refused("{% raw %}{{ x }}{% endraw %}", "tag 'raw' is not supported");
    refused("{% for x in y %}{% break %}{% endfor %}", "1:20: tag 'break' is not supported");
    refused("{{ x | wordcount }}", "1:8: filter 'wordcount' is not supported");
    refused("{{ x | map(attribute='content') }}", "filter 'map' is not supported");
    refused("{{ x | selectattr('role', 'divisibleby', 3) }}", "1:27: test 'divisibleby' is not supported");
    refused("{{ x | select(t) }}", "needs the test's name as a string literal");
    refused("{{ x | selectattr('a.b') }}", "an attribute name (a string literal without dots)");
    refused("{{ x | reject('equalto') }}", "'reject' with test 'equalto' takes 2 arguments");
    refused("{{ x is equalto }}", "test 'equalto' needs one argument");
    refused("{{ x is none(1) }}", "arguments to test 'none' are not supported");
    refused("{% if x is divisibleby(3) %}{% endif %}", "1:12: test 'divisibleby' is not supported");
    refused("{{ cycler('a') }}", "1:4: function 'cycler' is not supported");
    refused("{{ x.format(1) }}", "method 'format' is not supported");
    refused("{% for a, b, c in x %}{% endfor %}", "1:12: for with more than two targets is not supported");
    render_fails("{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{}", "not a pair");
    render_fails("{% for k, v in [1] | items %}{% endfor %}", "{}", "items of a list");
    refused("{% for a in x recursive %}{% endfor %}", "1:15: recursive loops are not supported");
    refused("{% set x %}a{% endset %}", "block set");
    refused("{{ 1.5 }}", "1:4: float literals are not supported");
    refused("{{ 4 / 2 }}", "1:6: operator '/' (a float) is not supported");
    refused("{{ (1, 2) }}", "tuples are not supported");
    refused("{% if x %}a", "unexpected end of template: expected 'endif'");
    refused("{% for x in y %}a{% else %}b", "expected 'endfor'");
    refused("{% endif %}", "1:4: unexpected 'endif'");
    refused("{{ x ", "unterminated tag");
    refused("ab\n{# never closed", "t.jinja:2:1: unterminated comment");
    refused("{{ 'open }}", "1:4: unterminated string literal");
    refused("{{ x ) }}", "unexpected ')'");
    refused("{{ x + }}", "expected an expression");
    refused("{{ f(x) }}", "function 'f' is not supported");
    refused("{{ x['a'](1) }}", "calling this expression is not supported");
    refused("{{ 99999999999999999999 }}", "integer literal out of range");
    refused("{{ '\\N{DASH}' }}", "escape \\N in a string literal is not supported");
    refused("\xff{{ x }}", "1:1: the template is not UTF-8");
    char deep[2000];
    size_t n = 0;
    n += (size_t)sprintf(deep, "{{ ");
    for (int i = 0; i < 300; i++) deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 300; i++) deep[n++] = ')';
    strcpy(deep + n, " }}");
    refused(deep, "nesting deeper than");
    bt_chat_template *t = NULL;
    static const char nul[] = "ab\0{{ x }}";
    CU_ASSERT_EQUAL(bt_chat_template_compile(nul, sizeof nul - 1, "t.jinja", &t), BT_ERR_MODEL);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "1:3: NUL byte"));
}

static void test_render_errors(void)
{
    render_fails("{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}",
                 "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}]}",
                 "t.jinja:1:39: raise_exception: Conversation roles must alternate");
    render_fails("{{ messages[0]['content'] }}", "{\"messages\": []}", "is undefined");
    render_fails("{{ nothing.role }}", "{}", "'nothing' is undefined");
    /* the name of a missing key built at render time outlives the key's value */
    render_fails("{{ d['mi' ~ 'ss'] + 1 }}", "{\"d\": {}}", "'miss' is undefined");
    render_fails("{{ 'a' + nothing }}", "{}", "'nothing' is undefined");
    render_fails("{{ temperature }}", "{\"temperature\": 0.5}", "a float value (0.5) is not supported");
    render_fails("{{ messages }}", "{\"messages\": []}", "printing a list (Python's repr) is not supported");
    render_fails("{{ 'a' + 1 }}", "{}", "unsupported operand types for +: str and int");
    render_fails("{{ 1 % 0 }}", "{}", "modulo by zero");
    render_fails("{{ 'x' % 3 }}", "{}", "string formatting");
    render_fails("{{ loop.index }}{% for m in [1] %}{{ loop.previtem }}{% endfor %}", "{}", "'loop' is undefined");
    render_fails("{% for m in [1] %}{{ loop.previtem }}{% endfor %}", "{}", "loop.previtem is not supported");
    render_fails("{{ m.items }}", "{\"m\": {\"items\": 1}}", "'items' names a method of a mapping");
    render_fails("{{ 'É' | upper }}", "{}", "non-ASCII");
    render_fails("{% for x in 5 %}{% endfor %}", "{}", "a int is not iterable");
    render_fails("{% set x = 1 %}{% set x.y = 2 %}", "{}", "'x' is not a namespace");
    render_fails("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}",
                 "the render took more than 20000000 steps");
}

static void test_rules(void)
{
    /* a set in a loop body lives for that iteration; the outer value stays */
    renders("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", "{}", "01010");
    renders("{% for m in [1, 2] %}{% if loop.first %}{% set s = m %}{% endif %}[{{ s }}]{% endfor %}", "{}", "[1][]");
    /* a set in an if at top level stays */
    renders("{% if true %}{% set y = 'a' %}{% endif %}{{ y }}", "{}", "a");
    /* \r\n and \r are newlines; one trailing newline is dropped */
    renders("a\r\nb\rc\n", "{}", "a\nb\nc");
    renders("a\n\n", "{}", "a\n");
    /* lstrip_blocks at the start of the template and after a block's newline, not before {{ */
    renders("  {% if true %}x{% endif %}\n  {{ 'y' }}", "{}", "x  y");
    renders("{% if true %}\n  {% if true %}\nz\n  {% endif %}\n{% endif %}", "{}", "z\n");
    /* + keeps what trim_blocks and lstrip_blocks would remove; - strips all whitespace */
    renders("a\n  {%+ if true +%}\nb{% endif %}", "{}", "a\n  \nb");
    renders("a \n {{- 'b' -}} \n c", "{}", "abc");
    /* the messages' text is data, never template */
    renders("{{ m }}", "{\"m\": \"{{ 1 }}{% if %}\"}", "{{ 1 }}{% if %}");
    /* and/or give an operand, not a bool; the conditional without else is undefined */
    renders("{{ '' or 'b' }}|{{ 'a' and 0 }}|{{ 'x' if false }}|", "{}", "b|0||");
    /* adjacent string literals are one */
    renders("{{ 'a' \"b\" }}", "{}", "ab");
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"refusals name the construct and line:col", test_refusals},
        {"render errors: raise_exception, undefined, floats, repr", test_render_errors},
        {"jinja2's rules: scoping, newlines, whitespace control", test_rules},
        {NULL, NULL},
    };
    return bt_test_main("chat_template", cases);
}
