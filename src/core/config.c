/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "ulsock/ulsock.h"
#include "../os/libc.h"

/*
 * The ulsock command links this file without the rest of the core (the ulsock_config
 * library, src/CMakeLists.txt) through include/ulsock/config.h: it checks the variables
 * to refuse bad ones, and never loads them into the library's configuration. The log and the real libc functions are there only in the library, so
 * uls_config_load reaches them through weak references, and the command links without.
 */
#pragma weak uls_log
#pragma weak uls_libc

pid_t uls_cached_pid;
static int uid_known;

#define RING_DEFAULT (1u << 20)
#define RING_MIN 4096u
#define RING_MAX (64u << 20)
/* Spin budgets past 10 s are a mistake, not a wish: -1 says "without limit". */
#define SPIN_MAX_US 10000000ll

struct uls_config uls_cfg = {
	.profile = ULS_PROFILE_BALANCED,
	.log_level = ULS_LOG_WARN,
	.log_fd = 2,
	.ring_size = RING_DEFAULT,
	.spin_ns = 20000,
};

static const char *const profile_names[] = {
	[ULS_PROFILE_LATENCY] = "latency",
	[ULS_PROFILE_BALANCED] = "balanced",
	[ULS_PROFILE_EFFICIENT] = "efficient",
};

static const char *const level_names[] = {
	[ULS_LOG_ERROR] = "error",
	[ULS_LOG_WARN] = "warn",
	[ULS_LOG_INFO] = "info",
	[ULS_LOG_DEBUG] = "debug",
};

/* Spin budgets: latency never sleeps while waiting for a peer that is active; balanced
 * covers a typical request/response turnaround; efficient sleeps at once. */
static const int64_t profile_spin_ns[] = {
	[ULS_PROFILE_LATENCY] = -1,
	[ULS_PROFILE_BALANCED] = 20000,
	[ULS_PROFILE_EFFICIENT] = 0,
};

const char *uls_profile_name(enum uls_profile p)
{
	return profile_names[p];
}

int uls_profile_parse(const char *s, enum uls_profile *out)
{
	for (int i = 0; i < 3; i++) {
		if (strcmp(s, profile_names[i]) == 0) {
			*out = (enum uls_profile)i;
			return 0;
		}
	}
	return -1;
}

/* --------------------------------------------------------------------- parsing */

/* A whole decimal number and nothing else: no blanks, no suffix. Returns 0, -ERANGE for
 * a number past long long (*out is then LLONG_MIN or LLONG_MAX), or -EINVAL. */
static int parse_ll(const char *s, long long *out)
{
	char *end;

	if (!((*s >= '0' && *s <= '9') || *s == '-' || *s == '+'))
		return -EINVAL;
	errno = 0;
	*out = strtoll(s, &end, 10);
	if (end == s || *end)
		return -EINVAL;
	return errno == ERANGE ? -ERANGE : 0;
}

/* An unsigned number, decimal or 0x-prefixed hexadecimal, and nothing else. */
static int parse_ull(const char *s, unsigned long long *out)
{
	int base = 10;
	char *end;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	if (!((*s >= '0' && *s <= '9') || (base == 16 && *s && strchr("abcdefABCDEF", *s))))
		return -1;
	errno = 0;
	*out = strtoull(s, &end, base);
	return errno || end == s || *end ? -1 : 0;
}

/* Each parser reads one variable's value (set, not empty) into cfg. On a bad value it
 * puts what is used instead in place, says so in bad->used, describes the problem in
 * bad->problem and returns -1. They run in table order: the spin budget's default comes
 * from the profile, and the pacing's from the spin budget. */
typedef int (*parse_fn)(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad);

static int parse_profile(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	if (uls_profile_parse(s, &cfg->profile) == 0) {
		cfg->spin_ns = profile_spin_ns[cfg->profile];
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem), "is not latency, balanced or efficient");
	snprintf(bad->used, sizeof(bad->used), "using %s", profile_names[cfg->profile]);
	return -1;
}

