#!/usr/bin/env bash
# Decode and prompt speed per thread count, and the speculative profiles at several concurrency levels, in one
# bounded run: what to measure on a machine with many cores. For each thread count, `engine_bench --profile`
# (decode tok/s, its fraction of the read-only stream measured beside it, pp512 and its fraction of the int8
# multiply-add ceiling, and where a 1-row, 4-row and 512-row step's time goes, with the thread pool's busy,
# late and waiting shares per kind of work); with --peer NAME=BIN, that llama-bench on the same file
# and threads (pp512 and decode); then `engine_sweep` with MTP off, always on and auto at the largest thread
# count. Prints one table at the end (python3; our pp512 is the median of its repetitions); every program's own
# output stays in OUT, with OUT/machine.txt (CPU, cores, memory, commands).
# Run from the repository root after a build (--bin DIR for binaries elsewhere, e.g. carried to another machine
# by bench/model/carry.sh).
#   bench/model/scaling_sweep.sh -m MODEL -o OUT [--threads 1,4,8,16] [--levels 1,4,16] [--decode 32]
#     [--pp-reps 2] [--max-tokens 32] [--draft-max 3] [-np 16] [-c 8192] [--bin DIR] [--timeout 300]
#     [--peer NAME=LLAMA_BENCH_BIN]... [--peer-args "ARGS"] [--grains 0,...] [--no-sweep]
# --timeout bounds each program's run (seconds); one that runs over leaves its partial output and a note.
# --grains runs engine_bench again at the largest thread count with each `--grain BYTES` (0: every job split
# over every thread, as before the thread pool had a grain), beside the default's row.
# --peer-args go to every peer (e.g. "-rtr 1" for ik_llama.cpp's run-time repacking; one --peer-args per run).
set -euo pipefail

model="" out="" threads=1,4,8,16 levels=1,4,16 decode=32 pp_reps=2 max_tokens=32 draft_max=3 slots=16
ctx=8192 bin="" limit=300 peer_args="" sweep=1 grains=""
peers=()

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit "$1"
}
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage 0 ;;
    --no-sweep) sweep=0; shift; continue ;;
  esac
  [ $# -ge 2 ] || { echo "scaling_sweep: $1 needs a value" >&2; exit 2; }
  case "$1" in
    -m) model=$2 ;; -o) out=$2 ;; --threads) threads=$2 ;; --levels) levels=$2 ;; --decode) decode=$2 ;;
    --pp-reps) pp_reps=$2 ;; --max-tokens) max_tokens=$2 ;; --draft-max) draft_max=$2 ;; -np) slots=$2 ;;
    -c) ctx=$2 ;; --bin) bin=$2 ;; --timeout) limit=$2 ;; --peer-args) peer_args=$2 ;; --grains) grains=$2 ;;
    --peer)
      case "$2" in
        *=*) peers+=("$2") ;;
        *) echo "scaling_sweep: --peer takes NAME=BIN, got '$2'" >&2; exit 2 ;;
      esac ;;
    *) echo "scaling_sweep: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$model" ] && [ -n "$out" ] || { echo "scaling_sweep: -m MODEL and -o OUT are required" >&2; exit 2; }
