/* SPDX-License-Identifier: MIT */
/*
 * The client that the connection harness plays (fuzz_conn.h): what it writes in the
 * segment (any word of its own, operation 0, or what an honest client writes, operations
 * 1 to 4) and on TCP, and what it reads of the server's, checked against the model of
 * the server's stream. Also the check that the server wrote nothing of the client's.
 */
#include "fuzz_conn.h"
#include "fuzz_loop.h"

#include <stdatomic.h>
#include <sys/socket.h>

#include "transport/shm/ring.h"

/* The byte the client publishes at C2S position p. */
static uint8_t ring_byte(uint64_t p)
{
	return (uint8_t)(0x21 + (p * 13 + (p >> 11)) % 90);
}

/* What the operations' value is taken relative to (mode 1 and 2 of set_field). */
enum anchor { A_NONE, A_TCP, A_SEEN, A_TAKEN, A_RHEAD, A_TTAIL };

/* The words of operation 0, in the order of gen_corpus.py's FIELDS. */
static const struct field {
	size_t off;
	int width;
	enum anchor anchor;
} fields[] = {
	{CLI(state), 4, A_NONE},         {CLI(pid), 4, A_NONE},
	{CLI(switch_pos), 8, A_TCP},     {CLI(switched), 4, A_NONE},
	{CLI(tcp_data), 8, A_TCP},       {CLI(tokens_sent), 8, A_SEEN},
	{CLI(light_fence), 4, A_NONE},   {CLI(tokens_closed), 4, A_NONE},
	{CLI(tokens_refused), 4, A_NONE}, {CLI(revert_req), 4, A_NONE},
	{CLI(tx_reverted), 4, A_NONE},   {CLI(revert_ring_end), 8, A_RHEAD},
	{CLI(revert_tcp_pos), 8, A_TAKEN}, {CLI(rx_back), 4, A_NONE},
	{CLI(multi), 4, A_NONE},         {CLI(tokens_seen), 8, A_NONE},
	{C2S(prod.tail), 8, A_RHEAD},    {C2S(prod.eof), 4, A_NONE},
	{C2S(prod.want_space), 4, A_NONE}, {S2C(cons.head), 8, A_TTAIL},
	{S2C(cons.want_data), 4, A_NONE}, {S2C(cons.closed), 4, A_NONE},
	{S2C(cons.data_pipe.who), 8, A_NONE}, {S2C(cons.data_pipe.ino), 8, A_NONE},
	{C2S(prod.space_pipe.who), 8, A_NONE}, {C2S(prod.space_pipe.ino), 8, A_NONE},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
_Static_assert(NFIELDS == 26, "gen_corpus.py: FIELDS");

/*
 * The ranges only the client may write, and whether the server may clear bits of them (a
 * mover exchanges the sleeper's want word for 0, and any change that is not a position
 * clears its futex bit: protocol.md, section 5). The client's lock words are the client's
 * too: the server takes its token lock while closing, and leaves it as it found it.
 */
static const struct fuzz_range peer_ranges[] = {
	{0, sizeof(struct uls_seg_ident), 0},
	{CLI(lock), CLI(light_fence) - CLI(lock), 0},
	/* A sleeper clears the peer's light_fence when membarrier fails (fence.h). */
	{CLI(light_fence), 4, 1},
	{CLI(light_fence) + 4, CLI(lock) + sizeof(struct uls_side) - CLI(light_fence) - 4, 0},
	{C2S(prod.tail), 8, 0},
	{C2S(prod.eof), 4, 0},
	{C2S(prod.want_space), 4, 1},
	{C2S(prod.space_pipe), sizeof(struct uls_wake_pipe), 0},
	{S2C(cons.head), 8, 0},
	{S2C(cons.want_data), 4, 1},
	{S2C(cons.closed), 4, 0},
	{S2C(cons.data_pipe), sizeof(struct uls_wake_pipe), 0},
	/* The client's offer: the server takes it off the board (0) at most. */
	{offsetof(struct uls_seg_hdr, both.offer), 4, 1},
	{offsetof(struct uls_seg_hdr, both.pad), sizeof(((struct uls_seg_hdr *)0)->both.pad), 0},
};

void fz_peer_snap(struct fz *f)
{
	memcpy(f->peer, f->h, sizeof(f->peer));
}

/* The server wrote nothing only the client may write (bits of a want word at most cleared). */
void fz_check_peer_untouched(const struct fz *f)
{
	fuzz_check_untouched(f->h, f->peer, peer_ranges,
			     sizeof(peer_ranges) / sizeof(peer_ranges[0]), "server");
}

void fz_client_send(struct fz *f, uint64_t n)
{
	uint8_t buf[MAX_FILL];

	while (n > 0 && !f->c_fin) {
		size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		for (size_t i = 0; i < k; i++)
			buf[i] = tcp_byte(f->c_sent + i);
		ssize_t r = send(f->cfd, buf, k, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r <= 0)
			return; /* the queues are full: what was sent is counted */
		f->c_sent += (uint64_t)r;
		n -= (uint64_t)r;
	}
}

void fz_client_fin(struct fz *f)
{
	if (!f->c_fin)
		shutdown(f->cfd, SHUT_WR);
	f->c_fin = 1;
}

static uint64_t anchor_of(const struct fz *f, enum anchor a, uint64_t *span)
{
	*span = 4096;
	switch (a) {
	case A_TCP:
		return RD64(SRV(tcp_data));
	case A_SEEN:
		return RD64(SRV(tokens_seen));
	case A_TAKEN:
		return RD64(SRV(tokens_seen)) + RD64(SRV(tcp_data));
	case A_RHEAD:
		*span = f->size[ULS_C2S];
		return RD64(C2S(cons.head));
	case A_TTAIL:
		*span = f->size[ULS_S2C];
		return RD64(S2C(prod.tail));
	default:
		return 0;
	}
}

static void set_field(struct fz *f, uint64_t v)
{
	const struct field *fl = &fields[(v & 31) % NFIELDS];
	uint64_t x = v >> 8, span, a = anchor_of(f, fl->anchor, &span), val;

	switch ((v >> 5) & 3) {
	case 0:
		val = x;
		break;
	case 1:
		val = a + (uint64_t)(int64_t)(int8_t)x;
		break;
	case 2:
		val = a + x % (4 * span + 1) - 2 * span;
		break;
	default:
		val = ~x;
		break;
	}
	wr(f, fl->off, fl->width, val);
}

/* The client as producer of C2S: bytes into the free space, then the tail (release). */
static void client_publish(struct fz *f, uint64_t v)
{
	struct uls_ring_shared *r = &f->h->ring[ULS_C2S];
	uint64_t tail = atomic_load(&r->prod.tail), head = atomic_load(&r->cons.head);
	uint64_t size = f->size[ULS_C2S], used = tail - head, n = v % (MAX_XFER + 1);

	if (used > size)
		return;
	if (n > size - used)
		n = size - used;
	for (uint64_t i = 0; i < n; i++)
		f->data[ULS_C2S][(tail + i) & (size - 1)] = ring_byte(tail + i);
	atomic_store_explicit(&r->prod.tail, tail + n, memory_order_release);
	/* A wake-up for a sleeper that asked, as a producer sends it (counted). */
	if ((v >> 16) & 1 && atomic_exchange(&r->cons.want_data, 0)) {
		fz_client_send(f, 1);
		wr(f, CLI(tokens_sent), 8, RD64(CLI(tokens_sent)) + 1);
	}
}

static void client_tcp(struct fz *f, uint64_t v)
{
	uint64_t before = f->c_sent;

	fz_client_send(f, v % (MAX_TCP + 1));
	uint64_t n = f->c_sent - before;
	if ((v >> 12) & 1)
		wr(f, CLI(tokens_sent), 8, RD64(CLI(tokens_sent)) + n);
	if ((v >> 13) & 1)
		wr(f, CLI(tcp_data), 8, RD64(CLI(tcp_data)) + n);
}

/* The S2C byte at position p, as the server's sends put it there. */
static int s2c_expected(const struct fz *f, uint64_t p, uint8_t *out)
{
	/* Before the server's first byte the ring holds the file's zeros. */
	if ((int64_t)(p - f->tx_base) < 0) {
		*out = 0;
		return 1;
	}
	if (p - f->tx_base >= f->tx_len)
		return 0;
	*out = f->tx_log[p - f->tx_base];
	return 1;
}

/* What the client reads on TCP: counted wake-ups, then data from the revert point on. */
void fz_client_read_tcp(struct fz *f)
{
	uint8_t buf[4096];
	ssize_t n;

	while ((n = recv(f->cfd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		TRACE("client reads %zd bytes at %llu of the server's TCP "
		      "(tokens %llu, data %d at %llu)\n", n, (unsigned long long)f->s_read,
		      (unsigned long long)RD64(SRV(tokens_sent)), f->out_data,
		      (unsigned long long)f->out_at);
		for (ssize_t i = 0; f->out_ok && i < n; i++) {
			uint64_t k = f->s_read + (uint64_t)i;
			uint8_t want;
			if (f->out_data && k >= f->out_at) {
				FUZZ_ASSERT(s2c_expected(f, f->out_end + (k - f->out_at), &want));
				FUZZ_ASSERT(buf[i] == want);
			} else {
				/* Every byte before the revert point is a wake-up, counted. */
				FUZZ_ASSERT(k < RD64(SRV(tokens_sent)));
			}
		}
		f->s_read += (uint64_t)n;
	}
}

/* The client as consumer of S2C: the bytes are the server's, in order. */
static void client_consume(struct fz *f, uint64_t v)
{
	struct uls_ring_shared *r = &f->h->ring[ULS_S2C];
	uint64_t tail = atomic_load(&r->prod.tail), head = atomic_load(&r->cons.head);
	uint64_t size = f->size[ULS_S2C], n = v % (MAX_XFER + 1);
	uint8_t want;

	fz_client_read_tcp(f);
	if (tail - head > size)
		return;
	if (n > tail - head)
		n = tail - head;
	for (uint64_t i = 0; i < n; i++) {
		FUZZ_ASSERT(s2c_expected(f, head + i, &want));
		FUZZ_ASSERT(f->data[ULS_S2C][(head + i) & (size - 1)] == want);
	}
	atomic_store_explicit(&r->cons.head, head + n, memory_order_release);
	if ((v >> 16) & 1)
		atomic_exchange(&r->prod.want_space, 0);
}

/* What an honest client does in its own calls (protocol.md, sections 4, 6 and 8). */
static void client_step(struct fz *f, uint64_t v)
{
	switch (v & 3) {
	case 0: /* its switch: data on TCP up to here, then the ring */
		wr(f, CLI(switch_pos), 8, RD64(CLI(tcp_data)));
		wr(f, CLI(switched), 4, 1);
		break;
	case 1: /* it moves its sending direction back to TCP */
		wr(f, CLI(tokens_closed), 4, 1);
		wr(f, CLI(revert_ring_end), 8, RD64(C2S(prod.tail)));
		wr(f, CLI(revert_tcp_pos), 8, RD64(CLI(tokens_sent)) + RD64(CLI(tcp_data)));
		wr(f, CLI(tx_reverted), 4, 1);
		break;
	case 2: /* it asks the server to do the same */
		wr(f, CLI(revert_req), 4, 1);
		fz_client_send(f, 1);
		wr(f, CLI(tokens_sent), 8, RD64(CLI(tokens_sent)) + 1);
		break;
	default: /* it closes */
		wr(f, CLI(state), 4, RD32(CLI(state)) | ULS_SIDE_CLOSED);
		wr(f, C2S(prod.eof), 4, 1);
		wr(f, S2C(cons.closed), 4, 1);
		fz_client_fin(f);
		break;
	}
}

/* Operations 0 to 4. */
static void (*const client_ops[5])(struct fz *, uint64_t) = {
	set_field, client_publish, client_tcp, client_consume, client_step,
};

void fz_client_op(struct fz *f, uint8_t op, uint64_t v)
{
	client_ops[op & 7](f, v);
}
