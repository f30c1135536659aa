/* SPDX-License-Identifier: MIT */
/*
 * A close against the peer's wake-up lock (src/transport/shm/attach.c, close_drain), over
 * real loopback TCP without the preload (conn_pair.h).
 *
 * A wake-up byte that reaches a closed socket makes its kernel answer with a reset, and
 * the reset throws away what that socket still had to send (a client's bytes from before
 * the switch that the server has not read yet: in CI a server of the short soak read
 * 128,000 of its client's 524,288 bytes, then a reset). A closing end therefore refuses wake-ups under the peer's token lock; the
 * peer sends one only under that lock, after looking. Here a thread of the other end
 * holds its token lock the way a sender preempted between taking the lock and sending
 * does, while this end closes:
 *   - held 300 ms, then it sends its wake-up: the close waits for the lock (it gave up
 *     after 100 ms once, and the wake-up came after the close), reads the byte, and the
 *     other end's socket sees a FIN, not a reset;
 *   - held until the close has returned (a holder that never lets go): the close gives up
 *     and still refuses, so the holder, looking once it has the lock's say again, sends
 *     nothing, and again no reset.
 * Checked from the client's close and from the server's, each after data both ways (both
 * ends on the rings, the client switched, so both may send wake-ups).
 */
#include <netinet/tcp.h>

#include "conn_pair.h"
#include "transport/shm/shmlock.h"

#define RING (16u << 10)

static int lfd;

enum hold { HOLD_300MS, HOLD_PAST_CLOSE };

struct holder {
	pthread_t t;
	struct end *e; /* the end that keeps its socket open */
	enum hold how;
	_Atomic int held, close_done;
	int sent; /* 1: it sent its wake-up while it held the lock */
};

/* What uls_conn_send_token does, with the lock held across a preemption. */
static void *hold_token_lock(void *arg)
{
	struct holder *h = arg;
	struct uls_shm_conn *s = shm_of(h->e->c);

	uls_shmlock_acquire(&s->me->token_lock, &s->me->token_owner);
	atomic_store(&h->held, 1);
	if (h->how == HOLD_300MS) {
		struct timespec ts = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
		nanosleep(&ts, NULL);
	} else {
		while (!atomic_load(&h->close_done))
			pair_pause();
	}
	if (!atomic_load(&s->me->tokens_closed) && !atomic_load(&s->peer->tokens_refused))
		h->sent = uls_conn_send_token_locked(h->e->c, h->e->fd);
	uls_shmlock_release(&s->me->token_lock, &s->me->token_owner);
	return NULL;
}

static int tcp_state(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	return ti.tcpi_state;
}

static void close_case(uint64_t seed, int closer, enum hold how)
{
	uint64_t rng = seed;
	struct stream c2s, s2c;
	struct end cli, srv;
	struct holder h = {.how = how};
	int err = -1;
	socklen_t len = sizeof(err);

	pair_watchdog();
	check_context("seed %#llx: the %s closes while the other end holds its token lock %s",
		      (unsigned long long)seed, closer == ULS_CLIENT ? "client" : "server",
		      how == HOLD_300MS ? "300 ms, then sends" : "until the close returned");
	pair_open_on_rings(lfd, RING, seed, &rng, &cli, &srv, &c2s, &s2c);
	CHECK(atomic_load(&shm_of(cli.c)->me->switched));

	struct end *v = closer == ULS_CLIENT ? &cli : &srv, *o = closer == ULS_CLIENT ? &srv : &cli;
	int ofd = o->fd;
	h.e = o;
	CHECK_EQ(pthread_create(&h.t, NULL, hold_token_lock, &h), 0);
	while (!atomic_load(&h.held))
		pair_pause();
	CHECK_EQ(pair_close(v), 0);
	atomic_store(&h.close_done, 1);
	CHECK_EQ(pthread_join(h.t, NULL), 0);
	if (how == HOLD_PAST_CLOSE)
		CHECK_EQ(h.sent, 0);

	/* The closed end's FIN reaches the other socket; a reset would come with or after it. */
	struct pollfd p = {.fd = ofd, .events = POLLRDHUP};
	CHECK_INT(poll(&p, 1, -1), ==, 1);
	struct timespec settle = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
	nanosleep(&settle, NULL);
	CHECK_EQ(getsockopt(ofd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	CHECK_EQ(err, 0);
	CHECK_EQ(tcp_state(ofd), TCP_CLOSE_WAIT);
	CHECK_INT(stream_recv(o, closer == ULS_CLIENT ? &c2s : &s2c, PAIR_CHUNK_MAX, &rng, 0), ==,
		  0);
	CHECK_EQ(pair_close(o), 0);
	stream_fini(&c2s);
	stream_fini(&s2c);
}

int main(void)
{
	uint64_t seed = 0xd7a1;

	pair_init("balanced");
	lfd = pair_listen();
	for (int closer = ULS_CLIENT; closer <= ULS_SERVER; closer++)
		for (int how = HOLD_300MS; how <= HOLD_PAST_CLOSE; how++)
			close_case(seed++, closer, (enum hold)how);
	close(lfd);
	check_context("%s", "");
	return CHECK_PASS;
}
