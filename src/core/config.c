/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ulsock/ulsock.h"

pid_t uls_cached_pid;
static int uid_known;

struct uls_config uls_cfg = {
	.profile = ULS_PROFILE_BALANCED,
	.log_level = ULS_LOG_WARN,
	.log_fd = 2,
	.ring_size = 1u << 20,
	.spin_ns = 20000,
};

static const char *const profile_names[] = {
	[ULS_PROFILE_LATENCY] = "latency",
	[ULS_PROFILE_BALANCED] = "balanced",
	[ULS_PROFILE_EFFICIENT] = "efficient",
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

static void load_log(void)
{
	static const char *const levels[] = {"error", "warn", "info", "debug"};
	const char *lvl = getenv(ULSOCK_ENV_LOG), *file = getenv(ULSOCK_ENV_LOG_FILE);

	for (int i = 0; lvl && i < 4; i++)
		if (strcmp(lvl, levels[i]) == 0)
			uls_cfg.log_level = (enum uls_log_level)i;
	uls_cfg.log_file = file && *file ? file : NULL;
}

static void load_trusted(void)
{
	const char *s = getenv(ULSOCK_ENV_TRUST_UIDS);
	char *end;

	uls_cfg.ntrusted = 0;
	while (s && *s && uls_cfg.ntrusted < ULS_MAX_TRUSTED) {
		unsigned long v = strtoul(s, &end, 10);
		if (end == s)
			break;
		uls_cfg.trusted[uls_cfg.ntrusted++] = (uid_t)v;
		s = *end == ',' ? end + 1 : end;
	}
}

static uint64_t round_pow2(uint64_t v)
{
	uint64_t p = 4096;
	while (p < v && p < (64u << 20))
		p <<= 1;
	return p;
}

void uls_config_load(void)
{
	const char *s;

	uls_cfg.uid = getuid();
	uid_known = 1;
	if ((s = getenv(ULSOCK_ENV_PROFILE)) != NULL)
		uls_profile_parse(s, &uls_cfg.profile);
	uls_cfg.spin_ns = profile_spin_ns[uls_cfg.profile];
	if ((s = getenv(ULSOCK_ENV_SPIN_US)) != NULL && *s)
		uls_cfg.spin_ns = atoll(s) < 0 ? -1 : atoll(s) * 1000;
	/* A receiver that does not spin does not pace either: pacing is a spin. */
	uls_cfg.rx_pace_ns = uls_cfg.spin_ns == 0 ? 0 : ULS_RX_PACE_NS;
	if ((s = getenv(ULSOCK_ENV_RX_PACE_NS)) != NULL && *s) {
		long long v = atoll(s); /* negative: off, like 0 */
		uls_cfg.rx_pace_ns = v <= 0 ? 0 : v > ULS_RX_PACE_MAX_NS ? ULS_RX_PACE_MAX_NS
									  : (uint64_t)v;
	}
	if ((s = getenv(ULSOCK_ENV_RING_SIZE)) != NULL && *s)
		uls_cfg.ring_size = round_pow2(strtoull(s, NULL, 0));
	if ((s = getenv(ULSOCK_ENV_DISABLE)) != NULL && *s && strcmp(s, "0") != 0)
		uls_cfg.disabled = 1;
	load_log();
	load_trusted();
}


pid_t uls_pid_slow(void)
{
	uls_cached_pid = getpid();
	return uls_cached_pid;
}

uid_t uls_uid(void)
{
	if (!uid_known) {
		uls_cfg.uid = getuid();
		uid_known = 1;
	}
	return uls_cfg.uid;
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
