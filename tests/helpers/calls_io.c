/*
 * calls_io: the data-transfer calls on a TCP stream between two processes.
 *
 * read/write, readv/writev, send/recv, sendto/recvfrom, sendmsg/recvmsg, sendmmsg/recvmmsg,
 * byte-stream semantics under arbitrary splits, MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT,
 * MSG_TRUNC, MSG_NOSIGNAL, SIGPIPE/EPIPE and EINTR. Each case forks a client that connects
 * to the parent over loopback (see calls_common.h). Usage: calls_io CASE.
 */
#include "calls_common.h"

#include <sys/uio.h>
#include <time.h>
#include <sys/wait.h>
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#endif

#define SEED_UP 1u   /* child -> parent */
#define SEED_DOWN 2u /* parent -> child */

/* read/write with chunk sizes that do not line up between the two sides. */
static void case_rw(CALLS_ARGS)
{
	static unsigned char buf[300000];
	struct calls_pair p;
	size_t sizes[] = {1, 1000, sizeof(buf), 7};
	uint64_t off = 0, total = 0;

	calls_pair_open(&p, AF_INET);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		total += sizes[i];
	if (p.child == 0) {
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			calls_pat_fill(buf, off, sizes[i], SEED_UP);
			CHECK_EQ(write(p.fd, buf, sizes[i]), sizes[i]);
			off += sizes[i];
		}
		calls_recv_pat(p.fd, 0, 100000, SEED_DOWN);
		calls_pair_close(&p);
	}
	while (off < total) {
		ssize_t r = read(p.fd, buf, 7777);
		CHECK(r > 0);
		CHECK_PAT(buf, off, (size_t)r, SEED_UP);
		off += (uint64_t)r;
	}
	CHECK_EQ(off, total);
	calls_pat_fill(buf, 0, 100000, SEED_DOWN);
	CHECK_EQ(write(p.fd, buf, 100000), 100000);
	/* The child closes after reading: EOF, and EOF again. */
	calls_expect_eof(p.fd);
	calls_expect_eof(p.fd);
	CHECK_EQ(read(p.fd, buf, 0), 0);
	calls_pair_close(&p);
}

/* writev with uneven (and empty) segments; readv into segments of other sizes. */
static void case_readv_writev(CALLS_ARGS)
{
	static unsigned char a[70000], b[100000];
	size_t lens[] = {1, 0, 4096, 70000, 3};
	const size_t nseg = sizeof(lens) / sizeof(lens[0]);
	const int rounds = 20;
	size_t per = 0;
	struct calls_pair p;

	for (size_t i = 0; i < nseg; i++)
		per += lens[i];
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		static unsigned char seg[5][70000];
		uint64_t off = 0;
		for (int r = 0; r < rounds; r++) {
			struct iovec iov[5];
			for (size_t i = 0; i < nseg; i++) {
				calls_pat_fill(seg[i], off, lens[i], SEED_UP);
				iov[i].iov_base = seg[i];
				iov[i].iov_len = lens[i];
				off += lens[i];
			}
			/* A blocking stream socket takes all of it in one call. */
			CHECK_EQ(writev(p.fd, iov, (int)nseg), per);
		}
		calls_pair_close(&p);
	}
	uint64_t off = 0, total = per * (uint64_t)rounds;
	unsigned char c10[10];
	while (off < total) {
		struct iovec iov[3] = {{c10, sizeof(c10)}, {a, 5000}, {b, sizeof(b)}};
		ssize_t r = readv(p.fd, iov, 3);
		CHECK(r > 0);
		size_t got = (size_t)r, k;
		k = got < 10 ? got : 10;
		CHECK_PAT(c10, off, k, SEED_UP);
		if (got > 10) {
			size_t k2 = got - 10 < 5000 ? got - 10 : 5000;
			CHECK_PAT(a, off + 10, k2, SEED_UP);
			if (got > 5010)
				CHECK_PAT(b, off + 5010, got - 5010, SEED_UP);
		}
		off += got;
	}
	CHECK_EQ(off, total);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* send/recv both ways; a blocking send much larger than any buffer returns the full count. */
static void case_send_recv(CALLS_ARGS)
{
	const size_t big = 8u << 20;
	unsigned char *buf = malloc(big + 1);
	struct calls_pair p;

	CHECK(buf != NULL);
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_pat_fill(buf, 0, big, SEED_UP);
		CHECK_EQ(send(p.fd, buf, big, 0), big);
		CHECK_EQ(send(p.fd, "x", 1, 0), 1);
		unsigned char r[64];
		size_t got = 0;
		while (got < 64) {
			ssize_t n = recv(p.fd, r + got, sizeof(r) - got, 0);
			CHECK(n > 0);
			got += (size_t)n;
		}
		CHECK_PAT(r, 0, 64, SEED_DOWN);
		calls_pair_close(&p);
	}
	size_t got = 0;
	while (got < big + 1) {
		ssize_t n = recv(p.fd, buf + got, big + 1 - got, 0);
		CHECK(n > 0);
		got += (size_t)n;
	}
	CHECK_PAT(buf, 0, big, SEED_UP);
	CHECK_EQ(buf[big], 'x');
	calls_pat_fill(buf, 0, 64, SEED_DOWN);
	for (int i = 0; i < 64; i++)
		CHECK_EQ(send(p.fd, buf + i, 1, 0), 1);
	calls_expect_eof(p.fd);
	free(buf);
	calls_pair_close(&p);
}

