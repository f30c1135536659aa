/* SPDX-License-Identifier: MIT */
/* Logging that is safe inside interposed calls: no stdio, no malloc, one write(2). */
#ifndef ULS_LOG_H
#define ULS_LOG_H

#include "config.h"

/* Opens ULSOCK_LOG_FILE, once the real libc functions are resolved. */
void uls_log_open(void);

void uls_log(enum uls_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define uls_err(...) uls_log(ULS_LOG_ERROR, __VA_ARGS__)
#define uls_warn(...) uls_log(ULS_LOG_WARN, __VA_ARGS__)
#define uls_info(...) uls_log(ULS_LOG_INFO, __VA_ARGS__)
#define uls_dbg(...)                                                                       \
	do {                                                                               \
		if (uls_cfg.log_level >= ULS_LOG_DEBUG)                                    \
			uls_log(ULS_LOG_DEBUG, __VA_ARGS__);                               \
	} while (0)

#endif
