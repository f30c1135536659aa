/* SPDX-License-Identifier: MIT */
/*
 * The connection harness of fuzz_conn.h: the set-up, the attach, the server's operations
 * with their checks, and the close; the client's operations are fuzz_peer.c's.
 * Operations (u8 op, u64 v):
 *
 *   op & 7  what                                                      who
 *   0       set one word of the client's (fields[]) to any value      client
 *   1       publish up to 8 KiB on C2S, honestly                      client
 *   2       send up to 2 KiB on TCP, counted as data (v bit 13),      client
 *           as wake-ups (bit 12) or not at all
 *   3       read up to 8 KiB of S2C, honestly, and what TCP holds     client
 *   4       a step of an honest client: its switch, its move          client
 *           back to TCP, its request that the server move, its close
 *   5       recv, MSG_DONTWAIT (MSG_PEEK, MSG_WAITALL)                server: uls_shm_recv
 *   6       send, MSG_DONTWAIT                                        server: uls_shm_send
 *   7       readiness, FIONREAD, drain wake-ups, serve a revert,      server: the transport
 *           follow the client back to TCP, move back itself,
 *           shutdown, arm, or hold the socket shared (a fork)
 *
 * The input's end is the server's close (fz_close).
 *
 * After each server operation the checks of check_step hold: the server wrote nothing of
 * the client's; its TCP accounting matches the kernel's queue; what a receive returned
 * came from one place, the right one (TCP data before the switch point, the ring up to
 * the revert point, plain TCP after the exact discard), and equals the bytes there; a
 * send never overwrote what the client had not read; a revert point the server accepted
 * lies within the ring; a broken connection fails every later call with ECONNRESET.
 * What the client reads on TCP is a counted wake-up before the server's revert point and
 * the server's own bytes, from its ring end on, after it.
 */
#include "fuzz_conn.h"
#include "fuzz_loop.h"

#include <errno.h>
#include <linux/tcp.h> /* tcpi_bytes_received, which glibc's struct tcp_info lacks */
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "core/config.h"
#include "core/conn.h"
#include "core/fdtable.h"
#include "core/handshake.h"
#include "core/log.h"
#include "os/libc.h"
#include "transport/shm/fence.h"
#include "transport/shm/offers.h"
#include "transport/shm/shm_int.h"

#define CLOSE_BOUND_NS 2000000000ull /* a close waits at most 100 ms for the peer */

static int diag_ok; /* the kernel answers sock_diag lookups: a valid segment is taken */
int fz_trace;

/* ---- set-up ---- */

static int tcp_pair(struct fz *f);

/* Does the kernel name the client's socket to the server, as the attach asks it to? */
static int diag_probe(void)
{
	struct sockaddr_storage self, peer;
	socklen_t a = sizeof(self), b = sizeof(peer);
	struct uls_sockid id = {0};
	struct fz f = {.cfd = -1, .sfd = -1};
	int ok = tcp_pair(&f) == 0 && getsockname(f.sfd, (struct sockaddr *)&self, &a) == 0 &&
		 getpeername(f.sfd, (struct sockaddr *)&peer, &b) == 0 &&
		 uls_diag_lookup((struct sockaddr *)&peer, (struct sockaddr *)&self, &id) == 0 &&
		 id.ino == f.ino;

	if (f.cfd >= 0)
		close(f.cfd);
	if (f.sfd >= 0)
		close(f.sfd);
	return ok;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_loop_init();
	fz_trace = getenv("FZ_TRACE") != NULL;
	diag_ok = diag_probe();
	if (!diag_ok)
		fprintf(stderr, "fuzz: no sock_diag answer here: no segment can be attached\n");
	return 0;
}




