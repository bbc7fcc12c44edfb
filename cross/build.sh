#!/usr/bin/env bash
# Static, stripped release binaries of nodeportd for router targets, without Docker.
#
#   cross/build.sh [TARGET...]      # default: mips mipsel armv7 aarch64 x86_64
#
# TARGET is a Rust triple or a short name: mips, mipsel, armv7 (armhf), aarch64, x86_64,
# `all` (those five), and the test-only s390x (a big-endian guest for tests/qemu; never
# built by default).
# Output: dist/<triple>/nodeportd. Installs what it needs (rustup components and targets,
# zig + cargo-zigbuild from PyPI, Debian packages) and skips what is already there.
#
# Environment:
#   NODEPORTD_NIGHTLY               nightly toolchain name for build-std targets (default: nightly)
#   NODEPORTD_ALLOW_OTHER_NIGHTLY=1 accept a nightly other than the pinned one (with a warning)
#   CARGO_TARGET_DIR                as usual (default: target/ in the repository)
#   NODEPORTD_FEATURES              extra cargo features for every triple (comma-separated);
#                                   NODEPORTD_FEATURES=cluster builds the cluster-mode variant
#                                   (the nodeportd-cluster package) into dist/cluster/<triple>/
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=cross/targets.sh
. "$ROOT/cross/targets.sh"

DEFAULT_TARGETS=$(np_default_targets)
# The MIPS and armv7 musl std is built from source with this nightly. Other zig or nightly
# versions have produced MIPS binaries that crash in tokio's start-up, so both are pinned.
NIGHTLY=${NODEPORTD_NIGHTLY:-nightly}
NIGHTLY_EXPECTED="rustc 1.97.0-nightly (e50aa6fba 2026-05-19)"
ZIG_VERSION=0.14.1
ZIGBUILD_VERSION=0.24.0
OUT_DIR="$ROOT/dist"
# A variant with extra features lands next to the base build, never over it.
if [ -n "${NODEPORTD_FEATURES:-}" ]; then
    OUT_DIR="$ROOT/dist/$(printf '%s' "$NODEPORTD_FEATURES" | tr ',' '-')"
fi

log() { printf '[build] %s\n' "$*" >&2; }
die() { printf '[build] error: %s\n' "$*" >&2; exit 1; }

stable_toolchain() {
    local chan=""
    if [ -f rust-toolchain.toml ]; then
        chan=$(sed -n 's/^[[:space:]]*channel[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' rust-toolchain.toml | head -n 1)
    elif [ -f rust-toolchain ]; then
        chan=$(head -n 1 rust-toolchain)
    fi
    printf '%s\n' "${chan:-1.95.0}"
}
STABLE=$(stable_toolchain)

triple_of() { np_triple "$1"; }

# How each triple is built:
#   buildstd  nightly + -Z build-std, linked by zig (tier 3, or no std download here)
#   stable    pinned stable with rustup's std, linked by rust-lld (self-contained musl)
#   gnucross  pinned stable, glibc linked statically by Debian's cross gcc (test-only)
mode_of() {
    case "$1" in
        mips-* | mipsel-* | armv7-*) echo buildstd ;;
        aarch64-* | x86_64-*) echo stable ;;
        s390x-*) echo gnucross ;;
    esac
}

# `file` wording of the ELF machine each triple must produce: catches a host binary
# landing in dist/ because a flag went missing.
elf_of() {
    case "$1" in
        mips-*) echo 'MSB executable, MIPS' ;;
        mipsel-*) echo 'LSB executable, MIPS' ;;
        armv7-*) echo 'LSB executable, ARM' ;;
        aarch64-*) echo 'LSB executable, ARM aarch64' ;;
        x86_64-*) echo 'LSB executable, x86-64' ;;
        s390x-*) echo 'MSB executable, IBM S/390' ;;
    esac
}

env_name() { printf '%s' "$1" | tr 'a-z.-' 'A-Z__'; }

# --- installers: each checks first, so a warm machine pays only a few rustup calls ---

