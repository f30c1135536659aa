/* SPDX-License-Identifier: MIT */
/*
 * The client's switch from TCP to the ring (docs/protocol.md, section 4), through the
 * core's connection API over real loopback TCP, without the preload (conn_pair.h). The
 * client sends before the server attached, so those bytes go on TCP; the server attaches
 * at accept; the client's later bytes go on the ring. Each receiver checks every byte of
 * its direction against a PRNG stream (none lost, repeated, reordered, and no wake-up byte
 * taken for data), then the end of the stream after a shutdown(SHUT_WR), and the paths
 * the conns report are the documented ones (conn.h): a client PENDING until it sees the
 * server attached, then SHM; a server SHM from its accept.
 *
 * Three ways to run both ends, each the way programs run them:
 *   loop:    one thread holds both ends, non-blocking, waiting in the core's poll
 *            (uls_poll), as an event loop does; the order of the steps is exact, so the
 *            switch position is known;
 *   fork:    client and server in two single-threaded processes with blocking calls (the
 *            solo path of shm/io.c): request/response rounds, then a stream each way;
 *   threads: one process, a sending and a receiving thread per end, blocking calls, with
 *            the accept made while the client's first bytes are still being sent.
 * Last, a hostile server that never attached (hostile_unattached_case).
 * One process can hold both ends: the server finds the client's segment through
 * sock_diag whichever process holds the client socket. The fork case runs before any
 * thread exists, since a process that made a thread never runs solo again.
 */
#include <sched.h>
#include <sys/single_threaded.h>

#include "conn_pair.h"

#define RING_SMALL 4096u
#define RING_MID (64u << 10)

static int lfd;

/* What the client has done so far: bytes on TCP, not switched, still pending. */
static void expect_unswitched(struct end *cli, uint64_t tcp)
{
	CHECK_EQ(pair_path(cli), ULS_PATH_PENDING);
	CHECK_U64(atomic_load(&shm_of(cli->c)->me->tcp_data), ==, tcp);
	CHECK_U64(atomic_load(&shm_of(cli->c)->me->switched), ==, 0);
	CHECK(pair_seg_named(cli));
}

/* After the streams: the switch happened at exactly the bytes the server read on TCP. */
static void expect_switched(struct end *cli, struct end *srv, uint64_t pos)
{
	CHECK_EQ(pair_path(cli), ULS_PATH_SHM);
	CHECK_EQ(pair_path(srv), ULS_PATH_SHM);
	CHECK_U64(atomic_load(&shm_of(cli->c)->me->switched), ==, 1);
	CHECK_U64(atomic_load(&shm_of(cli->c)->me->switch_pos), ==, pos);
	CHECK_U64(atomic_load(&shm_of(srv->c)->me->tcp_data), ==, pos);
}

/* A send after shutdown(SHUT_WR) fails with EPIPE (and MSG_NOSIGNAL keeps SIGPIPE away). */
static void expect_epipe(struct end *e)
{
	struct iovec iov = {.iov_base = "z", .iov_len = 1};

	CHECK_INT(pair_sendv(e, &iov, 1, 0), ==, -EPIPE);
}

/* Both closed, in either order: the client's last close removes the segment's name. */
static void close_both(struct end *cli, struct end *srv, uint64_t *rng)
{
	struct end name = *cli;

	if (check_rand_below(rng, 2)) {
		CHECK_EQ(pair_close(srv), 0);
		CHECK_EQ(pair_close(cli), 0);
	} else {
		CHECK_EQ(pair_close(cli), 0);
		CHECK(!pair_seg_named(&name));
		CHECK_EQ(pair_close(srv), 0);
	}
	CHECK(!pair_seg_named(&name));
}

/* ------------------------------------------------------------------ loop */

/*
 * Both streams to their ends in one thread: each end sends while it has bytes (and shuts
 * down writing right after the last), and reads until its stream ends, whenever the core's
 * poll says it may. A lost wake-up leaves the poll asleep, and the watchdog fails the test.
 */
