/*
 * calls_zerocopy: the calls that change how a TCP socket's bytes are sent or that count
 * them, between two processes.
 *
 * MSG_ZEROCOPY with SO_ZEROCOPY (every byte arrives; every send's completion arrives once
 * on MSG_ERRQUEUE, possibly merged into ranges; poll says POLLERR while one is queued) and
 * without it (the flag is ignored: no completions); TCP_INFO's byte counters; TCP_CORK
 * (full segments still flow, the rest follows the uncork) and MSG_MORE; SO_PEEK_OFF (peeks
 * advance it, reads pull it back). Kernel TCP is the oracle. Usage: calls_zerocopy CASE.
 */
#include "calls_common.h"

#include <linux/errqueue.h>
#include <stddef.h>

#define SEED_UP 1u   /* client -> server */
#define SEED_DOWN 2u /* server -> client */

#define WAIT_MS 10000

static uint32_t xr(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static int get_int(int fd, int level, int name)
{
	int v = -12345;
	socklen_t len = sizeof(v);

	CHECK(getsockopt(fd, level, name, &v, &len) == 0);
	CHECK_EQ(len, sizeof(v));
	return v;
}

static void set_int(int fd, int level, int name, int v)
{
	CHECK(setsockopt(fd, level, name, &v, sizeof(v)) == 0);
}

/* ---- MSG_ZEROCOPY ---------------------------------------------------------------------------- */

#define ZC_SENDS 32
#define ZC_MAX_ID 256

/* The completions seen so far: each send id exactly once. */
struct zc_track {
	int family;
	unsigned ids;	  /* sends made, so ids 0..ids-1 exist */
	unsigned done;	  /* ids completed */
	unsigned notes;	  /* notifications read (ranges count once) */
	unsigned char seen[ZC_MAX_ID];
};

/* Reads every queued error-queue entry (never waits); each must be a zerocopy completion. */
static void zc_drain(int fd, struct zc_track *t)
{
	for (;;) {
		union {
			char buf[256];
			struct cmsghdr align;
		} ctl;
		struct msghdr m;
		struct sock_extended_err ee;
		char data[16];
		struct iovec iov = {data, sizeof(data)};

		memset(&m, 0, sizeof(m));
		m.msg_iov = &iov;
		m.msg_iovlen = 1;
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof(ctl.buf);
		ssize_t r = recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT);
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			return;
		}
		/* A TCP error-queue entry carries no payload. */
		CHECK_EQ(r, 0);
		CHECK(m.msg_flags & MSG_ERRQUEUE);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		CHECK(cm != NULL);
		if (t->family == AF_INET6) {
			CHECK_EQ(cm->cmsg_level, SOL_IPV6);
			CHECK_EQ(cm->cmsg_type, IPV6_RECVERR);
		} else {
			CHECK_EQ(cm->cmsg_level, SOL_IP);
			CHECK_EQ(cm->cmsg_type, IP_RECVERR);
		}
		CHECK(cm->cmsg_len >= CMSG_LEN(sizeof(ee)));
		memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
		CHECK_EQ(ee.ee_errno, 0);
		CHECK_EQ(ee.ee_origin, SO_EE_ORIGIN_ZEROCOPY);
		/* Loopback copies: the kernel may say so, and that is the only code it uses. */
		CHECK(ee.ee_code == 0 || ee.ee_code == SO_EE_CODE_ZEROCOPY_COPIED);
		CHECK(ee.ee_info <= ee.ee_data);
		CHECK(ee.ee_data < t->ids);
		for (uint32_t id = ee.ee_info; id <= ee.ee_data; id++) {
			CHECK_EQ(t->seen[id], 0);
			t->seen[id] = 1;
			t->done++;
		}
		CHECK(CMSG_NXTHDR(&m, cm) == NULL);
		t->notes++;
	}
}