APT_UPDATED=0
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "apt-get install ${missing[*]}"
    if [ "$APT_UPDATED" -eq 0 ]; then
        # Exit 100 happens while a foreign-architecture index is mid-sync; the native
        # index is still usable, so carry on and let the install decide.
        apt-get -o DPkg::Lock::Timeout=600 update -qq || log "apt-get update failed (exit $?); continuing"
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
}

need_host_tools() {
    local pkgs=()
    command -v readelf >/dev/null || pkgs+=(binutils)
    command -v file >/dev/null || pkgs+=(file)
    [ "${#pkgs[@]}" -eq 0 ] || apt_install "${pkgs[@]}"
}

rustup_has_toolchain() { rustup run "$1" rustc -V >/dev/null 2>&1; }

need_stable() {
    rustup_has_toolchain "$STABLE" || die "toolchain $STABLE (from rust-toolchain.toml) is not installed; this script never installs or updates toolchains"
    if ! rustup component list --installed --toolchain "$STABLE" 2>/dev/null | grep -q '^llvm-tools'; then
        log "rustup component add llvm-tools --toolchain $STABLE"
        rustup component add llvm-tools --toolchain "$STABLE" >&2
    fi
}

need_stable_target() {
    need_stable
    if ! rustup target list --installed --toolchain "$STABLE" | grep -qx "$1"; then
        log "rustup target add $1 --toolchain $STABLE"
        rustup target add "$1" --toolchain "$STABLE" >&2 || die "rust-std for $1 on $STABLE is not downloadable"
    fi
}

NIGHTLY_CHECKED=0
need_nightly() {
    [ "$NIGHTLY_CHECKED" -eq 1 ] && return 0
    local v
    v=$(rustup run "$NIGHTLY" rustc -V 2>/dev/null) || die "toolchain '$NIGHTLY' is not installed; the MIPS/armv7 builds need '$NIGHTLY_EXPECTED' with rust-src (this script never installs toolchains)"
    if [ "$v" != "$NIGHTLY_EXPECTED" ]; then
        if [ "${NODEPORTD_ALLOW_OTHER_NIGHTLY:-0}" = 1 ]; then
            log "warning: $NIGHTLY is '$v', not the pinned '$NIGHTLY_EXPECTED'; MIPS binaries from other versions have crashed: run tests/smoke/run.sh"
        else
            die "toolchain '$NIGHTLY' is '$v' but the build is pinned to '$NIGHTLY_EXPECTED' (set NODEPORTD_NIGHTLY to a toolchain with that version, or NODEPORTD_ALLOW_OTHER_NIGHTLY=1 to try anyway)"
        fi
    fi
    if ! rustup component list --installed --toolchain "$NIGHTLY" 2>/dev/null | grep -q '^rust-src'; then
        log "rustup component add rust-src --toolchain $NIGHTLY"
        rustup component add rust-src --toolchain "$NIGHTLY" >&2
    fi
    NIGHTLY_CHECKED=1
}

ZIGBUILD=""
need_zig() {
    [ -n "$ZIGBUILD" ] && return 0
    command -v python3 >/dev/null || apt_install python3 python3-pip
    local scripts have_zig have_zb
    scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
    have_zig=$(python3 -m ziglang version 2>/dev/null || true)
    have_zb=$("$scripts/cargo-zigbuild" --version 2>/dev/null || true)
    if [ "$have_zig" != "$ZIG_VERSION" ] || [ "$have_zb" != "cargo-zigbuild $ZIGBUILD_VERSION" ]; then
        log "pip install ziglang==$ZIG_VERSION cargo-zigbuild==$ZIGBUILD_VERSION"
        # Debian's own python refuses system-wide pip installs without this flag;
        # a pyenv/venv python ignores it.
        PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check \
            "ziglang==$ZIG_VERSION" "cargo-zigbuild==$ZIGBUILD_VERSION" >&2
        scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
    fi
    ZIGBUILD="$scripts/cargo-zigbuild"
    [ -x "$ZIGBUILD" ] || die "cargo-zigbuild not found at $ZIGBUILD after pip install"
    # cargo-zigbuild prefers `python -m ziglang` over a `zig` on PATH; name the python that
    # holds the pinned ziglang, so another python3 earlier on PATH cannot swap it.
    CARGO_ZIGBUILD_PYTHON_PATH=$(python3 -c 'import sys; print(sys.executable)')
    export CARGO_ZIGBUILD_PYTHON_PATH
    [ "$("$CARGO_ZIGBUILD_PYTHON_PATH" -m ziglang version)" = "$ZIG_VERSION" ] || die "ziglang in $CARGO_ZIGBUILD_PYTHON_PATH is not $ZIG_VERSION"
}

