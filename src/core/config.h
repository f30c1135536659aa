/* SPDX-License-Identifier: MIT */
/* Configuration, read from the environment once when the library loads. */
#ifndef ULS_CONFIG_H
#define ULS_CONFIG_H

#include <stdint.h>
#include <sys/types.h>

enum uls_profile { ULS_PROFILE_LATENCY, ULS_PROFILE_BALANCED, ULS_PROFILE_EFFICIENT };
enum uls_log_level { ULS_LOG_ERROR, ULS_LOG_WARN, ULS_LOG_INFO, ULS_LOG_DEBUG };

#define ULS_MAX_TRUSTED 16

struct uls_config {
	enum uls_profile profile;
	enum uls_log_level log_level;
	int log_fd;
	const char *log_file; /* ULSOCK_LOG_FILE, opened by uls_log_open */
	uint64_t ring_size; /* default bytes per direction */
	int64_t spin_ns;    /* spin before sleeping; -1: without limit */
	int disabled;       /* ULSOCK_DISABLE: never accelerate */
	int ntrusted;
	uid_t trusted[ULS_MAX_TRUSTED];
	uid_t uid;
};

extern struct uls_config uls_cfg;

void uls_config_load(void);
/* getpid() and getuid() without a system call each time; the pid is renewed after fork. */
pid_t uls_pid(void);
uid_t uls_uid(void);
void uls_config_atfork_child(void);
int uls_config_uid_trusted(uid_t uid);
const char *uls_profile_name(enum uls_profile p);
int uls_profile_parse(const char *s, enum uls_profile *out);

#endif