/*
 * One MSG_ZEROCOPY send of buf[0, n) (through sendmsg with two segments when `vec`),
 * retried on ENOBUFS (too many completions pending) once some are read. Short counts
 * are possible and are each a send with an id of their own. Returns nothing: all n go.
 */
static void zc_send(int fd, const unsigned char *buf, size_t n, int vec, struct zc_track *t)
{
	while (n > 0) {
		ssize_t r;
		if (vec && n > 1) {
			struct iovec iov[2] = {{(void *)buf, n / 2},
					       {(void *)(buf + n / 2), n - n / 2}};
			struct msghdr m;
			memset(&m, 0, sizeof(m));
			m.msg_iov = iov;
			m.msg_iovlen = 2;
			r = sendmsg(fd, &m, MSG_ZEROCOPY);
		} else {
			r = send(fd, buf, n, MSG_ZEROCOPY);
		}
		if (r == -1 && (errno == ENOBUFS || errno == EINTR)) {
			zc_drain(fd, t);
			calls_sleep_ms(2);
			continue;
		}
		CHECK(r > 0);
		CHECK(t->ids < ZC_MAX_ID);
		t->ids++;
		buf += r;
		n -= (size_t)r;
	}
}

/* The sizes of the ZC_SENDS sends of stream `seed` (1 B to 192 KiB); returns their sum. */
static size_t zc_sizes(unsigned seed, size_t sz[ZC_SENDS])
{
	static const size_t base[4] = {1, 1000, 65536, 192 << 10};
	uint32_t s = 99 + seed;
	size_t sum = 0;

	for (int i = 0; i < ZC_SENDS; i++) {
		sz[i] = base[i % 4] + xr(&s) % 100;
		sum += sz[i];
	}
	return sum;
}

/*
 * The zerocopy sender: ZC_SENDS sends from one buffer it never writes again; after the peer
 * has read everything (it answers one byte), waits for and checks the completions, then
 * finds the error queue empty and no POLLERR.
 */
static void zc_sender(int fd, int family, unsigned seed)
{
	struct zc_track t;
	size_t sz[ZC_SENDS];
	size_t sum = zc_sizes(seed, sz);
	unsigned char *buf = malloc(sum);
	char c;

	CHECK(buf != NULL);
	memset(&t, 0, sizeof(t));
	t.family = family;
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ZEROCOPY), 0);
	CHECK_ERR(setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &(int){2}, sizeof(int)), EINVAL);
	set_int(fd, SOL_SOCKET, SO_ZEROCOPY, 1);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ZEROCOPY), 1);
	calls_pat_fill(buf, 0, sum, seed);
	size_t off = 0;
	for (int i = 0; i < ZC_SENDS; i++) {
		zc_send(fd, buf + off, sz[i], i % 3 == 2, &t);
		off += sz[i];
	}
	CHECK(t.ids >= ZC_SENDS);
	calls_read_exact(fd, &c, 1);
	CHECK_EQ(c, 'k');
	while (t.done < t.ids) {
		short rev = calls_wait_for(fd, 0, WAIT_MS);
		if (!(rev & POLLERR))
			calls_fail(__FILE__, __LINE__, "no POLLERR: completions missing after 10 s",
				   0);
		zc_drain(fd, &t);
	}
	CHECK_EQ(t.done, t.ids);
	CHECK(t.notes >= 1);
	CHECK_EQ(calls_wait_for(fd, POLLIN, 0), 0);
	CHECK_ERR(recvmsg(fd, &(struct msghdr){0}, MSG_ERRQUEUE | MSG_DONTWAIT), EAGAIN);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_ERROR), 0);
	char note[80];
	snprintf(note, sizeof(note), "%u sends completed in %u notifications", t.ids, t.notes);
	calls_note(note);
	free(buf);
}

/* Receives the zerocopy stream `seed` and acknowledges it with one byte. */
static void zc_receiver(int fd, unsigned seed)
{
	size_t sz[ZC_SENDS];

	calls_recv_pat(fd, 0, zc_sizes(seed, sz), seed);
	calls_write_all(fd, "k", 1);
}

