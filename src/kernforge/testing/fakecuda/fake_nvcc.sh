#!/bin/sh
# A fake nvcc for tests without a GPU: "nvcc -cubin -arch=sm_XX [-I..] [-D..] -o OUT FILE"
# compiles FILE (C for the fake driver) with the host compiler into a shared library under
# $KFFAKE_NVRTC_DIR (default /tmp) and writes the image the fake driver loads,
# "KFFAKE <library>", to OUT. --use_fast_math defines KF_FAST_MATH; other options are ignored.
out= src= flags=
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift ;;
    -I*|-D*) flags="$flags $1" ;;
    --use_fast_math) flags="$flags -DKF_FAST_MATH" ;;
    -*) ;;
    *) src=$1 ;;
  esac
  shift
done
[ -n "$out" ] && [ -n "$src" ] || { echo "fake nvcc: need -o OUT and a source file" >&2; exit 2; }
dir=${KFFAKE_NVRTC_DIR:-/tmp}
key=$( (cat "$src"; echo "$flags") | cksum | tr ' ' '-')
lib="$dir/nvcc-$key.so"
if [ ! -f "$lib" ]; then
  ${CC:-cc} -shared -fPIC -O1 $flags -o "$lib.tmp.$$" "$src" || exit 1
  mv "$lib.tmp.$$" "$lib"
fi
printf 'KFFAKE %s\n' "$lib" > "$out"
