/* SPDX-License-Identifier: MIT */
/*
 * Moving an accelerated connection back to kernel TCP in place (docs/protocol.md, section
 * 8) through uls_conn_revert, over real loopback TCP without the preload (conn_pair.h).
 * When the revert starts, bytes are in flight both ways: on the rings, unread, and on
 * TCP (the client's bytes from before its switch, and wake-up bytes each end armed for).
 * Afterwards the reverting end's path is ULS_PATH_KERNEL and its socket is plain TCP: it
 * reads and writes there with libc alone (as a program without ulsock would), and the
 * bytes it had not read from the ring come there, resent by the peer. The peer reads the
 * ring up to the revert point, then TCP, and ends on the kernel path too. Every byte is
 * checked at its offset in a PRNG stream: none lost, repeated, reordered, and no wake-up
 * byte delivered as data. Then both ends shut down and each sees the end of the stream.
 *
 * The peer cooperates in three ways: in this very thread (both ends in one process: the
 * revert serves the other end itself, revert.c, uls_conn_local_peer), in a thread blocked
 * in uls_conn_recv on the other end, and in a forked process blocked there, where only
 * its own call can answer. Also: a server whose client's first bytes are unread on TCP
 * cannot go back (EBUSY) until it read them; a reverting end that had shut down writing
 * on the ring gives its peer the end of the stream on TCP; a client that reverts before
 * the accept leaves a plain kernel connection behind; a peer that makes no call has its
 * direction moved for it only once no reader of wake-ups of this side is inside its read.
 */
#include "conn_pair.h"

#define RING (64u << 10)
/* The preload allows 2 s; a test on a loaded machine must not fail on a slow peer. */
#define REVERT_MS 15000
/* A stream long enough never to run out; a side's end is set where it shuts down. */
#define LONG (1ull << 40)

static int lfd;

struct busy {
	struct end cli, srv;
	struct stream up, down; /* client to server, server to client */
	uint64_t rng;
};

/*
 * An accelerated pair with bytes in flight: `pre` bytes of the client's on TCP before the
 * accept (read by the server only with read_pre), then `up` and `down` bytes on the
 * rings that nobody read. Each end first asks for a wake-up as a poll about to sleep does
 * (uls_conn_arm), so the other's send also puts a wake-up byte on TCP. With up == 0 the
 * client has not switched: its TCP bytes are all data.
 */
static void make_busy(struct busy *b, uint64_t seed, uint64_t pre, uint64_t up, uint64_t down,
		      int read_pre)
{
	memset(b, 0, sizeof(*b));
	b->rng = seed;
	stream_init(&b->up, "c2s", seed ^ 0xc25, LONG);
	stream_init(&b->down, "s2c", seed ^ 0x52c, LONG);
	b->cli = pair_connect(0, RING, RING);
	stream_send_to(&b->cli, &b->up, pre, &b->rng);
	b->srv = pair_accept(lfd, 0);
	CHECK_EQ(pair_path(&b->srv), ULS_PATH_SHM);
	if (read_pre)
		stream_recv_to(&b->srv, &b->up, pre, &b->rng);
	uls_conn_arm(b->cli.c, POLLIN, -1);
	stream_send_to(&b->srv, &b->down, down, &b->rng);
	CHECK_U64(atomic_load(&shm_of(b->srv.c)->me->tokens_sent), >=, 1);
	if (!up) {
		CHECK_U64(atomic_load(&shm_of(b->cli.c)->me->switched), ==, 0);
		return;
	}
	uls_conn_arm(b->srv.c, POLLIN, -1);
	stream_send_to(&b->cli, &b->up, pre + up, &b->rng);
	CHECK_EQ(pair_path(&b->cli), ULS_PATH_SHM);
	CHECK_U64(atomic_load(&shm_of(b->cli.c)->me->switch_pos), ==, pre);
	CHECK_U64(atomic_load(&shm_of(b->cli.c)->me->tokens_sent), >=, 1);
}

static void free_busy(struct busy *b)
{
	struct end name = b->cli;

	CHECK_EQ(pair_close(&b->cli), 0);
	CHECK_EQ(pair_close(&b->srv), 0);
	CHECK(!pair_seg_named(&name));
	stream_fini(&b->up);
	stream_fini(&b->down);
}

/* What a finished revert leaves on the side that asked. */
static void expect_reverted(struct end *e)
{
	CHECK_EQ(pair_path(e), ULS_PATH_KERNEL);
	CHECK_U64(atomic_load(&shm_of(e->c)->me->tx_reverted), ==, 1);
	CHECK_U64(atomic_load(&shm_of(e->c)->me->rx_back), ==, 1);
	CHECK(!pair_seg_named(e));
}