need_s390x_gcc() {
    command -v s390x-linux-gnu-gcc >/dev/null && [ -f /usr/s390x-linux-gnu/lib/libc.a ] && return 0
    apt_install gcc-s390x-linux-gnu libc6-dev-s390x-cross
}

# A C compiler for TRIPLE (zig cc behind cargo-zigbuild's filter of clang-only flags such as
# --target=), for crates that compile C where the link is rust-lld's (stable targets).
zig_cc_wrapper() {
    local dir="${CARGO_TARGET_DIR:-$ROOT/target}/zigcc" w zt
    zt=$(printf '%s' "$1" | sed 's/-unknown-/-/')
    w="$dir/cc-$1.sh"
    mkdir -p "$dir"
    printf '#!/bin/sh\nCARGO_ZIGBUILD_ZIG_COMMAND=%s CARGO_ZIGBUILD_ZIG_COMMAND_ARGS="-m ziglang" exec %s zig cc -- -target %s "$@"\n' \
        "$CARGO_ZIGBUILD_PYTHON_PATH" "$ZIGBUILD" "$zt" >"$w"
    chmod 0755 "$w"
    echo "$w"
}

objcopy_bin() { echo "$(rustc +"$STABLE" --print sysroot)/lib/rustlib/$(rustc +"$STABLE" -vV | sed -n 's/^host: //p')/bin/llvm-objcopy"; }

# Cargo features for a triple: x86_64 (the desktop/VM build) gets YAML input if the crate
# offers it; the flash-constrained routers do not pay for it. Builds start from no
# features (--no-default-features): the base package has neither pod routes nor cluster
# mode; NODEPORTD_FEATURES=cluster (which brings pod-routes) is the nodeportd-cluster build.
features_of() {
    local f=""
    case "$1" in
        x86_64-*)
            if sed -n '/^\[features\]/,/^\[/p' Cargo.toml | grep -q '^[[:space:]]*yaml[[:space:]]*='; then
                f=yaml
            fi
            ;;
    esac
    if [ -n "${NODEPORTD_FEATURES:-}" ]; then
        f="${f:+$f,}$NODEPORTD_FEATURES"
    fi
    echo "$f"
}

# --- build one triple ---

# Flags common to every router build:
#   +crt-static             nightly's MIPS musl targets default to dynamic linking
#   relocation-model=static the binary is a fixed-address executable anyway; non-PIC code
#                           is ~12 % smaller on MIPS (no $gp/GOT indirection)
#   force-unwind-tables=no  panic=abort never unwinds; .eh_frame was ~80 KB on mipsel
SIZE_FLAGS="-C relocation-model=static -C force-unwind-tables=no"
# Only where std is built from source (nightly), so they reach std and core too:
#   panic=immediate-abort  a panic executes the trap instruction at once: no message, no
#                          panic hook, no formatting machinery behind it. A panic in the
#                          daemon is a bug and procd restarts it either way; the cost is a
#                          bare SIGILL/SIGTRAP instead of "panicked at ..." in the log
#                          (reproduce on x86_64/aarch64, which keep panic=abort with messages).
#                          Replaces the std feature panic_immediate_abort, which this nightly
#                          no longer has. Unstable, hence -Z unstable-options.
#   location-detail=none   no file/line/column strings for #[track_caller] sites (what
#                          remains of them once panics print nothing)
#   fmt-debug=shallow      a derived Debug prints the type or variant name only (strings,
#                          numbers and durations keep their Debug). Messages quote values with
#                          {:?} on strings only; the derived Debug of netlink-packet-route's
#                          messages, which netlink-proto keeps alive in a warn!, was ~200 KB.
# and std's `optimize_for_size` feature (-Z build-std-features, which also leaves out the
# backtrace symbolizer): smaller, slower algorithms in core/alloc (sorting, integer
# formatting) with the same results.
BUILDSTD_SIZE_FLAGS="-Z unstable-options -C panic=immediate-abort -Z location-detail=none -Z fmt-debug=shallow"
# NP_PANIC_MESSAGES=1: keep panic messages (and their locations) on these targets too, to
# find out why a daemon died on a router (+~220 KB on mipsel).
if [ "${NP_PANIC_MESSAGES:-0}" = 1 ]; then
    BUILDSTD_SIZE_FLAGS="-C panic=abort"