static void pump(struct end *ends[2], struct stream *tx[2], struct stream *rx[2], uint64_t *rng)
{
	int shut[2], eof[2] = {0, 0};

	for (int i = 0; i < 2; i++)
		shut[i] = tx[i]->sent == tx[i]->total;
	while (!(shut[0] && shut[1] && eof[0] && eof[1])) {
		struct pollfd p[2];
		for (int i = 0; i < 2; i++) {
			p[i].fd = ends[i]->fd;
			p[i].events = (short)((shut[i] ? 0 : POLLOUT) | (eof[i] ? 0 : POLLIN));
		}
		CHECK_INT(uls_poll(p, 2, -1, NULL), >, 0);
		for (int i = 0; i < 2; i++) {
			CHECK_INT(p[i].revents & (POLLERR | POLLNVAL), ==, 0);
			if (!eof[i] && (p[i].revents & (POLLIN | POLLHUP))) {
				ssize_t n = stream_recv(ends[i], rx[i], PAIR_CHUNK_MAX, rng, 0);
				CHECK(n >= 0 || n == -EAGAIN);
				if (n == 0) {
					CHECK_U64(rx[i]->got, ==, rx[i]->total);
					eof[i] = 1;
				}
			}
			if (!shut[i] && (p[i].revents & POLLOUT)) {
				ssize_t n = stream_send(ends[i], tx[i], PAIR_CHUNK_MAX, rng, 0);
				CHECK(n > 0 || n == -EAGAIN);
				if (tx[i]->sent == tx[i]->total) {
					CHECK_EQ(pair_shutdown(ends[i], SHUT_WR), 0);
					shut[i] = 1;
				}
			}
		}
	}
}

/* Sends the first `pre` bytes of st before anyone accepted: they can only go on TCP. */
static void send_early(struct end *cli, struct stream *st, uint64_t pre, uint64_t *rng)
{
	while (st->sent < pre) {
		ssize_t n = stream_send(cli, st, (size_t)(pre - st->sent), rng, 0);
		if (n == -EAGAIN)
			pair_wait(cli, POLLOUT);
		else
			CHECK_INT(n, >, 0);
	}
}

/*
 * One thread, non-blocking: `pre` bytes before the accept; with shut_early the client
 * sends its whole stream then and shuts down writing on TCP, so it never switches
 * (ULS_SIDE_TCP_SHUT) while the server's bytes still come on the ring.
 */
static void loop_case(uint64_t seed, uint64_t pre, uint64_t total, int shut_early)
{
	struct stream up, down;
	uint64_t rng = seed;
	struct end cli, srv;

	pair_watchdog();
	check_context("loop: seed %#llx, %llu bytes before the accept%s", (unsigned long long)seed,
		      (unsigned long long)pre, shut_early ? ", then SHUT_WR" : "");
	stream_init(&up, "c2s", seed ^ 0xc25, shut_early ? pre : total);
	stream_init(&down, "s2c", seed ^ 0x52c, total);
	cli = pair_connect(1, RING_SMALL, 2 * RING_SMALL);
	CHECK_EQ(pair_path(&cli), ULS_PATH_PENDING);
	CHECK(pair_seg_named(&cli));
	CHECK(pair_wait(&cli, POLLOUT) & POLLOUT);
	/* Nothing to read yet: the client reads TCP, where a server without ulsock writes. */
	CHECK_INT(stream_recv(&cli, &down, 100, &rng, 0), ==, -EAGAIN);
	send_early(&cli, &up, pre, &rng);
	expect_unswitched(&cli, pre);
	if (shut_early) {
		CHECK_EQ(pair_shutdown(&cli, SHUT_WR), 0);
		CHECK(atomic_load(&shm_of(cli.c)->me->state) & ULS_SIDE_TCP_SHUT);
		expect_epipe(&cli);
	}

	srv = pair_accept(lfd, 1);
	CHECK_EQ(pair_path(&srv), ULS_PATH_SHM);
	CHECK(atomic_load(&shm_of(srv.c)->me->state) & ULS_SIDE_ATTACHED);
	/* The client learns of the attach at its next call. */
	expect_unswitched(&cli, pre);

	struct end *ends[2] = {&cli, &srv};
	struct stream *tx[2] = {&up, &down}, *rx[2] = {&down, &up};
	pump(ends, tx, rx, &rng);

	if (shut_early) {
		CHECK_EQ(pair_path(&cli), ULS_PATH_SHM); /* it receives on the ring */
		CHECK_U64(atomic_load(&shm_of(cli.c)->me->switched), ==, 0);
		CHECK_U64(atomic_load(&shm_of(srv.c)->me->tcp_data), ==, pre);
	} else {
		expect_switched(&cli, &srv, pre);
	}
	expect_epipe(&cli);
	expect_epipe(&srv);
	/* The end of the stream stays. */
	CHECK_INT(stream_recv(&cli, &down, 100, &rng, 0), ==, 0);
	CHECK_INT(stream_recv(&srv, &up, 100, &rng, 0), ==, 0);
	close_both(&cli, &srv, &rng);
	stream_fini(&up);
	stream_fini(&down);
}

/* ------------------------------------------------------------------ fork */

#define ROUNDS 40

/*
 * The sizes of the request/response rounds, from a seed both processes know: the server
 * reads exactly each request before it answers. Some are larger than the ring, so the
 * sender waits for room.
 */
static uint64_t round_size(uint64_t *plan)
{
	return 1 + check_rand_below(plan, check_rand_below(plan, 4) ? 600 : 3 * RING_SMALL);
}

