/* SPDX-License-Identifier: MIT */
#include "runtime.h"

#include <stdio.h>
#include <unistd.h>

void ulf_vline(int fd, const char *prefix, const char *fmt, va_list ap)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "%s", prefix);

	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write: lines of many processes sharing a pipe must not interleave. */
	if (write(fd, line, (size_t)n) < 0)
		return;
}
