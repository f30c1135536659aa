/* SPDX-License-Identifier: MIT */
/*
 * A send to a peer that shut down both ways, when the peer's FIN is late (src/transport/
 * shm/io.c, send_to_gone_peer), over real loopback TCP without the preload (conn_pair.h).
 *
 * A side that shuts both ways closes its receiving ring, shuts its kernel socket down both
 * ways (the FIN) and then ends its sending ring. A program on the other side that saw that
 * end and answers it with a send must get what Linux gives: the bytes go to the shut
 * socket's kernel, which resets, and this side says RESET so the shut side's next receive
 * reports ECONNRESET. On a busy machine the kernel may leave the FIN's loopback packet to
 * its softirq thread, so the ring's end can be seen before this socket has the FIN; a
 * send that then took the peer for one that only stopped reading dropped the bytes, and
 * no reset ever came (calls_shutdown shut_rdwr_then_data failed so under load).
 *
 * Here the server's rings say "shut both ways" and a thread makes the real shutdown 30 ms
 * later, the late FIN; the client sends at once. The send must wait for the FIN, send on
 * TCP and say RESET, and the server's kernel must reset the connection.
 */
#include <netinet/tcp.h>

#include "conn_pair.h"

#define RING (16u << 10)

static int lfd;

struct late_fin {
	pthread_t t;
	int fd;
};

static void *shut_late(void *arg)
{
	struct late_fin *l = arg;
	struct timespec ts = {.tv_sec = 0, .tv_nsec = 30 * 1000 * 1000};

	nanosleep(&ts, NULL);
	CHECK_EQ(shutdown(l->fd, SHUT_RDWR), 0);
	return NULL;
}

static void late_fin_case(uint64_t seed)
{
	uint64_t rng = seed;
	struct stream c2s, s2c;
	struct end cli, srv;
	struct late_fin l;
	char buf[64] = {0};
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};

	pair_watchdog();
	check_context("seed %#llx: the client answers the server's end before its FIN came",
		      (unsigned long long)seed);
	pair_open_on_rings(lfd, RING, seed, &rng, &cli, &srv, &c2s, &s2c);

	/* The server's shutdown(SHUT_RDWR) on the rings, its FIN 30 ms late. */
	struct uls_shm_conn *s = shm_of(srv.c);
	atomic_store(&srv.c->shut_rd, 1);
	atomic_store(&s->rx->sh->cons.closed, 1);
	l.fd = srv.fd;
	CHECK_EQ(pthread_create(&l.t, NULL, shut_late, &l), 0);
	atomic_store(&s->tx->sh->prod.eof, 1);
	atomic_store(&srv.c->shut_wr, 1);

	/* The client sees the end, and answers it. */
	stream_recv_eof(&cli, &s2c, &rng);
	CHECK_INT(pair_sendv(&cli, &iov, 1, MSG_NOSIGNAL), ==, (ssize_t)sizeof(buf));
	CHECK(atomic_load(&shm_of(cli.c)->me->state) & ULS_SIDE_RESET);
	CHECK_EQ(pthread_join(l.t, NULL), 0);

	/* The bytes reached the shut socket's kernel, which resets: the client's socket
	 * reports it (a dropped send would leave it open for good: 5 s, then fail). */
	struct pollfd p = {.fd = cli.fd, .events = POLLIN};
	CHECK_INT(poll(&p, 1, 5000), ==, 1);
	CHECK(p.revents & (POLLERR | POLLHUP));
	CHECK_EQ(pair_close(&cli), 0);
	CHECK_EQ(pair_close(&srv), 0);
	stream_fini(&c2s);
	stream_fini(&s2c);
}

int main(void)
{
	pair_init("balanced");
	lfd = pair_listen();
	for (uint64_t seed = 0x5f10; seed < 0x5f13; seed++)
		late_fin_case(seed);
	close(lfd);
	check_context("%s", "");
	return CHECK_PASS;
}
