/*
 * calls_fortify: the _FORTIFY_SOURCE entry points of glibc on a TCP stream.
 *
 * With _FORTIFY_SOURCE=2 and optimization, glibc's headers turn read/recv/recvfrom/poll/
 * ppoll on a buffer of known size and a length not known at compile time into calls to
 * __read_chk, __recv_chk, __recvfrom_chk, __poll_chk and __ppoll_chk. A preload library that
 * interposes only the plain names misses them, so this file forces the fortified variants:
 * the define below must come before any include, and it needs -O (the project's default
 * RelWithDebInfo build gives -O2). Without optimization the case skips.
 * Usage: calls_fortify fortify.
 */
#undef _FORTIFY_SOURCE
#if defined(__OPTIMIZE__)
#define _FORTIFY_SOURCE 2
#endif

#include "calls_common.h"

#define SEED 7u

/* Lengths the compiler cannot see through, so the checked variants are called. */
static volatile size_t chunk = 1000;
static volatile nfds_t one_fd = 1;

static void recv_chunk(int fd, int how, uint64_t off)
{
	unsigned char buf[4096];
	struct sockaddr_storage from;
	socklen_t fromlen = sizeof(from);
	size_t got = 0;

	while (got < chunk) {
		ssize_t r;
		size_t want = chunk - got;
		switch (how) {
		case 0:
			r = read(fd, buf, want); /* __read_chk */
			break;
		case 1:
			r = recv(fd, buf, want, 0); /* __recv_chk */
			break;
		case 2:
			r = recv(fd, buf, want, MSG_PEEK); /* __recv_chk */
			CHECK(r > 0);
			CHECK_PAT(buf, off + got, (size_t)r, SEED);
			r = recv(fd, buf, (size_t)r, 0);
			break;
		default:
			r = recvfrom(fd, buf, want, 0, (struct sockaddr *)&from,
				     &fromlen); /* __recvfrom_chk */
			CHECK_EQ(fromlen, 0);
			break;
		}
		CHECK(r > 0);
		CHECK_PAT(buf, off + got, (size_t)r, SEED);
		got += (size_t)r;
	}
}

static void wait_readable(int fd, int use_ppoll)
{
	struct pollfd pfd[1] = {{.fd = fd, .events = POLLIN}};
	struct timespec ts = {.tv_sec = 5};
	int r;

	if (use_ppoll)
		r = ppoll(pfd, one_fd, &ts, NULL); /* __ppoll_chk */
	else
		r = poll(pfd, one_fd, 5000); /* __poll_chk */
	CHECK_EQ(r, 1);
	CHECK(pfd[0].revents & POLLIN);
}

static void case_fortify(CALLS_ARGS)
{
	struct calls_pair p;

#if defined(_FORTIFY_SOURCE)
	dprintf(1, "calls: fortify level %d\n", (int)_FORTIFY_SOURCE);
#else
	calls_skip("built without optimization: _FORTIFY_SOURCE has no effect");
#endif
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		for (int i = 0; i < 8; i++) {
			calls_await(&p);
			calls_send_pat(p.fd, (uint64_t)i * chunk, chunk, SEED);
		}
		calls_pair_close(&p);
	}
	for (int i = 0; i < 8; i++) {
		calls_post(&p, 'g');
		wait_readable(p.fd, i & 1);
		recv_chunk(p.fd, i % 4, (uint64_t)i * chunk);
	}
	unsigned char c[16];
	CHECK_EQ(read(p.fd, c, chunk > sizeof(c) ? sizeof(c) : chunk), 0);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"fortify", case_fortify},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
