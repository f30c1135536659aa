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
#include "handshake.h"
#include "log.h"
#include "../os/libc.h"

static int pid_maps_ulsock(long pid)
{
	char path[64], line[512];
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "libulsock") != NULL;
	fclose(f);
	return found;
}

/* Does every process that holds the socket `ino` run ulsock? (a scan of /proc) */
static int holders_run_ulsock(uint64_t ino)
{
	char want[40], dir[300], link[600], target[64];
	struct dirent *p, *f;
	int holders = 0, ok = 1;
	DIR *proc = opendir("/proc");

	snprintf(want, sizeof(want), "socket:[%llu]", (unsigned long long)ino);
	while (ok && proc && (p = readdir(proc)) != NULL) {
		if (p->d_name[0] < '1' || p->d_name[0] > '9')
			continue;
		snprintf(dir, sizeof(dir), "/proc/%s/fd", p->d_name);
		DIR *fds = opendir(dir);
		while (fds && (f = readdir(fds)) != NULL) {
			snprintf(link, sizeof(link), "%s/%s", dir, f->d_name);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (strcmp(target, want) == 0) {
				holders++;
				ok = pid_maps_ulsock(strtol(p->d_name, NULL, 10));
				break;
			}
		}
		if (fds)
			closedir(fds);
	}
	if (proc)
		closedir(proc);
	return ok && holders > 0;
}

/*
 * Does the process at the other end of this unix socket run ulsock? SO_PEERCRED names
 * it for a connected socket; a socketpair only names its creator, so then the holders of
 * the other end are looked up.
 */
static int peer_runs_ulsock(int unix_fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (uls_libc.getsockopt(unix_fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.pid <= 0)
		return 0;
	if (cr.pid != uls_pid())
		return pid_maps_ulsock(cr.pid);
	uint64_t peer = uls_diag_unix_peer(unix_fd);
	return peer && holders_run_ulsock(peer);
}

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

void uls_handoff_sent(int unix_fd, const struct msghdr *msg)
{
	int fds[SCM_MAX], n = scm_fds(msg, fds, SCM_MAX), verified = -1;

	for (int i = 0; i < n; i++) {
		struct uls_conn *pc = uls_fd_conn(fds[i]);
		if (!pc)
			continue;
		atomic_store(&pc->shared, ULS_SHARED_STICKY);
		if (!uls_conn_accelerated(pc))
			continue;
		if (verified < 0 && pc->tp->follows)
			verified = peer_runs_ulsock(unix_fd);
		if (verified > 0 && pc->tp->follows)
			continue;
		int r = uls_conn_revert(pc, fds[i], 2000);
		if (r < 0)
			uls_err("SCM_RIGHTS: fd=%d goes to a process without ulsock but could not "
				"move back to kernel TCP: %s", fds[i], strerror(-r));
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

char **uls_handoff_exec_env(char *const envp[], char **to_free, int all)
{
	const char *lib = library_path(), *old = NULL;
	size_t n = 0, k = 0;
	char **env, *entry;
	int at = -1;

	*to_free = NULL;
	if (!lib || !uls_conn_any_accelerated())
		return (char **)envp;
	for (n = 0; envp && envp[n]; n++)
		if (strncmp(envp[n], "LD_PRELOAD=", 11) == 0) {
			old = envp[n] + 11;
			at = (int)n;
		}
	if (old && preload_has(old, lib))
		return (char **)envp;
	/* The preload was dropped: go back to TCP in place, else keep the library. */
	if (revert_inherited(all) == 0)
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
	uls_warn("exec: LD_PRELOAD restored so that accelerated sockets keep working");
	*to_free = entry;
	return env;
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
