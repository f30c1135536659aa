/* SPDX-License-Identifier: MIT */
/* Sockets leaving ulsock's reach: SCM_RIGHTS (handoff.h). */
#include "handoff.h"

#include <dirent.h>
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
		atomic_store(&pc->shared, 1);
		if (!uls_conn_accelerated(pc))
			continue;
		if (verified < 0)
			verified = peer_runs_ulsock(unix_fd);
		if (verified)
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
