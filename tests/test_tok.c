/* tests/test_tok.c: the parts of src/tok against values the `tokenizers` library (0.19.1) gives on
 * the same small files (computed with it once and written here): BPE merges (by rank, ties to the
 * leftmost, both merge forms), ignore_merges, byte fallback, unk and fuse_unk (with tokenizers'
 * order when a fallback follows an unknown character), added tokens with lstrip and rstrip,
 * normalized added tokens, the split behaviours and invert, Metaspace's prepend schemes, the
 * regex escapes rewritten for PCRE2, the decoders, from_utf8_lossy, the byte-level alphabet,
 * tokenizer_config.json; and the refusals: every unimplemented feature names its JSON path. */
#include <stdarg.h>
#include <string.h>

#include "bt_test.h"
#include "core/error.h"
#include "tok/tok.h"
#include "tok/tok_internal.h"

/* A BPE over a, b, c with merges "b c" < "a b" < "a bc" < "a a" (ranks 0..3). */
static const char base_json[] =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [], \"normalizer\": null, "
    "\"pre_tokenizer\": null, \"post_processor\": null, \"decoder\": null, \"model\": {\"type\": \"BPE\", \"dropout\": "
    "null, \"unk_token\": null, \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, "
    "\"byte_fallback\": false, \"ignore_merges\": false, \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, "
    "\"abc\": 5, \"aa\": 6, \"ca\": 7, \"<unk>\": 8, \"<0x64>\": 9, \" \": 10}, \"merges\": [\"b c\", \"a b\", \"a bc\", "
    "\"a a\"]}}";

/* base_json with each (old, new) pair replaced once; NULL-terminated pairs. The result is static. */
static const char *with(const char *first, ...)
{
    static char buf[8192];
    strcpy(buf, base_json);
    va_list ap;
    va_start(ap, first);
    for (const char *old = first; old; old = va_arg(ap, const char *)) {
        const char *rep = va_arg(ap, const char *);
        char *at = strstr(buf, old);
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        char rest[8192];
        strcpy(rest, at + strlen(old));
        strcpy(at, rep);
        strcat(at, rest);
    }
    va_end(ap);
    return buf;
}

static bt_tokenizer *load(const char *json, const char *config)
{
    bt_tokenizer *t = NULL;
    bt_status st = bt_tokenizer_from_json(json, strlen(json), config, config ? strlen(config) : 0, "test.json", &t);
    if (st != BT_OK) printf("\n    load failed: %s\n", bt_last_error());
    CU_ASSERT_EQUAL(st, BT_OK);
    return t;
}

/* The ids of text equal want[0..n). */
static void expect_ids(const bt_tokenizer *t, const char *text, const int32_t *want, size_t n)
{
    bt_tok_ids ids = {0};
    bt_status st = bt_tokenizer_encode(t, text, strlen(text), 1, &ids);
    if (st != BT_OK) printf("\n    encode \"%s\" failed: %s\n", text, bt_last_error());
    CU_ASSERT_EQUAL_FATAL(st, BT_OK);
    int same = ids.n == n && memcmp(ids.ids, want, n * sizeof *want) == 0;
    if (!same) {
        printf("\n    \"%s\": got", text);
        for (size_t i = 0; i < ids.n; i++) printf(" %d", ids.ids[i]);
        printf(", want");
        for (size_t i = 0; i < n; i++) printf(" %d", want[i]);
        printf("\n");
    }
    CU_ASSERT(same);
    free(ids.ids);
}
#define EXPECT(t, text, ...)                                                                 \
    do {                                                                                     \
        static const int32_t want_[] = {__VA_ARGS__};                                        \
        expect_ids(t, text, want_, sizeof want_ / sizeof want_[0]);                          \
    } while (0)

