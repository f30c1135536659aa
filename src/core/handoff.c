/* SPDX-License-Identifier: MIT */
/* Sockets leaving ulsock's reach: SCM_RIGHTS, exec and posix_spawn, stdio (handoff.h). */
#include "handoff.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "fdtable.h"
#include "log.h"
#include "../os/libc.h"

/* Collects the descriptors carried by SCM_RIGHTS messages; returns how many. */
static int scm_fds(const struct msghdr *msg, int *out, int max)
{
	int k = 0;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR((struct msghdr *)msg); cm;
	     cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n && k < max; i++)
			memcpy(&out[k++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	}
	return k;
}

#define SCM_MAX 253 /* the kernel's SCM_MAX_FD */

/*
 * Every accelerated connection among them moves back to kernel TCP before the message
 * leaves, whoever will receive it. No check at this moment can prove that the process
 * that takes the descriptor out of the unix socket runs ulsock: a process that maps the
 * library now may exec a program without it while the descriptor is still queued (its
 * exec moves back only what it holds), or pass the unix socket on; such a receiver would
 * read the kernel socket while the peer's bytes stayed on the ring. A receiver that runs
 * ulsock finds the connection on the kernel path (docs/design.md, "SCM_RIGHTS").
 */
void uls_handoff_sent(const struct msghdr *msg)
{
	int fds[SCM_MAX], n = scm_fds(msg, fds, SCM_MAX);

	for (int i = 0; i < n; i++) {
		struct uls_conn *pc = uls_fd_conn(fds[i]);
		if (!pc)
			continue;
		atomic_store(&pc->shared, ULS_SHARED_STICKY);
		if (!uls_conn_accelerated(pc))
			continue;
		int r = uls_conn_revert(pc, fds[i], 2000);
		if (r < 0)
			uls_err("SCM_RIGHTS: fd=%d leaves this process but could not move back to "
				"kernel TCP: %s", fds[i], strerror(-r));
	}
}

void uls_handoff_received(const struct msghdr *msg)
{
	int fds[SCM_MAX], n = scm_fds(msg, fds, SCM_MAX);

	for (int i = 0; i < n; i++)
		uls_fd_clear(fds[i]);
}

/* ---- exec and posix_spawn ---- */

/* The library's own file: dladdr on one of its functions (the core is compiled into it). */
static const char *library_path(void)
{
	static char path[4096];
	Dl_info info;

	if (!path[0] && dladdr((void *)library_path, &info) && info.dli_fname)
		strncpy(path, info.dli_fname, sizeof(path) - 1);
	return path[0] ? path : NULL;
}

static int preload_has(const char *value, const char *lib)
{
	const char *p = value;
	size_t n = strlen(lib);

	while (p && (p = strstr(p, lib)) != NULL) {
		if ((p == value || p[-1] == ':' || p[-1] == ' ') &&
		    (p[n] == '\0' || p[n] == ':' || p[n] == ' '))
			return 1;
		p += n;
	}
	return 0;
}

/*
 * The new program will not run ulsock: move every accelerated socket it inherits back to
 * kernel TCP first. With all, close-on-exec ones too (a posix_spawn file action may dup
 * them into the child). Returns 0 when all could be moved.
 */
static int revert_inherited(int all)
{
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	int failed = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL) {
		int fd = atoi(de->d_name);
		if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dirfd(d))
			continue;
		struct uls_conn *c = uls_fd_conn(fd);
		if (!uls_conn_accelerated(c))
			continue;
		int fl = uls_libc.fcntl(fd, F_GETFD);
		if (fl < 0 || ((fl & FD_CLOEXEC) && !all))
			continue;
		int r = uls_conn_revert(c, fd, 2000);
		if (r < 0) {
			uls_warn("exec: fd=%d could not move back to kernel TCP: %s", fd, strerror(-r));
			failed = 1;
		}
	}
	closedir(d);
	return failed ? -1 : 0;
}

/* This thread closed the exec gate (conn.h) for the exec it prepares. */
static __thread int gate_held;

/* How long an exec waits for the connections other threads are setting up to reach the
 * descriptor table (their kernel connect included), before it keeps the library instead. */
#define BIRTHS_WAIT_NS 500000000ull

char **uls_handoff_exec_env(char *const envp[], char **to_free, int all, int gate)
{
	const char *lib = library_path(), *old = NULL;
	size_t n = 0, k = 0;
	char **env, *entry;
	int at = -1, born = 1;

	*to_free = NULL;
	if (!lib)
		return (char **)envp;
	for (n = 0; envp && envp[n]; n++)
		if (strncmp(envp[n], "LD_PRELOAD=", 11) == 0) {
			old = envp[n] + 11;
			at = (int)n;
		}
	if (old && preload_has(old, lib))
		return (char **)envp;
	/*
	 * The preload was dropped. Another thread may be setting up a connection now that
	 * the walk below would miss and the new program inherit, accelerated: no new one
	 * leaves TCP from here, and those under way end first.
	 */
	if (gate && !gate_held) {
		gate_held = 1;
		born = uls_conn_exec_gate_close(BIRTHS_WAIT_NS) == 0;
	}
	/* Go back to TCP in place, else keep the library (also when a birth did not end in
	 * time: it may become accelerated after any look here). */
	if (born && !uls_conn_any_accelerated())
		return (char **)envp;
	if (born && revert_inherited(all) == 0)
		return (char **)envp;
	env = malloc((n + 2) * sizeof(*env));
	entry = malloc(strlen(lib) + (old ? strlen(old) : 0) + 16);
	if (!env || !entry) {
		free(env);
		free(entry);
		return (char **)envp;
	}
	strcpy(entry, "LD_PRELOAD=");
	strcat(entry, lib);
	if (old && *old) {
		strcat(entry, ":");
		strcat(entry, old);
	}
	for (k = 0; k < n; k++)
		env[k] = (int)k == at ? entry : envp[k];
	if (at < 0)
		env[n++] = entry;
	env[n] = NULL;
	uls_warn("exec: LD_PRELOAD restored so that accelerated sockets keep working%s",
		 born ? "" : " (another thread was still setting one up)");
	*to_free = entry;
	return env;
}

void uls_handoff_exec_end(void)
{
	if (gate_held) {
		gate_held = 0;
		uls_conn_exec_gate_open();
	}
}

/* ---- stdio ---- */

void uls_handoff_stdio(int fd)
{
	struct uls_conn *c;

	if (fd < 0 || fd > 2)
		return;
	c = uls_fd_conn(fd);
	if (!uls_conn_accelerated(c))
		return;
	/* Best effort: a connection that cannot move yet (its peer's first bytes, sent
	 * before the switch, are still unread: EBUSY) keeps working through ulsock for every
	 * call but stdio's. */
	int r = uls_conn_revert(c, fd, 2000);
	if (r < 0)
		uls_dbg("fd=%d: a standard stream, but it could not move back to kernel TCP: %s",
			fd, strerror(-r));
}

void uls_handoff_fdopen(int fd)
{
	struct uls_conn *c = uls_fd_conn(fd);

	if (uls_conn_accelerated(c)) {
		int r = uls_conn_revert(c, fd, 2000);
		if (r < 0)
			uls_err("fdopen: fd=%d stays accelerated (%s): stdio will not see its data",
				fd, strerror(-r));
	}
}
