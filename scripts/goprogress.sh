#!/bin/sh
# goprogress.sh -- [VAR=value ...] go build [flags] PACKAGE
#
# Runs the build with -v and numbers each package it compiles against the
# package count (`go list -deps`), so a first build on a clean Go build
# cache shows progress instead of minutes of silence. Other lines (errors)
# pass through; the exit status is the build's. On a warm cache it prints
# nothing. The command after -- is the one the Dockerfile runs too
# (deploy/dockerfile_test.go compares them).
set -u
[ "${1:-}" = "--" ] && shift
envs=""
while [ $# -gt 0 ]; do
	case $1 in *=*) envs="$envs $1"; shift ;; *) break ;; esac
done
gocmd=$1 sub=$2
shift 2
what="" prev="" pkg=""
for a in "$@"; do
	[ "$prev" = "-o" ] && what=$a
	prev=$a pkg=$a
done
echo "$envs $gocmd $sub $*" | sed 's/^ //'
# shellcheck disable=SC2086 # envs are VAR=value words
total=$(env $envs "$gocmd" list -deps "$pkg" | wc -l)
# shellcheck disable=SC2086
{ env $envs "$gocmd" "$sub" -v "$@" 2>&1; echo "exit $?"; } | awk -v total="$total" -v what="${what:-$pkg}" '
	/^exit [0-9]+$/ { code = $2; next }
	/^[A-Za-z0-9_.\/-]+$/ { n++; printf "  %s [%3d/%d] %s\n", what, n, total, $0; fflush(); next }
	{ print; fflush() }
	END { exit code }'