/*
 * sendto/recvfrom on a connected stream: the destination address is ignored by Linux TCP,
 * and recvfrom reports an address length of 0 without touching the address buffer.
 */
static void case_sendto_recvfrom(CALLS_ARGS)
{
	unsigned char buf[4096];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		struct calls_addr elsewhere;
		calls_loopback(AF_INET, &elsewhere, 9);
		calls_pat_fill(buf, 0, 1000, SEED_UP);
		CHECK_EQ(sendto(p.fd, buf, 600, 0, NULL, 0), 600);
		CHECK_EQ(sendto(p.fd, buf + 600, 400, 0, (struct sockaddr *)&elsewhere.ss,
				elsewhere.len),
			 400);
		calls_recv_pat(p.fd, 0, 3000, SEED_DOWN);
		calls_pair_close(&p);
	}
	struct sockaddr_storage from;
	socklen_t fromlen;
	size_t got = 0;
	while (got < 1000) {
		memset(&from, 0x55, sizeof(from));
		fromlen = sizeof(from);
		ssize_t r = recvfrom(p.fd, buf + got, 1000 - got, 0, (struct sockaddr *)&from,
				     &fromlen);
		CHECK(r > 0);
		CHECK_EQ(fromlen, 0);
		CHECK_EQ(((unsigned char *)&from)[0], 0x55);
		got += (size_t)r;
	}
	CHECK_PAT(buf, 0, 1000, SEED_UP);
	calls_pat_fill(buf, 0, 3000, SEED_DOWN);
	CHECK_EQ(sendto(p.fd, buf, 3000, 0, NULL, 0), 3000);
	calls_expect_eof(p.fd);
	CHECK_EQ(recvfrom(p.fd, buf, sizeof(buf), 0, NULL, NULL), 0);
	calls_pair_close(&p);
}

/* sendmsg with several segments; recvmsg reports no name, no control data and no flags. */
static void case_sendmsg_recvmsg(CALLS_ARGS)
{
	static unsigned char seg[4][50000];
	size_t lens[4] = {3, 50000, 1, 777};
	size_t per = 3 + 50000 + 1 + 777;
	const int rounds = 10;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t off = 0;
		for (int r = 0; r < rounds; r++) {
			struct iovec iov[4];
			struct msghdr m;
			memset(&m, 0, sizeof(m));
			for (int i = 0; i < 4; i++) {
				calls_pat_fill(seg[i], off, lens[i], SEED_UP);
				iov[i].iov_base = seg[i];
				iov[i].iov_len = lens[i];
				off += lens[i];
			}
			m.msg_iov = iov;
			m.msg_iovlen = 4;
			CHECK_EQ(sendmsg(p.fd, &m, 0), per);
		}
		calls_pair_close(&p);
	}
	uint64_t off = 0, total = per * (uint64_t)rounds;
	static unsigned char a[1000], b[60000];
	while (off < total) {
		struct iovec iov[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
		struct sockaddr_storage name;
		char ctl[64];
		struct msghdr m;
		memset(&m, 0, sizeof(m));
		m.msg_iov = iov;
		m.msg_iovlen = 2;
		m.msg_name = &name;
		m.msg_namelen = sizeof(name);
		m.msg_control = ctl;
		m.msg_controllen = sizeof(ctl);
		m.msg_flags = 0x5a5a;
		ssize_t r = recvmsg(p.fd, &m, 0);
		CHECK(r > 0);
		CHECK_EQ(m.msg_namelen, 0);
		CHECK_EQ(m.msg_controllen, 0);
		CHECK_EQ(m.msg_flags, 0);
		size_t got = (size_t)r;
		CHECK_PAT(a, off, got < sizeof(a) ? got : sizeof(a), SEED_UP);
		if (got > sizeof(a))
			CHECK_PAT(b, off + sizeof(a), got - sizeof(a), SEED_UP);
		off += got;
	}
	CHECK_EQ(off, total);
	struct iovec iov = {a, sizeof(a)};
	struct msghdr m;
	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	CHECK_EQ(recvmsg(p.fd, &m, 0), 0);
	calls_pair_close(&p);
}

