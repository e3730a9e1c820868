#!/usr/bin/env python3
"""Every `mtp COMMAND --flag` the README and docs/ show is a flag that command's --help lists.

Usage: docs_flags_check.py MTP_BINARY FILE_OR_DIR...

Reads inline code spans and fenced code blocks (a line ending in a backslash continues on the next), finds each
`mtp CMD` (with its subcommand where it has them: `mtp gate run`, `mtp draft-vocab build`), and checks every --flag written after it, up to a pipe, a semicolon or
another command, against `mtp CMD --help`. Prints one line per flag the help does not list and exits 1 if there
is any; a command the binary does not know is an error too.
"""
import pathlib
import re
import subprocess
import sys

COMMAND = re.compile(r"(?:^|[\s/`(\"'])mtp ([a-z][a-z-]*)((?: [a-z]+\b){0,2})")
SUBCOMMANDS = {"gate": {"freeze", "run", "probe greedy", "probe tools"}, "draft-vocab": {"build", "show"}}
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
STOP = re.compile(r"[|;&]|\bmtp\b|\bcurl\b|\bllama-\w+|\bvllm\b|\bpython3?\b")


def snippets(text):
    """Inline code spans and the logical lines of fenced code blocks. An options table's row (its first cell a
    code span starting with a flag) becomes `mtp CMD FLAG` where the heading above it names `mtp CMD`."""
    out = []
    in_block = False
    pending = ""
    heading_cmd = None
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_block = not in_block
            pending = ""
            continue
        if in_block:
            stripped = line.split("#", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            out.append(pending + stripped)
            pending = ""
            continue
        if line.startswith("#"):
            named = [u[0] for span in re.findall(r"`([^`]+)`", line) for u in uses(span)]
            heading_cmd = named[0] if named else None
        row = re.match(r"\|\s*`(-[^`]*)`", line)
        if row and heading_cmd:
            out.append(f"mtp {heading_cmd} {row.group(1)}")
        else:
            out.extend(re.findall(r"`([^`]+)`", line))
    return out


def uses(snippet):
    """(command, flags) for each `mtp CMD ...` in the snippet."""
    found = []
    for m in COMMAND.finditer(snippet):
        if m.group(1) == "help":  # `mtp help CMD` is `mtp CMD --help`
            continue
        words = m.group(2).split()
        sub = next((" ".join(words[:k]) for k in (2, 1) if " ".join(words[:k]) in SUBCOMMANDS.get(m.group(1), ())), None)
        cmd = m.group(1) + (" " + sub if sub else "")
        rest = snippet[m.end(1) + (len(" " + sub) if sub else 0):]
        stop = STOP.search(rest)
        if stop:
            rest = rest[: stop.start()]
        found.append((cmd, FLAG.findall(rest)))
    return found


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary = sys.argv[1]
    files = []
    for arg in sys.argv[2:]:
        p = pathlib.Path(arg)
        files.extend(sorted(p.glob("*.md")) if p.is_dir() else [p])
    helps = {}
    problems = []
    checked = 0
    for f in files:
        for snippet in snippets(f.read_text()):
            for cmd, flags in uses(snippet):
                if cmd not in helps:
                    r = subprocess.run([binary, *cmd.split(), "--help"], capture_output=True, text=True)
                    helps[cmd] = r.stdout if r.returncode == 0 else None
                if helps[cmd] is None:
                    problems.append(f"{f}: `mtp {cmd}` is not a command of {binary}")
                    continue
                for flag in flags:
                    checked += 1
                    if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", helps[cmd]):
                        problems.append(f"{f}: `mtp {cmd} {flag}`: not in `mtp {cmd} --help`")
    for p in sorted(set(problems)):
        print(p)
    print(f"{checked} flag uses of {len(helps)} commands checked in {len(files)} files, {len(set(problems))} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
