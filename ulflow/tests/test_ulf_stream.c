/* SPDX-License-Identifier: MIT */
/*
 * Streams, end-of-work markers, copies and every distribution policy, in one process
 * over socketpairs: the producer's ulf_out on one end, consumers' ulf_in on the other.
 * Single-threaded and deterministic: a socketpair delivers a write before it returns.
 */
#include "../../tests/unit/check.h"
#include "stream.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BLOCK 4096

struct pair {
	int prod, cons;
};

static void make_pairs(struct pair *p, int n)
{
	for (int i = 0; i < n; i++) {
		int sv[2];
		CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		p[i].prod = sv[0];
		p[i].cons = sv[1];
	}
}

static void close_pairs(struct pair *p, int n)
{
	for (int i = 0; i < n; i++) {
		close(p[i].prod);
		close(p[i].cons);
	}
}

static bool readable(int fd)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	return poll(&pf, 1, 0) == 1;
}

/* Three producer copies, one consumer: every buffer once, end only after 3 markers. */
static void test_markers_many_producers(void)
{
	struct pair p[3];
	struct ulf_out out[3];
	struct ulf_in in;
	int cons_fds[3], seen[30] = { 0 }, total = 0, rc;
	uint8_t buf[BLOCK];

	check_context("markers");
	make_pairs(p, 3);
	for (int i = 0; i < 3; i++) {
		cons_fds[i] = p[i].cons;
		CHECK_EQ(ulf_out_init(&out[i], 1, &p[i].prod, 64, BLOCK, &ulf_policy_rr), 0);
	}
	CHECK_EQ(ulf_in_init(&in, 3, cons_fds, BLOCK), 0);
	for (int uow = 0; uow < 2; uow++) {
		ulf_in_reset(&in);
		for (int i = 0; i < 3; i++) {
			for (int k = 0; k < 10; k++) {
				check_stream_fill(buf, 100 + (size_t)k, 7, (uint64_t)(i * 10 + k));
				CHECK_EQ(ulf_out_write(&out[i], buf, 100 + (size_t)k,
						       (uint64_t)(i * 10 + k)), 0);
			}
			/* Two producers end; the consumer must not see the end yet. */
			if (i < 2)
				CHECK_EQ(ulf_out_end(&out[i]), 0);
		}
		const void *d;
		size_t len;
		uint64_t tag;
		for (int n = 0; n < 30; n++) {
			rc = ulf_in_read(&in, &d, &len, &tag);
			CHECK_EQ(rc, 1);
			CHECK_U64(tag, <, 30);
			CHECK_U64(len, ==, 100 + tag % 10);
			CHECK_U64(check_stream_cmp(d, len, 7, tag), ==, len);
			seen[tag]++;
			total++;
		}
		CHECK_EQ(ulf_out_end(&out[2]), 0);
		CHECK_EQ(ulf_in_read(&in, &d, &len, &tag), 0);
		/* The end is sticky until the next UOW resets it. */
		CHECK_EQ(ulf_in_read(&in, &d, &len, &tag), 0);
		for (int i = 0; i < 3; i++) {
			CHECK_EQ(ulf_out_drain_acks(&out[i], false), 0);
			CHECK_EQ(out[i].unacked[0], 0);
		}
	}
	CHECK_EQ(total, 60);
	for (int t = 0; t < 30; t++)
		CHECK_EQ(seen[t], 2);
	for (int i = 0; i < 3; i++)
		ulf_out_fini(&out[i]);
	ulf_in_fini(&in);
	close_pairs(p, 3);
}

/* Reads (and so acknowledges) every buffer waiting for one consumer copy. */
static int consume_all(struct ulf_in *in, int fd)
{
	const void *d;
	size_t len;
	uint64_t tag;
	int n = 0;

	while (readable(fd)) {
		CHECK_EQ(ulf_in_read(in, &d, &len, &tag), 1);
		n++;
	}
	return n;
}

static void open_copies(struct pair *p, int n, struct ulf_out *out, struct ulf_in *in,
			unsigned window, const struct ulf_policy_ops *pol)
{
	int fds[8];

	make_pairs(p, n);
	for (int i = 0; i < n; i++) {
		fds[i] = p[i].prod;
		CHECK_EQ(ulf_in_init(&in[i], 1, &p[i].cons, BLOCK), 0);
	}
	CHECK_EQ(ulf_out_init(out, n, fds, window, BLOCK, pol), 0);
}

static void close_copies(struct pair *p, int n, struct ulf_out *out, struct ulf_in *in)
{
	ulf_out_fini(out);
	for (int i = 0; i < n; i++)
		ulf_in_fini(&in[i]);
	close_pairs(p, n);
}

