#!/bin/sh
# bench-before.sh REF DIR builds, from git revision REF, the three things
# `make bench` can measure in the same rounds as this tree: the filter
# (DIR/chime.wasm), the binary (DIR/chime) and the 1 MB edit's guest
# (DIR/benchwork-guest.wasm). It builds in a detached worktree it removes
# again; nothing in the working tree changes.
set -eu
ref=$1
dir=$2
top=$(git rev-parse --show-toplevel)
src=$(mktemp -d)/src
mkdir -p "$dir"
git -C "$top" worktree add --quiet --detach "$src" "$ref"
trap 'git -C "$top" worktree remove --force "$src"' EXIT
echo "bench: building $ref into $dir"
(cd "$src" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$dir/chime.wasm" ./plugin)
(cd "$src" && go build -trimpath -o "$dir/chime" ./cmd/chime)
(cd "$src/internal/benchwork" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$dir/benchwork-guest.wasm" ./guest)