static void fork_server(uint64_t seed, struct stream *up, struct stream *down, uint64_t pre,
			int go, int attached)
{
	uint64_t rng = seed ^ 0x5e, plan = seed;
	struct end srv;

	check_context("fork: server, seed %#llx", (unsigned long long)seed);
	pair_hear(go); /* the client's first bytes are on TCP now */
	srv = pair_accept(lfd, 0);
	CHECK_EQ(pair_path(&srv), ULS_PATH_SHM);
	pair_tell(attached);
	/* The client's bytes from before the accept, and its rounds. */
	stream_recv_to(&srv, up, pre, &rng);
	for (int i = 0; i < ROUNDS; i++) {
		stream_recv_to(&srv, up, up->got + round_size(&plan), &rng);
		stream_send_to(&srv, down, down->sent + round_size(&plan), &rng);
	}
	stream_recv_eof(&srv, up, &rng);
	stream_send_to(&srv, down, down->total, &rng);
	CHECK_EQ(pair_shutdown(&srv, SHUT_WR), 0);
	CHECK_EQ(pair_path(&srv), ULS_PATH_SHM);
	CHECK_U64(atomic_load(&shm_of(srv.c)->peer->switch_pos), ==, pre);
	CHECK_U64(atomic_load(&shm_of(srv.c)->me->tcp_data), ==, pre);
	CHECK_EQ(pair_close(&srv), 0);
	_exit(CHECK_PASS);
}

static void fork_case(uint64_t seed, uint64_t pre, uint64_t total)
{
	uint64_t rng = seed ^ 0xc1, plan = seed;
	struct stream up, down;
	struct end cli;
	int go[2], attached[2];

	pair_watchdog();
	check_context("fork: client, seed %#llx", (unsigned long long)seed);
	/* Otherwise this covers the locked path only. */
	CHECK(__libc_single_threaded);
	if (!atomic_load(&uls_fence_registered))
		fprintf(stderr, "note: no membarrier: no solo calls, the fork case takes locks\n");
	stream_init(&up, "c2s", seed ^ 0xc25, total);
	stream_init(&down, "s2c", seed ^ 0x52c, total);
	CHECK_EQ(pipe2(go, O_CLOEXEC), 0);
	CHECK_EQ(pipe2(attached, O_CLOEXEC), 0);
	if (pair_fork() == 0)
		fork_server(seed, &up, &down, pre, go[0], attached[1]);
	cli = pair_connect(0, RING_SMALL, RING_SMALL);
	stream_send_to(&cli, &up, pre, &rng);
	expect_unswitched(&cli, pre);
	pair_tell(go[1]);
	/* From here every byte goes on the ring: the switch is at exactly pre. */
	pair_hear(attached[0]);
	expect_unswitched(&cli, pre);
	for (int i = 0; i < ROUNDS; i++) {
		stream_send_to(&cli, &up, up.sent + round_size(&plan), &rng);
		stream_recv_to(&cli, &down, down.got + round_size(&plan), &rng);
	}
	stream_send_to(&cli, &up, up.total, &rng);
	CHECK_EQ(pair_shutdown(&cli, SHUT_WR), 0);
	stream_recv_eof(&cli, &down, &rng);
	CHECK_EQ(pair_path(&cli), ULS_PATH_SHM);
	CHECK_U64(atomic_load(&shm_of(cli.c)->me->switch_pos), ==, pre);
	pair_reap();
	struct end name = cli;
	CHECK_EQ(pair_close(&cli), 0);
	CHECK(!pair_seg_named(&name));
	for (int i = 0; i < 2; i++) {
		close(go[i]);
		close(attached[i]);
	}
	stream_fini(&up);
	stream_fini(&down);
}

/* ------------------------------------------------------------------ threads */

struct worker {
	pthread_t t;
	struct end *e;
	struct stream *st;
	uint64_t seed;
	int send, first; /* sends; sends the client's first bytes before the accept */
};

/* The client's first send returned (its size), and the accept starts. */
static _Atomic uint64_t first;
static _Atomic int accepting;

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = w->seed;

	if (!w->send) {
		stream_recv_eof(w->e, w->st, &rng);
		return NULL;
	}
	if (w->first) {
		/* Small enough that TCP takes it before anyone accepted; the rest races the
		 * accept. */
		ssize_t n = stream_send(w->e, w->st, 512, &rng, 0);
		CHECK_INT(n, >, 0);
		atomic_store(&first, (uint64_t)n);
		while (!atomic_load(&accepting))
			sched_yield();
	}
	stream_send_to(w->e, w->st, w->st->total, &rng);
	CHECK_EQ(pair_shutdown(w->e, SHUT_WR), 0);
	return NULL;
}

static void start(struct worker *w, struct end *e, struct stream *st, uint64_t seed, int send)
{
	w->e = e;
	w->st = st;
	w->seed = seed;
	w->send = send;
	w->first = send && e->c->role == ULS_CLIENT;
	CHECK_EQ(pthread_create(&w->t, NULL, work, w), 0);
}