/* Each way in turn; the second sender starts only once the first has checked its queue. */
static void zerocopy_case(int family)
{
	struct calls_pair p;

	calls_pair_open(&p, family);
	if (p.child == 0) {
		zc_sender(p.fd, family, SEED_UP);
		calls_post(&p, 'n');
		zc_receiver(p.fd, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	zc_receiver(p.fd, SEED_UP);
	CHECK_EQ(calls_await(&p), 'n');
	zc_sender(p.fd, family, SEED_DOWN);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

static void case_zerocopy(CALLS_ARGS)
{
	zerocopy_case(AF_INET);
}

static void case_zerocopy6(CALLS_ARGS)
{
	zerocopy_case(AF_INET6);
}

/*
 * MSG_ZEROCOPY without SO_ZEROCOPY: the kernel ignores the flag. Every send is an ordinary
 * one, the bytes arrive, and nothing ever reaches the error queue.
 */
static void case_zerocopy_noopt(CALLS_ARGS)
{
	static unsigned char buf[100000];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_ZEROCOPY), 0);
		calls_pat_fill(buf, 0, sizeof(buf), SEED_UP);
		CHECK_EQ(send(p.fd, buf, 10, MSG_ZEROCOPY), 10);
		CHECK_EQ(send(p.fd, buf + 10, sizeof(buf) - 10, MSG_ZEROCOPY), sizeof(buf) - 10);
		/* The buffer may be reused at once: the bytes were copied. */
		memset(buf, 0, sizeof(buf));
		char c;
		calls_read_exact(p.fd, &c, 1);
		CHECK_EQ(c, 'k');
		CHECK_EQ(calls_wait_for(p.fd, POLLIN, 100), 0);
		CHECK_ERR(recvmsg(p.fd, &(struct msghdr){0}, MSG_ERRQUEUE | MSG_DONTWAIT), EAGAIN);
		CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_ERROR), 0);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_recv_pat(p.fd, 0, sizeof(buf), SEED_UP);
	calls_write_all(p.fd, "k", 1);
	calls_expect_eof(p.fd);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- TCP_INFO -------------------------------------------------------------------------------- */

/*
 * struct tcp_info as the kernel fills it (linux/tcp.h); glibc's <netinet/tcp.h> stops
 * before the byte counters and the two headers cannot be included together.
 */
struct k_tcp_info {
	uint8_t state, ca_state, retransmits, probes, backoff, options, wscale, flags;
	uint32_t rto, ato, snd_mss, rcv_mss;
	uint32_t unacked, sacked, lost, retrans, fackets;
	uint32_t last_data_sent, last_ack_sent, last_data_recv, last_ack_recv;
	uint32_t pmtu, rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering;
	uint32_t rcv_rtt, rcv_space, total_retrans;
	uint64_t pacing_rate, max_pacing_rate;
	uint64_t bytes_acked;	 /* RFC 4898 tcpEStatsAppHCThruOctetsAcked */
	uint64_t bytes_received; /* RFC 4898 tcpEStatsAppHCThruOctetsReceived */
	uint32_t segs_out, segs_in, notsent_bytes, min_rtt, data_segs_in, data_segs_out;
	uint64_t delivery_rate, busy_time, rwnd_limited, sndbuf_limited;
	uint32_t delivered, delivered_ce;
	uint64_t bytes_sent;	/* RFC 4898 tcpEStatsPerfHCDataOctetsOut (since 4.19) */
	uint64_t bytes_retrans; /* RFC 4898 tcpEStatsPerfOctetsRetrans */
};

