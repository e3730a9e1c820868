#!/usr/bin/env bash
# The seed profile's sweep through `mtp bench`: one `mtp serve` per profile (MTP off, always on, at most 1, 2
# or 4 drafting slots, the auto policy), started in turn on one port with the same model and settings, each
# measured at every concurrency level with `mtp bench`; with --llama-server BIN, llama-server on the same
# file, MTP drafting off and on (profiles llama-off, llama-mtp). Each profile leaves OUT/PROFILE.jsonl (the
# run, for `mtp report`), OUT/PROFILE.json (its summary) and OUT/PROFILE.server.log; OUT/machine.txt names the
# CPU, the load and every server command; two tables of all profiles are printed at the end (python3).
# Run from the repository root after a build (--mtp BIN for another binary).
#   bench/server/profile_sweep.sh -m MODEL -o OUT [--mtp BIN] [--profiles off,on,slots1,slots2,slots4,auto]
#     [--levels 1,2,4,8,16] [--requests 16] [--warmup 2] [--prompt-tokens 64] [--max-tokens 32] [-np 16]
#     [-c 8192] [-t THREADS] [--draft-max 3] [--port 18090]
#     [--llama-server BIN [--llama-args "ARGS"] [--llama-mtp-args "ARGS"]]
# The llama profiles run after --profiles, or alone when --profiles names them. llama-server splits -c
# among its -np slots (mtp serve shares it), so -c must hold np x (prompt + max tokens) for it.
# --llama-mtp-args replaces "--spec-type draft-mtp --spec-draft-n-max DRAFT_MAX" for checkouts that spell
# MTP drafting otherwise.
set -euo pipefail

mtp=build/src/tools/mtp model="" out="" profiles=off,on,slots1,slots2,slots4,auto levels=1,2,4,8,16
requests=16 warmup=2 prompt_tokens=64 max_tokens=32 slots=16 ctx=8192 threads="" draft_max=3 port=18090
llama="" llama_args="" llama_mtp_args=""

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit "$1"
}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || case "$1" in -h | --help) usage 0 ;; *) echo "profile_sweep: $1 needs a value" >&2; exit 2 ;; esac
  case "$1" in
    -m) model=$2 ;; -o) out=$2 ;; --mtp) mtp=$2 ;; --profiles) profiles=$2 ;; --levels) levels=$2 ;;
    --requests) requests=$2 ;; --warmup) warmup=$2 ;; --prompt-tokens) prompt_tokens=$2 ;;
    --max-tokens) max_tokens=$2 ;; -np) slots=$2 ;; -c) ctx=$2 ;; -t) threads=$2 ;; --draft-max) draft_max=$2 ;;
    --port) port=$2 ;; --llama-server) llama=$2 ;; --llama-args) llama_args=$2 ;;
    --llama-mtp-args) llama_mtp_args=$2 ;;
    *) echo "profile_sweep: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$model" ] && [ -n "$out" ] || { echo "profile_sweep: -m MODEL and -o OUT are required" >&2; exit 2; }
[ -n "$llama_mtp_args" ] || llama_mtp_args="--spec-type draft-mtp --spec-draft-n-max $draft_max"

all=${profiles//,/ }
case " $all " in
  *" llama-"*) ;;
  *) [ -z "$llama" ] || all="$all llama-off llama-mtp" ;;
esac
# Every profile is checked before any server starts.
for p in $all; do
  case "$p" in
    off | on | slots[1-9] | slots[1-9][0-9] | auto) ;;
    llama-off | llama-mtp)
      [ -n "$llama" ] || { echo "profile_sweep: profile '$p' needs --llama-server BIN" >&2; exit 2; } ;;
    *) echo "profile_sweep: unknown profile '$p' (off, on, slotsN, auto, llama-off, llama-mtp)" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "profile_sweep: no model file '$model'" >&2; exit 1; }
[ -x "$mtp" ] || { echo "profile_sweep: no mtp binary at '$mtp' (--mtp BIN)" >&2; exit 1; }
[ -z "$llama" ] || [ -x "$llama" ] || { echo "profile_sweep: no llama-server binary at '$llama'" >&2; exit 1; }
mkdir -p "$out"

