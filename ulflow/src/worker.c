/* SPDX-License-Identifier: MIT */
/*
 * A worker process: joins the coordinator, connects its streams (producers connect,
 * consumers accept, all before the first UOW), then runs one thread per local filter
 * copy. The main thread only relays control: START wakes the copies, their completions
 * become one DONE, a failure becomes ERROR and the end of the process.
 */
#include "net.h"
#include "runtime.h"
#include "wire.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ulf_worker {
	const struct ulf_layout *l;
	int rank;
	int ctrl;
	int lfd;
	unsigned port; /* where lfd listens for this process's input streams */
	uint32_t ports[ULF_MAX_PROCS];
	struct ulf_ctx *ctx;
	int nctx;
	/* Copies wait on cond for a new generation; lock guards gen, work and quit. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned gen;
	unsigned uow;
	char *work;
	bool quit;
	int donepipe[2]; /* each copy writes its ctx index + 1, negated on failure */
	int64_t deadline;
	bool ready; /* READY sent: failures go to the coordinator from now on */
};

static char die_prefix[64] = "ulflow";

void ulf_die_msg(const char *fmt, ...)
{
	char prefix[80];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "%s: error: ", die_prefix);
	va_start(ap, fmt);
	ulf_vline(STDERR_FILENO, prefix, fmt, ap);
	va_end(ap);
}

/* Reports a failure to the coordinator (when joined) and ends the process. */
__attribute__((noreturn)) static void worker_fail(struct ulf_worker *w, const char *msg)
{
	fflush(stdout);
	if (w->ready) {
		ulf_wire_send(w->ctrl, ULF_F_ERROR, 0, msg, (uint32_t)strlen(msg));
		/*
		 * Wait until the coordinator has reported it and sent ABORT (or is gone), 5 s at
		 * most: `ulflow run` stops the whole group as soon as any process exits, and the
		 * coordinator (in rank 0, maybe this very process) would go with it before
		 * printing the cause (seen on a loaded machine: 1 run in 330).
		 */
		ulf_wait_readable(w->ctrl, ulf_now_ms() + 5000);
	} else {
		ulf_die_msg("%s", msg);
	}
	_exit(1);
}

static int check_kinds(const struct ulf_layout *l, char *err, size_t len)
{
	for (int i = 0; i < l->nfilters; i++)
		if (!ulf_filter_find(l->filters[i].kind)) {
			snprintf(err, len, "filter %s: unknown kind '%s'", l->filters[i].name,
				 l->filters[i].kind);
			return -EINVAL;
		}
	return 0;
}

static int join(struct ulf_worker *w, unsigned coord_port)
{
	const struct ulf_layout *l = w->l;
	uint32_t port, len;
	unsigned type;
	uint64_t tag;
	int rc;

	w->ctrl = ulf_connect(l->procs[0].host, coord_port, w->deadline);
	if (w->ctrl < 0) {
		rc = w->ctrl;
		w->ctrl = -1;
		return rc;
	}
	port = htole32(w->port);
	rc = ulf_wire_send(w->ctrl, ULF_F_HELLO, (uint64_t)w->rank, &port, sizeof(port));
	if (rc < 0)
		return rc;
	/* The table comes once every rank joined; the coordinator bounds that wait. */
	rc = ulf_wire_recv(w->ctrl, &type, &tag, w->ports, sizeof(w->ports), &len);
	if (rc < 0)
		return rc;
	if (type != ULF_F_TABLE || len != 4u * (unsigned)l->nprocs)
		return -ECONNABORTED;
	for (int r = 0; r < l->nprocs; r++)
		w->ports[r] = le32toh(w->ports[r]);
	return 0;
}

static struct ulf_ctx *local_ctx(struct ulf_worker *w, int filter, int copy)
{
	for (int i = 0; i < w->nctx; i++)
		if (w->ctx[i].f == &w->l->filters[filter] && w->ctx[i].copy == copy)
			return &w->ctx[i];
	return NULL;
}

