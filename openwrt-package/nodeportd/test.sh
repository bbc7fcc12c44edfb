#!/bin/sh
# shellcheck shell=dash
# Run by the openwrt/packages CI on the target after installing the package:
#
#   test.sh PACKAGE VERSION     (VERSION as opkg or apk has it: 0.1.0-1, 0.1.0-r1)
#
# NODEPORTD_CONFIG overrides the config to check (default: the packaged one).

case "$1" in
nodeportd)
	want="nodeportd ${2%-*}"
	out=$(nodeportd --version) || exit 1
	if [ "$out" != "$want" ]; then
		echo "nodeportd --version printed '$out', want '$want'" >&2
		exit 1
	fi
	# The client is the same binary through a link: it answers with its usage.
	if ! nodeportctl 2>&1 | grep -q '^usage: nodeportctl'; then
		echo "nodeportctl does not answer with its usage" >&2
		exit 1
	fi
	nodeportd --check-config --config "${NODEPORTD_CONFIG:-/etc/config/nodeportd}" >/dev/null
	;;
esac
