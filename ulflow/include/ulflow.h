/* SPDX-License-Identifier: MIT */
/*
 * ulflow: a filter-stream runtime (DataCutter's model) on plain TCP sockets.
 *
 * A filter is an operations table called once per unit of work (UOW): init, process,
 * finalize. Inside process it reads buffers from its input ports and writes buffers to
 * its output ports, nothing else. Ports are numbered in the order the layout file lists
 * the filter's streams. A filter may run as several transparent copies; the runtime
 * spreads each stream's buffers over the consumer copies (round-robin, demand-driven or
 * an application policy) and ends every UOW with an end-of-work marker per producer copy.
 * See docs/ulflow.md.
 */
#ifndef ULFLOW_H
#define ULFLOW_H

#include <stddef.h>
#include <stdint.h>

struct ulf_ctx;

/*
 * Each returns 0 or a negative errno; ulf_fail() records a message and returns -1.
 * destroy (optional) frees what ulf_set_state() holds, once, in the copy's thread after
 * its last UOW.
 */
struct ulf_filter_ops {
	const char *name;
	int (*init)(struct ulf_ctx *ctx, const char *work);
	int (*process)(struct ulf_ctx *ctx);
	int (*finalize)(struct ulf_ctx *ctx);
	void (*destroy)(void *state);
};

/*
 * A distribution policy picks the consumer copy for the next buffer: the index of a copy
 * whose unacknowledged count is below window, or -1 to wait for an acknowledgement.
 * state points to per-stream storage the policy may use (zeroed at start, 64 bytes).
 */
struct ulf_policy_ops {
	const char *name;
	int (*pick)(void *state, const unsigned *unacked, int copies, unsigned window);
};

/* Registration, before ulf_main(); names are unique, at most 64 filters and 16 policies. */
int ulf_register_filter(const struct ulf_filter_ops *ops);
int ulf_register_policy(const struct ulf_policy_ops *ops);

/*
 * One buffer from input port: 1 with *data (valid until the next read), *len and *tag,
 * 0 once every producer copy has sent its end-of-work marker, or a negative errno.
 */
int ulf_read(struct ulf_ctx *ctx, int port, const void **data, size_t *len, uint64_t *tag);
/* Sends len bytes (at most the port's block size) with an application tag. */
int ulf_write(struct ulf_ctx *ctx, int port, const void *data, size_t len, uint64_t tag);

int ulf_inputs(const struct ulf_ctx *ctx);
int ulf_outputs(const struct ulf_ctx *ctx);
size_t ulf_block_size(const struct ulf_ctx *ctx, int out_port);
int ulf_copy_index(const struct ulf_ctx *ctx);
int ulf_copies(const struct ulf_ctx *ctx);
const char *ulf_filter_name(const struct ulf_ctx *ctx);
unsigned ulf_uow(const struct ulf_ctx *ctx);

/* The filter's key=value arguments, then the layout's `set` lines; NULL when absent. */
const char *ulf_arg(const struct ulf_ctx *ctx, const char *key);
long long ulf_arg_int(const struct ulf_ctx *ctx, const char *key, long long def);
double ulf_arg_double(const struct ulf_ctx *ctx, const char *key, double def);

void ulf_set_state(struct ulf_ctx *ctx, void *state);
void *ulf_get_state(const struct ulf_ctx *ctx);

/* One line "report FILTER COPY UOW TEXT" on stdout, written with a single write(2). */
void ulf_report(const struct ulf_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int ulf_fail(struct ulf_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The `ulflow` command: run, worker, check, --help. */
int ulf_main(int argc, char **argv);

#endif