static int parse_spin(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	long long v;

	if (parse_ll(s, &v) == 0 && v >= -1 && v <= SPIN_MAX_US) {
		cfg->spin_ns = v < 0 ? -1 : v * 1000;
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem),
		 "is not a number of microseconds from 0 to %lld, or -1 for no limit",
		 SPIN_MAX_US);
	snprintf(bad->used, sizeof(bad->used), "using %lld (the %s profile's)",
		 cfg->spin_ns < 0 ? -1ll : (long long)(cfg->spin_ns / 1000),
		 profile_names[cfg->profile]);
	return -1;
}

static int parse_pace(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	long long v;
	int err = parse_ll(s, &v);

	if (err == 0 && v <= (long long)ULS_RX_PACE_MAX_NS) {
		cfg->rx_pace_ns = v <= 0 ? 0 : (uint64_t)v; /* 0 or negative: off */
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem),
		 "is not a number of nanoseconds up to %u (0 or less: off)", ULS_RX_PACE_MAX_NS);
	/* A number past the maximum is taken as the maximum, as it was before it was
	 * checked (and one below long long's range as off); anything else leaves the
	 * default. */
	if (err != -EINVAL)
		cfg->rx_pace_ns = v < 0 ? 0 : ULS_RX_PACE_MAX_NS;
	snprintf(bad->used, sizeof(bad->used), "using %" PRIu64, cfg->rx_pace_ns);
	return -1;
}

/* The smallest ring size allowed that holds v bytes. */
static uint64_t round_pow2(unsigned long long v)
{
	uint64_t p = RING_MIN;

	while (p < v && p < RING_MAX)
		p <<= 1;
	return p;
}

static int parse_ring(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	unsigned long long v;
	int number = parse_ull(s, &v) == 0;

	if (number && v >= RING_MIN && v <= RING_MAX && (v & (v - 1)) == 0) {
		cfg->ring_size = v;
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem),
		 "is not a power of two from %u to %u (bytes)", RING_MIN, RING_MAX);
	/* A number is rounded up to the next size allowed, as it was before it was checked. */
	if (number)
		cfg->ring_size = round_pow2(v);
	snprintf(bad->used, sizeof(bad->used), "using %" PRIu64, cfg->ring_size);
	return -1;
}

static int parse_log(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	for (int i = 0; i < 4; i++) {
		if (strcmp(s, level_names[i]) == 0) {
			cfg->log_level = (enum uls_log_level)i;
			return 0;
		}
	}
	snprintf(bad->problem, sizeof(bad->problem), "is not error, warn, info or debug");
	snprintf(bad->used, sizeof(bad->used), "using %s", level_names[cfg->log_level]);
	return -1;
}

static void close_fd(int fd)
{
	/* Inside the library, close() is ulsock's own: go around it. */
	if (&uls_libc && uls_libc.close)
		uls_libc.close(fd);
	else
		close(fd);
}

/*
 * Strings read later are kept as copies: a program may overwrite its environment's memory
 * once started (redis-server, nginx and postgres write their process titles over argv and
 * the environment after moving it), and a pointer into it would then read the title.
 */
static int keep(char *buf, size_t n, const char *s, const char **out,
		struct ulsock_config_bad *bad)
{
	size_t len = strlen(s);

	if (len >= n) {
		snprintf(bad->problem, sizeof(bad->problem), "is longer than %zu bytes", n - 1);
		snprintf(bad->used, sizeof(bad->used), "ignored");
		return -1;
	}
	memcpy(buf, s, len + 1);
	*out = buf;
	return 0;
}

/* The log file must be one this process can append to: it is opened (and created, as
 * uls_log_open would) to find out. A FIFO without a reader yet is fine. */
