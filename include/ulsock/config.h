/* SPDX-License-Identifier: MIT */
/*
 * Checking ulsock's environment variables (ULSOCK_ENV_* in ulsock.h) without loading the
 * library: `ulsock run` refuses a bad value with this before the program starts. The
 * library reads the same variables by the same rules when it loads, and warns instead
 * (src/core/config.c implements both).
 */
#ifndef ULSOCK_CONFIG_H
#define ULSOCK_CONFIG_H

/* A ULSOCK_* value that is not valid, and what the library uses instead. */
struct ulsock_config_bad {
	const char *var;   /* the variable's name */
	char value[204];   /* its value, printable, cut short past 200 bytes */
	char problem[112]; /* "is not error, warn, info or debug" */
	char used[64];     /* "using warn" */
};
typedef void (*ulsock_config_bad_fn)(const struct ulsock_config_bad *bad, void *arg);

/*
 * Reads the ULSOCK_* variables of this process's environment as the library would and
 * calls bad(arg) once for each invalid value. Returns how many there are: 0 when every
 * variable that is set is valid.
 */
int ulsock_config_check(ulsock_config_bad_fn bad, void *arg);

/* 1 when name is one of the profiles (latency, balanced, efficient), else 0. */
int ulsock_profile_known(const char *name);

#endif
