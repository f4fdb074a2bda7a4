"""tests/tokenizer_ref.py: `baton tokenize` against the Hugging Face `tokenizers` library (0.19.1).

Trains small tokenizers with `tokenizers` on the Shakespeare text and lays each out as its real
model family's tokenizer.json is laid out: GPT-2 (ByteLevel with its own regex, added tokens with
lstrip, rstrip and normalized flags), Llama 3 (Split regex + ByteLevel, ignore_merges, a
Sequence post-processor with BOS), Qwen2 (NFC, its regex, specials, no BOS), Llama 2 (Prepend +
Replace normalizer, no pre-tokenizer, byte fallback, unk, the Replace/ByteFallback/Fuse/Strip
decoder, BOS) and Mistral (Metaspace pre-tokenizer, prepend_scheme first). Then, for each, on a
slice of the Shakespeare text, on tests/tok_unicode.txt (accents, CJK, emoji, combining marks,
right-to-left text, runs of spaces, tabs and newlines, digit runs, code) and on a text full of
special tokens, checks that baton's ids are the library's ids, that baton's decoding of them is
the library's decoding, and that decode(encode(x)) == x (NFC(x) for Qwen2). It also checks
tokenizer_config.json's add_eos_token (the Llama template rebuilt with EOS) and
clean_up_tokenization_spaces, --no-special and --keep-special.

usage: tokenizer_ref.py BATON SRCDIR WORKDIR
Prints one line per failure and "tokenizer_ref: N tests, N failed"; exits 1 when any failed.
"""
import json
import os
import subprocess
import sys
import time
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

baton, srcdir, work = sys.argv[1], sys.argv[2], sys.argv[3]
TRAIN_BYTES = 1_000_000      # training text: the first MB of Shakespeare
TEST_BYTES = 300_000         # compared text: the next 300 KB
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")

tests = failed = 0


def fail(msg):
    global failed
    failed += 1
    print("FAIL: " + msg, flush=True)


with open(os.path.join(srcdir, "data", "shakespeare.txt"), encoding="utf-8") as f:
    shakespeare = f.read()
train_text = shakespeare[:TRAIN_BYTES]
lines = train_text.splitlines()
with open(os.path.join(srcdir, "tests", "tok_unicode.txt"), encoding="utf-8", newline="") as f:
    unicode_text = f.read()


def trainer(vocab, specials=(), alphabet=()):
    return trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(specials), initial_alphabet=list(alphabet),
                               show_progress=False)


def save(name, tok, config=None):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=True))
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
    return d


