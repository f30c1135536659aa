/* SPDX-License-Identifier: MIT */
/*
 * The visualization server's filters.
 *   vis_read:  the data repository; sends the chunks a query needs (copy k of n sends
 *              the chunks c with c % n == k), tag = chunk id.
 *   vis_stage: a pipeline stage; pays the processing cost of each buffer and passes it on.
 *   vis_view:  the visualization filter; checks that every chunk the query needs arrived
 *              exactly once with the repository's bytes.
 * Arguments (filter or `set`): image=BYTES chunk=BYTES view=PIXELS verify=0|1,
 * cost=NS_PER_BYTE cost_mode=wait|compute, slow_copies=I[,J] slow=FACTOR
 * slow_prob=P seed=N, fail=init|process|finalize and hang=process (tests).
 */
#include "vis.h"
#include "ulflow.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct vis_state {
	struct vis_geom g;
	uint8_t *repo;	 /* the whole image in chunk order */
	uint8_t *expect; /* vis_view: one chunk as the repository holds it */
	bool *need, *seen;
	long needed, got;
	uint64_t bytes, buffers, rng;
	double busy_s;
	double last_read, gap_s; /* when the last buffer was handed over; the sum of gaps */
	uint64_t gaps;
	double ns_per_byte, pass_ns; /* cost model; pass_ns: one compute pass per byte */
	double slow, slow_prob;
	bool slow_copy, verify;
	int mode; /* 0 calibrated wait, 2 real compute */
	uint64_t sink;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether argument key (fail, hang) names this step, in copy 0: the tests' faults. */
static bool asked_at(struct ulf_ctx *ctx, const char *key, const char *step)
{
	const char *f = ulf_arg(ctx, key);

	return f && strcmp(f, step) == 0 && ulf_copy_index(ctx) == 0;
}

static bool fail_at(struct ulf_ctx *ctx, const char *step)
{
	return asked_at(ctx, "fail", step);
}

/*
 * hang=process: a filter stuck for good, deaf to SIGTERM like one in uninterruptible
 * work, so only the launcher's time limit and SIGKILL can end the group.
 */
static void hang_forever(void)
{
	signal(SIGTERM, SIG_IGN);
	for (;;)
		pause();
}

