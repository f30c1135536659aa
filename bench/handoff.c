/*
 * uls-handoff: what passing a connected TCP socket to another process with SCM_RIGHTS
 * costs the sender.
 *
 * Each round: a client connects and sends two bytes, then waits for the answer (asleep in
 * a receive, or with -i in no call at all: it sleeps 100 ms); the server accepts, reads
 * the two bytes, forks a worker over a socketpair and times one sendmsg that carries the
 * socket; the worker answers on it and exits. Under ulsock the connection is on the fast
 * path before the pass, and the pass moves it back to kernel TCP (docs/design.md,
 * "SCM_RIGHTS").
 *
 *   uls-handoff [-n ROUNDS] [-i]
 *
 * Prints one line: "handoff: rounds=N median_us=M p90_us=P max_us=X".
 * Plain C11 and POSIX; it never links against ulsock, so it measures any substrate.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "uls-handoff: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void read_exact(int fd, char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = read(fd, buf, len);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 0)
				errno = EPIPE;
			die("read");
		}
		buf += n;
		len -= (size_t)n;
	}
}

static void client(const struct sockaddr_in *to, int idle)
{
	char buf[2];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || connect(fd, (const struct sockaddr *)to, sizeof(*to)) < 0)
		die("connect");
	if (write(fd, "hi", 2) != 2)
		die("write");
	if (idle) {
		struct timespec ts = {0, 100000000};
		nanosleep(&ts, NULL);
	}
	read_exact(fd, buf, 2);
	if (memcmp(buf, "ok", 2) != 0) {
		fprintf(stderr, "uls-handoff: wrong answer\n");
		exit(1);
	}
	close(fd);
	_exit(0);
}

static void worker(int unix_fd)
{
	char byte;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = {&byte, 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};
	int fd;

	if (recvmsg(unix_fd, &m, 0) != 1 || !CMSG_FIRSTHDR(&m))
		die("recvmsg");
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	if (write(fd, "ok", 2) != 2)
		die("write");
	close(fd);
	_exit(0);
}

/* One sendmsg carrying fd over unix_fd; returns its time in microseconds. */
static double pass(int unix_fd, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	char byte = 'F';
	struct iovec iov = {&byte, 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};

	memset(&ctl, 0, sizeof(ctl));
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	double t0 = now_us();
	if (sendmsg(unix_fd, &m, 0) != 1)
		die("sendmsg");
	return now_us() - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t len = sizeof(addr);
	int rounds = 200, idle = 0, opt;

	while ((opt = getopt(argc, argv, "n:i")) != -1) {
		if (opt == 'n')
			rounds = atoi(optarg);
		else if (opt == 'i')
			idle = 1;
		else {
			fprintf(stderr, "usage: uls-handoff [-n ROUNDS] [-i]\n");
			return 2;
		}
	}
	if (rounds < 1)
		rounds = 1;
	double *t = calloc((size_t)rounds, sizeof(*t));
	if (!t)
		die("calloc");
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(lfd, 16) < 0 || getsockname(lfd, (struct sockaddr *)&addr, &len) < 0)
		die("listen");
	for (int i = 0; i < rounds; i++) {
		char buf[2];
		int u[2];
		pid_t cl = fork();
		if (cl < 0)
			die("fork");
		if (cl == 0) {
			close(lfd);
			client(&addr, idle);
		}
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			die("accept");
		read_exact(fd, buf, 2);
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, u) < 0)
			die("socketpair");
		pid_t w = fork();
		if (w < 0)
			die("fork");
		if (w == 0) {
			close(u[0]);
			close(lfd);
			close(fd);
			worker(u[1]);
		}
		close(u[1]);
		t[i] = pass(u[0], fd);
		close(fd);
		close(u[0]);
		int st1 = 0, st2 = 0;
		if (waitpid(w, &st1, 0) < 0 || waitpid(cl, &st2, 0) < 0)
			die("waitpid");
		if (!WIFEXITED(st1) || WEXITSTATUS(st1) || !WIFEXITED(st2) || WEXITSTATUS(st2)) {
			fprintf(stderr, "uls-handoff: a child failed\n");
			return 1;
		}
	}
	qsort(t, (size_t)rounds, sizeof(*t), cmp_double);
	printf("handoff: rounds=%d median_us=%.1f p90_us=%.1f max_us=%.1f\n", rounds,
	       t[rounds / 2], t[(rounds * 9) / 10], t[rounds - 1]);
	free(t);
	return 0;
}