/* Sends `more` bytes of st and shuts down writing, unless it did already. */
static void send_rest(struct end *e, struct stream *st, uint64_t more, int shut, uint64_t *rng)
{
	if (!shut) {
		stream_send_to(e, st, st->sent + more, rng);
		CHECK_EQ(pair_shutdown(e, SHUT_WR), 0);
	}
	st->total = st->sent;
}

/*
 * After the revert, in one thread: each end that has not shut down yet writes `more`
 * bytes and shuts down, then each reads to the end of its stream; a read only waits for
 * bytes already sent. Both end on the kernel path.
 */
static void finish(struct busy *b, uint64_t more, int cli_shut, int srv_shut)
{
	send_rest(&b->cli, &b->up, more, cli_shut, &b->rng);
	send_rest(&b->srv, &b->down, more, srv_shut, &b->rng);
	stream_recv_eof(&b->srv, &b->up, &b->rng);
	stream_recv_eof(&b->cli, &b->down, &b->rng);
	CHECK_EQ(pair_path(&b->cli), ULS_PATH_KERNEL);
	CHECK_EQ(pair_path(&b->srv), ULS_PATH_KERNEL);
}

/* Who shut down writing on the ring before the revert: nobody, the reverting end, its peer. */
enum shut { NONE_SHUT, A_SHUT, P_SHUT };

/*
 * Both ends in this thread; the end of role `who` reverts. A server first meets the
 * client's unread bytes from before its switch (when pre > 0). An end that had shut
 * down writing on the ring gives the end of its stream on TCP after the revert.
 */
static void local_case(uint64_t seed, int who, uint64_t pre, enum shut shut, int switched)
{
	static const char *const shuts[] = {"", ", after its SHUT_WR",
					    ", after the peer's SHUT_WR"};
	uint64_t rng = seed;
	uint64_t up = switched ? 1 + check_rand_below(&rng, RING - 1) : 0;
	uint64_t down = 1 + check_rand_below(&rng, RING - 1);
	struct busy b;

	pair_watchdog();
	check_context("local: seed %#llx, %s reverts, %llu bytes before the %s%s",
		      (unsigned long long)seed, who == ULS_CLIENT ? "client" : "server",
		      (unsigned long long)pre, switched ? "switch" : "revert, no switch",
		      shuts[shut]);
	make_busy(&b, seed, pre, up, down, who == ULS_CLIENT && check_rand_below(&rng, 2));
	struct end *a = who == ULS_CLIENT ? &b.cli : &b.srv;
	struct end *p = who == ULS_CLIENT ? &b.srv : &b.cli;
	struct stream *a_rx = who == ULS_CLIENT ? &b.down : &b.up;
	if (shut != NONE_SHUT)
		CHECK_EQ(pair_shutdown(shut == A_SHUT ? a : p, SHUT_WR), 0);
	if (who == ULS_SERVER && pre && atomic_load(&shm_of(b.cli.c)->me->switched)) {
		/* The client's unread bytes from before its switch would sit in front of its
		 * wake-ups in the kernel's queue. (Unswitched, it sent only data there.) */
		CHECK_INT(uls_conn_revert(a->c, a->fd, REVERT_MS), ==, -EBUSY);
		CHECK_EQ(pair_path(a), ULS_PATH_SHM);
		CHECK_U64(atomic_load(&shm_of(a->c)->me->revert_req), ==, 0);
		CHECK_U64(atomic_load(&shm_of(p->c)->me->tx_reverted), ==, 0);
		stream_recv_to(a, &b.up, pre, &b.rng);
	}
	CHECK_EQ(uls_conn_revert(a->c, a->fd, REVERT_MS), 0);
	expect_reverted(a);
	/* Served from here: the peer's end is in this process. */
	CHECK_U64(atomic_load(&shm_of(p->c)->me->tx_reverted), ==, 1);
	/* A second revert has nothing to do. */
	CHECK_EQ(uls_conn_revert(a->c, a->fd, REVERT_MS), 0);
	/* The peer's bytes a had not read from the ring are on a's kernel socket now. */
	stream_recv_to(a, a_rx, a_rx->sent, &b.rng);
	struct end *shut_end = shut == A_SHUT ? a : shut == P_SHUT ? p : NULL;
	finish(&b, 1 + check_rand_below(&rng, 200000), shut_end == &b.cli, shut_end == &b.srv);
	free_busy(&b);
}

/* ------------------------------------------------------------------ a thread */

struct reader {
	pthread_t t;
	struct end *e;
	struct stream *st;
	uint64_t seed;
};

