#!/usr/bin/env bash
# llama-cpp-python (the version .ci/run installs) into the current Python environment, from a wheel built ONCE into
# a cache, so that the llama.cpp reader tests (GGUF exports read back by llama.cpp itself) run where a developer
# runs the suite instead of skipping.
#
#   scripts/build_llama_cpp.sh             # first call: builds the wheel from source (~8 min on 2 idle cores,
#                                          # ~25 under load; a C++ compiler and cmake are needed), then installs it;
#                                          # later calls: installs the cached wheel (seconds)
#   scripts/build_llama_cpp.sh --dry-run   # says whether it would build or reuse, and the commands; runs nothing
#   PYTHON=.venv/bin/python scripts/build_llama_cpp.sh   # another environment's interpreter (default: python)
#
# The cache is the one .ci/run reads: ${MATHNEURO_EDIT_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mathneuro-edit-ci},
# the wheel in its wheels/ folder, so a wheel built here also spares CI its build and the other way round. Only a
# wheel for this interpreter's CPython tag (cp311, ...) or for any Python 3 (py3-none, what pip builds) is reused. A wheel built for another CPU can die on an
# illegal instruction: the installed module is checked in a child process; delete the cached wheel to rebuild.
set -euo pipefail

version=0.3.36  # .ci/run's llama_version: keep the two equal
python="${PYTHON:-python}"
cache="${MATHNEURO_EDIT_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mathneuro-edit-ci}"
wheels="$cache/wheels"
dry=0
case "${1:-}" in
  "") ;;
  --dry-run) dry=1 ;;
  *) echo "usage: scripts/build_llama_cpp.sh [--dry-run]" >&2; exit 2 ;;
esac

run() {  # a command, or under --dry-run the line saying it would run
  if [ "$dry" = 1 ]; then echo "would run: $*"; else "$@"; fi
}

tag="$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
# pip builds llama-cpp-python as py3-none-linux_x86_64 (it loads llama.cpp's library through ctypes: any CPython
# takes it); a wheel tagged for one CPython (cp311-...) is taken only by that one
cached() { ls "$wheels"/llama_cpp_python-"$version"-{"$tag",py3-none}-*.whl 2>/dev/null | head -n 1 || true; }

wheel="$(cached)"
if [ -n "$wheel" ]; then
  echo "llama-cpp-python $version: the cached wheel $wheel" >&2
else
  echo "llama-cpp-python $version: no cached wheel for $tag in $wheels; building it once (~8 min on 2 idle cores," \
       "~25 under load)" >&2
  run mkdir -p "$wheels"
  run "$python" -m pip wheel --no-deps "llama-cpp-python==$version" -w "$wheels"
  wheel="$(cached)"
  if [ "$dry" = 1 ]; then
    wheel="$wheels/llama_cpp_python-$version-$tag-<platform>.whl"
  elif [ -z "$wheel" ]; then
    echo "error: pip built no llama_cpp_python-$version-$tag-*.whl in $wheels" >&2
    exit 1
  fi
fi
run "$python" -m pip install --quiet "$wheel"
if [ "$dry" = 1 ]; then
  exit 0
fi
if ! "$python" -c "import llama_cpp; llama_cpp.llama_backend_init(); print('llama-cpp-python', llama_cpp.__version__)"; then
  echo "error: the installed llama-cpp-python does not run on this machine (a wheel built for another CPU?);" \
       "delete $wheel and run this again to rebuild it here" >&2
  exit 1
fi
