/* SPDX-License-Identifier: MIT */
/* What the connection harnesses share (fuzz_loop.h). */
#include "fuzz_loop.h"
#include "fuzz_shm.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fdtable.h"
#include "core/log.h"
#include "os/libc.h"
#include "transport/shm/fence.h"

int fuzz_listen_fd = -1;
struct sockaddr_in fuzz_listen_addr;

void fuzz_loop_init(void)
{
	socklen_t len = sizeof(fuzz_listen_addr);

	/* The library's warnings (a broken connection) would flood the fuzzer's output. */
	setenv("ULSOCK_LOG", "error", 1);
	/*
	 * Every input is a short connection to one listener: with the client's learning on
	 * (core/shortconn.h), the fifth and every later one would stay on kernel TCP, and
	 * fuzz_client would play nothing from then on (as it did from b8eba49 to here).
	 */
	setenv("ULSOCK_SHORT_CALLS", "0", 1);
	signal(SIGPIPE, SIG_IGN);
	uls_libc_init();
	uls_config_load();
	uls_log_open();
	if (uls_fdtable_init() < 0)
		abort();
	uls_fence_init();
	fuzz_listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memset(&fuzz_listen_addr, 0, sizeof(fuzz_listen_addr));
	fuzz_listen_addr.sin_family = AF_INET;
	fuzz_listen_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fuzz_listen_fd < 0 ||
	    bind(fuzz_listen_fd, (struct sockaddr *)&fuzz_listen_addr, len) < 0 ||
	    listen(fuzz_listen_fd, 16) < 0 ||
	    getsockname(fuzz_listen_fd, (struct sockaddr *)&fuzz_listen_addr, &len) < 0) {
		fprintf(stderr, "fuzz: no loopback listener: %s\n", strerror(errno));
		abort();
	}
}

uint64_t fuzz_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int fuzz_connected(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int err = 0;
	socklen_t len = sizeof(err);

	while (poll(&p, 1, 10000) < 0)
		if (errno != EINTR)
			return 0;
	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

int fuzz_accept_client(int cfd)
{
	struct sockaddr_in mine, peer;
	socklen_t a = sizeof(mine);

	if (getsockname(cfd, (struct sockaddr *)&mine, &a) < 0)
		return -1;
	for (;;) {
		socklen_t b = sizeof(peer);
		int fd = accept4(fuzz_listen_fd, (struct sockaddr *)&peer, &b, SOCK_CLOEXEC);
		if (fd < 0 && errno == EINTR)
			continue;
		if (fd < 0 || (peer.sin_port == mine.sin_port &&
				peer.sin_addr.s_addr == mine.sin_addr.s_addr))
			return fd;
		close(fd);
	}
}

void fuzz_check_untouched(const void *now, const void *before, const struct fuzz_range *r,
			  size_t n, const char *who)
{
	const uint8_t *a = before, *b = now;

	for (size_t i = 0; i < n; i++, r++) {
		if (memcmp(b + r->off, a + r->off, r->len) == 0)
			continue;
		uint32_t was, is;
		memcpy(&was, a + r->off, 4);
		memcpy(&is, b + r->off, 4);
		if (r->may_clear && (is & ~was) == 0)
			continue;
		for (size_t k = 0; k < r->len; k++)
			if (b[r->off + k] != a[r->off + k])
				fprintf(stderr, "the %s wrote the other side's byte at %zu: %#x -> %#x\n",
					who, r->off + k, a[r->off + k], b[r->off + k]);
		FUZZ_ASSERT(!"the library's side wrote only its own words");
	}
}
