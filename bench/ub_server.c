/*
 * ulsock-bench: the server role.
 *
 * One accept loop. Each connection starts with a struct ub_hello. Connection-rate
 * connections are answered inline (the accept loop is what they measure); every other
 * connection joins its session, and once a session has all its connections a child
 * process serves them all: one process per ping-pong or stream pair, one process for
 * the N clients of hotspot, fan-in and fan-out.
 */
#include "ub.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PENDING 32

struct session {
	struct ub_hello hello;
	int fds[UB_MAX_CLIENTS];
	int n;
	double since;
};

static struct session pending[MAX_PENDING];
static int npending;

static void session_close(struct session *s)
{
	for (int i = 0; i < s->n; i++)
		close(s->fds[i]);
	*s = pending[--npending];
}

static int hello_valid(const struct ub_hello *h)
{
	return h->magic == UB_HELLO_MAGIC && h->version == UB_VERSION && h->test > 0 &&
	       h->test < UB_NTESTS && h->nconn >= 1 && h->nconn <= UB_MAX_CLIENTS &&
	       h->msg_size >= 1 && h->msg_size <= (64u << 20) && h->fetch <= (64u << 20) &&
	       h->duration_us <= 3600u * 1000000u;
}

/* Connect tests: answer the fetch (at least one byte, so the path is decided) and close. */
static void serve_fetch(int fd, const struct ub_hello *h, double timeout)
{
	static char page[64 << 10];
	uint64_t left = h->fetch ? h->fetch : 1;
	struct ub_trailer t;

	if (h->flags & UB_F_STATS) {
		ub_trailer_fill(&t, 0, 0, 0);
		ub_write_all(fd, &t, sizeof(t), 0, timeout);
		close(fd);
		return;
	}
	while (left) {
		size_t n = left < sizeof(page) ? (size_t)left : sizeof(page);

		if (ub_write_all(fd, page, n, 0, timeout) < 0)
			break;
		left -= n;
	}
	close(fd);
}

/* Ping-pong server of one connection, in the client's receive mode. */
static int serve_pingpong(int fd, const struct ub_hello *h, double timeout, double t0)
{
	int spin = (h->flags & UB_F_SPIN) != 0;
	char *buf = malloc(h->msg_size);
	uint64_t done = 0;
	struct ub_trailer t;
	int r;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		r = ub_read_some(fd, buf, h->msg_size, spin, timeout);
		if (r <= 0)
			break;
		if ((uint64_t)r < h->msg_size)
			r = ub_read_all(fd, buf + r, h->msg_size - (uint64_t)r, spin, timeout);
		if (r >= 0)
			r = ub_write_all(fd, buf, h->msg_size, spin, timeout);
		if (r < 0)
			break;
		done++;
	}
	free(buf);
	if (r < 0)
		return r;
	/* Every message read was answered whole: both counts are done messages. */
	ub_trailer_fill(&t, done * h->msg_size, done * h->msg_size, t0);
	return ub_write_all(fd, &t, sizeof(t), spin, timeout);
}

static unsigned roles_of(int test)
{
	switch (test) {
	case UB_HOTSPOT:
		return UB_R_ECHO;
	case UB_FANOUT:
		return UB_R_SOURCE;
	case UB_BIBW:
		return UB_R_SOURCE | UB_R_SINK | UB_R_PEER_TRAILER;
	default:
		return UB_R_SINK | UB_R_PEER_TRAILER;
	}
}

static int serve_engine(struct session *s, double timeout, double t0)
{
	const struct ub_hello *h = &s->hello;
	struct ub_engine_conn *c = calloc((size_t)s->n, sizeof(*c));
	int spin = (h->flags & UB_F_SPIN) != 0, rc;
	struct ub_opts o = {.timeout = timeout};

	if (!c)
		return -ENOMEM;
	for (int i = 0; i < s->n; i++) {
		ub_sock_setup(s->fds[i], &o, 1);
		c[i].fd = s->fds[i];
		c[i].roles = roles_of(h->test);
		c[i].msg = h->msg_size;
		c[i].window = h->window;
	}
	rc = ub_engine_run(c, s->n, t0 + h->duration_us / 1e6, spin, timeout, t0);
	free(c);
	return rc;
}

