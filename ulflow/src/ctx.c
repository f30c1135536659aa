/* SPDX-License-Identifier: MIT */
/* What a filter sees: its ports, arguments and reports; and one UOW of one copy. */
#include "runtime.h"
#include "wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_KINDS 64

static const struct ulf_filter_ops *kinds[MAX_KINDS];
static int nkinds;

int ulf_register_filter(const struct ulf_filter_ops *ops)
{
	if (!ops || !ops->name || !ops->process)
		return -EINVAL;
	if (ulf_filter_find(ops->name))
		return -EEXIST;
	if (nkinds == MAX_KINDS)
		return -ENOSPC;
	kinds[nkinds++] = ops;
	return 0;
}

const struct ulf_filter_ops *ulf_filter_find(const char *kind)
{
	for (int i = 0; i < nkinds; i++)
		if (strcmp(kinds[i]->name, kind) == 0)
			return kinds[i];
	return NULL;
}

int ulf_policy_known(const char *name)
{
	return ulf_policy_find(name) != NULL;
}

int ulf_read(struct ulf_ctx *ctx, int port, const void **data, size_t *len, uint64_t *tag)
{
	int rc;

	if (port < 0 || port >= ctx->f->nin)
		return -EINVAL;
	rc = ulf_in_read(&ctx->ins[port], data, len, tag);
	if (rc < 0)
		snprintf(ctx->err, sizeof(ctx->err), "read from input %d: %s", port,
			 strerror(-rc));
	return rc;
}

int ulf_write(struct ulf_ctx *ctx, int port, const void *data, size_t len, uint64_t tag)
{
	int rc;

	if (port < 0 || port >= ctx->f->nout)
		return -EINVAL;
	rc = ulf_out_write(&ctx->outs[port], data, len, tag);
	if (rc < 0)
		snprintf(ctx->err, sizeof(ctx->err), "write to output %d (%zu bytes): %s", port,
			 len, strerror(-rc));
	return rc;
}

int ulf_inputs(const struct ulf_ctx *ctx)
{
	return ctx->f->nin;
}

int ulf_outputs(const struct ulf_ctx *ctx)
{
	return ctx->f->nout;
}

size_t ulf_block_size(const struct ulf_ctx *ctx, int out_port)
{
	if (out_port < 0 || out_port >= ctx->f->nout)
		return ctx->l->block;
	return ctx->outs[out_port].block;
}

int ulf_copy_index(const struct ulf_ctx *ctx)
{
	return ctx->copy;
}

int ulf_copies(const struct ulf_ctx *ctx)
{
	return ctx->f->copies;
}

const char *ulf_filter_name(const struct ulf_ctx *ctx)
{
	return ctx->f->name;
}

unsigned ulf_uow(const struct ulf_ctx *ctx)
{
	return ctx->uow;
}

const char *ulf_arg(const struct ulf_ctx *ctx, const char *key)
{
	const char *v = ulf_kv_get(ctx->f->args, ctx->f->nargs, key);

	return v ? v : ulf_kv_get(ctx->l->sets, ctx->l->nsets, key);
}

long long ulf_arg_int(const struct ulf_ctx *ctx, const char *key, long long def)
{
	const char *v = ulf_arg(ctx, key);
	char *end;
	long long n;

	if (!v)
		return def;
	n = strtoll(v, &end, 0);
	/* Sizes read like the layout's: K, M and G are powers of 1024. */
	if (*end == 'K' || *end == 'k')
		n <<= 10;
	else if (*end == 'M' || *end == 'm')
		n <<= 20;
	else if (*end == 'G' || *end == 'g')
		n <<= 30;
	return n;
}

double ulf_arg_double(const struct ulf_ctx *ctx, const char *key, double def)
{
	const char *v = ulf_arg(ctx, key);

	return v ? strtod(v, NULL) : def;
}

void ulf_set_state(struct ulf_ctx *ctx, void *state)
{
	ctx->state = state;
}

void *ulf_get_state(const struct ulf_ctx *ctx)
{
	return ctx->state;
}

void ulf_report(const struct ulf_ctx *ctx, const char *fmt, ...)
{
	char prefix[96];
	va_list ap;

	snprintf(prefix, sizeof(prefix), "report %s %d %u ", ctx->f->name, ctx->copy, ctx->uow);
	va_start(ap, fmt);
	ulf_vline(STDOUT_FILENO, prefix, fmt, ap);
	va_end(ap);
}

int ulf_fail(struct ulf_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ctx->err, sizeof(ctx->err), fmt, ap);
	va_end(ap);
	return -1;
}

/* Reads what the filter left on its inputs, up to every end-of-work marker. */
static int drain_inputs(struct ulf_ctx *ctx)
{
	for (int p = 0; p < ctx->f->nin; p++) {
		const void *d;
		size_t len;
		uint64_t tag;
		int rc;

		while ((rc = ulf_read(ctx, p, &d, &len, &tag)) > 0)
			;
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int step_failed(struct ulf_ctx *ctx, const char *step, int rc)
{
	if (!ctx->err[0])
		snprintf(ctx->err, sizeof(ctx->err), "%s", strerror(rc < -1 ? -rc : EIO));
	char msg[sizeof(ctx->err)];
	size_t n = (size_t)snprintf(msg, sizeof(msg), "%s failed: ", step);

	memcpy(msg + n, ctx->err, sizeof(msg) - n - 1);
	msg[sizeof(msg) - 1] = '\0';
	memcpy(ctx->err, msg, sizeof(msg));
	return -1;
}

int ulf_ctx_run_uow(struct ulf_ctx *ctx, const char *work)
{
	int rc;

	ctx->err[0] = '\0';
	for (int p = 0; p < ctx->f->nin; p++)
		ulf_in_reset(&ctx->ins[p]);
	if (ctx->ops->init && (rc = ctx->ops->init(ctx, work)) < 0)
		return step_failed(ctx, "init", rc);
	if ((rc = ctx->ops->process(ctx)) < 0)
		return step_failed(ctx, "process", rc);
	if ((rc = drain_inputs(ctx)) < 0)
		return step_failed(ctx, "end of work", rc);
	for (int p = 0; p < ctx->f->nout; p++)
		if ((rc = ulf_out_end(&ctx->outs[p])) < 0)
			return step_failed(ctx, "end-of-work marker", rc);
	if (ctx->ops->finalize && (rc = ctx->ops->finalize(ctx)) < 0)
		return step_failed(ctx, "finalize", rc);
	return 0;
}
