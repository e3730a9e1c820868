#!/usr/bin/env python3
"""Reference renders of chat templates with Python's jinja2, for mtp.cpp's chat library tests.

Renders every template in tests/chat/data/templates.json with every conversation in
tests/chat/data/cases.json, and every snippet in tests/chat/data/snippets.json, under the Jinja environment
that Hugging Face transformers uses for chat templates (transformers/utils/chat_template_utils.py:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]), its own
`tojson` (json.dumps, ensure_ascii=False, keys in insertion order), `raise_exception`, `strftime_now`), and
writes the expected outputs under tests/chat/data/expected/. The C++ test (tests/chat) compares its renders
with these files byte for byte; it does not need Python.

    python3 scripts/reference/chat/render_reference.py           # regenerate the expected files
    python3 scripts/reference/chat/render_reference.py --check   # compare with the checked-in files (CI); exit 1 on drift

Needs jinja2 (Debian: python3-jinja2). transformers itself is not needed.
"""

import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DATA = os.path.join(ROOT, "tests", "chat", "data")
EXPECTED = os.path.join(DATA, "expected")


def make_env():
    # As transformers' _compile_jinja_template builds it (the AssistantTracker extension only adds the
    # {% generation %} tag, which renders its body; it is emulated below).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    class GenerationTag(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def normalize_messages(messages):
    # What mtp::chat::normalize_messages does before rendering: tool-call arguments given as JSON strings
    # become objects, missing ones become {}.
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                c = json.loads(json.dumps(c))
                fn = c["function"]
                if fn.get("arguments") is None:
                    fn["arguments"] = {}
                elif isinstance(fn["arguments"], str):
                    fn["arguments"] = json.loads(fn["arguments"])
                calls.append(c)
            m["tool_calls"] = calls
        out.append(m)
    return out


def render_case(env, source, spec, case, tools_table):
    # The variables mtp::chat::ChatTemplate::render passes, as transformers' apply_chat_template does.
    ctx = {
        "messages": normalize_messages(case["messages"]),
        "tools": tools_table[case["tools"]] if "tools" in case else None,
        "add_generation_prompt": case.get("add_generation_prompt", True),
        "bos_token": spec.get("bos_token", ""),
        "eos_token": spec.get("eos_token", ""),
    }
    if "enable_thinking" in case:
        ctx["enable_thinking"] = case["enable_thinking"]
    ctx.update(case.get("extra", {}))
    return env.from_string(source).render(**ctx)


def outcome(fn):
    try:
        return {"output": fn()}
    except jinja2.exceptions.TemplateError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # TypeError, ZeroDivisionError, ...: also a failed render
        return {"error": f"{type(e).__name__}: {e}"}


def build():
    """All expected files: {relative path: text}."""
    env = make_env()
    files = {}
    with open(os.path.join(DATA, "templates.json"), encoding="utf-8") as f:
        templates = json.load(f)
    with open(os.path.join(DATA, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    for name, spec in templates.items():
        with open(os.path.join(DATA, "templates", spec["file"]), encoding="utf-8", newline="") as f:
            source = f.read()
        for case in cases["cases"]:
            r = outcome(lambda: render_case(env, source, spec, case, cases["tools"]))
            base = f"{name}/{case['name']}"
            if "output" in r:
                files[base + ".txt"] = r["output"]
            else:
                files[base + ".err"] = r["error"] + "\n"
    with open(os.path.join(DATA, "snippets.json"), encoding="utf-8") as f:
        snippets = json.load(f)
    results = {}
    for s in snippets:
        results[s["name"]] = outcome(lambda: env.from_string(s["template"]).render(**s["context"]))
    files["snippets.json"] = json.dumps(results, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the checked-in files instead of writing")
    args = ap.parse_args()
    files = build()
    if args.check:
        bad = []
        for rel, text in sorted(files.items()):
            path = os.path.join(EXPECTED, rel)
            try:
                with open(path, encoding="utf-8", newline="") as f:
                    if f.read() != text:
                        bad.append(f"differs: {rel}")
            except FileNotFoundError:
                bad.append(f"missing: {rel}")
        for dirpath, _, names in os.walk(EXPECTED):
            for n in names:
                rel = os.path.relpath(os.path.join(dirpath, n), EXPECTED)
                if rel not in files:
                    bad.append(f"stale: {rel}")
        for b in bad:
            print(b, file=sys.stderr)
        print(f"{len(files)} reference renders, {len(bad)} problems (jinja2 {jinja2.__version__})", file=sys.stderr)
        return 1 if bad else 0
    for rel, text in files.items():
        path = os.path.join(EXPECTED, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print(f"wrote {len(files)} files under {os.path.relpath(EXPECTED, ROOT)} (jinja2 {jinja2.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
