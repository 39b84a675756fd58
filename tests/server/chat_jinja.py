#!/usr/bin/env python3
"""chat_jinja.py — the server's chat renderings against Jinja itself.

For every template in the fixture folder that pm_chat_render recognizes,
each conversation below is rendered twice: by Jinja, set up the way
Hugging Face's apply_chat_template sets it up (a sandboxed environment
with trim_blocks and lstrip_blocks, raise_exception and strftime_now, the
family's bos_token and eos_token, add_generation_prompt true), and by the
server's renderer. The prompts must be equal byte for byte; where the
template raises, the server must refuse with the same words.

One documented difference is allowed: Gemma's templates raise on a leading
system message, which the server folds into the first user turn instead.

Usage: chat_jinja.py PM_CHAT_RENDER FIXTURE_DIR    (exit 77: no jinja2)
"""
import os
import subprocess
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.sandbox
except ImportError:
    print("skip: python3-jinja2 is not installed")
    sys.exit(77)

DATE = "01 Dec 2026"

# The special-token texts Hugging Face passes to each family's template.
TOKENS = {
    "chatml": ("<s>", "<|im_end|>"),
    "qwen2.5": ("", "<|im_end|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral-v0": ("<s>", "</s>"),
    "mistral-v1": ("<s>", "</s>"),
    "mistral-v3": ("<s>", "</s>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "phi3.5": ("<s>", "<|endoftext|>"),
    "phi3-v0": ("<s>", "<|endoftext|>"),
    "gemma": ("<bos>", "<eos>"),
    "gemma2": ("<bos>", "<eos>"),
}

CONVERSATIONS = [
    [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Why?")],
    [("user", "Hi"), ("assistant", "Hello!"), ("user", "Why?")],
    [("user", "Hi")],
    [("user", " \t\u00a0Hi there\n\u3000"), ("assistant", " Hello! \n"), ("user", "\u65e5\u672c \u200b")],
    [("system", "  Spaced system  \n"), ("user", "\n\nq\n")],
    [("user", "Hi"), ("system", "Be brief.")],
    [("system", ""), ("user", "Hi")],
    [("user", "a"), ("user", "b")],
    [("assistant", "a")],
    [("system", "S"), ("user", "a"), ("assistant", "b")],
    [("system", "S"), ("system", "T"), ("user", "a")],
]


class TemplateError(Exception):
    pass


def jinja_render(text, fmt, conv):
    def raise_exception(message):
        raise TemplateError(message)

    def strftime_now(f):
        import datetime
        return datetime.datetime(2026, 12, 1).strftime(f)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    bos, eos = TOKENS[fmt]
    msgs = [{"role": r, "content": c} for r, c in conv]
    try:
        return 0, env.from_string(text).render(messages=msgs, bos_token=bos, eos_token=eos,
                                               add_generation_prompt=True)
    except TemplateError as e:
        return 3, str(e)


def ours(tool, fmt, conv):
    args = [tool, "render", fmt, DATE]
    for r, c in conv:
        args += [r, c]
    p = subprocess.run(args, capture_output=True)
    return p.returncode, p.stdout.decode("utf-8")


def main():
    tool, folder = sys.argv[1], sys.argv[2]
    failures = checked = 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".jinja"):
            continue
        path = os.path.join(folder, name)
        fmt = subprocess.run([tool, "detect", path], capture_output=True, text=True).stdout.strip()
        if fmt == "unknown":
            continue
        text = open(path, encoding="utf-8").read()
        for conv in CONVERSATIONS:
            want = jinja_render(text, fmt, conv)
            got = ours(tool, fmt, conv)
            if fmt.startswith("gemma") and conv[0][0] == "system" and want == (3, "System role not supported"):
                continue  # the documented fold
            checked += 1
            if got != want:
                failures += 1
                print(f"{name} ({fmt}) {conv}:\n  jinja {want!r}\n  ours  {got!r}")
    print(f"{checked} renderings compared, {failures} differ")
    sys.exit(1 if failures or checked == 0 else 0)


main()