/* One pass of real work over the bytes: a rolling checksum the compiler cannot drop. */
static uint64_t compute_pass(const uint8_t *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static void calibrate(struct vis_state *s)
{
	static uint8_t buf[1 << 16];
	double t0 = now_s();

	for (int i = 0; i < 16; i++)
		s->sink += compute_pass(buf, sizeof(buf), (uint64_t)i);
	s->pass_ns = (now_s() - t0) * 1e9 / (16.0 * sizeof(buf));
}

static bool in_list(const char *list, int k)
{
	char *end;

	while (list && *list) {
		long v = strtol(list, &end, 10);
		if (end == list)
			return false;
		if (v == k)
			return true;
		list = *end == ',' ? end + 1 : end;
	}
	return false;
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Pays the cost of processing n bytes: seed 000's 18 ns/byte, times the slow factor. */
static void pay_cost(struct vis_state *s, const uint8_t *p, size_t n)
{
	double ns = s->ns_per_byte * (double)n, until;
	struct timespec ts;

	if (s->slow_copy && (s->slow_prob >= 1.0 ||
			     (double)(rng_next(&s->rng) % 1000000) < s->slow_prob * 1e6))
		ns *= s->slow;
	if (ns <= 0)
		return;
	if (s->mode == 2) {
		for (double done = 0; done < ns; done += s->pass_ns * (double)n)
			s->sink += compute_pass(p, n, s->sink);
		return;
	}
	until = now_s() + ns * 1e-9;
	/*
	 * A calibrated wait: sleep through all but the last 100 us, whose timer slack would
	 * overshoot, and spin through those. Leaves the core free on a small machine.
	 */
	if (ns > 100e3) {
		double wake = until - 100e-6;
		ts.tv_sec = (time_t)wake;
		ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	while (now_s() < until)
		;
}

static int setup_cost(struct ulf_ctx *ctx, struct vis_state *s)
{
	const char *m = ulf_arg(ctx, "cost_mode");

	s->ns_per_byte = ulf_arg_double(ctx, "cost", 0);
	s->mode = !m || strcmp(m, "wait") == 0 ? 0 : strcmp(m, "compute") == 0 ? 2 : -1;
	if (s->mode < 0)
		return ulf_fail(ctx, "cost_mode=%s: use wait or compute", m);
	s->slow_copy = in_list(ulf_arg(ctx, "slow_copies"), ulf_copy_index(ctx));
	s->slow = ulf_arg_double(ctx, "slow", 1);
	s->slow_prob = ulf_arg_double(ctx, "slow_prob", 1);
	s->rng = (uint64_t)ulf_arg_int(ctx, "seed", 1) * 2654435761u + 1 +
		 (uint64_t)ulf_copy_index(ctx);
	if (s->mode == 2)
		calibrate(s);
	return 0;
}

static void vis_destroy(void *state)
{
	struct vis_state *s = state;

	if (!s)
		return;
	free(s->need);
	free(s->seen);
	free(s->repo);
	free(s->expect);
	free(s);
}

/* The state of a copy, made at its first UOW and kept for the next ones. */
static struct vis_state *state(struct ulf_ctx *ctx, bool repo)
{
	struct vis_state *s = ulf_get_state(ctx);
	size_t image = (size_t)ulf_arg_int(ctx, "image", 16 << 20);
	size_t chunk = (size_t)ulf_arg_int(ctx, "chunk", 64 << 10);

	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s) {
		ulf_fail(ctx, "out of memory");
		return NULL;
	}
	if (vis_geom_init(&s->g, image, chunk, (unsigned)ulf_arg_int(ctx, "view", 0)) < 0) {
		ulf_fail(ctx, "image=%zu chunk=%zu: powers of two with chunk <= image", image,
			 chunk);
		free(s);
		return NULL;
	}
	s->need = calloc(s->g.nchunks, sizeof(bool));
	s->seen = calloc(s->g.nchunks, sizeof(bool));
	s->repo = repo ? malloc(image) : NULL;
	s->verify = ulf_arg_int(ctx, "verify", 1) != 0;
	if (!s->need || !s->seen || (repo && !s->repo))
		ulf_fail(ctx, "out of memory for a %zu-byte image", image);
	if (!s->need || !s->seen || (repo && !s->repo) || setup_cost(ctx, s) < 0) {
		vis_destroy(s);
		return NULL;
	}
	for (size_t c = 0; repo && c < s->g.nchunks; c++)
		vis_chunk_fill(s->repo + c * chunk, chunk, c);
	ulf_set_state(ctx, s);
	return s;
}

static int vis_init(struct ulf_ctx *ctx, const char *work, bool repo)
{
	struct vis_state *s = state(ctx, repo);

	if (!s)
		return -1;
	if (fail_at(ctx, "init"))
		return ulf_fail(ctx, "asked to fail in init (fail=init)");
	s->needed = vis_query(&s->g, work, ulf_uow(ctx), s->need);
	if (s->needed < 0)
		return ulf_fail(ctx, "unknown query '%s'", work);
	memset(s->seen, 0, s->g.nchunks * sizeof(bool));
	s->got = 0;
	s->bytes = s->buffers = 0;
	s->busy_s = 0;
	s->last_read = s->gap_s = 0;
	s->gaps = 0;
	return 0;
}

static int read_init(struct ulf_ctx *ctx, const char *work)
{
	return vis_init(ctx, work, true);
}

static int read_process(struct ulf_ctx *ctx)
{
	struct vis_state *s = ulf_get_state(ctx);
	size_t n = (size_t)ulf_copies(ctx), k = (size_t)ulf_copy_index(ctx);

	if (fail_at(ctx, "process"))
		return ulf_fail(ctx, "asked to fail in process (fail=process)");
	if (ulf_outputs(ctx) < 1 || ulf_block_size(ctx, 0) < s->g.chunk)
		return ulf_fail(ctx, "needs an output whose block size holds a chunk (%zu)",
				s->g.chunk);
	for (size_t c = k; c < s->g.nchunks; c += n) {
		int rc;
		if (!s->need[c])
			continue;
		rc = ulf_write(ctx, 0, s->repo + c * s->g.chunk, s->g.chunk, c);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int stage_init(struct ulf_ctx *ctx, const char *work)
{
	return vis_init(ctx, work, false);
}

static int stage_process(struct ulf_ctx *ctx)
{
	struct vis_state *s = ulf_get_state(ctx);
	const void *d;
	size_t len;
	uint64_t tag;
	int rc;

	if (fail_at(ctx, "process"))
		return ulf_fail(ctx, "asked to fail in process (fail=process)");
	if (asked_at(ctx, "hang", "process"))
		hang_forever();
	while ((rc = ulf_read(ctx, 0, &d, &len, &tag)) > 0) {
		double t0 = now_s();
		/*
		 * ulf_read acknowledged this buffer, so the gap since the last one is how long
		 * the producer's balancer went without news from this copy: its reaction time.
		 */
		if (s->buffers) {
			s->gap_s += t0 - s->last_read;
			s->gaps++;
		}
		s->last_read = t0;
		pay_cost(s, d, len);
		s->busy_s += now_s() - t0;
		s->buffers++;
		s->bytes += len;
		if (ulf_outputs(ctx) > 0 && (rc = ulf_write(ctx, 0, d, len, tag)) < 0)
			return rc;
	}
	return rc;
}

static int stage_finalize(struct ulf_ctx *ctx)
{
	struct vis_state *s = ulf_get_state(ctx);

	if (fail_at(ctx, "finalize"))
		return ulf_fail(ctx, "asked to fail in finalize (fail=finalize)");
	ulf_report(ctx, "busy=%.6f buffers=%llu bytes=%llu slow=%d react=%.6f", s->busy_s,
		   (unsigned long long)s->buffers, (unsigned long long)s->bytes, s->slow_copy,
		   s->gaps ? s->gap_s / (double)s->gaps : 0.0);
	return 0;
}

/* Checks one chunk: wanted, not seen before, whole, with the repository's bytes. */
static int view_chunk(struct ulf_ctx *ctx, struct vis_state *s, const uint8_t *d, size_t len,
		      uint64_t c)
{
	if (c >= s->g.nchunks || !s->need[c])
		return ulf_fail(ctx, "chunk %llu was not asked for", (unsigned long long)c);
	if (s->seen[c])
		return ulf_fail(ctx, "chunk %llu arrived twice", (unsigned long long)c);
	if (len != s->g.chunk)
		return ulf_fail(ctx, "chunk %llu has %zu bytes, not %zu", (unsigned long long)c,
				len, s->g.chunk);
	if (s->verify) {
		if (!s->expect && !(s->expect = malloc(s->g.chunk)))
			return ulf_fail(ctx, "out of memory");
		vis_chunk_fill(s->expect, len, c);
		if (memcmp(s->expect, d, len) != 0)
			return ulf_fail(ctx, "chunk %llu: bytes differ from the repository",
					(unsigned long long)c);
	}
	s->seen[c] = true;
	s->got++;
	return 0;
}

static int view_process(struct ulf_ctx *ctx)
{
	struct vis_state *s = ulf_get_state(ctx);
	const void *d;
	size_t len;
	uint64_t tag;
	int rc;

	while ((rc = ulf_read(ctx, 0, &d, &len, &tag)) > 0) {
		double t0 = now_s();
		pay_cost(s, d, len);
		s->busy_s += now_s() - t0;
		s->bytes += len;
		s->buffers++;
		if (view_chunk(ctx, s, d, len, tag) < 0)
			return -1;
	}
	return rc;
}

static int view_finalize(struct ulf_ctx *ctx)
{
	struct vis_state *s = ulf_get_state(ctx);

	if (s->got != s->needed)
		return ulf_fail(ctx, "%ld of %ld chunks arrived", s->got, s->needed);
	ulf_report(ctx, "chunks=%ld bytes=%llu ok", s->got, (unsigned long long)s->bytes);
	return 0;
}

static const struct ulf_filter_ops read_ops = {
	.name = "vis_read", .init = read_init, .process = read_process, .destroy = vis_destroy,
};
static const struct ulf_filter_ops stage_ops = {
	.name = "vis_stage", .init = stage_init, .process = stage_process,
	.finalize = stage_finalize, .destroy = vis_destroy,
};
static const struct ulf_filter_ops view_ops = {
	.name = "vis_view", .init = stage_init, .process = view_process,
	.finalize = view_finalize, .destroy = vis_destroy,
};

/*
 * An application policy, as an example: the lowest-numbered copy with room in the
 * window, so work stays on the first copies until they fill (e.g. the local ones).
 */
static int first_free_pick(void *state, const unsigned *unacked, int copies, unsigned window)
{
	for (int c = 0; c < copies; c++)
		if (unacked[c] < window)
			return c;
	return -1;
}

static const struct ulf_policy_ops first_free = { .name = "first_free",
						  .pick = first_free_pick };

void vis_register(void)
{
	ulf_register_filter(&read_ops);
	ulf_register_filter(&stage_ops);
	ulf_register_filter(&view_ops);
	ulf_register_policy(&first_free);
}