static int make_contexts(struct ulf_worker *w)
{
	const struct ulf_layout *l = w->l;

	w->ctx = calloc((size_t)(l->nfilters * ULF_MAX_COPIES), sizeof(*w->ctx));
	if (!w->ctx)
		return -ENOMEM;
	for (int i = 0; i < l->nfilters; i++)
		for (int c = 0; c < l->filters[i].copies; c++) {
			struct ulf_ctx *x;
			if (l->filters[i].proc[c] != w->rank)
				continue;
			x = &w->ctx[w->nctx++];
			x->l = l;
			x->f = &l->filters[i];
			x->ops = ulf_filter_find(x->f->kind);
			x->w = w;
			x->copy = c;
			x->ins = calloc((size_t)x->f->nin + 1, sizeof(*x->ins));
			x->outs = calloc((size_t)x->f->nout + 1, sizeof(*x->outs));
			if (!x->ins || !x->outs)
				return -ENOMEM;
		}
	return 0;
}

/* Producer side: one connection per consumer copy, announced by a CONN frame. */
static int connect_stream(struct ulf_worker *w, int s, struct ulf_ctx *x)
{
	const struct ulf_lstream *st = &w->l->streams[s];
	const struct ulf_lfilter *to = &w->l->filters[st->to];
	int fds[ULF_MAX_COPIES], rc = 0;

	for (int cc = 0; cc < to->copies; cc++) {
		const struct ulf_lproc *p = &w->l->procs[to->proc[cc]];
		uint64_t tag = (uint64_t)s << 32 | (uint64_t)x->copy << 16 | (uint64_t)cc;
		fds[cc] = ulf_connect(p->host, w->ports[to->proc[cc]], w->deadline);
		if (fds[cc] < 0)
			return fds[cc];
		rc = ulf_wire_send(fds[cc], ULF_F_CONN, tag, NULL, 0);
		if (rc < 0)
			return rc;
	}
	return ulf_out_init(&x->outs[st->from_port], to->copies, fds, st->window, st->block,
			    ulf_policy_find(st->policy));
}

/* Consumer side: how many connections this process must accept. */
static int expected_accepts(struct ulf_worker *w)
{
	int n = 0;

	for (int s = 0; s < w->l->nstreams; s++) {
		const struct ulf_lstream *st = &w->l->streams[s];
		for (int cc = 0; cc < w->l->filters[st->to].copies; cc++)
			if (w->l->filters[st->to].proc[cc] == w->rank)
				n += w->l->filters[st->from].copies;
	}
	return n;
}

/* Accepts every incoming stream connection and files it by its CONN frame. */
static int accept_streams(struct ulf_worker *w, int *in_fds)
{
	const struct ulf_layout *l = w->l;
	int need = expected_accepts(w);

	for (int got = 0; got < need; got++) {
		unsigned type = 0;
		uint32_t len = 0;
		uint64_t tag = 0;
		int fd = ulf_accept(w->lfd, w->deadline), rc, s, pc, cc;

		if (fd < 0)
			return fd;
		rc = ulf_wait_readable(fd, w->deadline) > 0
			     ? ulf_wire_recv_hdr(fd, &type, &len, &tag)
			     : -ETIMEDOUT;
		s = (int)(tag >> 32);
		pc = (int)(tag >> 16 & 0xffff);
		cc = (int)(tag & 0xffff);
		if (rc < 0 || type != ULF_F_CONN || s >= l->nstreams ||
		    pc >= l->filters[l->streams[s].from].copies ||
		    cc >= l->filters[l->streams[s].to].copies ||
		    l->filters[l->streams[s].to].proc[cc] != w->rank ||
		    in_fds[(s * ULF_MAX_COPIES + cc) * ULF_MAX_COPIES + pc] >= 0) {
			close(fd);
			return rc < 0 ? rc : -EPROTO;
		}
		in_fds[(s * ULF_MAX_COPIES + cc) * ULF_MAX_COPIES + pc] = fd;
	}
	return 0;
}