/* Loading json fails with BT_ERR_MODEL and a message holding every given fragment. */
static void expect_refused(const char *json, const char *config, const char *fragment)
{
    bt_tokenizer *t = NULL;
    bt_status st = bt_tokenizer_from_json(json, strlen(json), config, config ? strlen(config) : 0, "test.json", &t);
    CU_ASSERT_EQUAL(st, BT_ERR_MODEL);
    CU_ASSERT_PTR_NULL(t);
    const char *msg = bt_last_error();
    if (st == BT_OK || !strstr(msg, fragment)) printf("\n    wanted \"%s\" in: %s\n", fragment, st == BT_OK ? "(loaded)" : msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, fragment));
    bt_tokenizer_destroy(t);
}

static void test_merges(void)
{
    bt_tokenizer *t = load(base_json, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "abc", 5);     /* b c (rank 0) before a b (rank 1), then a bc */
    EXPECT(t, "aaa", 6, 0);  /* equal ranks: the leftmost pair first */
    EXPECT(t, "aaaa", 6, 6);
    EXPECT(t, "abab", 3, 3);
    EXPECT(t, "ca", 2, 0);
    bt_tokenizer_destroy(t);
    /* the list form of merges, as tokenizers 0.20 writes them, means the same */
    t = load(with("[\"b c\", \"a b\", \"a bc\", \"a a\"]", "[[\"b\", \"c\"], [\"a\", \"b\"], [\"a\", \"bc\"], [\"a\", \"a\"]]",
                  NULL), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "abc", 5);
    EXPECT(t, "aaa", 6, 0);
    bt_tokenizer_destroy(t);
    /* ignore_merges: a piece that is in the vocabulary is that token */
    /* GPT-2's and Qwen2's files write "" for no prefix and no suffix */
    t = load(with("\"continuing_subword_prefix\": null", "\"continuing_subword_prefix\": \"\"", "\"end_of_word_suffix\": null",
                  "\"end_of_word_suffix\": \"\"", NULL),
             NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "abc", 5);
    bt_tokenizer_destroy(t);
    t = load(with("\"ignore_merges\": false", "\"ignore_merges\": true", NULL), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "ca", 7);
    EXPECT(t, "abc", 5);
    bt_tokenizer_destroy(t);
}

static void test_unknown_characters(void)
{
    bt_tokenizer *t = load(with("\"unk_token\": null", "\"unk_token\": \"<unk>\"", "\"byte_fallback\": false",
                                "\"byte_fallback\": true", "\"fuse_unk\": false", "\"fuse_unk\": true", NULL),
                           NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "d", 9);      /* byte fallback: <0x64> */
    EXPECT(t, "e", 8);      /* no <0x65>: unk */
    EXPECT(t, "ee", 8);     /* fused */
    EXPECT(t, "ed", 9, 8);  /* tokenizers adds a pending unk only before the next vocabulary character */
    EXPECT(t, "ede", 9, 8);
    bt_tokenizer_destroy(t);
    t = load(with("\"unk_token\": null", "\"unk_token\": \"<unk>\"", NULL), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "dd e", 8, 8, 10, 8); /* not fused */
    bt_tokenizer_destroy(t);
    /* neither unk nor fallback: tokenizers drops the character silently, baton refuses the text */
    t = load(base_json, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    bt_tok_ids ids = {0};
    CU_ASSERT_EQUAL(bt_tokenizer_encode(t, "xabc", 4, 1, &ids), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "U+0078"));
    /* text that is not UTF-8 is refused naming the byte */
    CU_ASSERT_EQUAL(bt_tokenizer_encode(t, "ab\xC3(", 4, 1, &ids), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "byte 2"));
    free(ids.ids);
    bt_tokenizer_destroy(t);
}

static const char added_tokens[] =
    "\"added_tokens\": [{\"id\": 11, \"content\": \"<m>\", \"single_word\": false, \"lstrip\": true, \"rstrip\": false, "
    "\"normalized\": false, \"special\": true}, {\"id\": 12, \"content\": \"[r]\", \"single_word\": false, \"lstrip\": "
    "false, \"rstrip\": true, \"normalized\": false, \"special\": false}, {\"id\": 5, \"content\": \"abc\", "
    "\"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": true, \"special\": false}, {\"id\": 13, "
    "\"content\": \"<mm>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
    "\"special\": true}]";