/* sendmmsg reports every message sent with its length; recvmmsg fills messages in order. */
static void case_mmsg(CALLS_ARGS)
{
	static unsigned char seg[6][70007];
	size_t lens[6] = {100, 50, 2000, 1, 70000, 7};
	size_t total = 0;
	struct calls_pair p;

	for (int i = 0; i < 6; i++)
		total += lens[i];
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		struct mmsghdr mm[3];
		struct iovec iov[6];
		uint64_t off = 0;
		memset(mm, 0, sizeof(mm));
		for (int i = 0; i < 6; i++) {
			calls_pat_fill(seg[i], off, lens[i], SEED_UP);
			off += lens[i];
			iov[i].iov_base = seg[i];
			iov[i].iov_len = lens[i];
		}
		for (int i = 0; i < 3; i++) {
			mm[i].msg_hdr.msg_iov = &iov[2 * i];
			mm[i].msg_hdr.msg_iovlen = 2;
		}
		CHECK_EQ(sendmmsg(p.fd, mm, 3, 0), 3);
		for (int i = 0; i < 3; i++)
			CHECK_EQ(mm[i].msg_len, lens[2 * i] + lens[2 * i + 1]);
		/* Then two 1000-byte blocks for the MSG_WAITALL round. */
		calls_await(&p);
		calls_send_pat(p.fd, 0, 2000, SEED_DOWN);
		calls_pair_close(&p);
	}
	static unsigned char rb[4][60000];
	uint64_t off = 0;
	while (off < total) {
		struct mmsghdr mm[4];
		struct iovec iov[4];
		memset(mm, 0, sizeof(mm));
		for (int i = 0; i < 4; i++) {
			iov[i].iov_base = rb[i];
			iov[i].iov_len = sizeof(rb[i]);
			mm[i].msg_hdr.msg_iov = &iov[i];
			mm[i].msg_hdr.msg_iovlen = 1;
		}
		int n = recvmmsg(p.fd, mm, 4, MSG_WAITFORONE, NULL);
		CHECK(n >= 1 && n <= 4);
		for (int i = 0; i < n; i++) {
			CHECK(mm[i].msg_len > 0);
			CHECK_PAT(rb[i], off, mm[i].msg_len, SEED_UP);
			off += mm[i].msg_len;
		}
	}
	CHECK_EQ(off, total);
	/* With MSG_WAITALL each message of the vector is filled completely. */
	calls_post(&p, 'g');
	struct mmsghdr mm[2];
	struct iovec iov[2] = {{rb[0], 1000}, {rb[1], 1000}};
	memset(mm, 0, sizeof(mm));
	for (int i = 0; i < 2; i++) {
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	CHECK_EQ(recvmmsg(p.fd, mm, 2, MSG_WAITALL, NULL), 2);
	CHECK_EQ(mm[0].msg_len, 1000);
	CHECK_EQ(mm[1].msg_len, 1000);
	CHECK_PAT(rb[0], 0, 1000, SEED_DOWN);
	CHECK_PAT(rb[1], 1000, 1000, SEED_DOWN);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* ---- splits: both directions at once, random sizes, every call -------------------------- */

#define SPLIT_TOTAL (8u << 20)
#define SPLIT_MAX (1u << 20)

static uint32_t split_rand(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static size_t split_size(uint32_t *s)
{
	uint32_t r = split_rand(s) % 100;

	if (r < 30)
		return 1 + split_rand(s) % 16;
	if (r < 70)
		return 17 + split_rand(s) % 4080;
	if (r < 95)
		return 4097 + split_rand(s) % (128u << 10);
	return (128u << 10) + split_rand(s) % (SPLIT_MAX - (128u << 10));
}

/* Sends len bytes from buf with one of six calls; blocking calls must take everything. */
static void split_send(int fd, unsigned char *buf, size_t len, uint32_t *s)
{
	struct iovec iov[4];
	struct msghdr m;
	struct mmsghdr mm[2];
	size_t cut = len > 1 ? split_rand(s) % len : 0;

	memset(&m, 0, sizeof(m));
	memset(mm, 0, sizeof(mm));
	switch (split_rand(s) % 6) {
	case 0:
		CHECK_EQ(write(fd, buf, len), len);
		break;
	case 1:
		CHECK_EQ(send(fd, buf, len, MSG_NOSIGNAL), len);
		break;
	case 2:
		CHECK_EQ(sendto(fd, buf, len, 0, NULL, 0), len);
		break;
	case 3:
		iov[0] = (struct iovec){buf, cut};
		iov[1] = (struct iovec){buf + cut, 0};
		iov[2] = (struct iovec){buf + cut, len - cut};
		CHECK_EQ(writev(fd, iov, 3), len);
		break;
	case 4:
		iov[0] = (struct iovec){buf, cut};
		iov[1] = (struct iovec){buf + cut, len - cut};
		m.msg_iov = iov;
		m.msg_iovlen = 2;
		CHECK_EQ(sendmsg(fd, &m, 0), len);
		break;
	default:
		iov[0] = (struct iovec){buf, cut};
		iov[1] = (struct iovec){buf + cut, len - cut};
		mm[0].msg_hdr.msg_iov = &iov[0];
		mm[0].msg_hdr.msg_iovlen = 1;
		mm[1].msg_hdr.msg_iov = &iov[1];
		mm[1].msg_hdr.msg_iovlen = 1;
		CHECK_EQ(sendmmsg(fd, mm, 2, 0), 2);
		CHECK_EQ(mm[0].msg_len + mm[1].msg_len, len);
		break;
	}
}

/*
 * Receives up to len bytes (at least one) with one of seven calls and checks them against
 * stream bytes [off, ...). Returns the count.
 */
static size_t split_recv(int fd, unsigned char *buf, size_t len, uint32_t *s, uint64_t off,
			 unsigned seed)
{
	struct iovec iov[3];
	struct msghdr m;
	struct mmsghdr mm[2];
	size_t cut = len > 1 ? split_rand(s) % len : 0;
	ssize_t r;

	memset(&m, 0, sizeof(m));
	memset(mm, 0, sizeof(mm));
	switch (split_rand(s) % 7) {
	case 0:
		r = read(fd, buf, len);
		break;
	case 1:
		r = recv(fd, buf, len, 0);
		break;
	case 2:
		r = recvfrom(fd, buf, len, 0, NULL, NULL);
		break;
	case 3:
		iov[0] = (struct iovec){buf, cut};
		iov[1] = (struct iovec){buf + cut, len - cut};
		r = readv(fd, iov, 2);
		break;
	case 4:
		iov[0] = (struct iovec){buf, cut};
		iov[1] = (struct iovec){buf + cut, len - cut};
		m.msg_iov = iov;
		m.msg_iovlen = 2;
		r = recvmsg(fd, &m, 0);
		break;
	case 5:
		r = recv(fd, buf, len, MSG_WAITALL);
		CHECK_EQ(r, len);
		break;
	default:
		if (cut == 0)
			cut = len;
		/* Each message is one recvmsg: the first may be short, and then the
		 * second continues the stream at buf + cut, not right after it. */
		iov[0] = (struct iovec){buf, cut};
		iov[1] = (struct iovec){buf + cut, len - cut};
		mm[0].msg_hdr.msg_iov = &iov[0];
		mm[0].msg_hdr.msg_iovlen = 1;
		mm[1].msg_hdr.msg_iov = &iov[1];
		mm[1].msg_hdr.msg_iovlen = 1;
		r = recvmmsg(fd, mm, cut < len ? 2 : 1, MSG_WAITFORONE, NULL);
		CHECK(r >= 1);
		CHECK(mm[0].msg_len > 0 && mm[0].msg_len <= cut);
		CHECK_PAT(buf, off, mm[0].msg_len, seed);
		if (r == 2) {
			CHECK(mm[1].msg_len > 0 && mm[1].msg_len <= len - cut);
			CHECK_PAT(buf + cut, off + mm[0].msg_len, mm[1].msg_len, seed);
		}
		return mm[0].msg_len + (r == 2 ? mm[1].msg_len : 0);
	}
	CHECK(r > 0);
	CHECK((size_t)r <= len);
	CHECK_PAT(buf, off, (size_t)r, seed);
	return (size_t)r;
}

struct split_rx {
	int fd;
	unsigned seed;
};

static void *split_rx_main(void *arg)
{
	struct split_rx *rx = arg;
	unsigned char *buf = malloc(SPLIT_MAX);
	uint32_t s = 0x1234567u + rx->seed;
	uint64_t off = 0;

	CHECK(buf != NULL);
	while (off < SPLIT_TOTAL) {
		size_t want = split_size(&s);
		if (want > SPLIT_TOTAL - off)
			want = SPLIT_TOTAL - off;
		off += split_recv(rx->fd, buf, want, &s, off, rx->seed);
	}
	calls_expect_eof(rx->fd);
	free(buf);
	return NULL;
}

static void split_run(int fd, unsigned seed_out, unsigned seed_in)
{
	unsigned char *buf = malloc(SPLIT_MAX);
	struct split_rx rx = {.fd = fd, .seed = seed_in};
	uint32_t s = 0x7654321u + seed_out;
	uint64_t off = 0;
	pthread_t t;

	CHECK(buf != NULL);
	CHECK(pthread_create(&t, NULL, split_rx_main, &rx) == 0);
	while (off < SPLIT_TOTAL) {
		size_t n = split_size(&s);
		if (n > SPLIT_TOTAL - off)
			n = SPLIT_TOTAL - off;
		calls_pat_fill(buf, off, n, seed_out);
		split_send(fd, buf, n, &s);
		off += n;
	}
	CHECK(shutdown(fd, SHUT_WR) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	free(buf);
}

static void case_splits(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		split_run(p.fd, SEED_UP, SEED_DOWN);
		calls_pair_close(&p);
	}
	split_run(p.fd, SEED_DOWN, SEED_UP);
	calls_pair_close(&p);
}

/* The same over IPv6. */
static void case_splits6(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET6);
	if (p.child == 0) {
		split_run(p.fd, SEED_UP, SEED_DOWN);
		calls_pair_close(&p);
	}
	split_run(p.fd, SEED_DOWN, SEED_UP);
	calls_pair_close(&p);
}

/* ---- flags ------------------------------------------------------------------------------- */

/* MSG_PEEK returns data without consuming it. */
static void case_peek(CALLS_ARGS)
{
	char buf[100];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "hello world", 11);
		calls_pair_close(&p);
	}
	/* Nothing there yet: a non-blocking peek fails with EAGAIN. */
	CHECK_ERR(recv(p.fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT), EAGAIN);
	calls_post(&p, 's');
	/* A blocking peek waits for data. */
	CHECK(recv(p.fd, buf, 5, MSG_PEEK) > 0);
	CHECK_EQ(memcmp(buf, "hello", 1), 0);
	long long end = calls_now_ms() + 5000;
	ssize_t r;
	while ((r = recv(p.fd, buf, sizeof(buf), MSG_PEEK)) < 11 && calls_now_ms() < end)
		calls_sleep_ms(2);
	CHECK_EQ(r, 11);
	CHECK_EQ(memcmp(buf, "hello world", 11), 0);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(recv(p.fd, buf, 5, MSG_PEEK), 5);
	CHECK_EQ(memcmp(buf, "hello", 5), 0);
	CHECK_EQ(recv(p.fd, buf, 3, 0), 3);
	CHECK_EQ(memcmp(buf, "hel", 3), 0);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), MSG_PEEK), 8);
	CHECK_EQ(memcmp(buf, "lo world", 8), 0);
	CHECK_EQ(calls_fionread(p.fd), 8);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), MSG_WAITALL), 8);
	CHECK_EQ(memcmp(buf, "lo world", 8), 0);
	/* At EOF a peek returns 0 as well. */
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), MSG_PEEK), 0);
	calls_pair_close(&p);
}

