/* SPDX-License-Identifier: MIT */
/*
 * The harness of fuzz_client (fuzz_server_peer.h): the core's client end of a real loopback
 * connection, made as tests/unit/conn_pair.h's pair_connect makes it, against a server
 * this harness plays through its own mapping of the client's segment file. Operations
 * (u8 op, u64 v):
 *
 *   op & 7  what                                                      who
 *   0       set one word of the server's (fields[]) to any value      server
 *   1       publish up to 8 KiB on S2C, honestly (a wake-up if asked) server
 *   2       send up to 2 KiB on TCP as data (v bit 12: as wake-ups,    server
 *           counted)
 *   3       consume up to 8 KiB of C2S and read TCP, honestly          server
 *   4       a step of an honest server: attach, its revert, serve     server
 *           the client's revert, follow it back, shutdown, close
 *   5       recv, MSG_DONTWAIT (MSG_PEEK, MSG_WAITALL)                client: the core
 *   6       send, MSG_DONTWAIT                                        client: the core
 *   7       readiness, FIONREAD, drain, arm, shutdown, revert          client: the core
 *
 * The input's end is the client's close, which must end within its bound.
 *
 * The model: the server's stream is one sequence of bytes (srv_byte), which it puts on
 * TCP before an attach (a server without ulsock), on S2C after it, and on TCP from its
 * revert point on. While the server was honest, every byte the client's receive returns
 * is the next byte of that stream: never a wake-up byte taken as data, never a ring byte
 * twice; the stream ends (a receive returns 0) only after its last byte, and is never
 * reset. So it is while the server never said ATTACHED and sent only data, whatever else
 * it wrote: its TCP bytes are the stream from the first on (protocol.md, section 3), or
 * the client reports ECONNRESET. While the server is honest, the client's own stream is
 * checked as the server reads it: its TCP data up to its switch, its ring bytes from
 * there, its TCP bytes from its revert position on.
 *
 * Whatever the server wrote, the client writes nothing of the server's side (its want
 * words' bits at most cleared, its token lock left as found), every call returns
 * (MSG_DONTWAIT) with a result in range, a broken connection fails every later receive
 * with ECONNRESET, and the close is bounded.
 */
#include "fuzz_server_peer.h"
#include "fuzz_loop.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>

#include "core/config.h"
#include "core/conn.h"
#include "core/fdtable.h"
#include "core/handshake.h"
#include "core/log.h"
#include "os/libc.h"
#include "transport/shm/fence.h"
#include "transport/shm/shm_int.h"

#define CLOSE_BOUND_NS 2000000000ull /* the close waits at most 100 ms for the peer */
#define CALL_BOUND_NS 2000000000ull  /* a non-blocking call, a revert of 2 ms */
#define MAX_XFER 8192
#define MAX_TCP 2048

#define SRV(field) offsetof(struct uls_seg_hdr, side[ULS_SIDE_SERVER].field)
#define CLI(field) offsetof(struct uls_seg_hdr, side[ULS_SIDE_CLIENT].field)
#define C2S(field) offsetof(struct uls_seg_hdr, ring[ULS_C2S].field)
#define S2C(field) offsetof(struct uls_seg_hdr, ring[ULS_S2C].field)

int fzc_trace;
#define TRACE(...) (fzc_trace ? (void)fprintf(stderr, __VA_ARGS__) : (void)0)

/* The server's stream byte k, and the client's. */
static uint8_t srv_byte(uint64_t k)
{
	return (uint8_t)(0x41 + (k * 11 + (k >> 9)) % 61);
}

static uint8_t cli_byte(uint64_t k)
{
	return (uint8_t)(0x80 | ((k * 5 + (k >> 8)) & 0x7f));
}

static uint64_t rd(const struct fzc *f, size_t off, int width)
{
	uint64_t v = 0;

	memcpy(&v, (const uint8_t *)f->h + off, (size_t)width);
	return v;
}