fi

# Where std is built from source (the MIPS and armv7 routers), the code the daemon runs
# most is linked together, ahead of the rest of .text (cross/hot-text.ld, generated from a
# profile of the emulated mipsel router by benches/qemu-prof/hot-text.py): their cores
# refill the TLB in software and map few pages at once, and the code a restart runs was
# spread over a megabyte (docs/benchmarks.md). The script's patterns leave out the parts
# of a symbol that change with the checkout's path (v0 mangling's crate hashes). Layout
# only: the same code, the same size.
# The script is passed by a path named after its contents: cargo does not track files a
# link argument names, and a new script must relink.
hot_text_flags() {
    local dir="${CARGO_TARGET_DIR:-$ROOT/target}" sum
    sum=$(sha256sum "$ROOT/cross/hot-text.ld" | cut -c1-16)
    mkdir -p "$dir"
    [ -f "$dir/hot-text-$sum.ld" ] || cp "$ROOT/cross/hot-text.ld" "$dir/hot-text-$sum.ld"
    echo "-C link-arg=-Wl,-T,$dir/hot-text-$sum.ld"
}

build_one() {
    local triple=$1 mode features envp flags start elapsed bin out
    mode=$(mode_of "$triple")
    features=$(features_of "$triple")
    envp=$(env_name "$triple")
    local cargo_args=(build --release --target "$triple" --bin nodeportd --no-default-features)
    [ -f Cargo.lock ] && cargo_args+=(--locked)
    [ -n "$features" ] && cargo_args+=(--features "$features")

    start=$(date +%s)
    case "$mode" in
        buildstd)
            need_nightly
            need_zig
            need_stable # llvm-objcopy
            # link-self-contained=no: zig brings its own soft-float musl and crt objects.
            flags="-C target-feature=+crt-static -C link-self-contained=no $SIZE_FLAGS $BUILDSTD_SIZE_FLAGS $(hot_text_flags)"
            cargo_args[0]=zigbuild
            log "$triple: cargo +$NIGHTLY zigbuild -Z build-std (RUSTFLAGS: $flags)"
            env "CARGO_TARGET_${envp}_RUSTFLAGS=$flags" \
                cargo "+$NIGHTLY" "${cargo_args[@]}" \
                -Z build-std=std,panic_abort -Z build-std-features=optimize_for_size >&2
            ;;
        stable)
            need_stable_target "$triple"
            flags="-C target-feature=+crt-static -C link-self-contained=yes $SIZE_FLAGS"
            local ccenv=()
            case ",$features," in
                *,cluster,*)
                    # ring (the cluster feature's TLS) compiles C and assembly: zig's clang,
                    # through cargo-zigbuild's argument filter, and llvm-ar.
                    need_zig
                    ccenv=("CC_$(printf '%s' "$triple" | tr '-' '_')=$(zig_cc_wrapper "$triple")"
                        "AR_$(printf '%s' "$triple" | tr '-' '_')=$(dirname "$(objcopy_bin)")/llvm-ar")
                    ;;
            esac
            log "$triple: cargo +$STABLE build, rust-lld (RUSTFLAGS: $flags)"
            env "${ccenv[@]}" "CARGO_TARGET_${envp}_LINKER=rust-lld" "CARGO_TARGET_${envp}_RUSTFLAGS=$flags" \
                cargo "+$STABLE" "${cargo_args[@]}" >&2
            ;;
        gnucross)
            need_stable_target "$triple"
            need_s390x_gcc
            flags="-C target-feature=+crt-static"
            log "$triple: cargo +$STABLE build, s390x-linux-gnu-gcc (RUSTFLAGS: $flags)"
            env "CARGO_TARGET_${envp}_LINKER=s390x-linux-gnu-gcc" "CARGO_TARGET_${envp}_RUSTFLAGS=$flags" \
                cargo "+$STABLE" "${cargo_args[@]}" >&2
            ;;
    esac
    elapsed=$(($(date +%s) - start))

    bin="${CARGO_TARGET_DIR:-$ROOT/target}/$triple/release/nodeportd"
    [ -f "$bin" ] || die "$triple: cargo finished but $bin is missing"
    out="$OUT_DIR/$triple/nodeportd"
    mkdir -p "$OUT_DIR/$triple"
    rm -f "$out"
    # lld keeps MIPS's .pdr (procedure descriptors, ~90 KB) even in a stripped binary; the
    # kernel and debuggers do not need it.
    "$(objcopy_bin)" --strip-all --remove-section=.pdr "$bin" "$out"
    verify_static "$triple" "$out"
    [ "$mode" = buildstd ] && verify_hot_text "$triple" "$out"
    printf '%s\t%s bytes\t%ss\t%s\n' "$triple" "$(stat -c %s "$out")" "$elapsed" "${out#"$ROOT"/}"
}