_Static_assert(offsetof(struct k_tcp_info, bytes_acked) == 120, "tcp_info ABI");
_Static_assert(offsetof(struct k_tcp_info, bytes_received) == 128, "tcp_info ABI");
_Static_assert(offsetof(struct k_tcp_info, bytes_sent) == 200, "tcp_info ABI");
_Static_assert(offsetof(struct k_tcp_info, bytes_retrans) == 208, "tcp_info ABI");

static void get_info(int fd, struct k_tcp_info *ti)
{
	socklen_t len = sizeof(*ti);

	memset(ti, 0, sizeof(*ti));
	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len) == 0);
	if (len < sizeof(*ti))
		calls_skip("this kernel's TCP_INFO has no tcpi_bytes_sent");
	CHECK_EQ(ti->state, TCP_ESTABLISHED);
}

/*
 * What the kernel guarantees once every byte this side sent has been read by the peer and
 * the peer's answer (which acknowledges all of it) has been read here:
 * - tcpi_bytes_received is exactly the count of bytes received;
 * - tcpi_bytes_acked is exactly the count of bytes sent, plus 1 on the connecting side,
 *   whose SYN took a sequence number and was acknowledged (the accepting side's counter
 *   starts after its SYN-ACK);
 * - tcpi_bytes_sent counts transmissions: the bytes sent plus any retransmitted.
 */
static void check_counters(int fd, uint64_t sent, uint64_t received, int connector)
{
	struct k_tcp_info ti;

	get_info(fd, &ti);
	CHECK_EQ(ti.bytes_received, received);
	CHECK_EQ(ti.bytes_acked, sent + (connector ? 1 : 0));
	CHECK(ti.bytes_sent >= sent);
	CHECK(ti.bytes_sent <= sent + ti.bytes_retrans);
	CHECK_EQ(ti.notsent_bytes, 0);
	CHECK_EQ(ti.unacked, 0);
}

#define INFO_UP ((1u << 20) + 17)
#define INFO_DOWN 300001u

static void case_tcp_info(CALLS_ARGS)
{
	struct calls_pair p;
	struct k_tcp_info ti;
	char c;

	calls_pair_open(&p, AF_INET);
	/* calls_pair_open's greeting: one byte each way, already acknowledged by the other. */
	get_info(p.fd, &ti);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, INFO_UP, SEED_UP);
		calls_recv_pat(p.fd, 0, INFO_DOWN, SEED_DOWN);
		calls_write_all(p.fd, "k", 1);
		calls_read_exact(p.fd, &c, 1);
		CHECK_EQ(c, 'd');
		check_counters(p.fd, 1 + INFO_UP + 1, 1 + INFO_DOWN + 1, 1);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_recv_pat(p.fd, 0, INFO_UP, SEED_UP);
	calls_send_pat(p.fd, 0, INFO_DOWN, SEED_DOWN);
	calls_read_exact(p.fd, &c, 1);
	CHECK_EQ(c, 'k');
	check_counters(p.fd, 1 + INFO_DOWN, 1 + INFO_UP + 1, 0);
	calls_write_all(p.fd, "d", 1);
	calls_expect_eof(p.fd);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- TCP_CORK and MSG_MORE ------------------------------------------------------------------- */

#define CORK_TOTAL ((1u << 20) + 3)
/* More than any segment the kernel holds back under the cork (one GSO segment, <= 64 KiB). */
#define CORK_HELD (128u << 10)

/*
 * Corked writes of 1 B to 8 KiB: full segments still leave, so the peer can read all but
 * the last CORK_HELD bytes while the cork is on; it posts when it has, and the uncork
 * sends the rest.
 */