static int build_inputs(struct ulf_worker *w, const int *in_fds)
{
	for (int s = 0; s < w->l->nstreams; s++) {
		const struct ulf_lstream *st = &w->l->streams[s];
		const struct ulf_lfilter *to = &w->l->filters[st->to];
		for (int cc = 0; cc < to->copies; cc++) {
			struct ulf_ctx *x = to->proc[cc] == w->rank ? local_ctx(w, st->to, cc) : NULL;
			int rc;
			if (!x)
				continue;
			rc = ulf_in_init(&x->ins[st->to_port], w->l->filters[st->from].copies,
					 &in_fds[(s * ULF_MAX_COPIES + cc) * ULF_MAX_COPIES],
					 st->block);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static int wire_streams(struct ulf_worker *w, char *err, size_t errlen)
{
	const struct ulf_layout *l = w->l;
	size_t slots = (size_t)l->nstreams * ULF_MAX_COPIES * ULF_MAX_COPIES;
	int *in_fds = malloc((slots + 1) * sizeof(int)), rc = 0;

	if (!in_fds)
		return -ENOMEM;
	for (size_t i = 0; i < slots; i++)
		in_fds[i] = -1;
	/* Connects first: the kernel completes them from the backlog before any accept. */
	for (int s = 0; s < l->nstreams && rc == 0; s++)
		for (int pc = 0; pc < l->filters[l->streams[s].from].copies && rc == 0; pc++)
			if (l->filters[l->streams[s].from].proc[pc] == w->rank) {
				rc = connect_stream(w, s, local_ctx(w, l->streams[s].from, pc));
				if (rc < 0)
					snprintf(err, errlen, "stream %s -> %s: connect: %s",
						 l->filters[l->streams[s].from].name,
						 l->filters[l->streams[s].to].name, strerror(-rc));
			}
	if (rc == 0 && (rc = accept_streams(w, in_fds)) < 0)
		snprintf(err, errlen, "accepting stream connections: %s", strerror(-rc));
	if (rc == 0)
		rc = build_inputs(w, in_fds);
	free(in_fds);
	return rc;
}

static void *copy_thread(void *arg)
{
	struct ulf_ctx *x = arg;
	struct ulf_worker *w = x->w;
	unsigned seen = 0;

	for (;;) {
		int idx = (int)(x - w->ctx) + 1, rc;
		char *work;

		pthread_mutex_lock(&w->lock);
		while (w->gen == seen && !w->quit)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->quit) {
			pthread_mutex_unlock(&w->lock);
			if (x->ops->destroy && x->state)
				x->ops->destroy(x->state);
			x->state = NULL;
			return NULL;
		}
		seen = w->gen;
		x->uow = w->uow;
		work = w->work;
		pthread_mutex_unlock(&w->lock);
		rc = ulf_ctx_run_uow(x, work);
		idx = rc < 0 ? -idx : idx;
		if (write(w->donepipe[1], &idx, sizeof(idx)) != sizeof(idx))
			abort();
	}
}

static int start_uow(struct ulf_worker *w, uint64_t uow, char *work)
{
	pthread_mutex_lock(&w->lock);
	free(w->work);
	w->work = work;
	w->uow = (unsigned)uow;
	w->gen++;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return w->nctx;
}

/* The control loop: returns when the coordinator says QUIT. */
static void control_loop(struct ulf_worker *w, struct ulf_coord *coord)
{
	int busy = 0;
	uint64_t uow = 0;

	for (;;) {
		struct pollfd pf[2] = { { .fd = w->ctrl, .events = POLLIN },
					{ .fd = w->donepipe[0], .events = POLLIN } };
		char msg[600];

		if (poll(pf, 2, -1) < 0)
			continue;
		if (pf[1].revents) {
			int idx;
			if (read(w->donepipe[0], &idx, sizeof(idx)) != sizeof(idx))
				worker_fail(w, "internal: completion pipe");
			if (idx < 0) {
				struct ulf_ctx *x = &w->ctx[-idx - 1];
				snprintf(msg, sizeof(msg), "filter %s copy %d on process %s: %s",
					 x->f->name, x->copy, w->l->procs[w->rank].name, x->err);
				worker_fail(w, msg);
			}
			if (--busy == 0)
				ulf_wire_send(w->ctrl, ULF_F_DONE, uow, NULL, 0);
			continue;
		}
		if (!pf[0].revents)
			continue;
		unsigned type;
		uint32_t len;
		int rc = ulf_wire_recv_hdr(w->ctrl, &type, &len, &uow);
		char *work = rc == 0 ? calloc(1, (size_t)len + 1) : NULL;
		if (rc == 0 && work)
			rc = ulf_read_full(w->ctrl, work, len);
		if (rc < 0 || !work) {
			ulf_die_msg("process %s lost the coordinator", w->l->procs[w->rank].name);
			_exit(1);
		}
		if (type == ULF_F_QUIT && busy == 0) {
			free(work);
			return;
		}
		if (type != ULF_F_START || busy) {
			/* ABORT (the coordinator already said why) or a protocol breach. */
			if (coord)
				ulf_coord_join(coord);
			fflush(stdout);
			_exit(1);
		}
		busy = start_uow(w, uow, work);
		if (busy == 0)
			ulf_wire_send(w->ctrl, ULF_F_DONE, uow, NULL, 0);
	}
}

static void stop_threads(struct ulf_worker *w)
{
	pthread_mutex_lock(&w->lock);
	w->quit = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	for (int i = 0; i < w->nctx; i++)
		if (w->ctx[i].started)
			pthread_join(w->ctx[i].thread, NULL);
}

static void free_worker(struct ulf_worker *w)
{
	for (int i = 0; i < w->nctx; i++) {
		struct ulf_ctx *x = &w->ctx[i];
		for (int p = 0; p < x->f->nin; p++) {
			for (int k = 0; k < x->ins[p].m; k++)
				close(x->ins[p].fds[k]);
			ulf_in_fini(&x->ins[p]);
		}
		for (int p = 0; p < x->f->nout; p++) {
			for (int k = 0; k < x->outs[p].n; k++)
				close(x->outs[p].fds[k]);
			ulf_out_fini(&x->outs[p]);
		}
		free(x->ins);
		free(x->outs);
	}
	free(w->ctx);
	free(w->work);
}

static int setup(struct ulf_worker *w, unsigned coord_port, char *err, size_t errlen)
{
	const struct ulf_layout *l = w->l;
	int rc = ulf_listen(l->procs[w->rank].host, 0, &w->port);

	if (rc < 0) {
		snprintf(err, errlen, "process %s (rank %d): cannot listen on %s: %s",
			 l->procs[w->rank].name, w->rank, l->procs[w->rank].host, strerror(-rc));
		return rc;
	}
	w->lfd = rc;
	rc = join(w, coord_port);
	if (rc < 0) {
		snprintf(err, errlen, "process %s (rank %d): cannot join the coordinator at "
			 "%s:%u: %s", l->procs[w->rank].name, w->rank, l->procs[0].host,
			 coord_port, strerror(-rc));
		return rc;
	}
	if ((rc = make_contexts(w)) < 0 || (rc = wire_streams(w, err, errlen)) < 0) {
		if (!err[0])
			snprintf(err, errlen, "set-up: %s", strerror(-rc));
		return rc;
	}
	for (int i = 0; i < w->nctx; i++) {
		if (pthread_create(&w->ctx[i].thread, NULL, copy_thread, &w->ctx[i]) != 0) {
			snprintf(err, errlen, "cannot start a thread");
			return -EAGAIN;
		}
		w->ctx[i].started = true;
	}
	rc = ulf_wire_send(w->ctrl, ULF_F_READY, 0, NULL, 0);
	w->ready = rc == 0;
	return rc;
}

int ulf_worker_main(const struct ulf_layout *l, int rank, unsigned coord_port, int port_fd)
{
	struct ulf_worker w = { .l = l, .rank = rank, .ctrl = -1, .lfd = -1 };
	struct ulf_coord *coord = NULL;
	char err[512] = "", msg[640];
	int rc;

	snprintf(die_prefix, sizeof(die_prefix), "ulflow[%s]", l->procs[rank].name);
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	w.deadline = ulf_now_ms() + (int64_t)(l->timeout_s * 1000);
	if (pipe2(w.donepipe, O_CLOEXEC) < 0 || check_kinds(l, err, sizeof(err)) < 0) {
		ulf_die_msg("%s", err[0] ? err : "cannot create a pipe");
		return 1;
	}
	if (rank == 0) {
		rc = ulf_coord_start(&coord, l, &coord_port);
		if (rc < 0) {
			ulf_die_msg("coordinator: cannot listen on %s:%u: %s", l->procs[0].host,
				    coord_port, strerror(-rc));
			return 1;
		}
		if (port_fd >= 0) {
			dprintf(port_fd, "%u\n", coord_port);
			close(port_fd);
		}
	}
	if (setup(&w, coord_port, err, sizeof(err)) < 0) {
		snprintf(msg, sizeof(msg), "%s", err);
		worker_fail(&w, msg);
	}
	control_loop(&w, coord);
	stop_threads(&w);
	free_worker(&w);
	close(w.ctrl);
	close(w.lfd);
	rc = ulf_coord_join(coord);
	fflush(stdout);
	return rc;
}