static int parse_log_file(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	int fd = open(s, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0600);

	if (fd >= 0 || errno == ENXIO) {
		static char copy[PATH_MAX];
		if (fd >= 0)
			close_fd(fd);
		if (keep(copy, sizeof(copy), s, &cfg->log_file, bad) == 0)
			return 0;
		snprintf(bad->used, sizeof(bad->used), "logging to standard error");
		return -1;
	}
	snprintf(bad->problem, sizeof(bad->problem), "cannot be opened (%s)", strerror(errno));
	snprintf(bad->used, sizeof(bad->used), "logging to standard error");
	return -1;
}

static int parse_short_calls(const char *s, struct uls_config *cfg,
			     struct ulsock_config_bad *bad)
{
	long long v;

	if (parse_ll(s, &v) == 0 && v >= 0 && v <= ULS_SHORT_CALLS_MAX) {
		cfg->short_calls = (int)v;
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem), "is not a count of calls from 0 to %d (0: off)",
		 ULS_SHORT_CALLS_MAX);
	snprintf(bad->used, sizeof(bad->used), "using %d", ULS_SHORT_CALLS_DEFAULT);
	return -1;
}

static int parse_disable(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0) {
		cfg->disabled = s[0] == '1';
		return 0;
	}
	/* Set to something, it was taken as "disable" before it was checked: keep that. */
	cfg->disabled = 1;
	snprintf(bad->problem, sizeof(bad->problem), "is not 1 (disable) or 0");
	snprintf(bad->used, sizeof(bad->used), "using 1 (every connection stays on kernel TCP)");
	return -1;
}

/* Comma-separated uids, at most ULS_MAX_TRUSTED. A list that is wrong anywhere trusts no
 * one: trust is not granted on a guess. */
static int parse_trusted(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	const char *item = s;

	cfg->ntrusted = 0;
	for (;;) {
		const char *comma = strchr(item, ',');
		size_t len = comma ? (size_t)(comma - item) : strlen(item);
		char num[16];
		long long v;

		if (len == 0 || len >= sizeof(num) || cfg->ntrusted == ULS_MAX_TRUSTED)
			break;
		memcpy(num, item, len);
		num[len] = '\0';
		if (num[0] < '0' || num[0] > '9' || parse_ll(num, &v) < 0 || v >= (uid_t)-1)
			break;
		cfg->trusted[cfg->ntrusted++] = (uid_t)v;
		if (!comma)
			return 0;
		item = comma + 1;
	}
	cfg->ntrusted = 0;
	snprintf(bad->problem, sizeof(bad->problem), "is not a comma-separated list of up to %d uids",
		 ULS_MAX_TRUSTED);
	snprintf(bad->used, sizeof(bad->used), "trusting no other user");
	return -1;
}

static int parse_fabric_port(const char *s, struct uls_config *cfg,
			     struct ulsock_config_bad *bad)
{
	long long v;

	if (parse_ll(s, &v) == 0 && v >= 1 && v <= 65535) {
		cfg->fabric_port = (uint16_t)v;
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem), "is not a port from 1 to 65535");
	snprintf(bad->used, sizeof(bad->used), "using %u", ULS_FABRIC_PORT);
	return -1;
}

static int parse_fabric_wait(const char *s, struct uls_config *cfg,
			     struct ulsock_config_bad *bad)
{
	long long v;

	if (parse_ll(s, &v) == 0 && v >= ULS_FABRIC_WAIT_MIN_MS && v <= ULS_FABRIC_WAIT_MAX_MS) {
		cfg->fabric_wait_ms = (uint32_t)v;
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem), "is not a count of milliseconds from %u to %u",
		 ULS_FABRIC_WAIT_MIN_MS, ULS_FABRIC_WAIT_MAX_MS);
	snprintf(bad->used, sizeof(bad->used), "using %u", ULS_FABRIC_WAIT_MS);
	return -1;
}

static int parse_fabric_untagged(const char *s, struct uls_config *cfg,
				 struct ulsock_config_bad *bad)
{
	if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0) {
		cfg->fabric_untagged = s[0] == '1';
		return 0;
	}
	snprintf(bad->problem, sizeof(bad->problem), "is not 1 (untagged) or 0 (tagged)");
	snprintf(bad->used, sizeof(bad->used), "using 1");
	return -1;
}