static void wr(struct fzc *f, size_t off, int width, uint64_t v)
{
	memcpy((uint8_t *)f->h + off, &v, (size_t)width);
}

#define RD64(off) rd(f, off, 8)
#define RD32(off) ((uint32_t)rd(f, off, 4))

static _Atomic uint32_t *word32(struct fzc *f, size_t off)
{
	return (_Atomic uint32_t *)(void *)((uint8_t *)f->h + off);
}

static _Atomic uint64_t *word64(struct fzc *f, size_t off)
{
	return (_Atomic uint64_t *)(void *)((uint8_t *)f->h + off);
}


/* ---- set-up ---- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_loop_init();
	fzc_trace = getenv("FZ_TRACE") != NULL;
	return 0;
}



int fzc_open(struct fzc *f, uint64_t c2s, uint64_t s2c)
{
	struct uls_conn_hints hints = {.sndbuf = (uint32_t)c2s, .rcvbuf = (uint32_t)s2c};
	struct linger lg = {1, 0};
	struct stat st;
	int err;

	memset(f, 0, sizeof(*f));
	f->cfd = f->sfd = -1;
	f->honest = 1;
	f->data_only = 1;
	f->cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->cfd < 0)
		return -1;
	/* The descriptor's table entry, as socket() leaves it in the interposer. */
	struct uls_fd *t = uls_fd_get(f->cfd);
	FUZZ_ASSERT(t != NULL);
	uls_fd_clear(f->cfd);
	atomic_store(&t->kind, ULS_FD_TCP);
	f->c = uls_conn_connect_prepare(f->cfd, (struct sockaddr *)&fuzz_listen_addr,
					sizeof(fuzz_listen_addr), &hints);
	FUZZ_ASSERT(f->c != NULL);
	/* A harness whose connections the client keeps on kernel TCP plays nothing. */
	FUZZ_ASSERT(!f->c->short_kept);
	err = connect(f->cfd, (struct sockaddr *)&fuzz_listen_addr, sizeof(fuzz_listen_addr)) < 0 ? errno : 0;
	if (err == EINTR && fuzz_connected(f->cfd))
		err = 0;
	f->c = uls_conn_connect_done(f->c, f->cfd, err);
	if (!f->c)
		return -1;
	atomic_store(&f->c->nonblock, 0);
	t->conn = f->c;
	atomic_store(&t->kind, ULS_FD_CONN);
	f->sfd = fuzz_accept_client(f->cfd);
	if (f->sfd < 0)
		return -1;
	/* The server's end resets at the end, so that no TIME_WAIT piles up. */
	setsockopt(f->sfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	if (f->c->tp != &uls_shm_transport)
		return -1; /* no segment here (/dev/shm): nothing to play */
	struct uls_shm_conn *s = shm_of(f->c);
	FUZZ_ASSERT(fstat(f->cfd, &st) == 0);
	uls_seg_path(f->path, sizeof(f->path), (uint64_t)st.st_ino);
	f->size[ULS_C2S] = s->seg.ring[ULS_C2S].size;
	f->size[ULS_S2C] = s->seg.ring[ULS_S2C].size;
	f->map_size = s->seg.map_size;
	int fd = open(f->path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	void *map = mmap(NULL, f->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	FUZZ_ASSERT(map != MAP_FAILED);
	f->h = map;
	f->data[ULS_C2S] = (uint8_t *)map + ULS_SEG_HDR_SIZE;
	f->data[ULS_S2C] = (uint8_t *)map + ULS_SEG_HDR_SIZE + f->size[ULS_C2S];
	f->c2s_base = RD64(C2S(cons.head));
	fzc_snap(f);
	return 0;
}

/* ---- what only the server may write ---- */

/*
 * The server's side and ring positions; may_clear: the client may clear bits of the word
 * (a mover exchanges the sleeper's want word, a sleeper the peer's light_fence). The
 * server's token lock is taken by the client's close and left as found.
 */
static const struct fuzz_range srv_ranges[] = {
	{SRV(lock), SRV(light_fence) - SRV(lock), 0},
	{SRV(light_fence), 4, 1},
	{SRV(light_fence) + 4, SRV(lock) + sizeof(struct uls_side) - SRV(light_fence) - 4, 0},
	{S2C(prod.tail), 8, 0},
	{S2C(prod.eof), 4, 0},
	{S2C(prod.want_space), 4, 1},
	{S2C(prod.space_pipe), sizeof(struct uls_wake_pipe), 0},
	{C2S(cons.head), 8, 0},
	{C2S(cons.want_data), 4, 1},
	{C2S(cons.closed), 4, 0},
	{C2S(cons.data_pipe), sizeof(struct uls_wake_pipe), 0},
	/* The client's offer, once counted: the client takes it back (0) at most. */
	{offsetof(struct uls_seg_hdr, both.offer), 4, 1},
	{offsetof(struct uls_seg_hdr, both.pad), sizeof(((struct uls_seg_hdr *)0)->both.pad), 0},
};

void fzc_snap(struct fzc *f)
{
	memcpy(f->srv, f->h, sizeof(f->srv));
}

static void check_server_untouched(const struct fzc *f)
{
	fuzz_check_untouched(f->h, f->srv, srv_ranges, sizeof(srv_ranges) / sizeof(srv_ranges[0]),
			     "client");
}

/* ---- the server's operations ---- */

/* The words of operation 0, in the order of gen_corpus.py's SRV_FIELDS. */
static const struct field {
	size_t off;
	int width;
} fields[] = {
	{SRV(state), 4},           {SRV(reason), 4},          {SRV(cookie), 8},
	{SRV(tcp_data), 8},        {SRV(tokens_sent), 8},     {SRV(light_fence), 4},
	{SRV(tokens_closed), 4},   {SRV(tokens_refused), 4},  {SRV(tokens_seen), 8},
	{SRV(revert_req), 4},      {SRV(tx_reverted), 4},     {SRV(revert_ring_end), 8},
	{SRV(revert_tcp_pos), 8},  {SRV(rx_back), 4},         {SRV(multi), 4},
	{S2C(prod.tail), 8},       {S2C(prod.eof), 4},        {S2C(prod.want_space), 4},
	{C2S(cons.head), 8},       {C2S(cons.want_data), 4},  {C2S(cons.closed), 4},
	{SRV(switched), 4},
	{C2S(cons.data_pipe.who), 8}, {C2S(cons.data_pipe.ino), 8},
	{S2C(prod.space_pipe.who), 8}, {S2C(prod.space_pipe.ino), 8},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
_Static_assert(NFIELDS == 26, "gen_corpus.py: SRV_FIELDS");

static void srv_set(struct fzc *f, uint64_t v)
{
	const struct field *fl = &fields[(v & 31) % NFIELDS];
	uint64_t x = v >> 8, cur = rd(f, fl->off, fl->width), val;

	switch ((v >> 5) & 3) {
	case 0:
		val = x;
		break;
	case 1:
		val = cur + (uint64_t)(int64_t)(int8_t)x;
		break;
	case 2:
		val = cur | (x & 0xff);
		break;
	default:
		val = ~x;
		break;
	}
	TRACE("server sets word %zu to %#llx\n", fl->off, (unsigned long long)val);
	if (val != cur)
		f->honest = 0;
	wr(f, fl->off, fl->width, val);
}

/* The server's TCP bytes; fewer where the queues are full. Returns how many went. */
static uint64_t srv_tcp(struct fzc *f, const uint8_t *p, size_t n)
{
	if (f->s_fin || !n)
		return 0;
	ssize_t r = send(f->sfd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (r <= 0)
		return 0;
	f->s_tcp += (uint64_t)r;
	return (uint64_t)r;
}

/* A counted wake-up, as an honest server sends one: never once the client refuses. */
static void srv_token(struct fzc *f)
{
	uint8_t b = 0;

	if (f->declined || RD32(CLI(tokens_refused)) || RD32(SRV(tokens_closed)) ||
	    RD32(SRV(tx_reverted)))
		return;
	if (srv_tcp(f, &b, 1))
		atomic_fetch_add(word64(f, SRV(tokens_sent)), 1);
}

/* Stream bytes from s_pos on TCP as data; the model follows what went. */
static void srv_tcp_data(struct fzc *f, uint64_t n)
{
	uint8_t buf[MAX_TCP];

	if (n > sizeof(buf))
		n = sizeof(buf);
	for (uint64_t i = 0; i < n; i++)
		buf[i] = srv_byte(f->s_pos + i);
	f->s_pos += srv_tcp(f, buf, (size_t)n);
}

static void srv_publish(struct fzc *f, uint64_t v)
{
	uint64_t tail = RD64(S2C(prod.tail)), head = atomic_load(word64(f, S2C(cons.head)));
	uint64_t size = f->size[ULS_S2C], n = v % (MAX_XFER + 1);

	if (!f->attached || f->declined || RD32(SRV(tx_reverted)) || RD32(S2C(prod.eof)) ||
	    tail - head > size)
		return;
	if (n > size - (tail - head))
		n = size - (tail - head);
	for (uint64_t i = 0; i < n; i++)
		f->data[ULS_S2C][(tail + i) & (size - 1)] = srv_byte(f->s_pos + i);
	atomic_store_explicit(word64(f, S2C(prod.tail)), tail + n, memory_order_release);
	f->s_pos += n;
	TRACE("server publishes %llu at %llu\n", (unsigned long long)n, (unsigned long long)tail);
	if (atomic_exchange(word32(f, S2C(cons.want_data)), 0) || ((v >> 16) & 1))
		srv_token(f);
}

static void srv_send_tcp(struct fzc *f, uint64_t v)
{
	uint64_t n = v % (MAX_TCP + 1);

	if ((v >> 12) & 1) {
		/* Wake-ups, counted: honest only while the server may send them. */
		uint8_t zero[MAX_TCP] = {0};
		f->data_only = 0;
		if (!f->attached || f->declined || RD32(CLI(tokens_refused)) || RD32(SRV(tokens_closed)) ||
		    RD32(SRV(tx_reverted)))
			f->honest = 0;
		uint64_t k = srv_tcp(f, zero, (size_t)n);
		atomic_fetch_add(word64(f, SRV(tokens_sent)), k);
		TRACE("server sends %llu wake-ups\n", (unsigned long long)k);
		return;
	}
	/*
	 * Data: a server that never attaches (then attaching is a lie), one that declined,
	 * or one back on TCP.
	 */
	if (f->attached && !f->declined && !RD32(SRV(tx_reverted)))
		f->honest = 0;
	if (!f->attached && n)
		f->plain = 1;
	TRACE("server sends %llu data bytes at %llu\n", (unsigned long long)n,
	      (unsigned long long)f->s_pos);
	srv_tcp_data(f, n);
}

/*
 * The client's TCP byte at offset k, as the server reads it: its data up to its switch,
 * wake-ups (any value) after it, and from its revert position on its stream again from
 * its ring end. Checked while the server was honest.
 */
static void check_client_tcp(struct fzc *f, uint64_t k, uint8_t b)
{
	int switched = RD32(CLI(switched)) != 0;
	uint64_t data_end = switched ? RD64(CLI(switch_pos)) : RD64(CLI(tcp_data));

	if (!f->honest || f->s_closed)
		return;
	if (RD32(CLI(tx_reverted)) && k >= RD64(CLI(revert_tcp_pos))) {
		uint64_t at = switched ? RD64(CLI(switch_pos)) + RD64(CLI(revert_ring_end)) -
						 f->c2s_base
				       : RD64(CLI(revert_tcp_pos));
		if (b != cli_byte(at + k - RD64(CLI(revert_tcp_pos))))
			TRACE("client TCP byte %llu: %#x, its stream's byte %llu is %#x (switch %llu, "
			      "revert ring %llu TCP %llu, data end %llu)\n", (unsigned long long)k, b,
			      (unsigned long long)(at + k - RD64(CLI(revert_tcp_pos))),
			      cli_byte(at + k - RD64(CLI(revert_tcp_pos))),
			      (unsigned long long)RD64(CLI(switch_pos)),
			      (unsigned long long)RD64(CLI(revert_ring_end)),
			      (unsigned long long)RD64(CLI(revert_tcp_pos)), (unsigned long long)data_end);
		FUZZ_ASSERT(b == cli_byte(at + k - RD64(CLI(revert_tcp_pos))));
	} else if (k < data_end) {
		FUZZ_ASSERT(b == cli_byte(k));
	}
}

/*
 * The server's reading: C2S bytes, then TCP (the client's data, wake-ups, a FIN). A server
 * that closed reads no more: its ring stays as it left it, and what TCP brings is dropped
 * unchecked, as the kernel drops it (the client, seeing CLOSED, sends on TCP at once).
 */
static void srv_consume(struct fzc *f, uint64_t v)
{
	uint64_t tail = atomic_load(word64(f, C2S(prod.tail))), head = RD64(C2S(cons.head));
	uint64_t size = f->size[ULS_C2S], n = v % (MAX_XFER + 1);
	uint8_t buf[4096];
	ssize_t r;

	if (f->attached && !f->s_closed && !RD32(SRV(rx_back)) && tail - head <= size) {
		if (n > tail - head)
			n = tail - head;
		/* The client's ring bytes: its stream from its switch position on. */
		for (uint64_t i = 0; f->honest && i < n; i++)
			FUZZ_ASSERT(f->data[ULS_C2S][(head + i) & (size - 1)] ==
				    cli_byte(RD64(CLI(switch_pos)) + head + i - f->c2s_base));
		atomic_store_explicit(word64(f, C2S(cons.head)), head + n, memory_order_release);
		if (n && atomic_exchange(word32(f, C2S(prod.want_space)), 0))
			srv_token(f);
	}
	while ((r = recv(f->sfd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		for (ssize_t i = 0; i < r; i++)
			check_client_tcp(f, f->s_took + (uint64_t)i, buf[i]);
		f->s_took += (uint64_t)r;
	}
	if (r == 0)
		f->c_fin = 1;
}

static void srv_attach(struct fzc *f)
{
	if (f->attached)
		return;
	/*
	 * A server that sent data or its FIN on TCP runs without ulsock (a ulsock server
	 * attaches in accept, before the program holds the socket): its attach now is a lie,
	 * and the client, which took the TCP bytes or end as a plain peer's, reads TCP only.
	 */
	if (f->plain || f->s_fin)
		f->honest = 0;
	f->attached = 1;
	atomic_store(word32(f, SRV(pid)), (uint32_t)getpid());
	atomic_store(word64(f, SRV(cookie)), uls_sock_cookie(f->sfd));
	atomic_fetch_or(word32(f, SRV(state)), ULS_SIDE_ATTACHED);
	/* The client back on TCP already: the server declines (protocol.md, section 8). */
	if (RD32(CLI(tx_reverted))) {
		atomic_fetch_or(word32(f, SRV(state)), ULS_SIDE_DECLINED);
		f->declined = 1;
	}
	TRACE("server attaches%s\n", f->declined ? ", declines" : "");
}

/*
 * The server's sending direction back to TCP at ring position end (its tail, or the
 * client's head when it serves the client's request): the ring bytes from end on go again
 * on TCP, as data, after its wake-ups.
 */
static void srv_tx_back(struct fzc *f, uint64_t end)
{
	uint64_t tail = RD64(S2C(prod.tail));

	if (!f->attached || RD32(SRV(tx_reverted)) || uls_ring_dist(end, tail) > f->size[ULS_S2C])
		return;
	atomic_store(word32(f, SRV(tokens_closed)), 1);
	/* The client's calls that read wake-ups end before it returns: none reads now. */
	if (RD32(CLI(token_readers)))
		f->honest = 0;
	wr(f, SRV(revert_ring_end), 8, end);
	wr(f, SRV(revert_tcp_pos), 8, RD64(SRV(tokens_sent)));
	atomic_store(word32(f, SRV(tx_reverted)), 1);
	f->s_pos -= tail - end;
	TRACE("server back on TCP at ring %llu, TCP %llu, stream %llu\n",
	      (unsigned long long)end, (unsigned long long)RD64(SRV(tokens_sent)),
	      (unsigned long long)f->s_pos);
	srv_tcp_data(f, tail - end);
}

static void srv_step(struct fzc *f, uint64_t v)
{
	switch (v % 6) {
	case 0:
		srv_attach(f);
		break;
	case 1: /* it leaves: asks the client to move too, then moves its own direction */
		if (!f->attached || f->declined)
			break;
		atomic_store(word32(f, SRV(revert_req)), 1);
		srv_token(f);
		srv_tx_back(f, RD64(S2C(prod.tail)));
		break;
	case 2: /* it serves the client's request: from the client's frozen head */
		if (f->attached && !f->declined && RD32(CLI(revert_req)))
			srv_tx_back(f, atomic_load(word64(f, S2C(cons.head))));
		break;
	case 3: /* it follows the client back: ring read up to its end, TCP up to its point */
		if (!f->attached || f->declined || f->s_closed || !RD32(CLI(tx_reverted)) ||
		    RD32(SRV(rx_back)))
			break;
		if (RD64(C2S(cons.head)) != RD64(CLI(revert_ring_end)))
			break;
		srv_consume(f, 0);
		if (f->s_took < RD64(CLI(revert_tcp_pos)))
			break;
		atomic_store(word32(f, SRV(rx_back)), 1);
		break;
	case 4: /* shutdown(SHUT_WR) */
		if (f->attached && !f->declined && !RD32(SRV(tx_reverted))) {
			atomic_store(word32(f, S2C(prod.eof)), 1);
			srv_token(f);
		} else if (!f->s_fin) {
			shutdown(f->sfd, SHUT_WR);
			f->s_fin = 1;
		}
		break;
	default: /* its close: the ring ends, its side says CLOSED (RESET where C2S bytes
		  * were left unread), then its FIN */
		if (f->attached && !f->declined) {
			uint32_t st = ULS_SIDE_CLOSED;
			if (RD64(C2S(prod.tail)) != RD64(C2S(cons.head))) {
				st |= ULS_SIDE_RESET;
				f->s_reset = 1;
			}
			atomic_store(word32(f, S2C(prod.eof)), 1);
			atomic_store(word32(f, C2S(cons.closed)), 1);
			atomic_fetch_or(word32(f, SRV(state)), st);
		}
		if (!f->s_fin)
			shutdown(f->sfd, SHUT_WR);
		f->s_fin = 1;
		f->s_closed = 1;
		break;
	}
}

static void server_op(struct fzc *f, uint8_t op, uint64_t v)
{
	switch (op & 7) {
	case 0:
		srv_set(f, v);
		break;
	case 1:
		srv_publish(f, v);
		break;
	case 2:
		srv_send_tcp(f, v);
		break;
	case 3:
		srv_consume(f, v);
		break;
	default:
		srv_step(f, v);
		break;
	}
	if (RD32(SRV(state)) & ULS_SIDE_ATTACHED)
		f->data_only = 0;
	fzc_snap(f);
}

/* ---- the client's operations: the code under test ---- */

static int accel(const struct fzc *f)
{
	return atomic_load(&f->c->path) != ULS_PATH_KERNEL;
}

static void client_recv(struct fzc *f, uint64_t v)
{
	size_t want = 1 + (size_t)(v % MAX_XFER);
	int flags = MSG_DONTWAIT | ((v >> 14) & 1 ? MSG_PEEK : 0) |
		    ((v >> 15) & 1 ? MSG_WAITALL : 0);
	uint8_t *buf = malloc(want);
	int broken = atomic_load(&f->c->broken), acc = accel(f);
	size_t a = (size_t)((v >> 20) % (want + 1));
	struct iovec iov[2] = {{buf, a}, {buf + a, want - a}};
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
	ssize_t n;

	FUZZ_ASSERT(buf != NULL);
	if (acc) {
		n = uls_conn_recv(f->c, f->cfd, &m, flags);
	} else {
		n = recvmsg(f->cfd, &m, flags);
		n = n < 0 ? -errno : n;
	}
	TRACE("recv %zu flags %#x%s: %zd (broken %d)\n", want, flags, acc ? "" : " (libc)", n,
	      (int)atomic_load(&f->c->broken));
	FUZZ_ASSERT(n <= (ssize_t)want);
	FUZZ_ASSERT(n >= 0 || n == -EAGAIN || n == -ECONNRESET || n == -EPIPE ||
		    n == -ENOTCONN || n == -ETIMEDOUT);
	/* A protocol break: ECONNRESET from now on, for as long as the conn has it. */
	if (broken && acc && !f->shut_rd)
		FUZZ_ASSERT(n == -ECONNRESET);
	/* The stream ends after its last byte; an honest server's is never reset. */
	if ((f->honest || f->data_only) && n == 0 && !f->shut_rd && !f->s_reset)
		FUZZ_ASSERT(f->c_got == f->s_pos);
	/* Unless the client shut down reading and the server's data came after: the
	 * kernel's own reset (calls_shutdown shut_rdwr_then_data). */
	if (f->honest && !f->s_reset && !f->shut_rd)
		FUZZ_ASSERT(n != -ECONNRESET);
	if (n > 0 && (f->honest || f->data_only)) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != srv_byte(f->c_got + (uint64_t)i))
				fprintf(stderr, "byte %llu of the server's stream: %#x, not %#x\n",
					(unsigned long long)(f->c_got + (uint64_t)i), buf[i],
					srv_byte(f->c_got + (uint64_t)i));
			FUZZ_ASSERT(buf[i] == srv_byte(f->c_got + (uint64_t)i));
		}
	}
	if (n > 0 && !(flags & MSG_PEEK))
		f->c_got += (uint64_t)n;
	free(buf);
}

static void client_send(struct fzc *f, uint64_t v)
{
	size_t want = 1 + (size_t)(v % MAX_XFER);
	uint8_t *buf = malloc(want);
	size_t a = (size_t)((v >> 20) % (want + 1));
	struct iovec iov[2] = {{buf, a}, {buf + a, want - a}};
	ssize_t n;

	FUZZ_ASSERT(buf != NULL);
	for (size_t i = 0; i < want; i++)
		buf[i] = cli_byte(f->c_sent + i);
	if (accel(f)) {
		n = uls_conn_send(f->c, f->cfd, iov, 2, MSG_DONTWAIT | MSG_NOSIGNAL);
	} else {
		n = send(f->cfd, buf, want, MSG_DONTWAIT | MSG_NOSIGNAL);
		n = n < 0 ? -errno : n;
	}
	TRACE("send %zu: %zd\n", want, n);
	FUZZ_ASSERT(n <= (ssize_t)want);
	if (n > 0)
		f->c_sent += (uint64_t)n;
	free(buf);
}

static void client_ctl(struct fzc *f, uint64_t v)
{
	int out = 0, r;

	TRACE("ctl %d\n", (int)(v & 7));
	if (!accel(f))
		return;
	switch (v & 7) {
	case 0:
		r = uls_conn_ready(f->c, POLLIN | POLLOUT | POLLRDHUP);
		FUZZ_ASSERT((r & ~(POLLIN | POLLOUT | POLLRDHUP | POLLERR | POLLHUP)) == 0);
		break;
	case 1:
		r = uls_conn_inq(f->c, f->cfd, &out);
		FUZZ_ASSERT(r == 0 || r < 0);
		if (r == 0)
			FUZZ_ASSERT(out >= 0);
		break;
	case 2:
		uls_conn_drain(f->c, f->cfd);
		break;
	case 3:
		/* As poll and epoll_wait arm: naming a pipe (the thread's bell), or not. */
		uls_conn_arm(f->c, POLLIN | POLLOUT, (v >> 3) & 1 ? uls_bell_thread() : -1);
		break;
	case 4: {
		static const int how[3] = {SHUT_WR, SHUT_RD, SHUT_RDWR};
		int h = how[(v >> 3) % 3];
		r = uls_conn_shutdown(f->c, f->cfd, h);
		TRACE("shutdown %d: %d\n", h, r);
		if (h != SHUT_WR)
			f->shut_rd = 1;
		break;
	}
	case 5:
		/*
		 * Once, as the interposer does before exec; the server answers in its ops. A
		 * revert position past the TCP bytes the server sent only costs the revert's
		 * bounded wait for them (5 s): not played.
		 */
		if (RD32(SRV(tx_reverted)) && RD64(SRV(revert_tcp_pos)) > f->s_tcp)
			break;
		if (f->reverted++)
			break;
		r = uls_conn_revert(f->c, f->cfd, 2);
		TRACE("revert: %d\n", r);
		FUZZ_ASSERT(r <= 0);
		break;
	case 6:
		uls_conn_revert_owed(f->c, f->cfd);
		break;
	default:
		uls_revert_serve(f->c, f->cfd);
		break;
	}
}

static void client_op(struct fzc *f, uint8_t op, uint64_t v)
{
	int broken = atomic_load(&f->c->broken);
	uint64_t t0 = fuzz_now_ns();

	switch (op & 7) {
	case 5:
		client_recv(f, v);
		break;
	case 6:
		client_send(f, v);
		break;
	default:
		client_ctl(f, v);
		break;
	}
	/* Non-blocking calls return; the revert waits its 2 ms, plus a revert's turns. */
	FUZZ_ASSERT(fuzz_now_ns() - t0 < CALL_BOUND_NS);
	FUZZ_ASSERT(!broken || atomic_load(&f->c->broken));
	check_server_untouched(f);
}

void fzc_run(struct fzc *f, const uint8_t *ops, size_t len)
{
	for (size_t i = 0; i + FZC_OP_SIZE <= len; i += FZC_OP_SIZE) {
		uint8_t op = ops[i];
		uint64_t v = fuzz_le(ops + i + 1, 8);
		TRACE("op %d v %#llx\n", op & 7, (unsigned long long)v);
		if ((op & 7) >= 5)
			client_op(f, op, v);
		else
			server_op(f, op, v);
	}
}

/* ---- the close ---- */

void fzc_close(struct fzc *f)
{
	if (f->c) {
		uint64_t t0 = fuzz_now_ns();
		uls_fd_clear(f->cfd);
		uls_conn_close(f->c, f->cfd, 1);
		f->cfd = -1;
		FUZZ_ASSERT(fuzz_now_ns() - t0 < CLOSE_BOUND_NS);
		if (f->h)
			check_server_untouched(f);
	}
	if (f->cfd >= 0)
		close(f->cfd);
	if (f->sfd >= 0)
		close(f->sfd);
	if (f->path[0])
		unlink(f->path);
	if (f->h)
		munmap(f->h, f->map_size);
	memset(f, 0, sizeof(*f));
}
