/* SPDX-License-Identifier: MIT */
/*
 * `ulflow run`: every rank of a layout as a child process on this host, in one process
 * group. Rank 0 starts first and says on a pipe where its coordinator listens; the others
 * are told through ULFLOW_COORD_PORT. The first child that fails, a signal or the time
 * limit stops the whole group: SIGTERM, then SIGKILL, and every child is reaped. Should
 * the launcher die first, each child gets SIGKILL from the kernel (PR_SET_PDEATHSIG).
 */
#include "net.h"
#include "runtime.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static pid_t spawn(const char *layout_path, int rank, int pgid, int port_fd, unsigned port)
{
	pid_t parent = getpid(), pid = fork();
	char buf[32];

	if (pid != 0)
		return pid;
	/*
	 * Should `ulflow run` itself die without stopping the group (SIGKILL, a crash), the
	 * kernel kills its children; checking the parent after arming closes the race with a
	 * parent that died before the prctl.
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(1);
	setpgid(0, pgid);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	snprintf(buf, sizeof(buf), "%d", rank);
	setenv("ULFLOW_RANK", buf, 1);
	if (port_fd >= 0) {
		snprintf(buf, sizeof(buf), "%d", port_fd);
		setenv("ULFLOW_PORT_FD", buf, 1);
	} else {
		snprintf(buf, sizeof(buf), "%u", port);
		setenv("ULFLOW_COORD_PORT", buf, 1);
	}
	execl("/proc/self/exe", "ulflow", "worker", layout_path, (char *)NULL);
	fprintf(stderr, "ulflow: cannot run /proc/self/exe: %s\n", strerror(errno));
	_exit(127);
}

/* The coordinator's port from rank 0, or 0 when it died or said nothing in time. */
static unsigned read_port(int fd, int64_t deadline)
{
	char buf[16] = "";
	ssize_t n;

	if (ulf_wait_readable(fd, deadline) <= 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	return n > 0 ? (unsigned)strtoul(buf, NULL, 10) : 0;
}

/*
 * Stops the group: after grace_ms (the coordinator is aborting the others and naming the
 * root cause) SIGTERM, 2 s later SIGKILL; returns once every child is reaped.
 */
static void stop_group(pid_t pgid, int nleft, pid_t *pids, int n, int grace_ms)
{
	int64_t term = ulf_now_ms() + grace_ms, until = term + 2000;
	bool termed = false;

	while (nleft > 0) {
		if (!termed && ulf_now_ms() >= term) {
			kill(-pgid, SIGTERM);
			termed = true;
		}
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p > 0) {
			for (int i = 0; i < n; i++)
				if (pids[i] == p)
					pids[i] = 0, nleft--;
			continue;
		}
		if (ulf_now_ms() > until) {
			kill(-pgid, SIGKILL);
			until = ulf_now_ms() + 60000;
		}
		usleep(10000);
	}
}

static void describe(const struct ulf_layout *l, int rank, int st)
{
	if (WIFEXITED(st))
		fprintf(stderr, "ulflow: process %s (rank %d) exited with status %d: stopping "
				"the group\n", l->procs[rank].name, rank, WEXITSTATUS(st));
	else
		fprintf(stderr, "ulflow: process %s (rank %d) killed by signal %d: stopping the "
				"group\n", l->procs[rank].name, rank, WTERMSIG(st));
}

/* Reaps children until all exit cleanly (0) or one fails, a signal or the limit (1). */
static int supervise(const struct ulf_layout *l, pid_t *pids, pid_t pgid, int64_t until)
{
	int nleft = l->nprocs;

	while (nleft > 0) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p > 0) {
			int r = 0;
			while (r < l->nprocs && pids[r] != p)
				r++;
			if (r == l->nprocs)
				continue;
			pids[r] = 0;
			nleft--;
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
				continue;
			describe(l, r, st);
			stop_group(pgid, nleft, pids, l->nprocs, 1000);
			return 1;
		}
		if (stop_signal || (until && ulf_now_ms() > until)) {
			if (stop_signal)
				fprintf(stderr, "ulflow: signal %d: stopping the group\n", stop_signal);
			else
				fprintf(stderr, "ulflow: time limit reached: stopping the group\n");
			stop_group(pgid, nleft, pids, l->nprocs, 0);
			return 1;
		}
		usleep(5000);
	}
	return 0;
}

int ulf_launch(const char *layout_path, const struct ulf_layout *l, double timeout_s)
{
	pid_t pids[ULF_MAX_PROCS] = { 0 };
	int64_t until = timeout_s > 0 ? ulf_now_ms() + (int64_t)(timeout_s * 1000) : 0;
	int pfd[2];
	unsigned port;
	struct sigaction sa = { .sa_handler = on_signal };

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (pipe(pfd) < 0)
		return 1;
	fflush(stdout);
	pids[0] = spawn(layout_path, 0, 0, pfd[1], 0);
	if (pids[0] < 0)
		return 1;
	setpgid(pids[0], pids[0]); /* both sides set it: no race with the exec */
	close(pfd[1]);
	port = read_port(pfd[0], ulf_now_ms() + (int64_t)(l->timeout_s * 1000));
	close(pfd[0]);
	if (port == 0) {
		fprintf(stderr, "ulflow: process %s (rank 0) did not start its coordinator\n",
			l->procs[0].name);
		stop_group(pids[0], 1, pids, 1, 0);
		return 1;
	}
	for (int r = 1; r < l->nprocs; r++) {
		pids[r] = spawn(layout_path, r, pids[0], -1, port);
		if (pids[r] > 0)
			setpgid(pids[r], pids[0]);
	}
	return supervise(l, pids, pids[0], until);
}