/* MSG_WAITALL waits for the full amount across several sends, or returns short at EOF. */
static void case_waitall(CALLS_ARGS)
{
	unsigned char buf[2000];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		for (int i = 0; i < 10; i++) {
			calls_send_pat(p.fd, (uint64_t)i * 100, 100, SEED_UP);
			calls_sleep_ms(20);
		}
		calls_await(&p);
		calls_send_pat(p.fd, 1000, 500, SEED_UP);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_pair_close(&p);
	}
	CHECK_EQ(recv(p.fd, buf, 1000, MSG_WAITALL), 1000);
	CHECK_PAT(buf, 0, 1000, SEED_UP);
	calls_post(&p, 'g');
	CHECK_EQ(recv(p.fd, buf, 1000, MSG_WAITALL), 500);
	CHECK_PAT(buf, 1000, 500, SEED_UP);
	CHECK_EQ(recv(p.fd, buf, 1000, MSG_WAITALL), 0);
	calls_pair_close(&p);
}

/*
 * MSG_DONTWAIT on a blocking socket: recv on an empty socket fails with EAGAIN; send into a
 * full buffer fails with EAGAIN, and exactly the bytes that were accepted arrive.
 */
static void case_dontwait(CALLS_ARGS)
{
	char buf[64];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "0123456789", 10);
		uint64_t n = 0;
		CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
		calls_recv_pat(p.fd, 0, n, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK_ERR(recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	CHECK_EQ(fcntl(p.fd, F_GETFL) & O_NONBLOCK, 0);
	calls_post(&p, 'g');
	CHECK(calls_wait_for(p.fd, POLLIN, 5000) & POLLIN);
	CHECK_EQ(calls_wait_fionread(p.fd, 10, 5000), 10);
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT), 10);
	CHECK_EQ(memcmp(buf, "0123456789", 10), 0);
	CHECK_ERR(recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	uint64_t n = calls_fill(p.fd, 0, SEED_DOWN);
	CHECK(n > 0);
	calls_expect_full(p.fd, &n, SEED_DOWN, MSG_DONTWAIT);
	CHECK_EQ(fcntl(p.fd, F_GETFL) & O_NONBLOCK, 0);
	CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* On TCP, recv with MSG_TRUNC discards the bytes instead of copying them (tcp(7)). */
static void case_msg_trunc(CALLS_ARGS)
{
	unsigned char buf[100];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, 100, SEED_UP);
		calls_pair_close(&p);
	}
	CHECK_EQ(recv(p.fd, buf, 10, MSG_WAITALL), 10);
	CHECK_PAT(buf, 0, 10, SEED_UP);
	CHECK_EQ(calls_wait_fionread(p.fd, 90, 5000), 90);
	CHECK_EQ(recv(p.fd, NULL, 40, MSG_TRUNC), 40);
	CHECK_EQ(recv(p.fd, buf, 50, MSG_WAITALL), 50);
	CHECK_PAT(buf, 50, 50, SEED_UP);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * Writing after the peer closed: eventually -1/EPIPE. With MSG_NOSIGNAL no SIGPIPE; with
 * write() or send(flags 0) SIGPIPE is raised once per failing call; with SIG_IGN just EPIPE.
 */
