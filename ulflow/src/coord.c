/* SPDX-License-Identifier: MIT */
/*
 * The coordinator: a thread of rank 0 holding one control connection per rank. It
 * gathers every rank's data port, hands out the table, and then runs the units of work
 * one at a time: START to every rank, DONE from every rank, one "uow" line on stdout with
 * the time between the two. The first ERROR or lost rank aborts everyone.
 */
#include "net.h"
#include "runtime.h"
#include "wire.h"

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ulf_coord {
	const struct ulf_layout *l;
	int lfd;
	int fds[ULF_MAX_PROCS];
	uint32_t ports[ULF_MAX_PROCS];
	pthread_t thread;
	int rc;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void broadcast(struct ulf_coord *c, unsigned type, uint64_t tag, const void *p,
		      uint32_t len)
{
	for (int r = 0; r < c->l->nprocs; r++)
		if (c->fds[r] >= 0)
			ulf_wire_send(c->fds[r], type, tag, p, len);
}

/* Every rank connects and says which it is, before the deadline. */
static int gather(struct ulf_coord *c, int64_t deadline)
{
	const struct ulf_layout *l = c->l;

	for (int joined = 0; joined < l->nprocs; joined++) {
		unsigned type;
		uint64_t rank;
		uint32_t port, len;
		int fd = ulf_accept(c->lfd, deadline), rc;

		if (fd < 0) {
			for (int r = 0; r < l->nprocs; r++)
				if (c->fds[r] < 0)
					ulf_die_msg("process %s (rank %d, %s) did not join within "
						    "%.0f s", l->procs[r].name, r,
						    l->procs[r].host, l->timeout_s);
			return -ETIMEDOUT;
		}
		rc = ulf_wait_readable(fd, deadline) > 0
			     ? ulf_wire_recv(fd, &type, &rank, &port, sizeof(port), &len)
			     : -ETIMEDOUT;
		if (rc < 0 || type != ULF_F_HELLO || len != 4 || rank >= (uint64_t)l->nprocs ||
		    c->fds[rank] >= 0) {
			/* A stranger or a duplicate: drop it and keep waiting for ours. */
			close(fd);
			joined--;
			continue;
		}
		c->fds[rank] = fd;
		c->ports[rank] = port; /* already little-endian: forwarded as is */
	}
	return 0;
}

static bool derived(const char *msg)
{
	return strstr(msg, "Broken pipe") || strstr(msg, "Connection reset");
}

/*
 * A failing filter's process exits, and its peers then fail too, on a broken stream.
 * Whichever ERROR arrives first, give the others 500 ms and report the root cause: the
 * first one that is not a lost connection.
 */
static void report_root_cause(struct ulf_coord *c, char *first)
{
	struct pollfd pf[ULF_MAX_PROCS];
	int64_t until = ulf_now_ms() + 500;

	while (derived(first) && ulf_now_ms() < until) {
		for (int r = 0; r < c->l->nprocs; r++)
			pf[r] = (struct pollfd){ .fd = c->fds[r], .events = POLLIN };
		if (poll(pf, (nfds_t)c->l->nprocs, (int)(until - ulf_now_ms())) <= 0)
			break;
		for (int r = 0; r < c->l->nprocs; r++) {
			char msg[512];
			unsigned type;
			uint64_t tag;
			uint32_t len;
			if (!pf[r].revents)
				continue;
			if (ulf_wire_recv(c->fds[r], &type, &tag, msg, sizeof(msg) - 1, &len) < 0) {
				close(c->fds[r]);
				c->fds[r] = -1;
				continue;
			}
			msg[len] = '\0';
			if (type == ULF_F_ERROR && !derived(msg)) {
				memcpy(first, msg, len + 1);
				break;
			}
		}
	}
	ulf_die_msg("%s", first);
}

/* Waits for one frame of type want from every rank; an ERROR or a loss aborts. */
static int wait_all(struct ulf_coord *c, unsigned want, uint64_t uow)
{
	const struct ulf_layout *l = c->l;
	struct pollfd pf[ULF_MAX_PROCS];
	bool got[ULF_MAX_PROCS] = { false };
	int left = l->nprocs;

	while (left > 0) {
		for (int r = 0; r < l->nprocs; r++)
			pf[r] = (struct pollfd){ .fd = got[r] ? -1 : c->fds[r], .events = POLLIN };
		if (poll(pf, (nfds_t)l->nprocs, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (int r = 0; r < l->nprocs; r++) {
			char msg[512];
			unsigned type;
			uint64_t tag;
			uint32_t len;
			int rc;

			if (!pf[r].revents)
				continue;
			rc = ulf_wire_recv(c->fds[r], &type, &tag, msg, sizeof(msg) - 1, &len);
			if (rc < 0) {
				ulf_die_msg("process %s (rank %d) exited or broke its control "
					    "connection: %s", l->procs[r].name, r, strerror(-rc));
				return rc;
			}
			if (type == ULF_F_ERROR) {
				msg[len] = '\0';
				report_root_cause(c, msg);
				return -ECANCELED;
			}
			if (type != want || (want == ULF_F_DONE && tag != uow)) {
				ulf_die_msg("process %s (rank %d): unexpected control frame %u",
					    l->procs[r].name, r, type);
				return -EPROTO;
			}
			got[r] = true;
			left--;
		}
	}
	return 0;
}

static int run_uows(struct ulf_coord *c)
{
	const struct ulf_layout *l = c->l;
	double total = 0;
	int rc;

	for (int i = 0; i < l->nworks; i++) {
		const char *w = l->works[i];
		double t0 = now_s(), dt;

		broadcast(c, ULF_F_START, (uint64_t)i, w, (uint32_t)strlen(w));
		if ((rc = wait_all(c, ULF_F_DONE, (uint64_t)i)) < 0)
			return rc;
		dt = now_s() - t0;
		total += dt;
		printf("uow %d %.6f %s\n", i, dt, w);
		fflush(stdout);
	}
	printf("done %d %.6f\n", l->nworks, total);
	fflush(stdout);
	return 0;
}

static void *coord_thread(void *arg)
{
	struct ulf_coord *c = arg;
	const struct ulf_layout *l = c->l;
	int64_t deadline = ulf_now_ms() + (int64_t)(l->timeout_s * 1000);
	int rc = gather(c, deadline);

	if (rc == 0) {
		broadcast(c, ULF_F_TABLE, 0, c->ports, (uint32_t)(4 * l->nprocs));
		rc = wait_all(c, ULF_F_READY, 0);
	}
	if (rc == 0)
		rc = run_uows(c);
	broadcast(c, rc == 0 ? ULF_F_QUIT : ULF_F_ABORT, 0, NULL, 0);
	c->rc = rc == 0 ? 0 : 1;
	return NULL;
}

int ulf_coord_start(struct ulf_coord **out, const struct ulf_layout *l, unsigned *port)
{
	struct ulf_coord *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	c->l = l;
	for (int r = 0; r < ULF_MAX_PROCS; r++)
		c->fds[r] = -1;
	c->lfd = ulf_listen(l->procs[0].host, *port, port);
	if (c->lfd < 0) {
		rc = c->lfd;
		goto err_free;
	}
	rc = -pthread_create(&c->thread, NULL, coord_thread, c);
	if (rc < 0)
		goto err_close;
	*out = c;
	return 0;
err_close:
	close(c->lfd);
err_free:
	free(c);
	return rc;
}

int ulf_coord_join(struct ulf_coord *c)
{
	int rc;

	if (!c)
		return 0;
	pthread_join(c->thread, NULL);
	rc = c->rc;
	for (int r = 0; r < c->l->nprocs; r++)
		if (c->fds[r] >= 0)
			close(c->fds[r]);
	close(c->lfd);
	free(c);
	return rc;
}