def byte_level_tokenizer(pre, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainer(1500, alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def gpt2():
    tok = byte_level_tokenizer(pre_tokenizers.ByteLevel(add_prefix_space=False))
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(["<|endoftext|>", AddedToken("<mask>", lstrip=True, special=True)])
    tok.add_tokens([AddedToken("[R]", rstrip=True, normalized=False), AddedToken("Exeunt", normalized=True),
                    AddedToken("question", normalized=False)])
    return tok


def llama3():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok = byte_level_tokenizer(pre, ignore_merges=True)
    # entries that merges alone would not give, so that ignore_merges decides the ids: the most
    # frequent pre-tokens of the compared texts that are not in the vocabulary
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    counts = {}
    for text in [shakespeare[TRAIN_BYTES:TRAIN_BYTES + TEST_BYTES], unicode_text]:
        for piece, _ in pre.pre_tokenize_str(text):
            if piece not in vocab:
                counts[piece] = counts.get(piece, 0) + 1
    for piece in sorted(counts, key=lambda p: (-counts[p], p))[:40]:
        vocab[piece] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(data))
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + ["<|reserved_special_token_%d|>" % i for i in range(4)]
    tok.add_special_tokens(specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def qwen2():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainer(1200, alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    return tok


_trained_sp = []


def sentencepiece_bpe():
    """Llama 2's layout: <unk> <s> </s>, the 256 <0xNN> tokens, then the trained pieces (trained once)."""
    if _trained_sp:
        return json.loads(_trained_sp[0])
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    t.train_from_iterator(lines, trainer(1000))
    trained = json.loads(t.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    _trained_sp.append(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
                  "merges": trained["merges"]},
    }))
    return json.loads(_trained_sp[0])


def template(bos=True, eos=False):
    single, pair, specials = [], [], {}
    if bos:
        single.append({"SpecialToken": {"id": "<s>", "type_id": 0}})
        specials["<s>"] = {"id": "<s>", "ids": [1], "tokens": ["<s>"]}
    single.append({"Sequence": {"id": "A", "type_id": 0}})
    if eos:
        single.append({"SpecialToken": {"id": "</s>", "type_id": 0}})
        specials["</s>"] = {"id": "</s>", "ids": [2], "tokens": ["</s>"]}
    pair = single + [{"Sequence": {"id": "B", "type_id": 1}}]
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def llama2(eos=False):
    data = sentencepiece_bpe()
    data["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    data["post_processor"] = template(True, eos)
    return Tokenizer.from_str(json.dumps(data))


def mistral():
    data = sentencepiece_bpe()
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    data["post_processor"] = template(True, False)
    return Tokenizer.from_str(json.dumps(data))


def clean_up(s):  # transformers' clean_up_tokenization
    for a, b in [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                 (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]:
        s = s.replace(a, b)
    return s


def run_baton(args, data):
    p = subprocess.run([baton, "tokenize"] + args, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def check(name, d, tok, label, text, roundtrip=None, cleanup=False):
    """ids, decoding and decode(encode(text)) of baton against tok on text."""
    global tests
    want = tok.encode(text).ids
    tests += 1
    rc, out, err = run_baton([d], text.encode("utf-8"))
    got = [int(x) for x in out.split()] if rc == 0 else None
    if rc != 0 or not out.endswith(b"\n") or out.count(b"\n") != 1:
        fail("%s, %s: encode exited %d (%s), output %r..." % (name, label, rc, err.strip()[:300], out[:80]))
        return
    if got != want:
        i = first_difference(got, want)
        fail("%s, %s: ids differ at position %d of %d/%d: baton %s, tokenizers %s" %
             (name, label, i, len(got), len(want), got[max(0, i - 3):i + 5], want[max(0, i - 3):i + 5]))
    want_text = tok.decode(want, skip_special_tokens=True)
    if cleanup:
        want_text = clean_up(want_text)
    tests += 1
    rc, out, err = run_baton([d, "--decode"], " ".join(map(str, want)).encode())
    if rc != 0:
        fail("%s, %s: decode exited %d: %s" % (name, label, rc, err.strip()[:300]))
    elif out != want_text.encode("utf-8"):
        i = first_difference(out, want_text.encode("utf-8"))
        fail("%s, %s: decoding differs at byte %d: baton %r, tokenizers %r" %
             (name, label, i, out[max(0, i - 20):i + 20], want_text.encode()[max(0, i - 20):i + 20]))
    if roundtrip is not None:
        tests += 1
        if out != roundtrip.encode("utf-8"):
            i = first_difference(out, roundtrip.encode("utf-8"))
            fail("%s, %s: decode(encode(x)) != x at byte %d: %r against %r" %
                 (name, label, i, out[max(0, i - 20):i + 20], roundtrip.encode()[max(0, i - 20):i + 20]))


t0 = time.time()
built = {"gpt2": gpt2(), "llama3": llama3(), "qwen2": qwen2(), "llama2": llama2(), "mistral": mistral()}
configs = {
    "gpt2": {"tokenizer_class": "GPT2Tokenizer", "clean_up_tokenization_spaces": False},
    "llama3": {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
               "clean_up_tokenization_spaces": False},
    "qwen2": {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "clean_up_tokenization_spaces": False},
    "llama2": {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
               "bos_token": "<s>", "eos_token": "</s>", "clean_up_tokenization_spaces": False, "legacy": False},
    "mistral": {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                "clean_up_tokenization_spaces": False},
}
dirs = {name: save(name, tok, configs[name]) for name, tok in built.items()}
print("tokenizer_ref: trained and wrote %d tokenizers in %.1f s" % (len(built), time.time() - t0), flush=True)

slice_text = shakespeare[TRAIN_BYTES:TRAIN_BYTES + TEST_BYTES]
specials_text = ("<s>Hello</s> <|endoftext|>the end<|endoftext|>  <mask> x <mask>[R]   y [R]z Exeunt all. "
                 "question<|im_start|>user\nhi<|im_end|><|begin_of_text|>x<|reserved_special_token_2|> <unk>")
byte_level = {"gpt2", "llama3", "qwen2"}
if os.environ.get("BT_HAVE_PCRE2", "1") != "1":
    for name in sorted(byte_level):
        tests += 1
        rc, out, err = run_baton([dirs[name], "--text", "x"], b"")
        if rc != 2 or "PCRE2" not in err:
            fail("%s without PCRE2: exit %d, expected 2 naming PCRE2: %s" % (name, rc, err.strip()))
        del built[name]
if os.environ.get("BT_HAVE_UNISTRING", "1") != "1" and "qwen2" in built:
    tests += 1
    rc, out, err = run_baton([dirs["qwen2"], "--text", "x"], b"")
    if rc != 2 or "normalizer.type: \"NFC\" needs libunistring" not in err:
        fail("qwen2 without libunistring: exit %d, expected 2 naming libunistring: %s" % (rc, err.strip()))
    del built["qwen2"]
for name, tok in built.items():
    d = dirs[name]
    for label, text in [("Shakespeare (%d KB)" % (TEST_BYTES // 1000), slice_text), ("tok_unicode.txt", unicode_text)]:
        rt = unicodedata.normalize("NFC", text) if name == "qwen2" else text
        check(name, d, tok, label, text, roundtrip=rt)
    check(name, d, tok, "special tokens", specials_text)
    check(name, d, tok, "the empty text", "", roundtrip="")
    # --no-special and --keep-special against add_special_tokens=False and skip_special_tokens=False
    tests += 1
    rc, out, err = run_baton([d, "--no-special", "--text", specials_text], b"")
    want = tok.encode(specials_text, add_special_tokens=False).ids
    if rc != 0 or [int(x) for x in out.split()] != want:
        fail("%s: --no-special: exit %d, ids %s..., tokenizers %s... (%s)" % (name, rc, out[:60], want[:8], err.strip()))
    tests += 1
    ids = tok.encode(specials_text).ids
    rc, out, err = run_baton([d, "--decode", "--keep-special"], " ".join(map(str, ids)).encode())
    if rc != 0 or out != tok.decode(ids, skip_special_tokens=False).encode("utf-8"):
        fail("%s: --keep-special: exit %d: %r, tokenizers %r (%s)" %
             (name, rc, out[:80], tok.decode(ids, skip_special_tokens=False)[:80], err.strip()))

# tokenizer_config.json: add_eos_token rebuilds Llama's template; clean_up_tokenization_spaces
eos_dir = save("llama2_eos", built["llama2"], dict(configs["llama2"], add_eos_token=True))
check("llama2 with add_eos_token", eos_dir, llama2(eos=True), "tok_unicode.txt", unicode_text)
if "gpt2" in built:
    clean_dir = save("gpt2_clean", built["gpt2"], dict(configs["gpt2"], clean_up_tokenization_spaces=True))
    check("gpt2 with clean_up_tokenization_spaces", clean_dir, built["gpt2"], "tok_unicode.txt",
          unicode_text + " Hello , world . Is n't it ? I 'm sure !", cleanup=True)

# the whole Shakespeare text, timed (against tokenizers too with BT_TOK_FULL=1: that takes it 15 s);
# not in sanitizer builds (check.sh's asan job sets ASAN_OPTIONS), where it takes minutes
sanitized = "ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ
for name in [n for n in ["llama3", "llama2"] if n in built and not sanitized]:
    t0 = time.time()
    rc, out, err = run_baton([dirs[name], "--file", os.path.join(srcdir, "data", "shakespeare.txt")], b"")
    baton_s = time.time() - t0
    tests += 1
    if rc != 0:
        fail("%s, the whole Shakespeare text: exit %d (%s)" % (name, rc, err.strip()))
        continue
    line = "tokenizer_ref: %s on the whole Shakespeare text (%d bytes): %d ids in %.2f s" % (
        name, len(shakespeare.encode()), len(out.split()), baton_s)
    if os.environ.get("BT_TOK_FULL") == "1":
        t0 = time.time()
        want = built[name].encode(shakespeare).ids
        line += ", tokenizers %.2f s" % (time.time() - t0)
        if [int(x) for x in out.split()] != want:
            fail("%s, the whole Shakespeare text: the ids differ from tokenizers'" % name)
    print(line, flush=True)

print("tokenizer_ref: %d tests, %d failed" % (tests, failed))
sys.exit(1 if failed else 0)