static void case_sigpipe(CALLS_ARGS)
{
	struct calls_pair p;
	ssize_t r = 0;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_pair_close(&p);
	}
	/* The child read nothing and closed: we see EOF first. */
	calls_expect_eof(p.fd);
	calls_on_signal(SIGPIPE, 0);
	int tries = 0;
	for (; tries < 500; tries++) {
		r = send(p.fd, "x", 1, MSG_NOSIGNAL);
		if (r == -1)
			break;
		CHECK_EQ(r, 1);
		calls_sleep_ms(5);
	}
	CHECK_EQ(r, -1);
	CHECK_EQ(errno, EPIPE);
	CHECK_EQ(calls_sig_count, 0);
	CHECK_ERR(send(p.fd, "x", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_EQ(calls_sig_count, 0);
	CHECK_ERR(write(p.fd, "x", 1), EPIPE);
	CHECK_EQ(calls_sig_count, 1);
	CHECK_ERR(send(p.fd, "x", 1, 0), EPIPE);
	CHECK_EQ(calls_sig_count, 2);
	struct iovec iov = {"x", 1};
	CHECK_ERR(writev(p.fd, &iov, 1), EPIPE);
	CHECK_EQ(calls_sig_count, 3);
	signal(SIGPIPE, SIG_IGN);
	CHECK_ERR(write(p.fd, "x", 1), EPIPE);
	CHECK_EQ(calls_sig_count, 3);
	/* Reading still reports EOF. */
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * A signal interrupting a blocked recv: without SA_RESTART -1/EINTR; with SA_RESTART the call
 * goes on and returns the data; with SO_RCVTIMEO set, EINTR even with SA_RESTART (signal(7)).
 */
static void case_eintr_recv(CALLS_ARGS)
{
	char c = 0;
	struct calls_pair p;
	struct calls_kick k;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "z", 1);
		calls_pair_close(&p);
	}
	calls_on_signal(SIGUSR1, 0);
	calls_kick_start(&k, SIGUSR1, 100, 100, -1);
	CHECK_ERR(recv(p.fd, &c, 1, 0), EINTR);
	calls_kick_stop(&k);
	CHECK(calls_sig_count >= 1);

	calls_sig_count = 0;
	calls_on_signal(SIGUSR1, SA_RESTART);
	struct timeval tv = {.tv_sec = 10};
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
	calls_kick_start(&k, SIGUSR1, 100, 100, -1);
	CHECK_ERR(recv(p.fd, &c, 1, 0), EINTR);
	calls_kick_stop(&k);
	CHECK(calls_sig_count >= 1);
	tv.tv_sec = 0;
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);

	calls_sig_count = 0;
	/* The kicker signals once, then tells the child to send. */
	calls_kick_start(&k, SIGUSR1, 150, 0, p.sync_wr);
	CHECK_EQ(recv(p.fd, &c, 1, 0), 1);
	CHECK_EQ(c, 'z');
	calls_kick_stop(&k);
	CHECK_EQ(calls_sig_count, 1);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * A signal interrupting a send blocked on a full buffer: without SA_RESTART and with nothing
 * copied, -1/EINTR; with SA_RESTART never EINTR: the send is restarted (or, if it had already
 * copied some bytes, returns that short count) and the rest goes through once the peer reads.
 */