static void *read_all(void *arg)
{
	struct reader *r = arg;
	uint64_t rng = r->seed;

	stream_recv_eof(r->e, r->st, &rng);
	return NULL;
}

/*
 * The server reverts while a thread of this process sleeps in uls_conn_recv on the
 * client's end, after it read the ring empty; the client's bytes to the server are
 * unread on the ring.
 */
static void thread_case(uint64_t seed)
{
	uint64_t rng = seed, more_up = 1 + check_rand_below(&rng, 300000);
	uint64_t more_down = 1 + check_rand_below(&rng, 300000);
	struct reader r;
	struct busy b;

	pair_watchdog();
	check_context("thread: seed %#llx, the server reverts", (unsigned long long)seed);
	make_busy(&b, seed, check_rand_below(&rng, 3000), 1 + check_rand_below(&rng, RING - 1),
		  1 + check_rand_below(&rng, RING - 1), 1);
	b.down.total = b.down.sent + more_down;
	b.up.total = b.up.sent + more_up;
	r = (struct reader){.e = &b.cli, .st = &b.down, .seed = seed + 1};
	CHECK_EQ(pthread_create(&r.t, NULL, read_all, &r), 0);
	/* It read the ring empty and sleeps (a futex or the socket): it asked to be woken. */
	while (!atomic_load(&shm_of(b.cli.c)->rx->sh->cons.want_data))
		pair_pause();
	CHECK_EQ(uls_conn_revert(b.srv.c, b.srv.fd, REVERT_MS), 0);
	expect_reverted(&b.srv);
	CHECK_U64(atomic_load(&shm_of(b.cli.c)->me->tx_reverted), ==, 1);
	stream_recv_to(&b.srv, &b.up, b.up.sent, &b.rng);
	stream_send_to(&b.srv, &b.down, b.down.total, &b.rng);
	CHECK_EQ(pair_shutdown(&b.srv, SHUT_WR), 0);
	stream_send_to(&b.cli, &b.up, b.up.total, &b.rng);
	CHECK_EQ(pair_shutdown(&b.cli, SHUT_WR), 0);
	stream_recv_eof(&b.srv, &b.up, &b.rng);
	CHECK_EQ(pthread_join(r.t, NULL), 0);
	CHECK_U64(b.down.got, ==, b.down.total);
	CHECK_EQ(pair_path(&b.cli), ULS_PATH_KERNEL);
	free_busy(&b);
}

/* ------------------------------------------------------------------ a process */

/*
 * The reverting end `who` is in this process, its peer in a forked one, where only the
 * peer's own call can answer: it sleeps in uls_conn_recv, or reads, when the request
 * comes. Each end sent the other bytes on the ring before; the reverting end read none.
 */
struct plan {
	uint64_t a_before, a_after; /* bytes the reverting end sends before and after */
	uint64_t p_before, p_after; /* and its peer */
};

static struct end open_end(int who)
{
	return who == ULS_CLIENT ? pair_connect(0, RING, RING) : pair_accept(lfd, 0);
}

static void fork_peer(int who, struct plan *pl, struct stream *a2p, struct stream *p2a, int go,
		      int ready, uint64_t seed)
{
	uint64_t rng = seed ^ 0x9ee4;
	struct end p;

	check_context("fork: the peer (%s), seed %#llx", who == ULS_CLIENT ? "server" : "client",
		      (unsigned long long)seed);
	p = open_end(!who);
	/* Both ends exist and the server attached: what follows goes on the rings. */
	pair_hear(go);
	stream_send_to(&p, p2a, pl->p_before, &rng);
	pair_tell(ready);
	stream_recv_eof(&p, a2p, &rng);
	CHECK_U64(atomic_load(&shm_of(p.c)->me->tx_reverted), ==, 1);
	stream_send_to(&p, p2a, p2a->total, &rng);
	CHECK_EQ(pair_shutdown(&p, SHUT_WR), 0);
	CHECK_EQ(pair_path(&p), ULS_PATH_KERNEL);
	CHECK_EQ(pair_close(&p), 0);
	_exit(CHECK_PASS);
}

/* The reverting end's last part: its end of the stream, the peer's bytes to its end. */
static void fork_case_end(struct end *a, struct stream *a2p, struct stream *p2a, int go[2],
			  int ready[2], uint64_t *rng)
{
	CHECK_EQ(pair_shutdown(a, SHUT_WR), 0);
	stream_recv_eof(a, p2a, rng);
	pair_reap();
	CHECK_EQ(pair_close(a), 0);
	for (int i = 0; i < 2; i++) {
		close(go[i]);
		close(ready[i]);
	}
	stream_fini(a2p);
	stream_fini(p2a);
}