/* The allow-list, the provider and the key are the fabric transport's to check, when a
 * connection first needs them (it logs a bad one once, and keeps to TCP). */
static int keep_fabric_peers(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	static char copy[4096];

	return keep(copy, sizeof(copy), s, &cfg->fabric_peers, bad);
}

static int keep_fabric_provider(const char *s, struct uls_config *cfg,
				struct ulsock_config_bad *bad)
{
	static char copy[256];

	return keep(copy, sizeof(copy), s, &cfg->fabric_provider, bad);
}

static int keep_fabric_key(const char *s, struct uls_config *cfg, struct ulsock_config_bad *bad)
{
	static char copy[PATH_MAX];

	return keep(copy, sizeof(copy), s, &cfg->fabric_key, bad);
}

static const struct {
	const char *name;
	parse_fn parse;
} vars[] = {
	{ULSOCK_ENV_PROFILE, parse_profile},
	{ULSOCK_ENV_SPIN_US, parse_spin},
	{ULSOCK_ENV_RX_PACE_NS, parse_pace},
	{ULSOCK_ENV_RING_SIZE, parse_ring},
	{ULSOCK_ENV_LOG, parse_log},
	{ULSOCK_ENV_LOG_FILE, parse_log_file},
	{ULSOCK_ENV_DISABLE, parse_disable},
	{ULSOCK_ENV_TRUST_UIDS, parse_trusted},
	{ULSOCK_ENV_SHORT_CALLS, parse_short_calls},
	{ULSOCK_ENV_FABRIC_PEERS, keep_fabric_peers},
	{ULSOCK_ENV_FABRIC_PROVIDER, keep_fabric_provider},
	{ULSOCK_ENV_FABRIC_KEY, keep_fabric_key},
	{ULSOCK_ENV_FABRIC_PORT, parse_fabric_port},
	{ULSOCK_ENV_FABRIC_WAIT_MS, parse_fabric_wait},
	{ULSOCK_ENV_FABRIC_UNTAGGED, parse_fabric_untagged},
};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

/* The value as a log line may show it: printable ASCII, at most 200 bytes of it. */
static void quote_value(char *out, size_t len, const char *s)
{
	size_t n = 0;

	for (; *s && n + 4 < len; s++)
		out[n++] = *s >= 0x20 && *s < 0x7f ? *s : '?';
	if (*s)
		memcpy(out + n - 3, "...", 3);
	out[n] = '\0';
}

int uls_config_parse(struct uls_config *cfg, ulsock_config_bad_fn bad_fn, void *arg)
{
	int nbad = 0;

	cfg->profile = ULS_PROFILE_BALANCED;
	cfg->log_level = ULS_LOG_WARN;
	cfg->log_file = NULL;
	cfg->ring_size = RING_DEFAULT;
	cfg->spin_ns = profile_spin_ns[cfg->profile];
	cfg->disabled = 0;
	cfg->short_calls = ULS_SHORT_CALLS_DEFAULT;
	cfg->ntrusted = 0;
	cfg->fabric_peers = cfg->fabric_provider = cfg->fabric_key = NULL;
	cfg->fabric_port = ULS_FABRIC_PORT;
	cfg->fabric_wait_ms = ULS_FABRIC_WAIT_MS;
	cfg->fabric_untagged = 1;
	for (size_t i = 0; i < NVARS; i++) {
		const char *s = getenv(vars[i].name);
		struct ulsock_config_bad bad = {.var = vars[i].name};

		/* A receiver that does not spin does not pace either: pacing is a spin. */
		if (vars[i].parse == parse_pace)
			cfg->rx_pace_ns = cfg->spin_ns == 0 ? 0 : ULS_RX_PACE_NS;
		if (!s || !*s || vars[i].parse(s, cfg, &bad) == 0)
			continue;
		quote_value(bad.value, sizeof(bad.value), s);
		nbad++;
		if (bad_fn)
			bad_fn(&bad, arg);
	}
	return nbad;
}

