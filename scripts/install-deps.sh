#!/usr/bin/env bash
# Installs everything ulsock needs to build, test and benchmark on Debian 12:
#
#   1. Debian's packages (PACKAGES below), with apt, as root (or through sudo);
#   2. the project's Python environment, .venv/ at the repository root: Debian's
#      python3 with exactly the packages of requirements.txt, installed with pip. The
#      Makefile, CMake, the tools and .ci/run use its interpreter and nothing else.
#
# Idempotent and fast when done: dpkg is asked once, apt is not touched when every
# package is there, and .venv/ is left alone while its stamp file holds the hash of
# requirements.txt it was built from. When requirements.txt changes, .venv/ is built anew
# from scratch, so it never keeps a package that is no longer listed.
#
# .venv/ belongs to the user who runs this script: run through sudo, it is made as
# $SUDO_USER, so that person's own builds and tests can use it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$ROOT/.venv
REQUIREMENTS=$ROOT/requirements.txt
STAMP=$VENV/.requirements.sha256
# Debian's interpreter, by its full path: a python3 earlier on PATH (pyenv, conda) is not
# what a fresh Debian machine has.
DEBIAN_PYTHON=/usr/bin/python3

PACKAGES=(
	# Build. libfabric-dev for its headers: the fabric transport loads libfabric.so.1
	# (libfabric1, which it depends on) at run time, never links it.
	gcc libc6-dev make cmake ninja-build pkg-config git libfabric-dev
	# Sanitizer builds and libFuzzer targets.
	clang libclang-rt-14-dev
	# The interpreter of .venv/ (its packages come from requirements.txt, not Debian),
	# and the certificates pip needs to fetch them.
	python3 python3-venv ca-certificates
	# Real programs the tests and benchmarks run.
	sockperf iperf3 redis-server redis-tools qperf libfabric-bin
	nginx-light wrk apache2-utils memcached libmemcached-tools haproxy postgresql
	openssh-server openssh-client openjdk-17-jdk-headless caddy curl nodejs
	mariadb-server mariadb-client sysbench
	# Process and socket inspection used by the tests; nftables for the NAT between
	# namespace hosts in the fabric tests (its service stays disabled: no rules load).
	iproute2 procps psmisc nftables
)

# System services that the packages above start when installed. Tests start their own
# instances on ports they pick; a system instance only holds well-known ports (80, 22,
# 5432, ...) and confuses people reading `ss` output.
SERVICES=(redis-server nginx memcached haproxy postgresql caddy mariadb)
# sshd is stopped only on a machine where this script installed it: on a machine that had
# it before, it may be how the person running this script is logged in.
SSH_SERVICE=ssh
SSH_PACKAGE=openssh-server

log() { printf 'install-deps: %s\n' "$*" >&2; }

# Prints the packages of PACKAGES that dpkg does not report as installed.
missing_packages() {
	local installed
	# dpkg-query exits non-zero when any name is unknown; the names it found still print.
	installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${PACKAGES[@]}" \
		2>/dev/null | awk '$2 == "ii" { print $1 }' || true)
	local p
	for p in "${PACKAGES[@]}"; do
		grep -qxF "$p" <<<"$installed" || printf '%s\n' "$p"
	done
}

# Sets SUDO to the prefix that runs a command as root, or fails.
pick_sudo() {
	SUDO=()
	if [[ $(id -u) -eq 0 ]]; then
		return 0
	fi
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
		return 0
	fi
	log "not root and sudo is not installed: run this script as root"
	return 1
}

# Stops the system service $1 and keeps it from starting at boot. Failures are ignored:
# there may be no systemd (containers), no init script, or no such service at all.
stop_service() {
	local svc=$1
	if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
		if systemctl is-active --quiet "$svc" 2>/dev/null ||
			systemctl is-enabled --quiet "$svc" 2>/dev/null; then
			log "stopping and disabling the system $svc service"
			pick_sudo || return 0
			"${SUDO[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
		fi
		return 0
	fi
	# Without systemd, the package's init script may have started it; LSB's `status`
	# exits 0 only while it runs.
	if [[ -x /etc/init.d/$svc ]] && /etc/init.d/"$svc" status >/dev/null 2>&1; then
		log "stopping the system $svc started by its init script"
		pick_sudo || return 0
		"${SUDO[@]}" /etc/init.d/"$svc" stop >/dev/null 2>&1 || true
		if command -v update-rc.d >/dev/null 2>&1; then
			"${SUDO[@]}" update-rc.d "$svc" disable >/dev/null 2>&1 || true
		fi
	fi
}

