"""tests/chat_template_ref.py: baton's chat templates (src/tok/chat_template.c, through
tests/chat_template_drv) against jinja2 (3.1.4) rendering them as transformers 4.40.2's
apply_chat_template does: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
with a global raise_exception that raises TemplateError, rendered with messages,
add_generation_prompt and the special tokens as keyword arguments.

Every template in tests/chat_templates/ is rendered with every message list below (none, one
user turn, system or not, multi-turn, unicode, content that looks like Jinja, roles that do not
alternate), with add_generation_prompt false and true. A rendering must equal jinja2's byte for
byte; where jinja2 raises, baton must fail too (exit 1), with raise_exception's message in its
error; any other exception of jinja2 (an undefined attribute) must be a failed render too.

usage: chat_template_ref.py DRIVER SRCDIR WORKDIR
Prints one line per failure and "chat_template_ref: N tests, N failed"; exits 1 when any failed.
"""
import json
import os
import subprocess
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

driver, srcdir, work = sys.argv[1], sys.argv[2], sys.argv[3]


def compile_like_transformers(source):
    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def m(role, content):
    return {"role": role, "content": content}


MESSAGES = {
    "empty": [],
    "user": [m("user", "Hello!")],
    "system_user": [m("system", "You are terse."), m("user", "What is 2+2?")],
    "multi": [m("user", "Hi"), m("assistant", " Hello, how can I help? "), m("user", "Tell me a joke.\n")],
    "system_multi": [m("system", "  Be kind.  "), m("user", "Hi"), m("assistant", "Hey."), m("user", "Bye")],
    "unicode": [m("system", "Tu es un assistant. 日本語で答えて 🎉"), m("user", "naïve café\n\tline two  \u00a0"),
                m("assistant", "Ça va — très bien ✓"), m("user", "😀👍🏽 עברית")],
    "jinja_text": [m("user", "{{ 1 + 1 }} {% if x %}y{% endif %} {# c #} {{- raw -}} <|eot_id|> '\"\\")],
    "not_alternating": [m("user", "one"), m("user", "two")],
    "bad_role": [m("user", "a"), m("tool", "b")],
    "named": [{"role": "user", "content": "with name", "name": "Ann"}],
    "ipython": [m("user", "call it"), m("assistant", "ok"), {"role": "ipython", "content": {"result": [1, "x"]}}],
}

# Message lists only some templates take: a dict content is printed (Python's repr, which baton
# refuses) by the templates without a branch for it.
ONLY = {"ipython": ["llama31.jinja"]}

EXTRAS = [
    {"bos_token": "<s>", "eos_token": "</s>"},
    {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "date_string": "01 Dec 2026", "extra": "x<y",
     "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather — at a place",
                                                 "parameters": {"type": "object", "required": ["city"],
                                                                "properties": {"city": {"type": "string"}}}}}]},
]

tests = failed = 0


def fail(what):
    global failed
    failed += 1
    print("FAIL:", what)


tdir = os.path.join(srcdir, "tests", "chat_templates")
for name in sorted(os.listdir(tdir)):
    path = os.path.join(tdir, name)
    with open(path, encoding="utf-8", newline="") as f:
        template = compile_like_transformers(f.read())
    rendered = 0
    for mname, messages in MESSAGES.items():
        if name not in ONLY.get(mname, [name]):
            continue
        for ei, extra in enumerate(EXTRAS):
            for gen in (False, True):
                case = f"{name} {mname} extra{ei} add_generation_prompt={gen}"
                tests += 1
                vars_ = dict(extra, messages=messages, add_generation_prompt=gen)
                try:
                    want, want_err = template.render(**vars_), None
                except Exception as e:  # raise_exception's TemplateError, UndefinedError, TypeError
                    want, want_err = None, e
                vpath = os.path.join(work, "vars.json")
                with open(vpath, "w", encoding="utf-8") as f:
                    json.dump(vars_, f, ensure_ascii=False)
                r = subprocess.run([driver, path, vpath], capture_output=True)
                err = r.stderr.decode("utf-8", "replace").strip()
                if want_err is None:
                    rendered += 1
                    if r.returncode != 0:
                        fail(f"{case}: jinja2 renders, baton fails (rc {r.returncode}): {err}")
                    elif r.stdout != want.encode("utf-8"):
                        fail(f"{case}: renderings differ\n  jinja2: {want!r}\n  baton:  {r.stdout.decode('utf-8', 'replace')!r}")
                else:
                    msg = str(want_err)
                    if r.returncode != 1:
                        fail(f"{case}: jinja2 raises {type(want_err).__name__} ({msg}), baton gives rc {r.returncode}")
                    elif type(want_err) is TemplateError and msg not in err:
                        fail(f"{case}: baton's error lacks raise_exception's message {msg!r}: {err}")
    if rendered < 8:  # a template that jinja2 itself fails on would show nothing
        fail(f"{name}: jinja2 renders only {rendered} of its cases")
print(f"chat_template_ref: {tests} tests, {failed} failed")
sys.exit(1 if failed else 0)
