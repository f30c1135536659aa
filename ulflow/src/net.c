/* SPDX-License-Identifier: MIT */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int64_t ulf_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_addr(const char *host, unsigned port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

int ulf_listen(const char *host, unsigned port, unsigned *bound)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int one = 1, fd, rc;

	if (parse_addr(host, port, &sa) < 0)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*bound = ntohs(sa.sin_port);
	return fd;
}

int ulf_wait_readable(int fd, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (;;) {
		int64_t left = deadline - ulf_now_ms();
		int n;

		if (left < 0)
			return 0;
		n = poll(&p, 1, (int)(left > 1000000 ? 1000000 : left));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			continue;
		return 1;
	}
}

static void set_nodelay(int fd)
{
	int one = 1;

	/* Buffers are whole messages: never hold one back waiting for more. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* One attempt: a non-blocking connect bounded by the deadline. */
static int connect_once(const struct sockaddr_in *sa, int64_t deadline)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int err = 0;
	socklen_t el = sizeof(err);
	struct pollfd p;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
		if (errno != EINPROGRESS) {
			err = errno;
			goto err_close;
		}
		p = (struct pollfd){ .fd = fd, .events = POLLOUT };
		int64_t left = deadline - ulf_now_ms();
		if (poll(&p, 1, left > 0 ? (int)left : 0) <= 0) {
			err = ETIMEDOUT;
			goto err_close;
		}
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		if (err)
			goto err_close;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	set_nodelay(fd);
	return fd;
err_close:
	close(fd);
	return -err;
}

int ulf_connect(const char *host, unsigned port, int64_t deadline)
{
	struct sockaddr_in sa;
	int fd;

	if (parse_addr(host, port, &sa) < 0)
		return -EINVAL;
	for (;;) {
		fd = connect_once(&sa, deadline);
		/* The peer may not listen yet when a launcher starts ranks in any order. */
		if (fd >= 0 || (fd != -ECONNREFUSED && fd != -EHOSTUNREACH &&
				fd != -ENETUNREACH) || ulf_now_ms() >= deadline)
			return fd;
		usleep(50000);
	}
}

int ulf_accept(int lfd, int64_t deadline)
{
	int rc = ulf_wait_readable(lfd, deadline), fd;

	if (rc <= 0)
		return rc < 0 ? rc : -ETIMEDOUT;
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return -errno;
	set_nodelay(fd);
	return fd;
}
