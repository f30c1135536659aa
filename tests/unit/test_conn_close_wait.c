/* SPDX-License-Identifier: MIT */
/*
 * A close that overtakes a call (docs/design.md, "A close that overtakes a call";
 * src/core/conn.c, kept_for_calls), over real loopback TCP without the preload
 * (conn_pair.h): one thread sleeps in uls_conn_recv on an accelerated connection, or in
 * uls_conn_send on its full ring, while another thread closes the last descriptor with
 * uls_conn_close.
 *
 * What the kernel does there, and the core documents it does the same: the file stays
 * open for the calls that hold it, so a recv blocked on a socket that another thread
 * closes neither fails (no EBADF) nor returns 0 by itself; it goes on and returns the
 * data that comes, or 0 at the peer's end of the stream; a blocked send completes once
 * the peer makes room. The socket moves to a private descriptor, the program's number is
 * closed at once, and the rest of the close (the peer told, the FIN) happens when the
 * last call returns.
 *
 * Checked, for a client and a server end, with the call asleep on its futex (its first
 * 20 ms) and on the socket (after that):
 *   - uls_conn_close returns 0 at once; the program's number no longer names the socket,
 *     only the kept own descriptor does; the call has not returned;
 *   - the call then returns exactly what the peer does: its bytes, or 0 after its
 *     shutdown(SHUT_WR) or close, or (a send) the whole count once the peer read it;
 *   - then the close is complete: the peer reads the end of the stream, no descriptor
 *     of this process holds the socket, the segment's name is gone once both are closed.
 */
#include <dirent.h>

#include "conn_pair.h"
#include "core/handshake.h"

#define RING (16u << 10)

static int lfd;

enum phase { ON_FUTEX, ON_SOCKET };
enum ending { PEER_SENDS, PEER_SHUTS, PEER_CLOSES };

struct call {
	pthread_t t;
	struct end e; /* the thread's copy: the closing thread forgets its own */
	struct stream *st;
	int send;
	uint64_t len;
	ssize_t ret;
	_Atomic int done;
};

static void *blocked(void *arg)
{
	struct call *k = arg;
	uint64_t rng = k->st->seed;

	if (k->send) {
		/* More than the ring holds: it sleeps for room with the rest. */
		uint64_t before = k->st->sent;
		check_stream_fill(k->st->txbuf, (size_t)k->len, k->st->seed, before);
		struct iovec iov = {.iov_base = k->st->txbuf, .iov_len = (size_t)k->len};
		k->ret = pair_sendv(&k->e, &iov, 1, 0);
		if (k->ret > 0)
			k->st->sent += (uint64_t)k->ret;
	} else {
		k->ret = stream_recv(&k->e, k->st, PAIR_CHUNK_MAX, &rng, 0);
	}
	atomic_store(&k->done, 1);
	return NULL;
}

/*
 * The descriptors of this process that hold the socket with inode ino: how many, and
 * one. Read from the names in /proc/self/fd, never through the descriptors themselves:
 * the core's thread may close one meanwhile, and ThreadSanitizer would take an fstat of
 * it for a race with that close.
 */