/* Serves one complete session and ends its connections: -errno or 0. */
static int serve_session(struct session *s, double timeout)
{
	const struct ub_hello *h = &s->hello;
	double t0 = ub_now();
	int rc;

	ub_watchdog(h->duration_us / 1e6 * 3 + timeout * 3 + 30);
	if (h->test == UB_LATENCY) {
		struct ub_opts o = {.timeout = timeout};

		ub_sock_setup(s->fds[0], &o, (h->flags & UB_F_SPIN) != 0);
		rc = serve_pingpong(s->fds[0], h, timeout, t0);
	} else {
		rc = serve_engine(s, timeout, t0);
	}
	if (rc < 0)
		ub_warn("server: %s session: %s", ub_test_name(h->test), strerror(-rc));
	/* End each connection explicitly, shutdown first: exit's implicit close is
	 * invisible to an interposer, and a close of a socket that fork shared may not
	 * count as the end of the stream there. */
	for (int i = 0; i < s->n; i++)
		shutdown(s->fds[i], SHUT_WR);
	ub_watchdog(0);
	return rc;
}

/* --inline: sessions one after another in this process, never forked. */
static int inline_sessions;

static void start_session(int lfd, struct session *s, double timeout)
{
	if (inline_sessions) {
		ub_cpu_base = ub_cpu_self(); /* the session's trailers count its own CPU */
		serve_session(s, timeout);
		ub_cpu_base = 0;
		session_close(s);
		return;
	}
	pid_t pid = fork();

	if (pid < 0) {
		ub_warn("server: fork: %s", strerror(errno));
	} else if (pid == 0) {
		close(lfd);
		/* Only this session's sockets stay open in the child, so that every other
		 * session's connections end when their own server closes them. */
		for (int i = 0; i < npending; i++)
			if (&pending[i] != s)
				for (int j = 0; j < pending[i].n; j++)
					close(pending[i].fds[j]);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int rc = serve_session(s, timeout);
		for (int i = 0; i < s->n; i++)
			close(s->fds[i]);
		_exit(rc < 0);
	}
	session_close(s);
}

static void add_to_session(int lfd, int fd, const struct ub_hello *h, double timeout)
{
	struct session *s = NULL;

	for (int i = 0; i < npending && !s; i++)
		if (pending[i].hello.session == h->session && pending[i].hello.test == h->test)
			s = &pending[i];
	if (!s) {
		if (npending == MAX_PENDING) {
			ub_warn("server: too many sessions being set up");
			close(fd);
			return;
		}
		s = &pending[npending++];
		s->hello = *h;
		s->n = 0;
		s->since = ub_now();
	}
	s->fds[s->n++] = fd;
	if ((uint32_t)s->n >= s->hello.nconn)
		start_session(lfd, s, timeout);
}

static void accept_one(int lfd, const struct ub_opts *o)
{
	struct ub_hello h;
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0) {
		if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
			ub_warn("server: accept: %s", strerror(errno));
		return;
	}
	ub_sock_setup(fd, o, 0);
	if (ub_read_all(fd, &h, sizeof(h), 0, o->timeout) < 0 || !hello_valid(&h)) {
		ub_warn("server: connection without a valid hello, closed");
		close(fd);
		return;
	}
	if (h.test == UB_CONNECT || h.test == UB_GANGLIA)
		serve_fetch(fd, &h, o->timeout);
	else
		add_to_session(lfd, fd, &h, o->timeout);
}

/* Serves until killed. Sessions whose clients never all arrive are dropped. */
int ub_server_run(int lfd, const struct ub_opts *o)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};

	inline_sessions = o->inline_sessions;
	signal(SIGCHLD, SIG_DFL);
	for (;;) {
		int r = poll(&p, 1, 500);

		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		for (int i = npending - 1; i >= 0; i--)
			if (ub_now() - pending[i].since > o->timeout) {
				ub_warn("server: session %u incomplete, dropped", pending[i].hello.session);
				session_close(&pending[i]);
			}
		if (r > 0)
			accept_one(lfd, o);
	}
	return 0;
}
