/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "../preload/libc.h"

void uls_log(enum uls_log_level level, const char *fmt, ...)
{
	char buf[512];
	int saved = errno, n, m;
	va_list ap;

	if (level > uls_cfg.log_level)
		return;
	n = snprintf(buf, sizeof(buf), "ulsock[%d]: ", (int)getpid());
	va_start(ap, fmt);
	m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n += m < 0 ? 0 : (m >= (int)sizeof(buf) - n - 1 ? (int)sizeof(buf) - n - 2 : m);
	buf[n++] = '\n';
	if (uls_libc.write)
		uls_libc.write(uls_cfg.log_fd, buf, (size_t)n);
	errno = saved;
}