static void cork_send(struct calls_pair *p, unsigned seed)
{
	static unsigned char buf[8192];
	uint32_t s = 7 + seed;
	uint64_t off = 0;

	CHECK_EQ(get_int(p->fd, IPPROTO_TCP, TCP_CORK), 0);
	set_int(p->fd, IPPROTO_TCP, TCP_CORK, 1);
	CHECK_EQ(get_int(p->fd, IPPROTO_TCP, TCP_CORK), 1);
	while (off < CORK_TOTAL) {
		size_t n = 1 + xr(&s) % sizeof(buf);
		if (n > CORK_TOTAL - off)
			n = (size_t)(CORK_TOTAL - off);
		calls_pat_fill(buf, off, n, seed);
		calls_write_all(p->fd, buf, n);
		off += n;
	}
	CHECK_EQ(calls_await(p), 'r');
	set_int(p->fd, IPPROTO_TCP, TCP_CORK, 0);
	CHECK_EQ(get_int(p->fd, IPPROTO_TCP, TCP_CORK), 0);
	/* The peer says when it has everything; no shutdown or close helped. */
	CHECK_EQ(calls_await(p), 'a');
}

static void cork_recv(struct calls_pair *p, unsigned seed)
{
	calls_recv_pat(p->fd, 0, CORK_TOTAL - CORK_HELD, seed);
	calls_post(p, 'r');
	calls_recv_pat(p->fd, CORK_TOTAL - CORK_HELD, CORK_HELD, seed);
	calls_post(p, 'a');
}

static void case_cork(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		cork_send(&p, SEED_UP);
		cork_recv(&p, SEED_DOWN);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	cork_recv(&p, SEED_UP);
	cork_send(&p, SEED_DOWN);
	calls_expect_eof(p.fd);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

#define MORE_PIECES 3000

/*
 * MORE_PIECES small pieces with MSG_MORE (through send, sendto and sendmsg), then one byte
 * without it: the peer gets every byte before the sender shuts down or closes anything.
 */
static uint64_t more_send(struct calls_pair *p, unsigned seed)
{
	unsigned char buf[700];
	uint32_t s = 11 + seed;
	uint64_t off = 0;

	for (int i = 0; i < MORE_PIECES; i++) {
		size_t n = 1 + xr(&s) % 600;
		struct iovec iov = {buf, n};
		struct msghdr m;

		calls_pat_fill(buf, off, n, seed);
		switch (i % 3) {
		case 0:
			CHECK_EQ(send(p->fd, buf, n, MSG_MORE), n);
			break;
		case 1:
			CHECK_EQ(sendto(p->fd, buf, n, MSG_MORE, NULL, 0), n);
			break;
		default:
			memset(&m, 0, sizeof(m));
			m.msg_iov = &iov;
			m.msg_iovlen = 1;
			CHECK_EQ(sendmsg(p->fd, &m, MSG_MORE), n);
			break;
		}
		off += n;
	}
	calls_pat_fill(buf, off, 1, seed);
	CHECK_EQ(send(p->fd, buf, 1, 0), 1);
	off++;
	CHECK_EQ(calls_await(p), 'a');
	return off;
}

static void more_recv(struct calls_pair *p, unsigned seed)
{
	uint32_t s = 11 + seed;
	uint64_t total = 1;

	for (int i = 0; i < MORE_PIECES; i++)
		total += 1 + xr(&s) % 600;
	calls_recv_pat(p->fd, 0, total, seed);
	calls_post(p, 'a');
}

static void case_msg_more(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		more_send(&p, SEED_UP);
		more_recv(&p, SEED_DOWN);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	more_recv(&p, SEED_UP);
	more_send(&p, SEED_DOWN);
	calls_expect_eof(p.fd);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- SO_PEEK_OFF ----------------------------------------------------------------------------- */

#define PEEK_TOTAL 10000

/* recv(flags) of exactly n bytes that must be stream bytes [at, at + n). */
static void recv_at(int fd, size_t n, int flags, uint64_t at, unsigned seed)
{
	unsigned char buf[256];

	CHECK(n <= sizeof(buf));
	CHECK_EQ(recv(fd, buf, n, flags), n);
	CHECK_PAT(buf, at, n, seed);
}

/*
 * With SO_PEEK_OFF set, each MSG_PEEK starts at the offset and moves it on; a normal read
 * moves it back by what it took (not below 0); -1 turns it off. Stream of PEEK_TOTAL bytes.
 */
static void peek_off_recv(struct calls_pair *p, unsigned seed)
{
	int fd = p->fd;
	char c;

	CHECK_EQ(calls_wait_fionread(fd, PEEK_TOTAL, WAIT_MS), PEEK_TOTAL);
	set_int(fd, SOL_SOCKET, SO_PEEK_OFF, 0);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 0);
	recv_at(fd, 3, MSG_PEEK, 0, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 3);
	recv_at(fd, 100, MSG_PEEK, 3, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 103);
	recv_at(fd, 50, 0, 0, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 53);
	recv_at(fd, 10, MSG_PEEK, 103, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 63);
	recv_at(fd, 100, 0, 50, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 0);
	recv_at(fd, 5, MSG_PEEK | MSG_DONTWAIT, 150, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 5);
	CHECK_EQ(calls_fionread(fd), PEEK_TOTAL - 150);
	/* At the end of the queued bytes a peek has nothing to give. */
	set_int(fd, SOL_SOCKET, SO_PEEK_OFF, PEEK_TOTAL - 150);
	CHECK_ERR(recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT), EAGAIN);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), PEEK_TOTAL - 150);
	set_int(fd, SOL_SOCKET, SO_PEEK_OFF, PEEK_TOTAL - 151);
	recv_at(fd, 1, MSG_PEEK | MSG_DONTWAIT, PEEK_TOTAL - 1, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), PEEK_TOTAL - 150);
	/* Off: peeks start at the head again and move nothing. */
	set_int(fd, SOL_SOCKET, SO_PEEK_OFF, -1);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), -1);
	recv_at(fd, 5, MSG_PEEK, 150, seed);
	recv_at(fd, 5, MSG_PEEK, 150, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), -1);
	set_int(fd, SOL_SOCKET, SO_PEEK_OFF, 0);
	calls_recv_pat(fd, 150, PEEK_TOTAL - 150, seed);
	CHECK_EQ(get_int(fd, SOL_SOCKET, SO_PEEK_OFF), 0);
	/* Only now may the peer shut down: a peek past the bytes at EOF is 0, not EAGAIN. */
	calls_post(p, 's');
	calls_expect_eof(fd);
	CHECK_EQ(recv(fd, &c, 1, MSG_PEEK), 0);
}