static void test_added_tokens(void)
{
    bt_tokenizer *t = load(with("\"added_tokens\": []", added_tokens, NULL), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "a  <m>b", 0, 11, 1);        /* lstrip takes the spaces before it */
    EXPECT(t, "a [r]  b", 0, 10, 12, 1);   /* rstrip the spaces after */
    EXPECT(t, "<mm><m>", 13, 11);          /* the longest match */
    EXPECT(t, "  <m>[r]  <m>", 11, 12, 11); /* lstrip never reaches into the previous match */
    CU_ASSERT_EQUAL(bt_tokenizer_token_id(t, "<mm>"), 13);
    CU_ASSERT_EQUAL(bt_tokenizer_vocab_size(t), 14);
    static const int32_t ids[] = {0, 11, 13, 12, 5};
    char *text;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(bt_tokenizer_decode(t, ids, 5, 1, &text, &len), BT_OK);
    CU_ASSERT_STRING_EQUAL(text, "a [r] abc"); /* no decoder: joined by spaces, specials left out */
    free(text);
    CU_ASSERT_EQUAL_FATAL(bt_tokenizer_decode(t, ids, 5, 0, &text, &len), BT_OK);
    CU_ASSERT_STRING_EQUAL(text, "a <m> <mm> [r] abc");
    free(text);
    static const int32_t bad[] = {0, 14};
    CU_ASSERT_EQUAL(bt_tokenizer_decode(t, bad, 2, 1, &text, &len), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "id 14 (the 2nd"));
    bt_tokenizer_destroy(t);
    /* a normalized added token is matched by its normalized form: Prepend makes "abc" "_abc" */
    t = load(with("\"added_tokens\": []",
                  "\"added_tokens\": [{\"id\": 11, \"content\": \"ab\", \"single_word\": false, \"lstrip\": false, "
                  "\"rstrip\": false, \"normalized\": true, \"special\": false}]",
                  "\"normalizer\": null", "\"normalizer\": {\"type\": \"Prepend\", \"prepend\": \" \"}", "\"id\": 11",
                  "\"id\": 3", NULL),
             NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "ab", 3);            /* " ab" is the token */
    EXPECT(t, "b ab", 10, 1, 3);   /* " b" " ab" */
    EXPECT(t, "c ab c", 10, 2, 3, 10, 2);
    bt_tokenizer_destroy(t);
}