int ulsock_config_check(ulsock_config_bad_fn bad, void *arg)
{
	struct uls_config cfg = uls_cfg;

	return uls_config_parse(&cfg, bad, arg);
}

int ulsock_profile_known(const char *name)
{
	enum uls_profile p;

	return uls_profile_parse(name, &p) == 0;
}

/* ------------------------------------------------------------------ the library */

struct bad_list {
	int n;
	struct ulsock_config_bad bad[NVARS];
};

static void collect(const struct ulsock_config_bad *bad, void *arg)
{
	struct bad_list *l = arg;

	l->bad[l->n++] = *bad;
}

static void log_config(void)
{
	char trusted[ULS_MAX_TRUSTED * 11 + 2] = "-";
	size_t n = 0;

	for (int i = 0; i < uls_cfg.ntrusted; i++)
		n += (size_t)snprintf(trusted + n, sizeof(trusted) - n, "%s%u", i ? "," : "",
				      (unsigned)uls_cfg.trusted[i]);
	uls_dbg("config: profile=%s spin_us=%lld rx_pace_ns=%" PRIu64 " ring_size=%" PRIu64
		" log=%s log_file=%s disable=%d short_calls=%d trust_uids=%s fabric_wait_ms=%u"
		" fabric_untagged=%d",
		profile_names[uls_cfg.profile],
		uls_cfg.spin_ns < 0 ? -1ll : (long long)(uls_cfg.spin_ns / 1000),
		uls_cfg.rx_pace_ns, uls_cfg.ring_size, level_names[uls_cfg.log_level],
		uls_cfg.log_file ? uls_cfg.log_file : "-", uls_cfg.disabled, uls_cfg.short_calls,
		trusted,
		(unsigned)uls_cfg.fabric_wait_ms, uls_cfg.fabric_untagged);
}

/* Logs the bad values, and at level debug the configuration, where the log will go:
 * uls_log_open has not run yet, so the log file is opened here for these lines only. */
static void report(const struct bad_list *l)
{
	int saved = uls_cfg.log_fd, fd = -1;

	if (!uls_log || (l->n == 0 && uls_cfg.log_level < ULS_LOG_DEBUG))
		return;
	if (uls_cfg.log_file) {
		fd = open(uls_cfg.log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0)
			uls_cfg.log_fd = fd;
	}
	for (int i = 0; i < l->n; i++)
		uls_warn("%s='%s' %s: %s", l->bad[i].var, l->bad[i].value, l->bad[i].problem,
			 l->bad[i].used);
	log_config();
	uls_cfg.log_fd = saved;
	if (fd >= 0)
		close_fd(fd);
}

void uls_config_load(void)
{
	struct bad_list bad = {0};

	uls_cfg.uid = geteuid();
	uid_known = 1;
	uls_config_parse(&uls_cfg, collect, &bad);
	report(&bad);
}

pid_t uls_pid_slow(void)
{
	uls_cached_pid = getpid();
	return uls_cached_pid;
}

/*
 * The user the files and sockets this process makes belong to (the effective uid, as
 * the kernel's fsuid follows it): segment names, trust, ownership checks. Kept, and
 * asked again after the program changes it (preload/socket.c, the setuid family).
 */
uid_t uls_uid(void)
{
	if (!uid_known) {
		uls_cfg.uid = geteuid();
		uid_known = 1;
	}
	return uls_cfg.uid;
}

void uls_uid_changed(void)
{
	uls_cfg.uid = geteuid();
	uid_known = 1;
}

void uls_config_atfork_child(void)
{
	uls_cached_pid = getpid();
}

int uls_config_uid_trusted(uid_t uid)
{
	if (uid == uls_uid())
		return 1;
	for (int i = 0; i < uls_cfg.ntrusted; i++)
		if (uls_cfg.trusted[i] == uid)
			return 1;
	return 0;
}
