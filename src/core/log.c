/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "../os/ownfd.h"
#include "../os/libc.h"

/*
 * A log line must not end the program: a process whose file size limit the log file
 * passed (OpenSSH's sandboxed child sets RLIMIT_FSIZE to 0) gets SIGXFSZ from the write,
 * and dies of it. So SIGXFSZ is held around the write, and the one the write raised is
 * taken back before it is let through.
 */
static void log_write(const char *buf, size_t n)
{
	ssize_t r = uls_write_unsignalled(uls_cfg.log_fd, buf, n, SIGXFSZ, EFBIG);
	(void)r;
}

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
		log_write(buf, (size_t)n);
	errno = saved;
}

void uls_log_open(void)
{
	int fd;

	if (!uls_cfg.log_file)
		return;
	fd = open(uls_cfg.log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	/* Out of the way of the descriptors the program picks, and out of its reach. */
	uls_own_fd_take(fd, &uls_cfg.log_fd);
}