static void eintr_send_with(void (*install)(int restart))
{
	const size_t big = 1u << 20;
	struct calls_pair p;
	struct calls_kick k;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t n = 0;
		CHECK_EQ(read(p.sync_rd, &n, sizeof(n)), sizeof(n));
		calls_await(&p); /* the kicker's byte: the parent has been interrupted once */
		calls_recv_pat(p.fd, 0, n + big, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	uint64_t n = calls_fill(p.fd, 0, SEED_DOWN);
	unsigned char *buf = malloc(big);
	CHECK(buf != NULL);

	install(0);
	for (int tries = 0;; tries++) {
		/* A byte still accepted (room freed late) is part of the stream: refill. */
		unsigned char b = calls_pat(n, SEED_DOWN);
		calls_kick_start(&k, SIGUSR1, 100, 100, -1);
		ssize_t r = send(p.fd, &b, 1, 0);
		int e = errno;
		calls_kick_stop(&k);
		if (r == -1) {
			CHECK_EQ(e, EINTR);
			break;
		}
		CHECK_EQ(r, 1);
		CHECK(tries < 20);
		n += 1;
		n += calls_fill(p.fd, n, SEED_DOWN);
	}
	CHECK(calls_sig_count >= 1);
	calls_pat_fill(buf, n, big, SEED_DOWN);

	calls_sig_count = 0;
	install(1);
	CHECK_EQ(write(p.sync_wr, &n, sizeof(n)), sizeof(n));
	calls_kick_start(&k, SIGUSR1, 150, 0, p.sync_wr);
	/* Restarted if nothing was copied yet; if the buffer had freed some room first, the
	 * kernel returns the short count instead. Never -1/EINTR. */
	ssize_t r = send(p.fd, buf, big, 0);
	CHECK(r > 0 && (size_t)r <= big);
	calls_write_all(p.fd, buf + r, big - (size_t)r);
	calls_kick_stop(&k);
	CHECK_EQ(calls_sig_count, 1);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	free(buf);
	calls_pair_close(&p);
}

static void with_sigaction(int restart)
{
	calls_on_signal(SIGUSR1, restart ? SA_RESTART : 0);
}

static void case_eintr_send(CALLS_ARGS)
{
	eintr_send_with(with_sigaction);
}

/*
 * The same with the handler from signal() and the choice from siginterrupt(), which
 * glibc applies through its internal sigaction (the alarm-and-siginterrupt timeout
 * idiom). siginterrupt is deprecated, and still used by programs.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void with_signal(int restart)
{
	CHECK(signal(SIGUSR1, calls_count_signal) != SIG_ERR);
	CHECK_EQ(siginterrupt(SIGUSR1, !restart), 0);
	/* glibc keeps siginterrupt's choice for the next signal() of that signal. */
	CHECK(signal(SIGUSR1, calls_count_signal) == calls_count_signal);
}
#pragma GCC diagnostic pop

static void case_signal_interrupt(CALLS_ARGS)
{
	eintr_send_with(with_signal);
}

static void sigset_other(int sig)
{
	(void)sig;
}

static int blocked(int sig)
{
	sigset_t now;

	CHECK(sigprocmask(SIG_BLOCK, NULL, &now) == 0);
	return sigismember(&now, sig);
}