static void threads_case(uint64_t seed, uint64_t total, const char *profile)
{
	struct worker w[4];
	struct stream up, down;
	uint64_t rng = seed;
	struct end cli, srv;

	pair_watchdog();
	pair_profile(profile);
	check_context("threads: seed %#llx, profile %s", (unsigned long long)seed, profile);
	stream_init(&up, "c2s", seed ^ 0xc25, total);
	stream_init(&down, "s2c", seed ^ 0x52c, total);
	cli = pair_connect(0, RING_SMALL, RING_MID);
	atomic_store(&first, 0);
	atomic_store(&accepting, 0);
	start(&w[0], &cli, &up, seed + 1, 1);
	while (!atomic_load(&first))
		pair_pause();
	expect_unswitched(&cli, atomic_load(&first));
	atomic_store(&accepting, 1);
	srv = pair_accept(lfd, 0);
	CHECK_EQ(pair_path(&srv), ULS_PATH_SHM);
	start(&w[1], &cli, &down, seed + 2, 0);
	start(&w[2], &srv, &down, seed + 3, 1);
	start(&w[3], &srv, &up, seed + 4, 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(pthread_join(w[i].t, NULL), 0);
	CHECK_U64(up.got, ==, total);
	CHECK_U64(down.got, ==, total);
	/*
	 * The kernel buffers megabytes before anyone reads: a client that sent its whole
	 * stream before it saw the server attached shut down on TCP and never switched.
	 * Otherwise it switched where the server stopped reading TCP, after its first send.
	 */
	if (!atomic_load(&shm_of(cli.c)->me->switched)) {
		CHECK(atomic_load(&shm_of(cli.c)->me->state) & ULS_SIDE_TCP_SHUT);
		CHECK_U64(atomic_load(&shm_of(srv.c)->me->tcp_data), ==, total);
		CHECK_EQ(pair_path(&cli), ULS_PATH_SHM);
	} else {
		uint64_t pos = atomic_load(&shm_of(cli.c)->me->switch_pos);
		CHECK_U64(pos, >=, first);
		expect_switched(&cli, &srv, pos);
	}
	close_both(&cli, &srv, &rng);
	stream_fini(&up);
	stream_fini(&down);
}

/*
 * A server that never attached but says it moves back to TCP (its tokens_closed, which
 * only a hostile server writes before attaching; this test writes it through the
 * client's own mapping): the client's non-blocking receive fails with ECONNRESET, as
 * does every later one, where it went round for ever before.
 */
static void hostile_unattached_case(void)
{
	struct end cli = pair_connect(1, RING_SMALL, RING_SMALL);
	int sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC); /* plain: it never attaches */
	char b[16];
	struct iovec iov = {.iov_base = b, .iov_len = sizeof(b)};

	check_context("%s", "hostile unattached server");
	CHECK(sfd >= 0);
	CHECK_INT(pair_recvv(&cli, &iov, 1, 0), ==, -EAGAIN);
	CHECK_EQ(pair_path(&cli), ULS_PATH_PENDING);
	atomic_store(&shm_of(cli.c)->peer->tokens_closed, 1);
	CHECK_INT(pair_recvv(&cli, &iov, 1, 0), ==, -ECONNRESET);
	CHECK(atomic_load(&cli.c->broken));
	CHECK_INT(pair_recvv(&cli, &iov, 1, 0), ==, -ECONNRESET);
	CHECK_INT(pair_sendv(&cli, &iov, 1, 0), ==, -ECONNRESET);
	close(sfd);
	pair_close(&cli);
}

int main(void)
{
	pair_init("balanced");
	lfd = pair_listen();

	/* No bytes before the accept, fewer than a ring, more than the client's ring. */
	loop_case(0x5017c4, 0, 300000, 0);
	loop_case(0x5017c5, 1, 300000, 0);
	loop_case(0x5017c6, 3000, 200000, 0);
	loop_case(0x5017c7, 20000, 200000, 0);
	loop_case(0x5017c8, 5000, 200000, 1);
	pair_profile("efficient");
	loop_case(0x5017c9, 700, 300000, 0);
	pair_profile("latency");
	loop_case(0x5017ca, 700, 300000, 0);

	pair_profile("efficient");
	fork_case(0xf0f0, 2500, 1 << 20);
	pair_profile("balanced");
	fork_case(0xf0f1, 0, 1 << 20);

	threads_case(0x7e01, 2 << 20, "balanced");
	threads_case(0x7e02, 1 << 20, "efficient");
	threads_case(0x7e03, 1 << 20, "latency");

	hostile_unattached_case();

	close(lfd);
	check_context("%s", "");
	return CHECK_PASS;
}