static void fork_case(uint64_t seed, int who)
{
	uint64_t rng = seed;
	struct plan pl = {
		.a_before = 1 + check_rand_below(&rng, RING - 1),
		.a_after = 1 + check_rand_below(&rng, 400000),
		.p_before = 1 + check_rand_below(&rng, RING - 1),
		.p_after = 1 + check_rand_below(&rng, 400000),
	};
	struct stream a2p, p2a;
	int go[2], ready[2];
	struct end a;

	pair_watchdog();
	check_context("fork: seed %#llx, the %s reverts", (unsigned long long)seed,
		      who == ULS_CLIENT ? "client" : "server");
	stream_init(&a2p, "to the peer", seed ^ 0xa2, pl.a_before + pl.a_after);
	stream_init(&p2a, "to the reverting end", seed ^ 0x2a, pl.p_before + pl.p_after);
	CHECK_EQ(pipe2(go, O_CLOEXEC), 0);
	CHECK_EQ(pipe2(ready, O_CLOEXEC), 0);
	if (pair_fork() == 0)
		fork_peer(who, &pl, &a2p, &p2a, go[0], ready[1], seed);
	a = open_end(who);
	pair_tell(go[1]);
	pair_hear(ready[0]);
	stream_send_to(&a, &a2p, pl.a_before, &rng);
	CHECK_EQ(pair_path(&a), ULS_PATH_SHM);
	CHECK_EQ(uls_conn_revert(a.c, a.fd, REVERT_MS), 0);
	expect_reverted(&a);
	stream_send_to(&a, &a2p, a2p.total, &rng);
	/* All of the peer's bytes come on the kernel socket: those it had put on the ring
	 * (resent), then the later ones. */
	fork_case_end(&a, &a2p, &p2a, go, ready, &rng);
}

/* ------------------------------------------------------------------ an idle peer */

/*
 * A peer that makes no call has its sending direction moved for it (revert.c,
 * assist_idle_peer) while a reader of this side is inside a read of wake-ups: a poll's
 * drain (uls_shm_drain) that announced its read and was preempted before its recv. Here
 * a thread plays that drain with the pause made long (300 ms), and the peer, a forked
 * process that only watches its segment, sends its next bytes the moment its direction
 * is on TCP. The move must wait for the reader: made while the reader is inside (the
 * revert went on after 100 ms), it lets the reader take the peer's first data bytes for
 * wake-ups.
 */
struct drain_reader {
	struct end *e;
	_Atomic int inside;
};

static void *preempted_drain(void *arg)
{
	struct drain_reader *r = arg;
	struct uls_shm_conn *s = shm_of(r->e->c);
	char buf[256];

	/* uls_token_read_begin, then the preemption, then the drain's read. */
	atomic_fetch_add(&s->me->token_readers, 1);
	CHECK(!atomic_load(&s->peer->tokens_closed) && !atomic_load(&s->peer->tx_reverted));
	atomic_store(&r->inside, 1);
	struct timespec ts = {0, 300 * 1000 * 1000};
	nanosleep(&ts, NULL);
	ssize_t n = recv(r->e->fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n > 0)
		atomic_fetch_add(&s->me->tokens_seen, (uint64_t)n);
	atomic_fetch_sub(&s->me->token_readers, 1);
	return NULL;
}

static void idle_peer(int who, struct stream *a2p, struct stream *p2a, int go, int ready,
		      uint64_t seed)
{
	uint64_t rng = seed ^ 0x1d1e;
	struct end p;

	check_context("idle peer: the peer (%s), seed %#llx",
		      who == ULS_CLIENT ? "server" : "client", (unsigned long long)seed);
	p = open_end(!who);
	pair_hear(go);
	stream_send_to(&p, p2a, 1000, &rng);
	stream_recv_to(&p, a2p, a2p->total, &rng);
	pair_tell(ready);
	/* No call on the connection: only a look at the segment, until the other end moved
	 * this end's sending direction (the watchdog bounds the wait). */
	while (!atomic_load(&shm_of(p.c)->me->tx_reverted))
		pair_pause();
	stream_send_to(&p, p2a, p2a->total, &rng);
	CHECK_EQ(pair_shutdown(&p, SHUT_WR), 0);
	stream_recv_eof(&p, a2p, &rng);
	CHECK_EQ(pair_close(&p), 0);
	_exit(CHECK_PASS);
}