/* Round-robin: copies in turn; the window stops a copy that does not acknowledge. */
static void test_round_robin(void)
{
	struct pair p[3];
	struct ulf_out out;
	struct ulf_in in[3];
	char b = 'x';

	check_context("round-robin");
	open_copies(p, 3, &out, in, 2, &ulf_policy_rr);
	for (int k = 0; k < 9; k++) {
		int c = ulf_out_pick(&out, false);
		CHECK_EQ(c, k % 3);
		CHECK_EQ(ulf_out_send(&out, c, &b, 1, 0), 0);
		consume_all(&in[1], p[1].cons);
		consume_all(&in[2], p[2].cons);
		if (k == 5)
			break;
	}
	/* Copy 0 holds two unacknowledged buffers: its turn must wait. */
	CHECK_EQ(out.unacked[0], 2);
	CHECK_EQ(ulf_out_pick(&out, false), -EAGAIN);
	CHECK_EQ(consume_all(&in[0], p[0].cons), 2);
	CHECK_EQ(ulf_out_pick(&out, false), 0);
	CHECK_U64(out.sent[0], ==, 2);
	CHECK_U64(out.sent[1], ==, 2);
	CHECK_U64(out.sent[2], ==, 2);
	close_copies(p, 3, &out, in);
}

/*
 * Runs steps of a producer feeding a fast copy (consumes everything each step) and a
 * slow one (one buffer every 4 steps); returns how many each received.
 */
static void fast_and_slow(const struct ulf_policy_ops *pol, uint64_t *sent)
{
	struct pair p[2];
	struct ulf_out out;
	struct ulf_in in[2];
	char b = 'y';
	const void *d;
	size_t len;
	uint64_t tag;

	open_copies(p, 2, &out, in, 4, pol);
	for (int step = 0; step < 400; step++) {
		int c = ulf_out_pick(&out, false);
		if (c >= 0)
			CHECK_EQ(ulf_out_send(&out, c, &b, 1, 0), 0);
		else
			CHECK_EQ(c, -EAGAIN);
		consume_all(&in[0], p[0].cons);
		if (step % 4 == 3 && readable(p[1].cons))
			CHECK_EQ(ulf_in_read(&in[1], &d, &len, &tag), 1);
	}
	sent[0] = out.sent[0];
	sent[1] = out.sent[1];
	close_copies(p, 2, &out, in);
}

/* Demand-driven sends more to the faster copy; round-robin cannot. */
static void test_demand_driven_prefers_fast_copy(void)
{
	uint64_t dd[2], rr[2];

	check_context("demand-driven");
	fast_and_slow(&ulf_policy_dd, dd);
	fast_and_slow(&ulf_policy_rr, rr);
	/* The slow copy acknowledges 1 buffer per 4 steps: at most 100 + window. */
	CHECK_U64(dd[1], <=, 104);
	CHECK_U64(dd[0], >=, 2 * dd[1]);
	CHECK_U64(dd[0] + dd[1], >, rr[0] + rr[1]);
	/* Round-robin alternates, so the slow copy holds back the fast one. */
	CHECK_U64(rr[0], <=, rr[1] + 1);
	fprintf(stderr, "dd fast=%llu slow=%llu, rr fast=%llu slow=%llu\n",
		(unsigned long long)dd[0], (unsigned long long)dd[1],
		(unsigned long long)rr[0], (unsigned long long)rr[1]);
}

static int last_pick(void *state, const unsigned *unacked, int copies, unsigned window)
{
	return unacked[copies - 1] < window ? copies - 1 : -1;
}

/* An application policy is found by name and decides alone. */
static void test_app_policy(void)
{
	static const struct ulf_policy_ops last = { .name = "last", .pick = last_pick };
	struct pair p[3];
	struct ulf_out out;
	struct ulf_in in[3];
	char b = 'z';

	check_context("application policy");
	CHECK_EQ(ulf_register_policy(&last), 0);
	CHECK_EQ(ulf_register_policy(&last), -EEXIST);
	CHECK(ulf_policy_find("last") == &last);
	CHECK(ulf_policy_find("nope") == NULL);
	open_copies(p, 3, &out, in, 8, ulf_policy_find("last"));
	for (int k = 0; k < 8; k++)
		CHECK_EQ(ulf_out_write(&out, &b, 1, 0), 0);
	CHECK_EQ(ulf_out_pick(&out, false), -EAGAIN);
	CHECK_U64(out.sent[2], ==, 8);
	CHECK_U64(out.sent[0] + out.sent[1], ==, 0);
	close_copies(p, 3, &out, in);
}

/* Oversized buffers, stray bytes and a vanished producer are errors, not hangs. */
static void test_errors(void)
{
	struct pair p[1];
	struct ulf_out out;
	struct ulf_in in[1];
	static uint8_t big[BLOCK + 1];
	const void *d;
	size_t len;
	uint64_t tag;

	check_context("errors");
	open_copies(p, 1, &out, in, 4, &ulf_policy_dd);
	CHECK_EQ(ulf_out_write(&out, big, sizeof(big), 0), -EMSGSIZE);
	CHECK_EQ(write(p[0].prod, "garbage-garbage!", 16), 16);
	CHECK_EQ(ulf_in_read(&in[0], &d, &len, &tag), -EPROTO);
	close(p[0].prod);
	p[0].prod = -1;
	CHECK_EQ(ulf_in_read(&in[0], &d, &len, &tag), -EPIPE);
	ulf_out_fini(&out);
	ulf_in_fini(&in[0]);
	close(p[0].cons);
}

int main(void)
{
	test_markers_many_producers();
	test_round_robin();
	test_demand_driven_prefers_fast_copy();
	test_app_policy();
	test_errors();
	return CHECK_PASS;
}