static void peek_off_send(struct calls_pair *p, unsigned seed)
{
	calls_send_pat(p->fd, 0, PEEK_TOTAL, seed);
	CHECK_EQ(calls_await(p), 's');
	CHECK(shutdown(p->fd, SHUT_WR) == 0);
}

static void case_peek_off(CALLS_ARGS)
{
	struct calls_pair p;
	int zero = 0;

	calls_pair_open(&p, AF_INET);
	/* Off by default. */
	CHECK_EQ(get_int(p.fd, SOL_SOCKET, SO_PEEK_OFF), -1);
	if (setsockopt(p.fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof(zero)) != 0) {
		CHECK(errno == EOPNOTSUPP || errno == ENOPROTOOPT);
		calls_skip("SO_PEEK_OFF is not supported on TCP here");
	}
	set_int(p.fd, SOL_SOCKET, SO_PEEK_OFF, -1);
	if (p.child == 0) {
		peek_off_send(&p, SEED_UP);
		peek_off_recv(&p, SEED_DOWN);
		calls_pair_close(&p);
	}
	peek_off_recv(&p, SEED_UP);
	peek_off_send(&p, SEED_DOWN);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"zerocopy", case_zerocopy},
	{"zerocopy6", case_zerocopy6},
	{"zerocopy_noopt", case_zerocopy_noopt},
	{"tcp_info", case_tcp_info},
	{"cork", case_cork},
	{"msg_more", case_msg_more},
	{"peek_off", case_peek_off},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
