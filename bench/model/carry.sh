#!/usr/bin/env bash
# Gathers what scaling_sweep.sh needs on another machine (one with more cores) into one folder: the programs
# `engine_bench`, `engine_sweep` and `mtp` from a build, and the shared libraries they load beyond the C and C++
# runtimes (Debian's libpcre2, libutf8proc, cpp-httplib, ...), which that machine may lack. Kernels dispatch on
# the CPU at run time, so the same binaries run there at its best ISA.
#   bench/model/carry.sh DIR [--build BUILD]     (default BUILD: build)
# Then there, from the repository root:
#   LD_LIBRARY_PATH=DIR/lib DIR/bin/mtp synth --shape 35b-a3b --layers 8 --mtp --type iq4_xs --structured 10 \
#     --seed 1 -o MODEL
#   LD_LIBRARY_PATH=DIR/lib bench/model/scaling_sweep.sh -m MODEL -o OUT --bin DIR/bin --threads 1,4,8,16
set -euo pipefail

dir="" build=build
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --build) [ $# -ge 2 ] || { echo "carry: --build needs a value" >&2; exit 2; }; build=$2; shift 2 ;;
    -*) echo "carry: unknown option '$1'" >&2; exit 2 ;;
    *) [ -z "$dir" ] || { echo "carry: one folder, got '$dir' and '$1'" >&2; exit 2; }; dir=$1; shift ;;
  esac
done
[ -n "$dir" ] || { echo "carry: DIR is required" >&2; exit 2; }
programs=("$build/bench/model/engine_bench" "$build/bench/server/engine_sweep" "$build/src/tools/mtp")
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "carry: no program at '$p' (build first, or --build BUILD)" >&2; exit 1; }
done

mkdir -p "$dir/bin" "$dir/lib"
cp "${programs[@]}" "$dir/bin/"
# ldd's "name => path (address)" lines; the C and C++ runtimes and the loader are on every Linux machine.
ldd "${programs[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$dir/lib/"; done
echo "carry: $(ls "$dir/bin" | wc -l) programs and $(ls "$dir/lib" | wc -l) libraries in $dir ($(du -sh "$dir" | cut -f1))"
