#!/usr/bin/env python3
"""bench/server/profile_sweep.sh end to end on the bundled model, with a stand-in for llama-server: a script
that records its arguments, drops llama-server's MTP flags and runs `mtp serve` with the rest (the flags the
sweep gives both servers are the same). Checks that our profiles and the llama ones run and reach the tables,
that the MTP flags reach llama-server (the default pair, or --llama-mtp-args instead), that --profiles can
name the llama profiles alone, and that a bad profile stops the sweep before any server starts.

Usage: profile_sweep_test.py MTP_BINARY SOURCE_DIR
"""
import os
import pathlib
import socket
import subprocess
import sys
import tempfile

STAND_IN = """#!/usr/bin/env bash
# llama-server stand-in: logs its arguments, then `mtp serve` without llama-server's MTP flags.
if [ "$1" = --version ]; then echo "stand-in 1"; exit 0; fi
echo "$*" >> "{log}"
args=()
while [ $# -gt 0 ]; do
  case "$1" in --spec-type | --spec-draft-n-max) shift 2 ;; *) args+=("$1"); shift ;; esac
done
exec "{mtp}" serve "${{args[@]}}"
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sweep(source, mtp, out, *extra):
    cmd = ["bash", str(source / "bench/server/profile_sweep.sh"), "-m", "tests/data/example.gguf", "-o", str(out),
           "--mtp", mtp, "--levels", "1", "--requests", "2", "--warmup", "0", "--prompt-tokens", "8",
           "--max-tokens", "4", "-np", "2", "-c", "1024", "-t", "1", "--port", str(free_port()), *extra]
    return subprocess.run(cmd, cwd=source, capture_output=True, text=True, timeout=240)


def table_rows(stdout):
    """The first cell of every body row of the printed tables."""
    cells = [line.split("|")[1].strip() for line in stdout.splitlines() if line.startswith("| ")]
    return [c for c in cells if c != "profile"]


def check(cond, what, run=None):
    if not cond:
        detail = f"\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}" if run is not None else ""
        raise AssertionError(what + detail)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    mtp, source = os.path.abspath(sys.argv[1]), pathlib.Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        log = tmp / "llama-args.log"
        stand_in = tmp / "llama-server"
        stand_in.write_text(STAND_IN.format(log=log, mtp=mtp))
        stand_in.chmod(0o755)

        # Ours, then both llama profiles (appended because --profiles names none of them).
        run = sweep(source, mtp, tmp / "a", "--profiles", "off", "--llama-server", str(stand_in))
        check(run.returncode == 0, f"sweep exited with {run.returncode}", run)
        rows = table_rows(run.stdout)
        check(rows.count("off") == 2 and rows.count("llama-off") == 2 and rows.count("llama-mtp") == 2,
              f"rows {rows}", run)
        args = log.read_text().splitlines()
        check(len(args) == 2, f"llama-server started {len(args)} times: {args}")
        check("--spec-type" not in args[0], f"llama-off got MTP flags: {args[0]}")
        check(args[1].endswith("--spec-type draft-mtp --spec-draft-n-max 3"), f"llama-mtp got: {args[1]}")
        machine = (tmp / "a" / "machine.txt").read_text()
        for needle in ("cpu: ", "load average at start: ", "llama-server: stand-in 1", "llama-mtp: "):
            check(needle in machine, f"machine.txt lacks '{needle}':\n{machine}")
        for p in ("off", "llama-off", "llama-mtp"):
            check((tmp / "a" / f"{p}.json").is_file(), f"no summary for {p}")

        # The llama profile alone, with the MTP flags given.
        log.unlink()
        run = sweep(source, mtp, tmp / "b", "--profiles", "llama-mtp", "--llama-server", str(stand_in),
                    "--llama-mtp-args", "--spec-type draft-mtp --spec-draft-n-max 2")
        check(run.returncode == 0, f"sweep exited with {run.returncode}", run)
        check(table_rows(run.stdout) == ["llama-mtp", "llama-mtp"], f"rows {table_rows(run.stdout)}", run)
        args = log.read_text().splitlines()
        check(len(args) == 1 and args[0].endswith("--spec-draft-n-max 2"), f"llama-server got: {args}")

        # Bad profiles: exit 2 and one line, before any server starts.
        for extra, message in ((["--profiles", "off,llama-mtp"], "profile 'llama-mtp' needs --llama-server BIN"),
                               (["--profiles", "off,bogus"], "unknown profile 'bogus'")):
            run = sweep(source, mtp, tmp / "c", *extra)
            check(run.returncode == 2 and message in run.stderr, f"{extra}: exit {run.returncode}", run)
            check(not (tmp / "c").exists(), f"{extra}: the sweep started")
    print("profile_sweep_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