/* The pieces one pre-tokenizer makes of text, joined by '|'. */
static void expect_pieces(const char *pre_json, const char *text, const char *want)
{
    char json[8192];
    snprintf(json, sizeof json, "%s", with("\"pre_tokenizer\": null", pre_json, NULL));
    bt_tokenizer *t = load(json, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    tok_pieces in = {0}, out = {0};
    CU_ASSERT_EQUAL_FATAL(tok_pieces_add(&in, text, strlen(text), -1, 1), BT_OK);
    for (size_t k = 0; k < t->n_pre; k++) {
        out.n = out.buf.n = 0;
        CU_ASSERT_EQUAL_FATAL(tok_pre_tokenize(&t->pre[k], &in, &out), BT_OK);
        tok_pieces_swap(&in, &out);
    }
    char got[512] = "";
    for (size_t k = 0; k < in.n; k++) {
        if (k) strcat(got, "|");
        strncat(got, in.buf.s + in.p[k].off, in.p[k].len);
    }
    if (strcmp(got, want) != 0) printf("\n    %s on \"%s\": got \"%s\", want \"%s\"\n", pre_json, text, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    tok_pieces_free(&in);
    tok_pieces_free(&out);
    bt_tokenizer_destroy(t);
}

static void test_split_behaviours(void)
{
    static const struct {
        const char *behavior;
        const char *plain, *inverted;
    } cases[] = {
        {"Removed", "a|b|c", "-|-|-|-"},
        {"Isolated", "a|-|-|b|-|c|-", "a|-|-|b|-|c|-"},
        {"MergedWithPrevious", "a-|-|b-|c-", "a|-|-b|-c|-"},
        {"MergedWithNext", "a|-|-b|-c|-", "a-|-|b-|c-"},
        {"Contiguous", "a|--|b|-|c|-", "a|--|b|-|c|-"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int inv = 0; inv < 2; inv++) {
            char pre[256];
            snprintf(pre, sizeof pre,
                     "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\", "
                     "\"invert\": %s}",
                     cases[i].behavior, inv ? "true" : "false");
            expect_pieces(pre, "a--b-c-", inv ? cases[i].inverted : cases[i].plain);
        }
}

static void test_metaspace(void)
{
    static const struct {
        const char *scheme;
        int split;
        const char *want;
    } cases[] = {
        {"always", 1, "\xE2\x96\x81hey|\xE2\x96\x81|\xE2\x96\x81you|\xE2\x96\x81|\xE2\x96\x81x"},
        {"always", 0, "\xE2\x96\x81hey\xE2\x96\x81\xE2\x96\x81you\xE2\x96\x81\xE2\x96\x81x"},
        {"first", 1, "\xE2\x96\x81hey|\xE2\x96\x81|\xE2\x96\x81you|\xE2\x96\x81|\xE2\x96\x81x"},
        {"never", 1, "hey|\xE2\x96\x81|\xE2\x96\x81you|\xE2\x96\x81|\xE2\x96\x81x"},
        {"never", 0, "hey\xE2\x96\x81\xE2\x96\x81you\xE2\x96\x81\xE2\x96\x81x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char pre[256];
        snprintf(pre, sizeof pre,
                 "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"%s\", "
                 "\"split\": %s}",
                 cases[i].scheme, cases[i].split ? "true" : "false");
        expect_pieces(pre, "hey  you \xE2\x96\x81x", cases[i].want);
    }
    /* the older form: add_prefix_space false means prepend_scheme never */
    expect_pieces("\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"add_prefix_space\": false, "
                  "\"str_rep\": \"\\u2581\"}",
                  "hey  you", "hey|\xE2\x96\x81|\xE2\x96\x81you");
}

static void test_regex_meaning(void)
{
    if (!bt_tokenizer_have_regex()) {
        expect_refused(with("\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
                                                      "false, \"trim_offsets\": true, \"use_regex\": true}", NULL),
                       NULL, "pre_tokenizer.use_regex: this baton was built without PCRE2");
        return;
    }
#define SPLIT(re) "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"" re "\"}, \"behavior\": \"Isolated\", \"invert\": false}"
    expect_pieces(SPLIT("\\\\s+"), "a\xE1\xA0\x8E" "b c", "a\xE1\xA0\x8E" "b| |c"); /* U+180E is not White_Space */
    expect_pieces(SPLIT("\\\\w+"), "e\xCC\x81x y", "e\xCC\x81x| |y");               /* \w takes combining marks */
    expect_pieces(SPLIT("\\\\h+"), "xx09afG", "xx|09af|G");                         /* Ruby's \h: hex digits */
    expect_pieces(SPLIT("|x"), "axb", "a|x|b");                                     /* empty matches, Rust's order */
    expect_pieces(SPLIT("(?i:'s)"), "it'S", "it|'S");
    expect_pieces(SPLIT("\\\\u0041+"), "xAAy", "x|AA|y");
    /* GPT-2's ByteLevel: its regex, then the byte-level characters (a space is U+0120) */
    expect_pieces("\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
                  "\"use_regex\": true}",
                  "Hi  there!\n", "\xC4\xA0Hi|\xC4\xA0|\xC4\xA0there|!|\xC4\x8A");
    expect_refused(with("\"pre_tokenizer\": null", SPLIT("\\\\bx"), NULL), NULL,
                   "pre_tokenizer.pattern.Regex: the word boundary \\b is not supported");
    expect_refused(with("\"pre_tokenizer\": null", SPLIT("[\\\\W]"), NULL), NULL,
                   "pre_tokenizer.pattern.Regex: \\W inside a character class");
    expect_refused(with("\"pre_tokenizer\": null", SPLIT("[a-z&&[^b]]"), NULL), NULL, "pre_tokenizer.pattern.Regex: a class");
    expect_refused(with("\"pre_tokenizer\": null", SPLIT("(x"), NULL), NULL,
                   "pre_tokenizer.pattern.Regex: the regex does not compile");
#undef SPLIT
}

static void decode_with(const char *decoder_json, const char *const *tokens, size_t n, const char *want)
{
    tok_dec d;
    char json[8192];
    snprintf(json, sizeof json, "%s", with("\"decoder\": null", decoder_json, NULL));
    bt_tokenizer *t = load(json, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    tok_strs a = {0}, b = {0};
    for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL_FATAL(tok_strs_add(&a, tokens[i], strlen(tokens[i])), BT_OK);
    for (size_t k = 0; k < t->n_dec; k++) {
        d = t->dec[k];
        tok_strs_free(&b);
        CU_ASSERT_EQUAL_FATAL(tok_decode_step(&d, &a, &b), BT_OK);
        tok_strs tmp = a;
        a = b;
        b = tmp;
    }
    char got[512] = "";
    for (size_t i = 0; i < a.n; i++) strncat(got, a.s[i], a.len[i]);
    if (strcmp(got, want) != 0) printf("\n    %s: got \"%s\", want \"%s\"\n", decoder_json, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    tok_strs_free(&a);
    tok_strs_free(&b);
    bt_tokenizer_destroy(t);
}

static void test_decoders(void)
{
    static const char *const strip_in[] = {"  a ", " b", "   "};
    decode_with("\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": 2, \"stop\": 1}", strip_in, 3, "ab");
    static const char *const fb_in[] = {"<0xE6>", "<0x97>", "x", "<0xE6>", "<0x97>", "<0xA5>", "<0x+A>", "<0xzz>"};
    decode_with("\"decoder\": {\"type\": \"ByteFallback\"}", fb_in, 8,
                "\xEF\xBF\xBD\xEF\xBF\xBDx\xE6\x97\xA5\n<0xzz>"); /* a run that is not UTF-8: U+FFFD per byte */
    static const char *const ms_in[] = {"\xE2\x96\x81\xE2\x96\x81" "a\xE2\x96\x81" "b", "\xE2\x96\x81" "c"};
    decode_with("\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\", "
                "\"split\": true}",
                ms_in, 2, "ab c");
    decode_with("\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"never\", "
                "\"split\": true}",
                ms_in, 2, "  a b c");
    static const char *const bl_in[] = {"\xC4\xA0hi", "\xC3\xA6\xC4\xB9", "\xC2\xA5", "\xE2\x96\x81x", "\xC3\xA6"};
    decode_with("\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
                "\"use_regex\": true}",
                bl_in, 5, " hi\xE6\x97\xA5\xE2\x96\x81x\xEF\xBF\xBD");
    static const char *const llama_in[] = {"\xE2\x96\x81Hi", "<0xE6>", "<0x97>", "<0xA5>", "\xE2\x96\x81you"};
    decode_with("\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
                "\"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": "
                "\"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}",
                llama_in, 5, "Hi\xE6\x97\xA5 you");
}

static void test_utf8_and_alphabet(void)
{
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        {"a\xE6\x97", 3, "a\xEF\xBF\xBD"},                  /* a cut sequence: one U+FFFD */
        {"\xF0\x80x", 3, "\xEF\xBF\xBD\xEF\xBF\xBDx"},      /* F0 80 is no prefix of any sequence */
        {"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* a surrogate */
        {"\xC3\xA9\xFF", 3, "\xC3\xA9\xEF\xBF\xBD"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tok_buf b = {0};
        CU_ASSERT_EQUAL(tok_buf_put_lossy(&b, (const unsigned char *)cases[i].in, cases[i].n), BT_OK);
        CU_ASSERT_STRING_EQUAL(b.s, cases[i].want);
        free(b.s);
    }
    CU_ASSERT_EQUAL(tok_byte_char(' '), 0x120);
    CU_ASSERT_EQUAL(tok_byte_char('\n'), 0x10A);
    CU_ASSERT_EQUAL(tok_byte_char('A'), 'A');
    CU_ASSERT_EQUAL(tok_byte_char(0xAD), 0x143);
    CU_ASSERT_EQUAL(tok_byte_char(0x7F), 0x121);
    int seen[400] = {0}, bijective = 1;
    for (int b = 0; b < 256; b++) {
        uint32_t c = tok_byte_char((unsigned char)b);
        if (c >= 400 || seen[c]++ || tok_char_byte(c) != b) bijective = 0;
    }
    CU_ASSERT(bijective);
    CU_ASSERT_EQUAL(tok_char_byte(0x144), -1);
    CU_ASSERT_EQUAL(tok_utf8_check("ab\xC3", 3), 2);
}

static void test_templates_and_config(void)
{
    static const char template_json[] =
        "\"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\", \"add_prefix_space\": "
        "true, \"trim_offsets\": false, \"use_regex\": true}, {\"type\": \"TemplateProcessing\", \"single\": "
        "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
        "{\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {\"<s>\": {\"id\": "
        "\"<s>\", \"ids\": [11], \"tokens\": [\"<s>\"]}, \"</s>\": {\"id\": \"</s>\", \"ids\": [12, 13], \"tokens\": "
        "[\"</s>\", \"x\"]}}}]}";
    static const char specials[] =
        "\"added_tokens\": [{\"id\": 11, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": "
        "false, \"normalized\": false, \"special\": true}, {\"id\": 12, \"content\": \"</s>\", \"single_word\": false, "
        "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}]";
    char json[8192];
    snprintf(json, sizeof json, "%s", with("\"post_processor\": null", template_json, "\"added_tokens\": []", specials, NULL));
    bt_tokenizer *t = load(json, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "ab", 11, 3, 12, 13);
    EXPECT(t, "", 11, 12, 13);
    bt_tok_ids ids = {0};
    CU_ASSERT_EQUAL(bt_tokenizer_encode(t, "ab", 2, 0, &ids), BT_OK); /* add_special 0: the model's ids alone */
    CU_ASSERT(ids.n == 1 && ids.ids[0] == 3);
    free(ids.ids);
    bt_tokenizer_destroy(t);
    /* LlamaTokenizerFast rebuilds the template from add_bos_token / add_eos_token */
    t = load(json, "{\"tokenizer_class\": \"LlamaTokenizer\", \"add_bos_token\": false, \"add_eos_token\": true}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "ab", 3, 12);
    bt_tokenizer_destroy(t);
    t = load(json, "{\"tokenizer_class\": \"LlamaTokenizerFast\"}"); /* its defaults: BOS, no EOS */
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    EXPECT(t, "ab", 11, 3);
    bt_tokenizer_destroy(t);
    /* other classes keep the file's template: the keys must agree with it */
    t = load(json, "{\"tokenizer_class\": \"PreTrainedTokenizerFast\", \"add_bos_token\": true, \"bos_token\": \"<s>\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    bt_tokenizer_destroy(t);
    expect_refused(json, "{\"tokenizer_class\": \"PreTrainedTokenizerFast\", \"add_bos_token\": false, \"bos_token\": \"<s>\"}",
                   "add_bos_token is false, but test.json's post_processor adds it");
    expect_refused(json, "{\"tokenizer_class\": \"LlamaTokenizerFast\", \"add_prefix_space\": true}", "add_prefix_space");
    expect_refused(json, "{\"tokenizer_class\": \"LlamaTokenizer\", \"bos_token\": \"<nope>\"}", "bos_token \"<nope>\" is not a token");
    /* clean_up_tokenization_spaces */
    t = load(with("\"<0x64>\": 9", "\"<0x64>\": 9, \".\": 11", NULL),
             "{\"clean_up_tokenization_spaces\": true}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    static const int32_t dots[] = {0, 11};
    char *text;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(bt_tokenizer_decode(t, dots, 2, 1, &text, &len), BT_OK);
    CU_ASSERT_STRING_EQUAL(text, "a."); /* "a ." without the clean-up */
    free(text);
    bt_tokenizer_destroy(t);
}

static void test_refusals(void)
{
    static const struct {
        const char *old, *rep, *fragment;
    } cases[] = {
        {"\"type\": \"BPE\"", "\"type\": \"Unigram\"", "test.json: model.type: the model \"Unigram\" is not supported"},
        {"\"dropout\": null", "\"dropout\": 0.1", "model.dropout: is not supported"},
        {"\"continuing_subword_prefix\": null", "\"continuing_subword_prefix\": \"##\"", "model.continuing_subword_prefix"},
        {"\"end_of_word_suffix\": null", "\"end_of_word_suffix\": \"</w>\"", "model.end_of_word_suffix"},
        {"\"fuse_unk\": false", "\"fuse_unk\": false, \"foo\": 1", "model.foo: this key is not supported"},
        {"\"version\": \"1.0\"", "\"version\": \"2.0\"", "version: \"2.0\" is not supported"},
        {"\"truncation\": null", "\"truncation\": {\"max_length\": 5}", "truncation: is not supported"},
        {"\"padding\": null", "\"padding\": {}", "padding: is not supported"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"Lowercase\"}", "normalizer.type: the normalizer \"Lowercase\""},
        {"\"normalizer\": null",
         "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"x\"}, {\"type\": \"Replace\", "
         "\"pattern\": {\"Regex\": \"x\"}, \"content\": \"y\"}]}",
         "normalizer.normalizers[1].pattern.Regex: a regex pattern is not supported here"},
        {"\"pre_tokenizer\": null",
         "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Metaspace\", \"replacement\": "
         "\"\\u2581\", \"prepend_scheme\": \"always\", \"split\": true}, {\"type\": \"Digits\", \"individual_digits\": "
         "true}]}",
         "pre_tokenizer.pretokenizers[1].type: the pre-tokenizer \"Digits\" is not supported"},
        {"\"pre_tokenizer\": null",
         "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Sideways\", \"invert\": "
         "false}",
         "pre_tokenizer.behavior: \"Sideways\" is not a split behavior"},
        {"\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"\"}, \"behavior\": "
                                    "\"Isolated\", \"invert\": false}",
         "pre_tokenizer.pattern.String: an empty pattern"},
        {"\"normalizer\": null, \"pre_tokenizer\": null",
         "\"normalizer\": {\"type\": \"Prepend\", \"prepend\": \"_\"}, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
         "\"replacement\": \"_\", \"prepend_scheme\": \"first\", \"split\": false}",
         "pre_tokenizer.prepend_scheme: \"first\" after a Prepend or Replace normalizer"},
        {"\"post_processor\": null", "\"post_processor\": {\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2]}",
         "post_processor.type: the post-processor \"RobertaProcessing\""},
        {"\"post_processor\": null",
         "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
         "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {}}",
         "post_processor.single[0].SpecialToken.id: \"<s>\" is not in post_processor.special_tokens"},
        {"\"post_processor\": null",
         "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"B\", \"type_id\": "
         "0}}], \"pair\": [], \"special_tokens\": {}}",
         "post_processor.single[0].Sequence.id: a single-sequence template can only hold the sequence \"A\""},
        {"\"decoder\": null", "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": "
                              "\"WordPiece\", \"prefix\": \"##\", \"cleanup\": true}]}",
         "decoder.decoders[1].type: the decoder \"WordPiece\" is not supported"},
        {"\"decoder\": null", "\"decoder\": {\"type\": \"Strip\", \"content\": \"ab\", \"start\": 1, \"stop\": 0}",
         "decoder.content: must be one character"},
        {"\"added_tokens\": []",
         "\"added_tokens\": [{\"id\": 11, \"content\": \"<m>\", \"single_word\": true, \"lstrip\": false, \"rstrip\": false, "
         "\"normalized\": false, \"special\": true}]",
         "added_tokens[0].single_word: single_word tokens are not supported"},
        {"\"added_tokens\": []",
         "\"added_tokens\": [{\"id\": 12, \"content\": \"<m>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
         "\"normalized\": false, \"special\": true}]",
         "added_tokens[0].id: the file says 12, but tokenizers gives this token the id 11"},
        {"\"added_tokens\": []",
         "\"added_tokens\": [{\"id\": 3, \"content\": \"ab\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
         "\"normalized\": false, \"special\": true}, {\"id\": 3, \"content\": \"ab\", \"single_word\": false, \"lstrip\": "
         "true, \"rstrip\": false, \"normalized\": false, \"special\": true}]",
         "added_tokens[1].content: \"ab\" is added twice"},
        {"\"a bc\"", "\"a bd\"", "model.merges[2]: \"bd\" is not in model.vocab"},
        {"\"a bc\"", "\"a b c\"", "model.merges[2]: a merge must be two tokens separated by one space"},
        {"\"a bc\"", "\"abc\"", "model.merges[2]: a merge must be two tokens"},
        {"\"aa\": 6", "\"aa\": 5", "model.vocab.\"aa\": the id 5 is also the id of"},
        {"\"aa\": 6", "\"aa\": -1", "model.vocab.\"aa\": an id must be an integer from 0"},
        {"\"unk_token\": null", "\"unk_token\": \"<nope>\"", "model.unk_token: \"<nope>\" is not in model.vocab"},
        {"\"fuse_unk\": false", "\"fuse_unk\": 1", "model.fuse_unk: must be true or false"},
        {"\"aa\": 6", "\"aa\": 6, \"aa\": 6", "test.json:1:"}, /* duplicate keys: jansson names line and column */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[8192];
        snprintf(json, sizeof json, "%s", with(cases[i].old, cases[i].rep, NULL));
        expect_refused(json, NULL, cases[i].fragment);
    }
    if (!bt_tokenizer_have_unicode_normalization())
        expect_refused(with("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", NULL), NULL,
                       "normalizer.type: \"NFC\" needs libunistring");
}

static void test_nfc(void)
{
    if (!bt_tokenizer_have_unicode_normalization()) return; /* the refusal is test_refusals' */
    tok_norm nfc = {.kind = TOK_NORM_NFC};
    tok_buf b = {0};
    static const char in[] = "cafe\xCC\x81 \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB";
    CU_ASSERT_EQUAL(tok_normalize(&nfc, 1, in, sizeof in - 1, &b), BT_OK);
    CU_ASSERT_STRING_EQUAL(b.s, "caf\xC3\xA9 \xED\x95\x9C"); /* café, and the jamo as one syllable */
    free(b.s);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"BPE merges: ranks, ties, both merge forms, ignore_merges", test_merges},
        {"byte fallback, unk, fuse_unk; refused characters and text", test_unknown_characters},
        {"added tokens: lstrip, rstrip, longest, normalized, decode", test_added_tokens},
        {"Split: the five behaviours, invert", test_split_behaviours},
        {"Metaspace: prepend schemes, split, older form", test_metaspace},
        {"regexes: Oniguruma's meaning through PCRE2", test_regex_meaning},
        {"decoders: Strip, ByteFallback, Metaspace, ByteLevel, Llama 2's", test_decoders},
        {"from_utf8_lossy and the byte-level alphabet", test_utf8_and_alphabet},
        {"templates, tokenizer_config.json", test_templates_and_config},
        {"refusals name the JSON path", test_refusals},
        {"NFC", test_nfc},
        {NULL, NULL},
    };
    return bt_test_main("tok", cases);
}