/*
 * System V's sigset() and sigignore(), which glibc applies through its internal
 * sigaction, and the old action sigaction reports: the same dispositions, masks and
 * return values plain and under ulsock.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void case_sigset_semantics(CALLS_ARGS)
{
	struct sigaction now;

	CHECK(sigset(SIGUSR1, calls_count_signal) == SIG_DFL);
	CHECK(!blocked(SIGUSR1));
	CHECK(sigset(SIGUSR1, SIG_HOLD) == calls_count_signal);
	CHECK(blocked(SIGUSR1));
	CHECK(sigset(SIGUSR1, SIG_HOLD) == SIG_HOLD);
	CHECK(sigaction(SIGUSR1, NULL, &now) == 0);
	CHECK(now.sa_handler == calls_count_signal);
	CHECK(sigset(SIGUSR1, sigset_other) == SIG_HOLD);
	CHECK(!blocked(SIGUSR1));
	CHECK(sigaction(SIGUSR1, NULL, &now) == 0);
	CHECK(now.sa_handler == sigset_other);
	CHECK(!(now.sa_flags & (SA_RESTART | SA_RESETHAND)));
	calls_sig_count = 0;
	CHECK(raise(SIGUSR1) == 0);
	CHECK(sigset(SIGUSR1, calls_count_signal) == sigset_other);
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(calls_sig_count, 1);
	/* sigaction reports the handler it replaced (ulsock reported the new one). */
	struct sigaction act = {.sa_handler = sigset_other}, prev;
	CHECK(sigaction(SIGUSR1, &act, &prev) == 0);
	CHECK(prev.sa_handler == calls_count_signal);
	CHECK(sigaction(SIGUSR1, &act, &prev) == 0);
	CHECK(prev.sa_handler == sigset_other);
	CHECK_EQ(sigignore(SIGUSR1), 0);
	CHECK(sigaction(SIGUSR1, NULL, &now) == 0);
	CHECK(now.sa_handler == SIG_IGN);
	CHECK(sigset(0, SIG_IGN) == SIG_ERR && errno == EINVAL);
	CHECK(sigset(SIGUSR1, SIG_DFL) == SIG_IGN);
}
#pragma GCC diagnostic pop

/*
 * ulsock runs the calls of a single-threaded process without locks (shm/io.c, the solo
 * path). These cases stay single-threaded, with signals from interval timers in place of
 * the kicker thread, and check what a signal handler can do to such a call.
 */
/* SIGUSR2 after first_us, then every period_us (0: once; both 0: off). A POSIX timer, not
 * alarm(), which the helpers' watchdog uses; SIGEV_SIGNAL starts no thread. */
static void solo_timer(long first_us, long period_us)
{
	static timer_t id;
	static int made;

	if (!made) {
		struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR2};
		CHECK(timer_create(CLOCK_MONOTONIC, &ev, &id) == 0);
		made = 1;
	}
	struct itimerspec its = {.it_interval = {0, period_us * 1000},
				 .it_value = {0, first_us * 1000}};
	CHECK(timer_settime(id, 0, &its, NULL) == 0);
}

static void solo_check_single_threaded(void)
{
#if __has_include(<sys/single_threaded.h>)
	CHECK(__libc_single_threaded);
#endif
}

/* 16 MiB both ways in odd-sized writes and reads while a signal arrives every 200 us. */
static void case_solo_signals(CALLS_ARGS)
{
	const uint64_t total = 16u << 20;
	struct calls_pair p;
	unsigned char buf[3001];

	calls_pair_open(&p, AF_INET);
	calls_on_signal(SIGUSR2, SA_RESTART);
	solo_check_single_threaded();
	solo_timer(200, 200);
	unsigned seed_out = p.child == 0 ? SEED_UP : SEED_DOWN;
	unsigned seed_in = p.child == 0 ? SEED_DOWN : SEED_UP;
	uint64_t sent = 0, got = 0;
	size_t step = 1;
	CHECK(fcntl(p.fd, F_SETFL, O_NONBLOCK) == 0);
	while (sent < total || got < total) {
		struct pollfd pf = {.fd = p.fd, .events = (short)(POLLIN | (sent < total ? POLLOUT : 0))};
		int r = poll(&pf, 1, 10000);
		if (r < 0 && errno == EINTR)
			continue;
		CHECK(r > 0);
		if (sent < total && (pf.revents & POLLOUT)) {
			size_t n = step % sizeof(buf) + 1;
			if (n > total - sent)
				n = (size_t)(total - sent);
			calls_pat_fill(buf, sent, n, seed_out);
			ssize_t w = send(p.fd, buf, n, 0);
			if (w > 0)
				sent += (uint64_t)w;
			else
				CHECK(errno == EAGAIN || errno == EINTR);
			step = step * 7 + 3;
		}
		if (pf.revents & (POLLIN | POLLHUP)) {
			ssize_t n = recv(p.fd, buf, (step % sizeof(buf)) + 1, 0);
			if (n > 0) {
				for (ssize_t i = 0; i < n; i++)
					CHECK_EQ(buf[i], calls_pat(got + (uint64_t)i, seed_in));
				got += (uint64_t)n;
			} else {
				CHECK(n < 0 && (errno == EAGAIN || errno == EINTR));
			}
		}
	}
	solo_timer(0, 0);
	CHECK(calls_sig_count > 0);
	CHECK(fcntl(p.fd, F_SETFL, 0) == 0);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

static int solo_fd = -1;
static volatile sig_atomic_t solo_handler_ret = -2, solo_handler_errno;

static void solo_close_handler(int sig)
{
	(void)sig;
	solo_handler_ret = close(solo_fd);
}

static void solo_send_handler(int sig)
{
	(void)sig;
	int e = errno;
	solo_handler_ret = (int)send(solo_fd, "h", 1, MSG_DONTWAIT);
	solo_handler_errno = errno;
	errno = e;
}

/*
 * A handler closes the socket its process is blocked in recv on. Kernel TCP lets the recv
 * go on until data comes; ulsock may end it with EBADF instead. Neither may crash or hang.
 */
static void case_solo_handler_close(CALLS_ARGS)
{
	struct calls_pair p;
	char c = 0;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		usleep(300 * 1000);
		/* The parent's socket may be closed by now: EPIPE is fine, SIGPIPE is not. */
		ssize_t w = send(p.fd, "z", 1, MSG_NOSIGNAL);
		CHECK(w == 1 || (w == -1 && (errno == EPIPE || errno == ECONNRESET)));
		calls_pair_close(&p);
	}
	solo_check_single_threaded();
	solo_fd = p.fd;
	calls_set_handler(SIGUSR2, solo_close_handler, SA_RESTART);
	calls_post(&p, 'g');
	solo_timer(100 * 1000, 0);
	ssize_t r = recv(p.fd, &c, 1, 0);
	CHECK_EQ(solo_handler_ret, 0);
	CHECK(r == 1 ? c == 'z' : (r == -1 && errno == EBADF));
	CHECK(waitpid(p.child, NULL, 0) == p.child);
}

