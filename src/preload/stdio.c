/* SPDX-License-Identifier: MIT */
/*
 * Paths into a socket that glibc takes inside itself, past the interposed functions:
 * - dprintf and vdprintf write with glibc's own write: the text is formatted here and
 *   written through the interposed one;
 * - sockatmark asks ioctl inside glibc: asked through the interposed ioctl;
 * - stdio on the standard streams: a program handed a socket as its standard input or
 *   output (inetd, a daemon's dup2 before exec) reads and writes it with glibc's own
 *   read and write, which see wake-up bytes. Such a connection moves back to kernel TCP
 *   in place when the socket lands on descriptor 0, 1 or 2: the calls that put it there
 *   (socket.c's dup family, init.c for what the program started with) call
 *   uls_handoff_stdio (core/handoff.c);
 * - _Fork runs no fork handler, popen and system start their child with glibc's own
 *   spawn: the child may keep any socket, so each is marked as shared (the parent's
 *   close then asks the kernel whether the socket is still open elsewhere).
 * Every other stdio stream comes from fdopen, which moves the connection back first
 * (exec.c, through uls_handoff_fdopen).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload.h"
#include "../core/conn.h"
#include "../core/fdtable.h"

/* ---- dprintf ---- */

static int write_all(int fd, const char *p, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = write(fd, p + done, n - done);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

static int format_to(int fd, const char *fmt, va_list ap)
{
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);

	if (n < 0)
		return -1;
	int r = write_all(fd, s, (size_t)n) < 0 ? -1 : n;
	int err = errno;
	free(s);
	errno = err;
	return r;
}

ULS_EXPORT int vdprintf(int fd, const char *fmt, va_list ap)
{
	uls_ensure_init();
	if (uls_fd_accel(fd))
		return format_to(fd, fmt, ap);
	return uls_libc.vdprintf(fd, fmt, ap);
}

ULS_EXPORT int dprintf(int fd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int r = vdprintf(fd, fmt, ap);
	va_end(ap);
	return r;
}

/* The fortified entry points: the checks they add are on %n, which vasprintf refuses. */
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);
int __dprintf_chk(int fd, int flag, const char *fmt, ...);

ULS_EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
	uls_ensure_init();
	if (uls_fd_accel(fd))
		return format_to(fd, fmt, ap);
	return uls_libc.__vdprintf_chk(fd, flag, fmt, ap);
}

ULS_EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int r = __vdprintf_chk(fd, flag, fmt, ap);
	va_end(ap);
	return r;
}

/* ---- sockatmark ---- */

ULS_EXPORT int sockatmark(int fd)
{
	int at = 0;

	return ioctl(fd, SIOCATMARK, &at) < 0 ? -1 : at;
}

/* ---- children the fork handlers do not see ---- */

ULS_EXPORT pid_t _Fork(void)
{
	uls_ensure_init();
	uls_atfork_prepare();
	pid_t pid = uls_libc._Fork();
	if (pid == 0)
		uls_atfork_child();
	return pid;
}

ULS_EXPORT FILE *popen(const char *cmd, const char *mode)
{
	uls_ensure_init();
	if (uls_conn_any_accelerated())
		uls_conn_mark_shared_all(ULS_SHARED_STICKY);
	return uls_libc.popen(cmd, mode);
}

ULS_EXPORT int system(const char *cmd)
{
	uls_ensure_init();
	if (cmd && uls_conn_any_accelerated())
		uls_conn_mark_shared_all(ULS_SHARED_STICKY);
	return uls_libc.system(cmd);
}
