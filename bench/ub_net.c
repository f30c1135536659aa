/*
 * ulsock-bench: sockets with deadlines.
 *
 * Two receive modes, the seeds' "event-based" and "polling": blocking calls bounded by
 * SO_RCVTIMEO/SO_SNDTIMEO (the process sleeps until the substrate wakes it), or a
 * non-blocking socket spun on until data arrives, reading the clock every few thousand
 * tries so that a dead peer still ends the wait.
 */
#include "ub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#define SPIN_CLOCK_EVERY 4096

/* Parses HOST:PORT (IPv4 or a name) or [V6]:PORT into o->addr. */
int ub_parse_addr(const char *text, struct ub_opts *o)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
	char host[128];
	const char *colon = strrchr(text, ':');
	size_t hl;

	if (!colon || colon == text || !colon[1] || strlen(text) >= sizeof(host))
		return -EINVAL;
	hl = (size_t)(colon - text);
	if (text[0] == '[' && colon[-1] == ']') {
		memcpy(host, text + 1, hl - 2);
		host[hl - 2] = 0;
	} else {
		memcpy(host, text, hl);
		host[hl] = 0;
	}
	if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
		return -EINVAL;
	memcpy(&o->addr, res->ai_addr, res->ai_addrlen);
	o->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	snprintf(o->addr_text, sizeof(o->addr_text), "%s", text);
	return 0;
}

static void unix_addr(const struct ub_opts *o, struct sockaddr_un *su)
{
	memset(su, 0, sizeof(*su));
	su->sun_family = AF_UNIX;
	snprintf(su->sun_path, sizeof(su->sun_path), "%s", o->unix_path);
}

/* A listening socket; stores its bound address (the kernel picks port 0). */
int ub_listen(const struct ub_opts *o, struct sockaddr_storage *bound, socklen_t *len)
{
	struct sockaddr_un su;
	int one = 1, fd, err;

	fd = socket(o->unix_path ? AF_UNIX : o->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (o->unix_path) {
		unix_addr(o, &su);
		unlink(o->unix_path);
		if (bind(fd, (struct sockaddr *)&su, sizeof(su)) < 0)
			goto err_close;
	} else {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (const struct sockaddr *)&o->addr, o->addrlen) < 0)
			goto err_close;
	}
	if (listen(fd, 1024) < 0)
		goto err_close;
	*len = sizeof(*bound);
	if (getsockname(fd, (struct sockaddr *)bound, len) < 0)
		goto err_close;
	return fd;

err_close:
	err = errno;
	close(fd);
	return -err;
}