for v in "$decode" "$pp_reps" "$max_tokens" "$draft_max" "$slots" "$ctx" "$limit"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "scaling_sweep: '$v' is not a positive whole number" >&2; exit 2; }
done
for list in "$threads" "$levels"; do
  [[ "$list" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || {
    echo "scaling_sweep: '$list' is not a comma-separated list of positive whole numbers" >&2; exit 2; }
done
[ -z "$grains" ] || [[ "$grains" =~ ^(0|[1-9][0-9]*)(,(0|[1-9][0-9]*))*$ ]] || {
  echo "scaling_sweep: --grains '$grains' is not a comma-separated list of whole numbers (bytes)" >&2; exit 2; }
engine_bench=${bin:-build/bench/model}/engine_bench
engine_sweep=${bin:-build/bench/server}/engine_sweep
[ -f "$model" ] || { echo "scaling_sweep: no model file '$model'" >&2; exit 1; }
for b in "$engine_bench" "$engine_sweep"; do
  [ -x "$b" ] || { echo "scaling_sweep: no binary at '$b' (--bin DIR)" >&2; exit 1; }
done
for p in "${peers[@]}"; do
  name=${p%%=*} path=${p#*=}
  [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "scaling_sweep: peer name '$name': letters, digits, . _ -" >&2; exit 2; }
  [ -x "$path" ] || { echo "scaling_sweep: peer '$name': no binary at '$path'" >&2; exit 1; }
done
mkdir -p "$out"

# Every command goes to machine.txt before it runs; a run past --timeout is noted in its output file.
run() {
  local file=$1
  shift
  echo "$*" >>"$out/machine.txt"
  local rc=0
  timeout "$limit" "$@" >"$out/$file" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || echo "scaling_sweep: exit code $rc (124: past --timeout ${limit} s)" >>"$out/$file"
  echo "  $file: exit code $rc"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cores: $(nproc)"
  echo "isa: $(grep -m1 -o -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB, " $7 " GiB available"}')"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "model: $model"
  echo "commands:"
} >"$out/machine.txt"

for t in ${threads//,/ }; do
  echo "threads $t"
  run "mtp_t$t.txt" "$engine_bench" "$model" --threads "$t" --depths 0 --decode "$decode" --pp-reps "$pp_reps" --profile \
    --profile-rows 1,4,512
  for p in "${peers[@]}"; do
    name=${p%%=*} path=${p#*=}
    # shellcheck disable=SC2086 # peer_args is a list of arguments
    run "${name}_t$t.txt" "$path" -m "$model" -t "$t" -p 512 -n "$decode" -r "$pp_reps" $peer_args
  done
done
top=${threads##*,}
for g in ${grains//,/ }; do
  echo "threads $top, grain $g"
  run "mtp_t${top}_grain$g.txt" "$engine_bench" "$model" --threads "$top" --depths 0 --decode "$decode" \
    --pp-reps "$pp_reps" --profile --profile-rows 1 --grain "$g"
done
if [ "$sweep" -eq 1 ]; then
  echo "engine_sweep at $top threads"
  run sweep.txt "$engine_sweep" -m "$model" -np "$slots" -c "$ctx" -t "$top" --max-tokens "$max_tokens" --rounds 1 \
    --levels "$levels" --profiles off,on,auto --draft-max "$draft_max"
fi

python3 - "$out" "$threads" "$decode" "$grains" "${peers[@]}" <<'EOF'
import pathlib, re, sys

out, threads, decode, peers = pathlib.Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3], sys.argv[5:]
grains = [g for g in sys.argv[4].split(",") if g]
names = [p.split("=", 1)[0] for p in peers]

def mtp_figures(text):
    d = re.search(r"decode ([0-9.]+) tok/s \((\d+)% of bandwidth limit.*?(\d+)% of read-only", text)
    # One line per repetition: tok/s, and the fraction of the int8 multiply-add ceiling where the level has one.
    pp = sorted((float(v), c or "-") for v, c in re.findall(r"pp512: ([0-9.]+) tok/s[^(\n]*(?:\((\d+%) of)?", text))
    mid = pp[len(pp) // 2] if pp else (None, "-")
    return (float(d.group(1)) if d else None, d.group(3) + "%" if d else "-", mid[0], mid[1])

def pool_shares(text, rows):
    # The thread pool's line of the ROWS-row profile: busy / late / waiting for the slowest thread.
    m = re.search(rf"profile of {rows}-row steps.*?ran tasks (\d+)% of that, joined late (\d+)% and waited "
                  r"for the slowest thread (\d+)%", text, re.S)
    return "/".join(m.groups()) if m else "-"

def peer_figures(text):
    # llama-bench's markdown rows: the test name, then "t/s" as "MEAN ± SD" in the last column.
    pp = re.search(r"\|\s*pp512\s*\|\s*([0-9.]+)", text)
    tg = re.search(r"\|\s*tg" + decode + r"\s*\|\s*([0-9.]+)", text)
    return (float(tg.group(1)) if tg else None, float(pp.group(1)) if pp else None)

def fmt(v):
    return "-" if v is None else f"{v:.1f}"

def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"

head = ["threads", "mtp decode tok/s", "of read-only", "pool busy/late/wait % (1 row)", "mtp pp512 tok/s",
        "of int8 ceiling", "pool busy/late/wait % (512 rows)"]
for n in names:
    head += [f"{n} decode", f"{n} pp512", f"decode vs {n}", f"pp512 vs {n}"]

def read(name):
    f = out / name
    return f.read_text(errors="replace") if f.exists() else ""

print()
print("| " + " | ".join(head) + " |")
print("|" + "|".join("---:" for _ in head) + "|")
decodes = []
for t in threads:
    text = read(f"mtp_t{t}.txt")
    dec, frac, pp, pp_frac = mtp_figures(text)
    decodes.append(dec)
    row = [t, fmt(dec), frac, pool_shares(text, 1), fmt(pp), pp_frac, pool_shares(text, 512)]
    for n in names:
        pdec, ppp = peer_figures(read(f"{n}_t{t}.txt"))
        row += [fmt(pdec), fmt(ppp), ratio(dec, pdec), ratio(pp, ppp)]
    print("| " + " | ".join(str(c) for c in row) + " |")
if len(threads) > 1:
    print(f"\nmtp decode, {threads[-1]} threads vs {threads[0]}: {ratio(decodes[-1], decodes[0])}")
for g in grains:
    dec, frac, pp, _ = mtp_figures(read(f"mtp_t{threads[-1]}_grain{g}.txt"))
    print(f"grain {g} at {threads[-1]} threads: decode {fmt(dec)} tok/s ({frac} of read-only, "
          f"{ratio(dec, decodes[-1])} the default grain's), pp512 {fmt(pp)} tok/s")
table = [l for l in read("sweep.txt").splitlines() if l.startswith("|")]
if table:
    print("\nengine_sweep (tok/s by concurrency level):")
    print("\n".join(table))
EOF