# Stops the services of SERVICES, and sshd when this run installed it ($@: the packages
# this run installed).
stop_system_services() {
	local svc
	for svc in "${SERVICES[@]}"; do
		stop_service "$svc"
	done
	if printf '%s\n' "$@" | grep -qxF "$SSH_PACKAGE"; then
		stop_service "$SSH_SERVICE"
	fi
}

# Installs the Debian packages that are missing, then stops the services they started.
install_packages() {
	local missing
	mapfile -t missing < <(missing_packages)
	if [[ ${#missing[@]} -eq 0 ]]; then
		stop_system_services
		return 0
	fi

	log "installing: ${missing[*]}"
	pick_sudo
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${missing[@]}"

	local still
	mapfile -t still < <(missing_packages)
	if [[ ${#still[@]} -ne 0 ]]; then
		log "still missing after apt-get install: ${still[*]}"
		return 1
	fi
	stop_system_services "${missing[@]}"
}

# Runs a command as the user .venv/ belongs to: $SUDO_USER when root came through sudo,
# else whoever runs this script.
as_owner() {
	if [[ $(id -u) -eq 0 && -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
		sudo -u "$SUDO_USER" -H -- "$@"
	else
		"$@"
	fi
}

# What .venv/ was built from: requirements.txt and the interpreter behind it. A change
# of either (a new requirements.txt, Debian's python3 moving to another minor version)
# rebuilds .venv/.
venv_stamp() {
	local python=$1
	printf '%s %s\n' "$(sha256sum <"$REQUIREMENTS" | cut -d' ' -f1)" "$(readlink -f "$python")"
}

# Builds .venv/ from scratch: a fresh virtual environment, then requirements.txt with
# --no-deps (the file lists every dependency itself, and pip check proves it) from
# binary wheels only (no compiler runs, and a missing wheel is an error, not a build).
build_venv() {
	local python=$1 want=$2
	if [[ -e $VENV ]] && ! as_owner test -w "$VENV"; then
		log "$VENV belongs to another user: remove it, or run this as its owner"
		return 1
	fi
	log "creating the Python environment $VENV ($("$python" --version 2>&1))"
	as_owner "$python" -m venv --clear "$VENV"
	as_owner "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
		--require-virtualenv --no-deps --only-binary=:all: -r "$REQUIREMENTS"
	as_owner "$VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null
	as_owner sh -c 'printf "%s\n" "$1" >"$2"' sh "$want" "$STAMP"
	log "installed $(grep -cE '^[A-Za-z0-9]' "$REQUIREMENTS") packages into $VENV"
}

# Makes .venv/ match requirements.txt, unless its stamp says it already does.
ensure_venv() {
	local python=$DEBIAN_PYTHON want
	if [[ ! -x $python ]]; then
		python=$(command -v python3 || true)
		[[ -n $python ]] || { log "python3 is not installed"; return 1; }
	fi
	want=$(venv_stamp "$python")
	if [[ -x $VENV/bin/python && -f $STAMP && $(<"$STAMP") == "$want" ]]; then
		return 0
	fi
	# Two builds at once (two make commands in one checkout) take turns; the second
	# finds the stamp written and does nothing. The lock is requirements.txt itself,
	# opened read-only, so no file is left behind.
	exec 9<"$REQUIREMENTS"
	flock 9
	if [[ -x $VENV/bin/python && -f $STAMP && $(<"$STAMP") == "$want" ]]; then
		exec 9<&-
		return 0
	fi
	build_venv "$python" "$want"
	exec 9<&-
}

main() {
	if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
		install_packages
	else
		log "not a Debian system: install these yourself: ${PACKAGES[*]}"
	fi
	ensure_venv
}

main "$@"
