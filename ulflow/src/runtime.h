/* SPDX-License-Identifier: MIT */
/* Internal: a filter copy's context, the worker process and the coordinator. */
#ifndef ULF_RUNTIME_H
#define ULF_RUNTIME_H

#include "layout.h"
#include "stream.h"
#include "ulflow.h"

#include <pthread.h>
#include <stdarg.h>

struct ulf_worker;

struct ulf_ctx {
	const struct ulf_layout *l;
	const struct ulf_lfilter *f;
	const struct ulf_filter_ops *ops;
	struct ulf_worker *w;
	int copy;
	struct ulf_in *ins;   /* f->nin */
	struct ulf_out *outs; /* f->nout */
	unsigned uow;
	void *state;
	pthread_t thread;
	bool started;
	char err[256];
};

const struct ulf_filter_ops *ulf_filter_find(const char *kind);
int ulf_policy_known(const char *name);

/* One unit of work in a copy's thread: 0, or -1 with ctx->err set. */
int ulf_ctx_run_uow(struct ulf_ctx *ctx, const char *work);

/*
 * A worker process: rank of l, coordinator at l->procs[0].host:coord_port. Rank 0 also
 * runs the coordinator; port_fd >= 0 receives the coordinator's port as text once it
 * listens. Returns the process's exit status.
 */
int ulf_worker_main(const struct ulf_layout *l, int rank, unsigned coord_port, int port_fd);

/* The coordinator, in rank 0's process: returns 0 when every UOW completed. */
struct ulf_coord;
int ulf_coord_start(struct ulf_coord **out, const struct ulf_layout *l, unsigned *port);
int ulf_coord_join(struct ulf_coord *c);

/* `ulflow run`: starts every rank on this host; the exit status of the group. */
int ulf_launch(const char *layout_path, const struct ulf_layout *l, double timeout_s);

/* One line, prefix then the formatted text, in a single write(2) to fd. */
void ulf_vline(int fd, const char *prefix, const char *fmt, va_list ap);
void ulf_die_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
