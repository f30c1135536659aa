/* SPDX-License-Identifier: MIT */
/* Configuration, read from the environment once when the library loads. */
#ifndef ULS_CONFIG_H
#define ULS_CONFIG_H

#include <stdint.h>
#include <sys/types.h>

#include "ulsock/config.h"

enum uls_profile { ULS_PROFILE_LATENCY, ULS_PROFILE_BALANCED, ULS_PROFILE_EFFICIENT };
enum uls_log_level { ULS_LOG_ERROR, ULS_LOG_WARN, ULS_LOG_INFO, ULS_LOG_DEBUG };

#define ULS_MAX_TRUSTED 16
/* Receive pacing (transport/shm/io.c, ring_recv): the default, and the most that
 * ULSOCK_RX_PACE_NS may set. */
#define ULS_RX_PACE_NS 1000u
#define ULS_RX_PACE_MAX_NS 100000u
/* The fabric directory's port (protocol.md 9.1). */
#define ULS_FABRIC_PORT 62840
/* How long a side of a fabric handshake waits for the other's next message (protocol.md
 * 9.4): the default, and ULSOCK_FABRIC_WAIT_MS's range. */
#define ULS_FABRIC_WAIT_MS 10000u
#define ULS_FABRIC_WAIT_MIN_MS 100u
#define ULS_FABRIC_WAIT_MAX_MS 600000u
/* ULSOCK_SHORT_CALLS (core/shortconn.h): the default, and the most it may be (0: off). */
#define ULS_SHORT_CALLS_DEFAULT 8
#define ULS_SHORT_CALLS_MAX 1000

struct uls_config {
	enum uls_profile profile;
	enum uls_log_level log_level;
	int log_fd;
	const char *log_file; /* ULSOCK_LOG_FILE, opened by uls_log_open */
	uint64_t ring_size; /* default bytes per direction */
	int64_t spin_ns;    /* spin before sleeping; -1: without limit */
	uint64_t rx_pace_ns; /* a streaming receiver looks at the ring at most this often */
	int disabled;       /* ULSOCK_DISABLE: never accelerate */
	int short_calls;    /* ULSOCK_SHORT_CALLS (core/shortconn.h); 0: off */
	/*
	 * Set once the process did something the rings cannot follow (io_uring, a seccomp
	 * filter: preload/direct.c): no new connection is accelerated, for this reason.
	 */
	const char *_Atomic off_reason;
	int ntrusted;
	uid_t trusted[ULS_MAX_TRUSTED];
	/*
	 * Between hosts (docs/protocol.md 9.1): the allow-list and the provider as set (the
	 * fabric transport parses them when it first needs them; NULL: unset), the key
	 * file's path, the directory port, how long a handshake waits for the peer, and
	 * whether connection slots are posted untagged where the provider can (9.2).
	 */
	const char *fabric_peers;
	const char *fabric_provider;
	const char *fabric_key;
	uint16_t fabric_port;
	uint32_t fabric_wait_ms;
	int fabric_untagged;
	uid_t uid;
};

extern struct uls_config uls_cfg;

/*
 * Reads the ULSOCK_* variables into uls_cfg: defaults first, then each variable that is
 * set and not empty. Each invalid value gets one warning in the log (at level warn, in
 * ULSOCK_LOG_FILE when that can be opened) naming the variable, the value and what is
 * used instead; at level debug one line gives the configuration in force.
 */
void uls_config_load(void);

/*
 * Reads the library's ULSOCK_* variables into *cfg, as uls_config_load does, without
 * logging: calls bad(arg) once for each invalid value, after putting in place what is used
 * instead. Returns the number of invalid values (ulsock_config_check is this on a copy).
 */
int uls_config_parse(struct uls_config *cfg, ulsock_config_bad_fn bad, void *arg);

/* getpid() and getuid() without a system call each time; the pid is renewed after fork. */
extern pid_t uls_cached_pid;
pid_t uls_pid_slow(void);
static inline pid_t uls_pid(void)
{
	return __builtin_expect(uls_cached_pid != 0, 1) ? uls_cached_pid : uls_pid_slow();
}
uid_t uls_uid(void);
/* After setuid and friends: the next uls_uid asks the kernel. */
void uls_uid_changed(void);
void uls_config_atfork_child(void);
int uls_config_uid_trusted(uid_t uid);
const char *uls_profile_name(enum uls_profile p);
int uls_profile_parse(const char *s, enum uls_profile *out);

#endif