/*
 * A handler sends on the socket whose receive it interrupted: the other direction, so it
 * must go through, and the blocked recv must then get the peer's answer.
 */
static void case_solo_handler_send(CALLS_ARGS)
{
	struct calls_pair p;
	char c = 0;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK_EQ(recv(p.fd, &c, 1, MSG_WAITALL), 1);
		CHECK_EQ(c, 'h');
		calls_write_all(p.fd, "z", 1);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	solo_check_single_threaded();
	solo_fd = p.fd;
	calls_set_handler(SIGUSR2, solo_send_handler, SA_RESTART);
	solo_timer(100 * 1000, 0);
	CHECK_EQ(recv(p.fd, &c, 1, 0), 1);
	CHECK_EQ(c, 'z');
	CHECK_EQ(solo_handler_ret, 1);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * A one-way stream of small messages, received with a large buffer, so that every receive
 * empties the ring and the next one is paced (shm/io.c, ring_recv); bursts end in pauses,
 * so the last message of each burst reaches a receiver that paced its look. Then one
 * request and reply each way: a receive after a send is not paced. Every byte is checked.
 */
static void case_paced_stream(CALLS_ARGS)
{
	static unsigned char buf[65536];
	const int bursts = 5, per_burst = 20000;
	uint64_t total = 0, got = 0, rng = 0x9e3779b97f4a7c15ull;
	struct calls_pair p;

	for (int i = 0; i < bursts * per_burst; i++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		total += 1 + (rng >> 33) % 200;
	}
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint64_t off = 0;
		rng = 0x9e3779b97f4a7c15ull;
		for (int b = 0; b < bursts; b++) {
			for (int i = 0; i < per_burst; i++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				size_t n = 1 + (rng >> 33) % 200;
				calls_send_pat(p.fd, off, n, SEED_UP);
				off += n;
			}
			calls_sleep_ms(5);
		}
		calls_recv_pat(p.fd, 0, 1, SEED_DOWN);
		calls_send_pat(p.fd, off, 1, SEED_UP);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	while (got < total) {
		ssize_t r = recv(p.fd, buf, sizeof(buf), 0);
		CHECK(r > 0);
		CHECK((uint64_t)r <= total - got);
		CHECK_PAT(buf, got, (size_t)r, SEED_UP);
		got += (uint64_t)r;
	}
	calls_send_pat(p.fd, 0, 1, SEED_DOWN);
	calls_recv_pat(p.fd, total, 1, SEED_UP);
	calls_expect_eof(p.fd);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"rw", case_rw},
	{"readv_writev", case_readv_writev},
	{"send_recv", case_send_recv},
	{"sendto_recvfrom", case_sendto_recvfrom},
	{"sendmsg_recvmsg", case_sendmsg_recvmsg},
	{"mmsg", case_mmsg},
	{"splits", case_splits},
	{"splits6", case_splits6},
	{"peek", case_peek},
	{"waitall", case_waitall},
	{"dontwait", case_dontwait},
	{"msg_trunc", case_msg_trunc},
	{"sigpipe", case_sigpipe},
	{"eintr_recv", case_eintr_recv},
	{"signal_interrupt", case_signal_interrupt},
	{"sigset_semantics", case_sigset_semantics},
	{"eintr_send", case_eintr_send},
	{"solo_signals", case_solo_signals},
	{"solo_handler_close", case_solo_handler_close},
	{"solo_handler_send", case_solo_handler_send},
	{"paced_stream", case_paced_stream},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