static void idle_reader_case(uint64_t seed, int who)
{
	uint64_t rng = seed;
	struct stream a2p, p2a;
	struct drain_reader r = {0};
	int go[2], ready[2];
	pthread_t t;
	struct end a;

	pair_watchdog();
	check_context("idle peer: seed %#llx, the %s reverts while its drain is preempted",
		      (unsigned long long)seed, who == ULS_CLIENT ? "client" : "server");
	stream_init(&a2p, "to the idle peer", seed ^ 0xa2, 1000);
	stream_init(&p2a, "from the idle peer", seed ^ 0x2a, 1000 + 20000);
	CHECK_EQ(pipe2(go, O_CLOEXEC), 0);
	CHECK_EQ(pipe2(ready, O_CLOEXEC), 0);
	if (pair_fork() == 0)
		idle_peer(who, &a2p, &p2a, go[0], ready[1], seed);
	a = open_end(who);
	pair_tell(go[1]);
	stream_recv_to(&a, &p2a, 1000, &rng);
	stream_send_to(&a, &a2p, a2p.total, &rng);
	pair_hear(ready[0]);
	CHECK_EQ(pair_path(&a), ULS_PATH_SHM);
	r.e = &a;
	CHECK_EQ(pthread_create(&t, NULL, preempted_drain, &r), 0);
	while (!atomic_load(&r.inside))
		pair_pause();
	CHECK_EQ(uls_conn_revert(a.c, a.fd, REVERT_MS), 0);
	expect_reverted(&a);
	CHECK_EQ(pthread_join(t, NULL), 0);
	/* What the drain took were wake-ups from before the move (its read came first); the
	 * peer's data, every byte of it, comes next on TCP. */
	fork_case_end(&a, &a2p, &p2a, go, ready, &rng);
}

/* ------------------------------------------------------------------ before the accept */

/*
 * A client that reverts before its server attached goes straight back to TCP; the server
 * then finds no segment (or declines) and the connection is plain kernel TCP.
 */
static void unattached_case(uint64_t seed)
{
	struct busy b;

	pair_watchdog();
	check_context("unattached: seed %#llx", (unsigned long long)seed);
	memset(&b, 0, sizeof(b));
	b.rng = seed;
	stream_init(&b.up, "c2s", seed ^ 0xc25, LONG);
	stream_init(&b.down, "s2c", seed ^ 0x52c, LONG);
	b.cli = pair_connect(0, RING, RING);
	stream_send_to(&b.cli, &b.up, 1 + check_rand_below(&b.rng, 5000), &b.rng);
	CHECK_EQ(pair_path(&b.cli), ULS_PATH_PENDING);
	CHECK_EQ(uls_conn_revert(b.cli.c, b.cli.fd, REVERT_MS), 0);
	expect_reverted(&b.cli);
	b.srv = pair_accept(lfd, 0);
	CHECK_EQ(pair_path(&b.srv), ULS_PATH_KERNEL);
	CHECK(!(atomic_load(&shm_of(b.cli.c)->peer->state) & ULS_SIDE_ATTACHED));
	finish(&b, 1 + check_rand_below(&b.rng, 100000), 0, 0);
	free_busy(&b);
}

int main(void)
{
	pair_init("balanced");
	lfd = pair_listen();

	for (uint64_t i = 0; i < 9; i++) {
		uint64_t pre = i % 3 == 0 ? 0 : 1 + i * 1500;
		local_case(0x4e7e0 + i, ULS_CLIENT, pre, (enum shut)(i / 3), 1);
		local_case(0x4e7f0 + i, ULS_SERVER, pre, (enum shut)(i / 3), 1);
	}
	/* The client's bytes so far all went on TCP, before it saw the server attached. */
	for (uint64_t i = 0; i < 4; i++) {
		local_case(0x4e800 + i, ULS_CLIENT, 1 + i * 2000, (enum shut)(i % 3), 0);
		local_case(0x4e810 + i, ULS_SERVER, 1 + i * 2000, (enum shut)(i % 3), 0);
	}
	unattached_case(0x0a77);

	/* Before any thread: the peer and this process run their calls solo. */
	pair_profile("efficient");
	fork_case(0xf1, ULS_CLIENT);
	fork_case(0xf2, ULS_SERVER);
	pair_profile("balanced");
	fork_case(0xf3, ULS_CLIENT);
	fork_case(0xf4, ULS_SERVER);

	thread_case(0x7401);
	pair_profile("efficient");
	thread_case(0x7402);

	pair_profile("balanced");
	idle_reader_case(0x1d01, ULS_CLIENT);
	idle_reader_case(0x1d02, ULS_SERVER);

	close(lfd);
	check_context("%s", "");
	return CHECK_PASS;
}