# The hot-text script must still name the code it was made for: a pattern that matches
# nothing is silently skipped, and a toolchain that renamed everything (another mangling)
# would leave only the C functions in the section (a few KiB: the layout lost, the build
# otherwise fine). Its hash-free patterns alone fill ~300 KB on MIPS.
HOT_TEXT_MIN=65536
verify_hot_text() {
    local triple=$1 f=$2 hex
    hex=$(readelf -SW "$f" | sed -n 's/.* \.text\.hot  *PROGBITS  *[0-9a-f]*  *[0-9a-f]*  *\([0-9a-f]*\) .*/\1/p')
    if [ -z "$hex" ] || [ "$((16#$hex))" -lt "$HOT_TEXT_MIN" ]; then
        die "$triple: .text.hot is $((16#${hex:-0})) bytes (under $HOT_TEXT_MIN): cross/hot-text.ld no longer matches this build's functions; regenerate it (benches/qemu-prof/hot-text.py)"
    fi
    log "$triple: .text.hot $((16#$hex)) bytes (cross/hot-text.ld)"
}

verify_static() {
    local triple=$1 f=$2 desc want
    desc=$(file -b "$f")
    want=$(elf_of "$triple")
    case "$desc" in
        *"$want"*) ;;
        *) die "$triple: $f is '$desc', expected '$want'" ;;
    esac
    if readelf -lW "$f" | grep -q 'INTERP'; then
        die "$triple: $f has a PT_INTERP (dynamically linked): $desc"
    fi
    if readelf -dW "$f" | grep -q '(NEEDED)'; then
        die "$triple: $f has NEEDED entries: $(readelf -dW "$f" | grep '(NEEDED)' | tr -s ' ')"
    fi
    if readelf -SW "$f" | grep -qE '\.(pdr|symtab|debug_)'; then
        die "$triple: $f is not fully stripped"
    fi
}

main() {
    [ -f Cargo.toml ] || die "no Cargo.toml in $ROOT"
    local args=("$@") triples=() t d tr
    [ "${#args[@]}" -eq 0 ] && read -r -a args <<<"$DEFAULT_TARGETS"
    for t in "${args[@]}"; do
        case "$t" in
            -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
            all)
                for d in $DEFAULT_TARGETS; do triples+=("$(triple_of "$d")"); done
                continue
                ;;
        esac
        tr=$(triple_of "$t") || die "unknown target '$t' (known: all $(np_all_targets), or their Rust triples)"
        triples+=("$tr")
    done
    command -v rustup >/dev/null || die "rustup is required"
    need_host_tools
    printf 'target\tsize\tbuild time\tpath\n'
    for tr in "${triples[@]}"; do
        build_one "$tr"
    done
}

main "$@"