static int tcp_pair(struct fz *f)
{
	struct linger lg = {1, 0};
	struct stat st;
	int one = 1;

	f->cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->cfd < 0)
		return -1;
	setsockopt(f->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	setsockopt(f->cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* As a client of ulsock does before its connect: the server looks only then. */
	uls_offer_made((struct sockaddr *)&fuzz_listen_addr);
	if (connect(f->cfd, (struct sockaddr *)&fuzz_listen_addr, sizeof(fuzz_listen_addr)) < 0 &&
	    (errno != EINTR || !fuzz_connected(f->cfd)))
		return -1;
	if (fstat(f->cfd, &st) < 0 || (f->sfd = fuzz_accept_client(f->cfd)) < 0)
		return -1;
	f->ino = (uint64_t)st.st_ino;
	f->cookie = uls_sock_cookie(f->cfd);
	return 0;
}

int fz_open(struct fz *f, const uint8_t *image, size_t len, uint64_t file_size, int patch,
	    unsigned pre)
{
	uint8_t img[ULS_SEG_HDR_SIZE * 2] = {0};
	int fd;

	memset(f, 0, sizeof(*f));
	f->cfd = f->sfd = -1;
	f->out_ok = 1;
	if (tcp_pair(f) < 0)
		return -1;
	if (len > sizeof(img))
		len = sizeof(img);
	memcpy(img, image, len);
	memset(img + CLI(lock), 0, offsetof(struct uls_side, solo_busy));
	memset(img + CLI(token_readers), 0, 4);
	uls_seg_path(f->path, sizeof(f->path), f->ino);
	f->file_size = file_size;
	if (fuzz_seg_write(f->path, img, len, file_size, f->ino, f->cookie, patch) < 0)
		return -1;
	/* The client's mapping: the header page, and the rings once their sizes are known. */
	fd = open(f->path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	void *map = mmap(NULL, ULS_SEG_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED || file_size < ULS_SEG_HDR_SIZE) {
		/* A file too short for a header: only the attach has something to do. */
		if (map != MAP_FAILED)
			munmap(map, ULS_SEG_HDR_SIZE);
		map = calloc(1, ULS_SEG_HDR_SIZE);
		FUZZ_ASSERT(map != NULL);
		memcpy(map, img, len < file_size ? len : (size_t)file_size);
		f->h_heap = 1;
	}
	f->h = map;
	fz_client_send(f, pre);
	return 0;
}

/* ---- the attach ---- */

/* Bytes of the header the attach may write: the server's side, the client's offer word. */
static int attach_may_write(size_t off)
{
	return (off >= SRV(lock) && off < SRV(lock) + sizeof(struct uls_side)) ||
	       (off >= offsetof(struct uls_seg_hdr, both.offer) &&
		off < offsetof(struct uls_seg_hdr, both.offer) + 4);
}

/* The server's side as an attach leaves it: afresh, with its pid, cookie and state, and
 * itself its one counted holder. */
static void check_fresh_side(const struct fz *f, uint32_t state)
{
	uint8_t want[sizeof(struct uls_side)] = {0};
	uint32_t pid = (uint32_t)getpid(), refs = 1;
	uint64_t cookie = uls_sock_cookie(f->sfd);

	memcpy(want + offsetof(struct uls_side, state), &state, 4);
	memcpy(want + offsetof(struct uls_side, refs), &refs, 4);
	memcpy(want + offsetof(struct uls_side, pid), &pid, 4);
	memcpy(want + offsetof(struct uls_side, cookie), &cookie, 8);
	FUZZ_ASSERT(memcmp((const uint8_t *)f->h + SRV(lock), want, sizeof(want)) == 0);
}

static void map_rings(struct fz *f)
{
	int fd = open(f->path, O_RDWR | O_CLOEXEC);

	FUZZ_ASSERT(fd >= 0);
	void *map = mmap(NULL, f->file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	FUZZ_ASSERT(map != MAP_FAILED);
	munmap(f->h, ULS_SEG_HDR_SIZE);
	f->h = map;
	f->data[ULS_C2S] = (uint8_t *)map + ULS_SEG_HDR_SIZE;
	f->data[ULS_S2C] = (uint8_t *)map + ULS_SEG_HDR_SIZE + f->size[ULS_C2S];
}

void fz_attach(struct fz *f)
{
	uint8_t before[sizeof(struct uls_seg_hdr)];
	struct uls_seg_ident id;
	struct sockaddr_in peer;
	socklen_t plen = sizeof(peer);
	int mapped = !f->h_heap;

	memcpy(before, f->h, sizeof(before));
	memcpy(&id, f->h, sizeof(id));
	int valid = mapped && fuzz_ident_valid(&id, f->ino, f->cookie, f->file_size);
	uint32_t reverted = RD32(CLI(tx_reverted));
	FUZZ_ASSERT(getpeername(f->sfd, (struct sockaddr *)&peer, &plen) == 0);
	f->c = uls_conn_accept(f->sfd, (struct sockaddr *)&peer, plen);
	FUZZ_ASSERT(f->c != NULL);
	struct uls_shm_conn *s = shm_of(f->c);
	f->shm = f->c->tp == &uls_shm_transport;
	f->out_data = !f->shm; /* the kernel's connection: data from its first byte */
	/*
	 * Taken exactly when the identity holds (a kernel without sock_diag takes none),
	 * unless the file went meanwhile: the sweep of another ulsock process takes one whose
	 * processes all look gone (fuzz_seg_write stamps this one's pid only with the inode).
	 */
	if (!f->shm && valid && access(f->path, F_OK) != 0)
		return;
	TRACE("attach: valid %d, taken %d: %s\n", valid, f->shm, f->c->reason);
	FUZZ_ASSERT(f->shm == (valid && diag_ok));
	if (!f->shm) {
		FUZZ_ASSERT(atomic_load(&f->c->path) == ULS_PATH_KERNEL);
		FUZZ_ASSERT(s->seg.hdr == NULL);
		/* A rejected segment is left as it was. */
		FUZZ_ASSERT(memcmp(f->h, before, sizeof(before)) == 0);
		return;
	}
	fuzz_seg_check_layout(&s->seg, f->file_size, f->ino, f->cookie);
	const uint8_t *now = (const uint8_t *)f->h;
	for (size_t i = 0; i < sizeof(before); i++)
		FUZZ_ASSERT(now[i] == before[i] || attach_may_write(i));
	/* A server of the client's user takes the offer off the board, whatever the word was. */
	FUZZ_ASSERT(RD32(offsetof(struct uls_seg_hdr, both.offer)) == 0);
	/* A client already back on TCP makes the server decline (protocol.md, section 8). */
	check_fresh_side(f, ULS_SIDE_ATTACHED | (reverted ? ULS_SIDE_DECLINED : 0));
	FUZZ_ASSERT(atomic_load(&f->c->path) == (reverted ? ULS_PATH_KERNEL : ULS_PATH_SHM));
	f->size[ULS_C2S] = s->seg.ring[ULS_C2S].size;
	f->size[ULS_S2C] = s->seg.ring[ULS_S2C].size;
	f->tx_base = RD64(S2C(prod.tail));
	f->out_data = reverted;
	f->out_end = f->tx_base;
	map_rings(f);
	fz_peer_snap(f);
}

/* ---- the server's operations ---- */

/*
 * The kernel's TCP states (tcpi_state) in which a FIN was received: CLOSE too, since the
 * client never resets the connection before the server's close, and a socket that sent
 * and received a FIN ends there.
 */
enum { ST_TIME_WAIT = 6, ST_CLOSE = 7, ST_CLOSE_WAIT = 8, ST_LAST_ACK = 9, ST_CLOSING = 11 };

/* The server socket's bytes received, its FIN counted as one, and whether that came. */
static uint64_t received(const struct fz *f, int *fin)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	FUZZ_ASSERT(getsockopt(f->sfd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0);
	FUZZ_ASSERT(len >= offsetof(struct tcp_info, tcpi_bytes_received) + 8);
	*fin = ti.tcpi_state == ST_CLOSE_WAIT || ti.tcpi_state == ST_LAST_ACK ||
	       ti.tcpi_state == ST_CLOSING || ti.tcpi_state == ST_TIME_WAIT ||
	       ti.tcpi_state == ST_CLOSE;
	return ti.tcpi_bytes_received;
}

/*
 * TCP bytes the server took off its socket: those its kernel received less those still
 * queued. The client's count would not do: bytes it sent may still be on their way (in
 * its send queue, or waiting for a softirq), and come in later.
 */
static uint64_t taken(const struct fz *f)
{
	for (;;) {
		int q = 0, fin, fin2;
		uint64_t got = received(f, &fin);
		FUZZ_ASSERT(ioctl(f->sfd, FIONREAD, &q) == 0);
		if (received(f, &fin2) == got && fin == fin2)
			return got - (uint64_t)q - (uint64_t)fin;
	}
}

/*
 * The client's honesty where a lie only costs a bounded wait: a side that says CLOSED
 * ends its TCP direction; the bytes a revert position counts are there to be discarded.
 */
static void settle(struct fz *f)
{
	fz_client_read_tcp(f);
	if (f->c_fin || !f->shm)
		return;
	if (RD32(CLI(state)) & ULS_SIDE_CLOSED) {
		fz_client_fin(f);
		return;
	}
	if (RD32(CLI(tx_reverted)) && !RD32(SRV(rx_back))) {
		uint64_t need = RD64(CLI(revert_tcp_pos)) -
				(RD64(SRV(tokens_seen)) + RD64(SRV(tcp_data)));
		uint64_t queued = f->c_sent - taken(f);
		if (need > queued && need - queued <= MAX_FILL)
			fz_client_send(f, need - queued);
		else if (need > queued && need <= (1ull << 32))
			fz_client_fin(f);
	}
}

struct snap {
	uint64_t taken, tcp_data, seen, sent, ring_end, tcp_pos;
	uint64_t rhead, rtail, ttail, thead;
	uint32_t rx_back, tx_reverted;
	int broken, accel;
};

/* The server's state; its conn's flags only while it has one (not after its close). */
static void snap(const struct fz *f, struct snap *s)
{
	s->taken = f->sfd >= 0 ? taken(f) : 0;
	s->tcp_data = RD64(SRV(tcp_data));
	s->seen = RD64(SRV(tokens_seen));
	s->sent = RD64(SRV(tokens_sent));
	s->ring_end = RD64(SRV(revert_ring_end));
	s->tcp_pos = RD64(SRV(revert_tcp_pos));
	s->rx_back = RD32(SRV(rx_back));
	s->tx_reverted = RD32(SRV(tx_reverted));
	s->rhead = RD64(C2S(cons.head));
	s->rtail = RD64(C2S(prod.tail));
	s->ttail = RD64(S2C(prod.tail));
	s->thead = RD64(S2C(cons.head));
	s->broken = f->c && atomic_load(&f->c->broken);
	s->accel = f->c && uls_conn_accelerated(f->c);
}

static void log_tx(struct fz *f, const uint8_t *p, size_t n)
{
	if (!n)
		return;
	if (f->tx_len + n > f->tx_cap) {
		f->tx_cap = (f->tx_len + n) * 2;
		f->tx_log = realloc(f->tx_log, f->tx_cap);
		FUZZ_ASSERT(f->tx_log != NULL);
	}
	memcpy(f->tx_log + f->tx_len, p, n);
	f->tx_len += n;
}

/* Two iovecs over buf, cut where v says. */
static void split(struct iovec *iov, uint8_t *buf, size_t n, uint64_t v)
{
	size_t a = (size_t)(v % (n + 1));

	iov[0] = (struct iovec){.iov_base = buf, .iov_len = a};
	iov[1] = (struct iovec){.iov_base = buf + a, .iov_len = n - a};
}

/* Where a receive's n bytes came from, and that they are the bytes there. */
static void check_recv_bytes(struct fz *f, const struct snap *a, const struct snap *b,
			     const uint8_t *buf, ssize_t n)
{
	uint64_t d_tcp = b->tcp_data - a->tcp_data, d_head = b->rhead - a->rhead;
	uint64_t size = f->size[ULS_C2S];

	if (d_head == (uint64_t)n && d_tcp == 0) {
		/* The ring, only past the client's switch point, and not past its revert point. */
		FUZZ_ASSERT(RD32(CLI(switched)) && a->tcp_data >= RD64(CLI(switch_pos)));
		const uint8_t *ring = f->data[ULS_C2S];
		for (ssize_t i = 0; i < n; i++)
			FUZZ_ASSERT(buf[i] == ring[(a->rhead + (uint64_t)i) & (size - 1)]);
		/* (A client that wrote past its ring end after it moved back only garbles its
		 * own stream: the server finds its head past the end and resets.) */
		uint64_t end = RD64(CLI(revert_ring_end));
		if (RD32(CLI(tx_reverted)) && uls_ring_dist(a->rhead, end) <= size &&
		    uls_ring_dist(a->rtail, end) <= size)
			FUZZ_ASSERT(uls_ring_dist(b->rhead, end) <= size);
		return;
	}
	if (d_tcp == (uint64_t)n && d_head == 0) {
		/* TCP data before the switch point: never a wake-up read as data. */
		if (RD32(CLI(switched)))
			FUZZ_ASSERT(b->tcp_data <= RD64(CLI(switch_pos)));
		for (ssize_t i = 0; i < n; i++)
			FUZZ_ASSERT(buf[i] == tcp_byte(a->taken + (uint64_t)i));
		return;
	}
	/* Plain TCP once the server follows the client back: the last bytes taken. */
	FUZZ_ASSERT(b->rx_back && d_tcp == 0 && d_head == 0 && b->taken - a->taken >= (uint64_t)n);
	for (ssize_t i = 0; i < n; i++)
		FUZZ_ASSERT(buf[i] == tcp_byte(b->taken - (uint64_t)n + (uint64_t)i));
}

/*
 * A receive as the interposer makes it (the conn while accelerated, else libc). Returns
 * the bytes it took off the socket as plain TCP, for check_taken.
 */
static uint64_t server_recv(struct fz *f, uint64_t v, const struct snap *a, struct snap *b)
{
	size_t want = 1 + (size_t)(v % MAX_XFER);
	int flags = MSG_DONTWAIT | ((v >> 14) & 1 ? MSG_PEEK : 0) |
		    ((v >> 15) & 1 ? MSG_WAITALL : 0);
	uint8_t *buf = malloc(want);
	struct iovec iov[2];
	uint64_t plain = 0;
	ssize_t n;

	FUZZ_ASSERT(buf != NULL);
	split(iov, buf, want, v >> 20);
	if (a->accel) {
		struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
		n = uls_shm_recv(f->c, f->sfd, &m, flags);
	} else {
		n = recv(f->sfd, buf, want, flags);
		n = n < 0 ? -errno : n;
	}
	snap(f, b);
	TRACE("recv %zu flags %#x%s: %zd\n", want, flags, a->accel ? "" : " (libc)", n);
	FUZZ_ASSERT(n <= (ssize_t)want);
	/* The peer broke the protocol: ECONNRESET from now on (core/conn.h), for as long as
	 * the conn has the connection (a revert may give it to the kernel still). */
	if (a->broken && a->accel && !f->rx_off)
		FUZZ_ASSERT(n == -ECONNRESET);
	if (n > 0 && !(flags & MSG_PEEK)) {
		uint64_t counted = (b->tcp_data + b->seen) - (a->tcp_data + a->seen);
		if (!a->accel)
			plain = (uint64_t)n;
		else if (b->rx_back)
			plain = (b->taken - a->taken) - counted;
		if (!f->rx_off && !a->accel) {
			for (ssize_t i = 0; i < n; i++)
				FUZZ_ASSERT(buf[i] == tcp_byte(a->taken + (uint64_t)i));
		} else if (!f->rx_off && !(flags & MSG_WAITALL)) {
			check_recv_bytes(f, a, b, buf, n);
		}
	}
	free(buf);
	return plain;
}

/* A send as the interposer makes it; its bytes join the model of the server's stream. */
static void server_send(struct fz *f, uint64_t v, const struct snap *a, struct snap *b)
{
	size_t want = 1 + (size_t)(v % MAX_XFER);
	uint8_t *buf = malloc(want);
	uint64_t size = f->size[ULS_S2C];
	struct iovec iov[2];
	ssize_t n;

	FUZZ_ASSERT(buf != NULL);
	for (size_t i = 0; i < want; i++)
		buf[i] = (uint8_t)(f->tx_len + i * 3 + (v >> 32));
	split(iov, buf, want, v >> 20);
	/* The client's head as the server last read it: a producer's cache (ring.h). */
	uint64_t seen = shm_of(f->c)->tx_head_seen;
	if (a->accel) {
		n = uls_shm_send(f->c, f->sfd, iov, 2, MSG_DONTWAIT | MSG_NOSIGNAL);
	} else {
		n = send(f->sfd, buf, want, MSG_DONTWAIT | MSG_NOSIGNAL);
		n = n < 0 ? -errno : n;
	}
	snap(f, b);
	TRACE("send %zu%s: %zd\n", want, a->accel ? "" : " (libc)", n);
	FUZZ_ASSERT(n <= (ssize_t)want);
	if (a->broken && a->accel)
		FUZZ_ASSERT(n == -ECONNRESET || (n == -EPIPE && atomic_load(&f->c->shut_wr)));
	if (n <= 0) {
		free(buf);
		return;
	}
	uint64_t on_ring = f->shm ? b->ttail - a->ttail : 0;
	FUZZ_ASSERT(on_ring <= (uint64_t)n);
	for (uint64_t i = 0; i < on_ring; i++)
		FUZZ_ASSERT(f->data[ULS_S2C][(a->ttail + i) & (size - 1)] == buf[i]);
	/*
	 * The producer never writes more than size - (tail - head): nothing unread is lost.
	 * (It may trust the head it read last: only a client that moved its head back, which
	 * garbles nothing but its own stream, makes that more.)
	 */
	if (on_ring && uls_ring_dist(a->thead, a->ttail) <= size &&
	    uls_ring_dist(seen, a->thead) <= size)
		FUZZ_ASSERT(uls_ring_dist(a->thead, b->ttail) <= size);
	/*
	 * The rest went on TCP as data (after a revert, or on the kernel's connection), or
	 * to a peer that stopped reading: dropped, or sent after its close, which the model
	 * of the stream does not follow.
	 */
	size_t logged = (size_t)n;
	if (on_ring < (uint64_t)n && a->accel && !b->tx_reverted) {
		f->out_ok = 0;
		logged = (size_t)on_ring;
	}
	log_tx(f, buf, logged);
	free(buf);
}

static void server_ctl(struct fz *f, uint64_t v)
{
	int out = 0, r;

	TRACE("ctl %d\n", (int)(v & 7));
	switch (v & 7) {
	case 0:
		r = uls_shm_ready(f->c, POLLIN | POLLOUT | POLLRDHUP);
		FUZZ_ASSERT((r & ~(POLLIN | POLLOUT | POLLRDHUP | POLLERR | POLLHUP)) == 0);
		break;
	case 1:
		FUZZ_ASSERT(uls_shm_inq(f->c, f->sfd, &out) == 0);
		FUZZ_ASSERT(out >= 0);
		if (!(uls_shm_kernel_parts(f->c) & ULS_KERNEL_RX))
			FUZZ_ASSERT((uint64_t)out <= f->size[ULS_C2S]);
		break;
	case 2:
		uls_shm_drain(f->c, f->sfd);
		break;
	case 3:
		uls_revert_serve(f->c, f->sfd);
		break;
	case 4:
		if (!uls_conn_trylock(f->c, RXL))
			break;
		r = uls_revert_rx_back(f->c, f->sfd, 0);
		uls_conn_unlock(f->c, RXL);
		TRACE("rx_back: %d\n", r);
		FUZZ_ASSERT(r == 0 || r == 1 || r == -ECONNRESET || r == -EPIPE);
		FUZZ_ASSERT((r == 1) == (RD32(SRV(rx_back)) != 0));
		/* Not broken, the kernel may have reset the connection itself: data came
		 * after this side shut down reading (Linux answers it with a reset). */
		if (r == -ECONNRESET && !f->rx_off)
			FUZZ_ASSERT(atomic_load(&f->c->broken));
		break;
	case 5:
		/* Once, as uls_conn_revert; 2 ms: the client answers in its own calls or never. */
		if (f->reverted++)
			break;
		r = uls_shm_revert(f->c, f->sfd, 2);
		FUZZ_ASSERT(r <= 0);
		if (r == 0)
			f->removed = 1;
		break;
	case 6: {
		static const int how[3] = {SHUT_WR, SHUT_RD, SHUT_RDWR};
		r = uls_shm_shutdown(f->c, f->sfd, how[(v >> 3) % 3]);
		TRACE("shutdown %d: %d\n", how[(v >> 3) % 3], r);
		/* Back on TCP, the kernel's shutdown may find the connection gone. */
		FUZZ_ASSERT(r == 0 || r == -ENOTCONN);
		if (how[(v >> 3) % 3] != SHUT_WR)
			f->rx_off = 1;
		break;
	}
	default:
		/* Another process may hold the socket from now on: a counted fork child, until
		 * the side's count (which the peer can write) says it closed; SCM_RIGHTS, for
		 * good. */
		if ((v >> 3) & 1)
			uls_conn_mark_shared_all((v >> 5) & 1 ? ULS_SHARED_FORK : ULS_SHARED_STICKY);
		else /* as poll and epoll_wait arm: naming a pipe (the thread's bell), or not */
			uls_shm_arm(f->c, POLLIN | POLLOUT, (v >> 4) & 1 ? uls_bell_thread() : -1);
		break;
	}
}

/* The server's TCP accounting: what it took off its socket, counted exactly. */
static void check_taken(struct fz *f, const struct snap *a, const struct snap *b, uint64_t plain)
{
	uint64_t counted = (b->tcp_data + b->seen) - (a->tcp_data + a->seen);

	TRACE("taken %llu -> %llu, data %llu -> %llu, wake-ups %llu -> %llu, plain %llu\n",
	      (unsigned long long)a->taken, (unsigned long long)b->taken,
	      (unsigned long long)a->tcp_data, (unsigned long long)b->tcp_data,
	      (unsigned long long)a->seen, (unsigned long long)b->seen, (unsigned long long)plain);
	if (!b->rx_back) {
		FUZZ_ASSERT(b->taken - a->taken == counted);
		return;
	}
	if (!a->rx_back && RD32(CLI(switched)))
		/* The discard ends exactly at the client's revert position. */
		FUZZ_ASSERT(b->tcp_data + b->seen == RD64(CLI(revert_tcp_pos)));
	FUZZ_ASSERT(b->taken - a->taken == counted + plain);
}

/*
 * What holds after any server operation: the client's words untouched, the server's
 * counters never going back, a revert point accepted only within the ring, the server
 * back on TCP only at the client's revert point, and its accounting exact.
 */
static void check_step(struct fz *f, const struct snap *a, const struct snap *b)
{
	fz_check_peer_untouched(f);
	FUZZ_ASSERT(b->sent >= a->sent);
	FUZZ_ASSERT(b->rx_back >= a->rx_back && b->tx_reverted >= a->tx_reverted);
	FUZZ_ASSERT(!a->broken || b->broken);
	FUZZ_ASSERT(b->tcp_data >= a->tcp_data && b->seen >= a->seen);
	FUZZ_ASSERT(uls_ring_dist(a->rhead, b->rhead) <= f->size[ULS_C2S]);
	FUZZ_ASSERT(uls_ring_dist(a->ttail, b->ttail) <= f->size[ULS_S2C]);
	if (!a->tx_reverted && b->tx_reverted) {
		/* Its ring end: the client's head (served) or its own tail (its own revert). */
		FUZZ_ASSERT(b->ring_end == a->thead || b->ring_end == a->ttail);
		FUZZ_ASSERT(uls_ring_dist(b->ring_end, b->ttail) <= f->size[ULS_S2C]);
		/* Every wake-up it sent is counted before its TCP bytes turn into data. */
		FUZZ_ASSERT(b->tcp_pos == b->sent);
		if (!f->out_data) {
			f->out_data = 1;
			f->out_at = b->tcp_pos;
			f->out_end = b->ring_end;
		}
	}
	if (!a->rx_back && b->rx_back) {
		FUZZ_ASSERT(RD32(CLI(tx_reverted)));
		FUZZ_ASSERT(b->rhead == RD64(CLI(revert_ring_end)));
	}
}

static void server_op(struct fz *f, uint8_t op, uint64_t v)
{
	struct snap a, b;
	uint64_t plain = 0;

	settle(f);
	snap(f, &a);
	if ((op & 7) == 5)
		plain = server_recv(f, v, &a, &b);
	else if ((op & 7) == 6)
		server_send(f, v, &a, &b);
	else if (a.accel)
		server_ctl(f, v);
	if (!f->shm)
		return; /* the kernel's connection: nothing in the file is read any more */
	snap(f, &b);
	check_step(f, &a, &b);
	if (a.accel && !f->rx_off)
		check_taken(f, &a, &b, plain);
	fz_client_read_tcp(f);
}

void fz_run(struct fz *f, const uint8_t *ops, size_t len)
{
	for (size_t i = 0; i + FZ_OP_SIZE <= len; i += FZ_OP_SIZE) {
		uint8_t op = ops[i];
		uint64_t v = fuzz_le(ops + i + 1, 8);
		TRACE("op %d v %#llx\n", op & 7, (unsigned long long)v);
		if ((op & 7) >= 5) {
			server_op(f, op, v);
			continue;
		}
		if (!f->shm)
			continue; /* nothing in the file is read any more */
		fz_client_op(f, op, v);
		fz_peer_snap(f);
	}
}

/* ---- the close ---- */

void fz_close(struct fz *f)
{
	int accepted = f->c != NULL;

	if (!accepted)
		goto out;
	if (f->shm) {
		settle(f);
		/* The wake-ups the client counted are on their way, or its stream ends. */
		uint64_t owed = RD64(CLI(tokens_sent)) - RD64(SRV(tokens_seen));
		uint64_t queued = f->c_sent - taken(f);
		if (!f->c_fin && (int64_t)(owed - queued) > 0 && owed - queued <= MAX_FILL)
			fz_client_send(f, owed - queued);
		else if (!f->c_fin && (int64_t)(owed - queued) > 0)
			fz_client_fin(f);
	}
	uint32_t peer_state = f->shm ? RD32(CLI(state)) : 0;
	uint64_t unread = f->shm ? RD64(C2S(prod.tail)) - RD64(C2S(cons.head)) : 0;
	/* Unread TCP bytes make the kernel reset the connection: the client's socket goes. */
	int fin = f->c_fin || (f->shm && taken(f) != f->c_sent);
	/* A reset said before the close: a send to a client shut both ways (its ring closed,
	 * which a hostile one may have undone since, and its FIN sent), the reset Linux makes
	 * of data after SHUT_RDWR (send_to_gone_peer). */
	uint32_t early_reset = f->shm ? RD32(SRV(state)) & ULS_SIDE_RESET : 0;
	if (early_reset)
		FUZZ_ASSERT(f->c_fin);
	struct snap a, b;
	snap(f, &a);
	TRACE("close: shared %d\n", uls_conn_maybe_shared(f->c));
	uint64_t t0 = fuzz_now_ns();
	uls_conn_close(f->c, f->sfd, 1);
	f->sfd = -1;
	f->c = NULL;
	FUZZ_ASSERT(fuzz_now_ns() - t0 < CLOSE_BOUND_NS);
	if (!f->shm)
		goto out;
	/* The close may serve the client's revert request (its drain does): checked alike. */
	snap(f, &b);
	b.broken = a.broken;
	check_step(f, &a, &b);
	/* Section 6: the peer is told by the last close (here also a shared socket's, which
	 * the kernel knows to be closed), a reset where bytes were left unread. */
	uint32_t state = RD32(SRV(state));
	FUZZ_ASSERT(state & ULS_SIDE_CLOSED);
	FUZZ_ASSERT(RD32(S2C(prod.eof)) == 1 && RD32(C2S(cons.closed)) == 1);
	if (!early_reset)
		FUZZ_ASSERT(!(state & ULS_SIDE_RESET) == !unread);
	/* The name goes when the client is done with it, not while its socket lives. */
	int named = access(f->path, F_OK) == 0;
	if (peer_state & ULS_SIDE_CLOSED)
		FUZZ_ASSERT(!named);
	else if (!fin && !f->removed)
		FUZZ_ASSERT(named);
out:
	if (f->cfd >= 0 && accepted)
		fz_client_read_tcp(f);
	if (f->cfd >= 0)
		close(f->cfd);
	if (f->sfd >= 0)
		close(f->sfd);
	unlink(f->path);
	if (f->h && f->h_heap)
		free(f->h);
	else if (f->h)
		munmap(f->h, f->shm ? f->file_size : ULS_SEG_HDR_SIZE);
	free(f->tx_log);
	memset(f, 0, sizeof(*f));
}