static int holders(uint64_t ino, int *one)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char name[48];
	int n = 0;

	CHECK(d != NULL);
	*one = -1;
	while ((de = readdir(d)) != NULL) {
		ssize_t len = readlinkat(dirfd(d), de->d_name, name, sizeof(name) - 1);
		name[len > 0 ? len : 0] = '\0';
		if (strncmp(name, "socket:[", 8) != 0 || strtoull(name + 8, NULL, 10) != ino)
			continue;
		*one = atoi(de->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/* The inode of the open socket with these names as the kernel reports it, 0 when none. */
static uint64_t kernel_socket(const struct sockaddr_storage *self,
			      const struct sockaddr_storage *other)
{
	struct uls_sockid id;
	int r = uls_diag_lookup((const struct sockaddr *)self, (const struct sockaddr *)other, &id);

	CHECK(r == 0 || r == -ENOENT);
	return r == 0 ? id.ino : 0;
}

/*
 * Waits until the call sleeps: it announced it on its ring's flag word (the futex bit
 * first; the wake-up bit once it sleeps on the socket, after the futex window).
 */
static void until_asleep(struct uls_conn *c, int send, enum phase ph)
{
	struct uls_shm_conn *s = shm_of(c);
	_Atomic uint32_t *want = send ? &s->tx->sh->prod.want_space : &s->rx->sh->cons.want_data;
	uint32_t bit = ph == ON_FUTEX ? ULS_WANT_FUTEX : ULS_WANT_TOKEN;

	while (!(atomic_load(want) & bit) || atomic_load(&c->life) < 2)
		pair_pause();
}

static void close_case(uint64_t seed, int victim, int send, enum phase ph, enum ending how)
{
	static const char *const hows[] = {"the peer sends", "the peer shuts down",
					   "the peer closes"};
	uint64_t rng = seed;
	struct stream to_victim, from_victim;
	struct end cli, srv;
	struct call k;
	int one;
	size_t sent_now = 0;

	pair_watchdog();
	check_context("seed %#llx: %s blocked in %s on the %s, closed; %s",
		      (unsigned long long)seed, send ? "send" : "recv",
		      ph == ON_FUTEX ? "its futex" : "the socket",
		      victim == ULS_CLIENT ? "client" : "server", send ? "it reads" : hows[how]);
	stream_init(&to_victim, "to the closed end", seed ^ 0x70, 1 << 20);
	stream_init(&from_victim, "from the closed end", seed ^ 0xf0, 1 << 20);
	cli = pair_connect(0, RING, RING);
	srv = pair_accept(lfd, 0);
	struct end *v = victim == ULS_CLIENT ? &cli : &srv, *p = victim == ULS_CLIENT ? &srv : &cli;
	/* Both ways on the rings first (the client switches at its first send). */
	stream_send_to(&cli, victim == ULS_CLIENT ? &from_victim : &to_victim, 1, &rng);
	stream_recv_to(&srv, victim == ULS_CLIENT ? &from_victim : &to_victim, 1, &rng);
	CHECK_EQ(pair_path(&cli), ULS_PATH_SHM);
	CHECK_EQ(pair_path(&srv), ULS_PATH_SHM);

	memset(&k, 0, sizeof(k));
	k.e = *v;
	k.send = send;
	k.st = send ? &from_victim : &to_victim;
	k.len = send ? 2 * RING + 1 + check_rand_below(&rng, RING) : 0;
	struct uls_conn *c = v->c;
	struct sockaddr_storage self = c->local_sa, other = c->peer_sa;
	uint64_t ino = pair_ino(v->fd);
	CHECK_U64(kernel_socket(&self, &other), ==, ino);
	CHECK_EQ(pthread_create(&k.t, NULL, blocked, &k), 0);
	until_asleep(c, send, ph);

	CHECK_EQ(pair_close(v), 0);
	/* The number is closed; the socket lives on for the call on a private descriptor. */
	CHECK(atomic_load(&c->kept));
	CHECK_EQ(holders(ino, &one), 1);
	CHECK_INT(one, >=, ULS_OWN_FD_MIN);
	CHECK_U64(kernel_socket(&self, &other), ==, ino);
	CHECK(!atomic_load(&k.done));

	if (send) {
		/* Everything the call had to send arrives, and it returns the whole count. */
		stream_recv_to(p, k.st, k.st->got + k.len, &rng);
	} else if (how == PEER_SENDS) {
		/* One send that fits the ring: a single publication, read by one receive. */
		struct iovec iov = {.iov_base = k.st->txbuf,
				    .iov_len = 1 + check_rand_below(&rng, RING - 1)};
		check_stream_fill(k.st->txbuf, iov.iov_len, k.st->seed, k.st->sent);
		CHECK_INT(pair_sendv(p, &iov, 1, 0), ==, iov.iov_len);
		k.st->sent += iov.iov_len;
		sent_now = iov.iov_len;
	} else if (how == PEER_SHUTS) {
		CHECK_EQ(pair_shutdown(p, SHUT_WR), 0);
	} else {
		CHECK_EQ(pair_close(p), 0);
	}
	CHECK_EQ(pthread_join(k.t, NULL), 0);
	if (send)
		CHECK_INT(k.ret, ==, k.len);
	else if (how == PEER_SENDS)
		CHECK_INT(k.ret, ==, sent_now);
	else
		CHECK_INT(k.ret, ==, 0);

	/* The close completed with the call: nothing of this process holds the socket, and
	 * the kernel closed it (what is left of it, in FIN_WAIT or TIME_WAIT, has no file). */
	CHECK_EQ(holders(ino, &one), 0);
	CHECK_U64(kernel_socket(&self, &other), !=, ino);
	if (how != PEER_CLOSES || send) {
		/* The peer reads the end of the stream (after the bytes the call sent). */
		struct stream *back = send ? k.st : &from_victim;
		back->total = back->sent;
		stream_recv_eof(p, back, &rng);
		struct end name = *p;
		CHECK_EQ(pair_close(p), 0);
		CHECK(!pair_seg_named(&name));
	} else {
		CHECK(!pair_seg_named(&cli));
	}
	stream_fini(&to_victim);
	stream_fini(&from_victim);
}

int main(void)
{
	uint64_t seed = 0xc105e;

	pair_init("balanced");
	lfd = pair_listen();
	for (int victim = ULS_CLIENT; victim <= ULS_SERVER; victim++) {
		for (int ph = ON_FUTEX; ph <= ON_SOCKET; ph++) {
			for (int how = PEER_SENDS; how <= PEER_CLOSES; how++)
				close_case(seed++, victim, 0, (enum phase)ph, (enum ending)how);
			close_case(seed++, victim, 1, (enum phase)ph, PEER_SENDS);
		}
	}
	close(lfd);
	check_context("%s", "");
	return CHECK_PASS;
}