static void set_timeouts(int fd, double seconds)
{
	struct timeval tv = {.tv_sec = (time_t)seconds,
			     .tv_usec = (suseconds_t)((seconds - (time_t)seconds) * 1e6)};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Per-connection settings: no Nagle on TCP, call timeouts, and the receive mode. */
void ub_sock_setup(int fd, const struct ub_opts *o, int spin)
{
	int one = 1, fl;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_timeouts(fd, o->timeout);
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, spin ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* A connected socket, or -errno. The connect itself is bounded by SO_SNDTIMEO. */
int ub_connect(const struct ub_opts *o)
{
	struct sockaddr_un su;
	int fd, err;

	fd = socket(o->unix_path ? AF_UNIX : o->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	set_timeouts(fd, o->timeout);
	if (o->unix_path) {
		unix_addr(o, &su);
		if (connect(fd, (struct sockaddr *)&su, sizeof(su)) < 0)
			goto err_close;
	} else if (connect(fd, (const struct sockaddr *)&o->addr, o->addrlen) < 0) {
		goto err_close;
	}
	return fd;

err_close:
	err = errno;
	close(fd);
	return err == EINPROGRESS ? -ETIMEDOUT : -err;
}

/*
 * Whether a failed call with this errno should be retried. A spinning caller gives up
 * timeout seconds after its first EAGAIN; the clock is read only once spinning starts,
 * so a call that finds its data ready costs no clock read.
 */
static int retry(int err, int spin, unsigned *tries, double *deadline, double timeout)
{
	if (err == EINTR)
		return 1;
	if (err != EAGAIN && err != EWOULDBLOCK)
		return 0;
	if (!spin)
		return 0; /* a blocking call returned EAGAIN: its timeout expired */
	if (*tries == 0)
		*deadline = ub_now() + timeout;
	if (++*tries % SPIN_CLOCK_EVERY == 0 && ub_now() > *deadline)
		return 0;
	return 1;
}

int ub_write_all(int fd, const void *buf, size_t n, int spin, double timeout)
{
	const char *p = buf;
	unsigned tries = 0;
	double deadline = 0;
	size_t done = 0;

	while (done < n) {
		ssize_t w = send(fd, p + done, n - done, MSG_NOSIGNAL);

		if (w < 0) {
			int err = errno;

			if (retry(err, spin, &tries, &deadline, timeout))
				continue;
			return err == EAGAIN ? -ETIMEDOUT : -err;
		}
		done += (size_t)w;
	}
	return (int)(n > 0x7fffffff ? 0x7fffffff : n);
}

/* Reads at least one byte; 0 means end of file. */
int ub_read_some(int fd, void *buf, size_t n, int spin, double timeout)
{
	unsigned tries = 0;
	double deadline = 0;

	for (;;) {
		ssize_t r = recv(fd, buf, n, 0);

		if (r >= 0)
			return (int)r;
		int err = errno;

		if (!retry(err, spin, &tries, &deadline, timeout))
			return err == EAGAIN ? -ETIMEDOUT : -err;
	}
}

/* Reads exactly n bytes; -EPIPE when the peer closed first. */
int ub_read_all(int fd, void *buf, size_t n, int spin, double timeout)
{
	char *p = buf;
	size_t done = 0;

	while (done < n) {
		int r = ub_read_some(fd, p + done, n - done, spin, timeout);

		if (r < 0)
			return r;
		if (r == 0)
			return -EPIPE;
		done += (size_t)r;
	}
	return 0;
}

/* Keeps the last UB_TAIL bytes of a stream, where the peer's trailer will be. */
void ub_tail_push(unsigned char *tail, size_t *tail_len, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	if (n >= UB_TAIL) {
		memcpy(tail, p + n - UB_TAIL, UB_TAIL);
		*tail_len = UB_TAIL;
		return;
	}
	if (*tail_len + n > UB_TAIL) {
		size_t drop = *tail_len + n - UB_TAIL;

		memmove(tail, tail + drop, *tail_len - drop);
		*tail_len -= drop;
	}
	memcpy(tail + *tail_len, p, n);
	*tail_len += n;
}

int ub_tail_trailer(const unsigned char *tail, size_t tail_len, struct ub_trailer *t)
{
	if (tail_len < UB_TAIL)
		return -EPROTO;
	memcpy(t, tail, sizeof(*t));
	return t->magic == UB_TRAILER_MAGIC ? 0 : -EPROTO;
}

void ub_trailer_fill(struct ub_trailer *t, uint64_t sent, uint64_t received, double t0)
{
	t->magic = UB_TRAILER_MAGIC;
	t->sent = sent;
	t->received = received;
	t->cpu_us = (uint64_t)((ub_cpu_self() - ub_cpu_base) * 1e6);
	t->wall_us = (uint64_t)((ub_now() - t0) * 1e6);
}

/* Reads until end of file, counting bytes and keeping the tail. */
int ub_drain_to_eof(int fd, int spin, double timeout, uint64_t *bytes,
		    unsigned char *tail, size_t *tail_len)
{
	static unsigned char buf[1 << 16];

	for (;;) {
		int r = ub_read_some(fd, buf, sizeof(buf), spin, timeout);

		if (r < 0)
			return r;
		if (r == 0)
			return 0;
		*bytes += (uint64_t)r;
		ub_tail_push(tail, tail_len, buf, (size_t)r);
	}
}