common="-m $model -np $slots -c $ctx --host 127.0.0.1 --port $port${threads:+ -t $threads}"
# The server command line of a profile.
server_command() {
  case "$1" in
    off) echo "$mtp serve $common" ;;
    on) echo "$mtp serve $common --spec mtp --draft-max $draft_max" ;;
    slots*) echo "$mtp serve $common --spec mtp --draft-max $draft_max --spec-max-drafting-slots ${1#slots}" ;;
    auto) echo "$mtp serve $common --spec mtp --draft-max $draft_max --spec-policy auto" ;;
    llama-off) echo "$llama $common $llama_args" ;;
    llama-mtp) echo "$llama $common $llama_args $llama_mtp_args" ;;
  esac
}

pid=""
# SIGTERM, then SIGKILL after 30 s: llama-server can keep waiting on a stream its client left.
stop_server() {
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
trap stop_server EXIT

# Whether the server on $port answers GET /health with 200 (llama-server listens while it loads the model,
# answering 503 until it is ready).
healthy() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    head -n 1 <&3 | grep -q ' 200'
  ) 2>/dev/null
}

# Starts a profile's server and waits until it is healthy, at most 600 s.
start_server() {
  local cmd log=$out/$1.server.log
  cmd=$(server_command "$1")
  echo "profile_sweep: $1: $cmd" >&2
  echo "$1: $cmd" >>"$out/machine.txt"
  $cmd >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do
    kill -0 "$pid" 2>/dev/null || { echo "profile_sweep: the $1 server exited; see $log" >&2; return 1; }
    if healthy; then return 0; fi
    sleep 0.5
  done
  echo "profile_sweep: the $1 server did not start in 600 s; see $log" >&2
  return 1
}

# What the figures depend on besides the profiles: the CPU, its load and the kernels' environment.
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "MTP_ISA=${MTP_ISA:-} MTP_AMX=${MTP_AMX:-}"
  [ -z "$llama" ] || echo "llama-server: $("$llama" --version 2>&1 | tr '\n' ' ')"
} >"$out/machine.txt"

for p in $all; do
  start_server "$p"
  "$mtp" bench --url "http://127.0.0.1:$port" --concurrency "$levels" --requests "$requests" --warmup "$warmup" \
    --prompt-tokens "$prompt_tokens" --max-tokens "$max_tokens" --ignore-eos --temperature 0 \
    -o "$out/$p.jsonl" >"$out/$p.report.md"
  "$mtp" report "$out/$p.jsonl" --json "$out/$p.json" >/dev/null
  stop_server
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

# One row per profile: output tokens/s and median TPOT at each level, draft acceptance over all levels; then
# median TTFT at each level.
python3 - "$out" $all <<'PY'
import json, sys
out, profiles = sys.argv[1], sys.argv[2:]
rows = {p: json.load(open(f"{out}/{p}.json"))["levels"] for p in profiles}
levels = [l["max_concurrency"] for l in rows[profiles[0]]]
fmt = lambda v, f: "-" if v is None else f.format(v)
print("| profile | " + " | ".join(f"c{c} tok/s" for c in levels) + " | " +
      " | ".join(f"c{c} TPOT ms" for c in levels) + " | draft acceptance |")
print("|---" + "|---:" * (2 * len(levels) + 1) + "|")
for p in profiles:
    ls = rows[p]
    drafted = sum(l.get("spec_decode_draft_tokens") or 0 for l in ls)
    accepted = sum(l.get("spec_decode_accepted_tokens") or 0 for l in ls)
    acc = f"{100 * accepted / drafted:.1f}%" if drafted else "-"
    print(f"| {p} | " + " | ".join(fmt(l["output_throughput"], "{:.1f}") for l in ls) + " | " +
          " | ".join(fmt(l["median_tpot_ms"], "{:.2f}") for l in ls) + f" | {acc} |")
print()
print("| profile | " + " | ".join(f"c{c} TTFT ms p50" for c in levels) + " |")
print("|---" + "|---:" * len(levels) + "|")
for p in profiles:
    print(f"| {p} | " + " | ".join(fmt(l["median_ttft_ms"], "{:.1f}") for l in rows[p]) + " |")
PY
