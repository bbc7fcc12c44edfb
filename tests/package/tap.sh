# Shared by the package tests (sourced): TAP-style results and their counts.
# shellcheck shell=bash
passed=0
failed=0

ok() {
	passed=$((passed + 1))
	echo "ok - $1"
}

# not_ok DESCRIPTION [DETAIL...]
not_ok() {
	failed=$((failed + 1))
	echo "not ok - $1"
	shift
	[ $# -gt 0 ] && printf '    %s\n' "$@"
}

# check DESCRIPTION COMMAND...: one test; the command's output is shown on failure.
check() {
	local desc=$1 out
	shift
	if out=$("$@" 2>&1); then
		ok "$desc"
	else
		not_ok "$desc" "$out"
	fi
}
