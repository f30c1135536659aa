#!/usr/bin/env bash
# Installs everything ulsock needs to build, test and benchmark on Debian 12.
#
# Idempotent: when every package is already installed it asks dpkg once and never
# touches apt. Run it as root, or as a user with sudo.
set -euo pipefail

PACKAGES=(
	# Build.
	gcc libc6-dev make cmake ninja-build pkg-config git
	# Sanitizer builds and libFuzzer targets.
	clang libclang-rt-14-dev
	# Test harness and plots.
	python3 python3-pytest python3-matplotlib
	# Real programs the tests and benchmarks run.
	sockperf iperf3 redis-server redis-tools qperf libfabric-bin
	# Process and socket inspection used by the tests.
	iproute2 procps psmisc
)

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

# Debian starts redis-server on port 6379 when it is installed. Tests pick their own
# ports, but a stray system instance only confuses people reading `ss` output, so stop
# and disable it. Failures are ignored: there may be no systemd (containers).
stop_system_redis() {
	if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
		if systemctl is-active --quiet redis-server 2>/dev/null ||
			systemctl is-enabled --quiet redis-server 2>/dev/null; then
			log "stopping and disabling the system redis-server service"
			pick_sudo || return 0
			"${SUDO[@]}" systemctl disable --now redis-server >/dev/null 2>&1 || true
		fi
		return 0
	fi
	# Without systemd, the package's init script may have started it.
	if [[ -x /etc/init.d/redis-server && -s /run/redis/redis-server.pid ]]; then
		log "stopping the system redis-server started by its init script"
		pick_sudo || return 0
		"${SUDO[@]}" /etc/init.d/redis-server stop >/dev/null 2>&1 || true
		if command -v update-rc.d >/dev/null 2>&1; then
			"${SUDO[@]}" update-rc.d redis-server disable >/dev/null 2>&1 || true
		fi
	fi
}

main() {
	if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
		log "not a Debian system: install these yourself: ${PACKAGES[*]}"
		return 0
	fi

	local missing
	mapfile -t missing < <(missing_packages)
	if [[ ${#missing[@]} -eq 0 ]]; then
		stop_system_redis
		return 0
	fi

	log "installing: ${missing[*]}"
	pick_sudo
	export DEBIAN_FRONTEND=noninteractive
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${missing[@]}"

	local still
	mapfile -t still < <(missing_packages)
	if [[ ${#still[@]} -ne 0 ]]; then
		log "still missing after apt-get install: ${still[*]}"
		return 1
	fi
	stop_system_redis
	log "done"
}

main "$@"
