/* SPDX-License-Identifier: MIT */
/*
 * Connections of the core driven the way the interposer drives them, without the preload:
 * the tests make real loopback TCP sockets with plain libc calls (no preload is loaded, so
 * socket, connect and accept are the kernel's) and do around each call what
 * src/preload/socket.c and io.c do around the program's: the descriptor table entry,
 * uls_conn_connect_prepare / connect / uls_conn_connect_done, accept4 then
 * uls_conn_accept, the conn or libc by the connection's path for data calls, the entry
 * forgotten before uls_conn_close. pair_init does what preload/init.c does that the core
 * needs, with the ULSOCK_* variables in a known state.
 *
 * Every wait of a test is bounded by a watchdog (SIGALRM, re-armed per case) that fails
 * the test. The segment files the test's clients create are removed at exit, after a
 * failed check (check.h exits) and by the watchdog; an unnamed spare (segment.h) needs
 * nothing. Both ends of a connection may live in one process: the core finds the other
 * end through the descriptor table where it must serve it itself (revert.c).
 */
#ifndef ULS_TEST_CONN_PAIR_H
#define ULS_TEST_CONN_PAIR_H

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/bell.h"
#include "core/config.h"
#include "core/conn.h"
#include "core/event.h"
#include "core/fdtable.h"
#include "core/log.h"
#include "os/libc.h"
#include "os/ownfd.h"
#include "transport/shm/fence.h"
#include "transport/shm/shm_int.h"

/* Seconds one case may take before the watchdog fails the test (CMake gives more). */
#define PAIR_WATCHDOG_SEC 40
#define PAIR_MAX_SEGS 128
/* The largest single send or receive of a stream (more than the small rings hold). */
#define PAIR_CHUNK_MAX (48u << 10)

extern char **environ;

static pid_t pair_main_pid, pair_child;
static char pair_seg_paths[PAIR_MAX_SEGS][96];
static _Atomic int pair_nseg;
static struct sockaddr_in pair_addr; /* the listener's address */

/* Async-signal-safe: the names are written before the files exist. */
static inline void pair_unlink_all(void)
{
	int n = atomic_load(&pair_nseg);

	for (int i = 0; i < n && i < PAIR_MAX_SEGS; i++)
		unlink(pair_seg_paths[i]);
}

static inline void pair_atexit(void)
{
	if (getpid() == pair_main_pid)
		pair_unlink_all();
}

static inline void pair_say(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

/* SIGALRM: a wait did not end; SIGPIPE: a send raised it despite MSG_NOSIGNAL. */
static inline void pair_fatal_signal(int sig)
{
	pair_say(sig == SIGALRM ? "FAIL: watchdog: a wait did not end [" : "FAIL: SIGPIPE [");
	pair_say(check_ctx);
	pair_say("]\n");
	if (getpid() == pair_main_pid) {
		if (pair_child > 0)
			kill(pair_child, SIGKILL);
		pair_unlink_all();
	}
	_exit(CHECK_FAIL);
}

/* Each case arms it afresh: a case that does not end within the bound fails. */
static inline void pair_watchdog(void)
{
	alarm(PAIR_WATCHDOG_SEC);
}

/*
 * The ULSOCK_* variables as the test wants them, whatever the caller's shell exported:
 * all unset (the defaults), the profile named, and ULSOCK_SHORT_CALLS=0: the pairs are
 * many short connections to one listener, each of which must take shared memory
 * (core/shortconn.h). Loaded at once; call with no connection busy, since the spin
 * budget is read by every wait.
 */
static inline void pair_profile(const char *profile)
{
	for (;;) {
		char name[128] = "";
		for (char **e = environ; *e; e++) {
			const char *eq = strchr(*e, '=');
			if (strncmp(*e, "ULSOCK_", 7) == 0 && eq &&
			    (size_t)(eq - *e) < sizeof(name)) {
				memcpy(name, *e, (size_t)(eq - *e));
				name[eq - *e] = '\0';
				break;
			}
		}
		if (!name[0])
			break;
		CHECK_EQ(unsetenv(name), 0);
	}
	CHECK_EQ(setenv("ULSOCK_PROFILE", profile, 1), 0);
	CHECK_EQ(setenv("ULSOCK_SHORT_CALLS", "0", 1), 0);
	uls_config_load();
}

/* preload/init.c's fork handlers, as far as the core has them. */
static inline void pair_atfork_prepare(void)
{
	uls_conn_mark_shared_all(ULS_SHARED_FORK);
	uls_epoll_unshare();
}

static inline void pair_atfork_child(void)
{
	uls_own_fd_atfork_child();
	uls_bell_atfork_child();
	uls_epoll_atfork_child();
	uls_config_atfork_child();
	uls_fence_init();
	uls_conn_atfork_child();
}

static inline void pair_init(const char *profile)
{
	const char *pre = getenv("LD_PRELOAD");
	struct sigaction sa;
	int nl;

	if (pre && strstr(pre, "ulsock"))
		CHECK_SKIP("libulsock is preloaded: these tests drive the core themselves");
	if (access("/dev/shm", W_OK) != 0)
		CHECK_SKIP("/dev/shm is not writable: %s", strerror(errno));
	/* The server proves its peer through NETLINK_SOCK_DIAG (test_handshake). */
	nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (nl < 0)
		CHECK_SKIP("no netlink sockets: %s", strerror(errno));
	close(nl);
	pair_main_pid = getpid();
	atexit(pair_atexit);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = pair_fatal_signal;
	sigaction(SIGALRM, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	uls_libc_init();
	pair_profile(profile);
	uls_log_open();
	CHECK_EQ(uls_fdtable_init(), 0);
	uls_fence_init();
	pthread_atfork(pair_atfork_prepare, NULL, pair_atfork_child);
}

/* A listener on 127.0.0.1, port chosen by the kernel; pair_connect connects to it. */
static inline int pair_listen(void)
{
	socklen_t len = sizeof(pair_addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	memset(&pair_addr, 0, sizeof(pair_addr));
	pair_addr.sin_family = AF_INET;
	pair_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK_EQ(bind(fd, (struct sockaddr *)&pair_addr, sizeof(pair_addr)), 0);
	CHECK_EQ(listen(fd, 16), 0);
	CHECK_EQ(getsockname(fd, (struct sockaddr *)&pair_addr, &len), 0);
	return fd;
}

/* One end of a connection as the program sees it: its descriptor and the core's conn. */
struct end {
	int fd;
	struct uls_conn *c;
	char seg[96]; /* the segment's file name, "" when it has none */
};

static inline int pair_path(const struct end *e)
{
	return atomic_load(&e->c->path);
}

static inline int pair_seg_named(const struct end *e)
{
	return e->seg[0] && access(e->seg, F_OK) == 0;
}

/*
 * The name of the segment e maps, for the test's checks and for the cleanup (a server
 * that attached knows it too: its client may be a forked peer, whose files the cleanup
 * of the main process would not know otherwise).
 */
static inline void pair_note_seg(struct end *e)
{
	int n = atomic_load(&pair_nseg);

	struct uls_seg *seg = &shm_of(e->c)->seg;

	if (!seg->hdr)
		return;
	CHECK_INT(n, <, PAIR_MAX_SEGS);
	uls_seg_path_of(pair_seg_paths[n], sizeof(pair_seg_paths[n]), seg->uid, seg->ino);
	atomic_store(&pair_nseg, n + 1);
	memcpy(e->seg, pair_seg_paths[n], sizeof(e->seg));
}

/* The descriptor's table entry, as socket() and accept() leave it in the interposer. */
static inline struct uls_fd *pair_entry(int fd, int nonblock)
{
	struct uls_fd *t = uls_fd_get(fd);

	CHECK(t != NULL);
	uls_fd_clear(fd);
	t->nonblock = (uint8_t)nonblock;
	return t;
}

static inline void pair_bind_entry(struct uls_fd *t, struct end *e, int nonblock)
{
	atomic_store(&e->c->nonblock, nonblock);
	t->conn = e->c;
	atomic_store(&t->kind, ULS_FD_CONN);
}

/*
 * connect() as preload/socket.c makes it; with nonblock it may still be in progress. The
 * ring sizes are asked as socket buffers (powers of two: the rings get them exactly).
 */
static inline struct end pair_connect(int nonblock, uint64_t c2s, uint64_t s2c)
{
	struct end e = {.fd = -1};
	struct uls_conn_hints hints = {.sndbuf = (uint32_t)c2s, .rcvbuf = (uint32_t)s2c};
	int r, err;

	e.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	CHECK(e.fd >= 0);
	struct uls_fd *t = pair_entry(e.fd, nonblock);
	atomic_store(&t->kind, ULS_FD_TCP);
	e.c = uls_conn_connect_prepare(e.fd, (struct sockaddr *)&pair_addr, sizeof(pair_addr),
				       &hints);
	CHECK(e.c != NULL);
	if (e.c->tp == &uls_kernel_transport)
		check_context("uls_conn_connect_prepare: %s", e.c->reason);
	CHECK(e.c->tp == &uls_shm_transport);
	pair_note_seg(&e);
	r = connect(e.fd, (struct sockaddr *)&pair_addr, sizeof(pair_addr));
	err = r < 0 ? errno : 0;
	CHECK(err == 0 || err == EINPROGRESS);
	CHECK(uls_conn_connect_done(e.c, e.fd, err) == e.c);
	pair_bind_entry(t, &e, nonblock);
	return e;
}

/* accept() as preload/socket.c's do_accept makes it. */
static inline struct end pair_accept(int lfd, int nonblock)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct end e = {.fd = -1};

	e.fd = accept4(lfd, (struct sockaddr *)&ss, &sl,
		       SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0));
	CHECK(e.fd >= 0);
	struct uls_fd *t = pair_entry(e.fd, nonblock);
	e.c = uls_conn_accept(e.fd, (struct sockaddr *)&ss, sl);
	CHECK(e.c != NULL);
	pair_note_seg(&e);
	pair_bind_entry(t, &e, nonblock);
	return e;
}

/* The data calls of preload/io.c: the conn while some bytes may go off the kernel path. */
static inline ssize_t pair_sendv(struct end *e, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};

	flags |= MSG_NOSIGNAL;
	if (pair_path(e) != ULS_PATH_KERNEL)
		return uls_conn_send(e->c, e->fd, iov, iovcnt, flags);
	ssize_t n = sendmsg(e->fd, &m, flags);
	return n < 0 ? -errno : n;
}

static inline ssize_t pair_recvv(struct end *e, struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};

	if (pair_path(e) != ULS_PATH_KERNEL)
		return uls_conn_recv(e->c, e->fd, &m, flags);
	ssize_t n = recvmsg(e->fd, &m, flags);
	return n < 0 ? -errno : n;
}

static inline int pair_shutdown(struct end *e, int how)
{
	if (uls_conn_accelerated(e->c))
		return uls_conn_shutdown(e->c, e->fd, how);
	return shutdown(e->fd, how) < 0 ? -errno : 0;
}

/* close(): the entry is forgotten first; the conn may live on for calls still inside. */
static inline int pair_close(struct end *e)
{
	uls_epoll_forget_fd(e->fd);
	uls_fd_clear(e->fd);
	int r = uls_conn_close(e->c, e->fd, 1);
	e->fd = -1;
	e->c = NULL;
	return r < 0 ? -errno : 0;
}

/* The core's poll on one end; forever, the watchdog bounds it. Returns revents. */
static inline int pair_wait(struct end *e, int events)
{
	struct pollfd p = {.fd = e->fd, .events = (short)events};

	CHECK_INT(uls_poll(&p, 1, -1, NULL), ==, 1);
	return p.revents;
}

/*
 * One direction's bytes: byte k is check.h's stream byte k for seed, so every byte is
 * checked at its offset and a byte lost, repeated, reordered or foreign (a wake-up byte
 * taken for data) shows. The sender writes `sent` and the receiver `got`: one thread each.
 */
struct stream {
	const char *name;
	uint64_t seed, total;
	uint64_t sent, got;
	uint8_t *txbuf, *rxbuf;
};

static inline void stream_init(struct stream *st, const char *name, uint64_t seed, uint64_t total)
{
	memset(st, 0, sizeof(*st));
	st->name = name;
	st->seed = seed;
	st->total = total;
	st->txbuf = malloc(PAIR_CHUNK_MAX);
	st->rxbuf = malloc(PAIR_CHUNK_MAX);
	CHECK(st->txbuf && st->rxbuf);
}

static inline void stream_fini(struct stream *st)
{
	free(st->txbuf);
	free(st->rxbuf);
	st->txbuf = st->rxbuf = NULL;
}

/* 1 to 4 iovecs over buf[0, n), cut at random places (some of them empty). */
static inline int pair_iov(struct iovec *iov, uint8_t *buf, size_t n, uint64_t *rng)
{
	size_t off = 0;
	int k = 0;

	while (k < 3 && check_rand_below(rng, 2)) {
		size_t len = (size_t)check_rand_below(rng, n - off + 1);
		iov[k].iov_base = buf + off;
		iov[k++].iov_len = len;
		off += len;
	}
	iov[k].iov_base = buf + off;
	iov[k++].iov_len = n - off;
	return k;
}

/* A size in [1, max]: a third of them small, as request/response programs send. */
static inline size_t pair_size(uint64_t *rng, size_t max)
{
	if (max > PAIR_CHUNK_MAX)
		max = PAIR_CHUNK_MAX;
	if (max > 64 && check_rand_below(rng, 3) == 0)
		max = 64;
	return 1 + (size_t)check_rand_below(rng, max);
}

/* Sends the stream's next bytes, at most max of them: the send's result. */
static inline ssize_t stream_send(struct end *e, struct stream *st, size_t max, uint64_t *rng,
				  int flags)
{
	struct iovec iov[4];

	CHECK_U64(st->sent, <, st->total);
	uint64_t left = st->total - st->sent;
	size_t n = pair_size(rng, max < left ? max : (size_t)left);
	check_stream_fill(st->txbuf, n, st->seed, st->sent);
	ssize_t r = pair_sendv(e, iov, pair_iov(iov, st->txbuf, n, rng), flags);
	if (r > 0) {
		CHECK_INT(r, <=, n);
		st->sent += (uint64_t)r;
	}
	return r;
}

/* Receives at most max bytes and checks them against the stream: the receive's result. */
static inline ssize_t stream_recv(struct end *e, struct stream *st, size_t max, uint64_t *rng,
				  int flags)
{
	struct iovec iov[4];
	size_t n = pair_size(rng, max);
	ssize_t r = pair_recvv(e, iov, pair_iov(iov, st->rxbuf, n, rng), flags);

	if (r <= 0)
		return r;
	CHECK_INT(r, <=, n);
	if (st->got + (uint64_t)r > st->total)
		check_context("stream %s: %llu bytes past its end", st->name,
			      (unsigned long long)(st->got + (uint64_t)r - st->total));
	CHECK_U64(st->got + (uint64_t)r, <=, st->total);
	size_t bad = check_stream_cmp(st->rxbuf, (size_t)r, st->seed, st->got);
	if (bad != (size_t)r)
		check_context("stream %s: byte %llu differs", st->name,
			      (unsigned long long)(st->got + bad));
	CHECK_U64(bad, ==, r);
	st->got += (uint64_t)r;
	return r;
}

/* Blocking calls: sends the stream up to `until` bytes. */
static inline void stream_send_to(struct end *e, struct stream *st, uint64_t until, uint64_t *rng)
{
	while (st->sent < until)
		CHECK_INT(stream_send(e, st, (size_t)(until - st->sent), rng, 0), >, 0);
}

/* Blocking calls: receives until `until` bytes of the stream were checked. */
static inline void stream_recv_to(struct end *e, struct stream *st, uint64_t until, uint64_t *rng)
{
	while (st->got < until)
		CHECK_INT(stream_recv(e, st, (size_t)(until - st->got), rng, 0), >, 0);
}

/* Blocking calls: the rest of the stream, then its end, which stays (a second EOF). */
static inline void stream_recv_eof(struct end *e, struct stream *st, uint64_t *rng)
{
	stream_recv_to(e, st, st->total, rng);
	CHECK_INT(stream_recv(e, st, PAIR_CHUNK_MAX, rng, 0), ==, 0);
	CHECK_INT(stream_recv(e, st, PAIR_CHUNK_MAX, rng, MSG_DONTWAIT), ==, 0);
}

/*
 * A connection on the rings both ways: a client of listener lfd with rings of `ring`
 * bytes, its server's end, and 4 KiB sent each way (so the client has switched). The
 * two streams are left for the case to free.
 */
static inline void pair_open_on_rings(int lfd, uint64_t ring, uint64_t seed, uint64_t *rng,
				      struct end *cli, struct end *srv, struct stream *c2s,
				      struct stream *s2c)
{
	stream_init(c2s, "client to server", seed ^ 0x70, 4096);
	stream_init(s2c, "server to client", seed ^ 0xf0, 4096);
	*cli = pair_connect(0, ring, ring);
	*srv = pair_accept(lfd, 0);
	stream_send_to(cli, c2s, c2s->total, rng);
	stream_recv_to(srv, c2s, c2s->total, rng);
	stream_send_to(srv, s2c, s2c->total, rng);
	stream_recv_to(cli, s2c, s2c->total, rng);
	CHECK_EQ(pair_path(cli), ULS_PATH_SHM);
	CHECK_EQ(pair_path(srv), ULS_PATH_SHM);
}

/* A peer process: the child returns 0 with its own watchdog, the parent its pid. */
static inline pid_t pair_fork(void)
{
	pid_t parent = getpid(), pid = fork();

	CHECK(pid >= 0);
	if (pid > 0) {
		pair_child = pid;
		return pid;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(CHECK_FAIL);
	pair_watchdog();
	return 0;
}

static inline void pair_reap(void)
{
	int st;

	CHECK_EQ(waitpid(pair_child, &st, 0), pair_child);
	pair_child = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != CHECK_PASS)
		check_context("the peer process failed (status %#x)", st);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == CHECK_PASS);
}

/* One byte through a pipe between the two processes: "I am there". */
static inline void pair_tell(int fd)
{
	CHECK_EQ(write(fd, "x", 1), 1);
}

static inline void pair_hear(int fd)
{
	char b;

	CHECK_EQ(read(fd, &b, 1), 1);
}

/* A short pause in a wait for another thread's state (the watchdog bounds the wait). */
static inline void pair_pause(void)
{
	struct timespec ts = {0, 200000};

	nanosleep(&ts, NULL);
}

static inline uint64_t pair_ino(int fd)
{
	struct stat st;

	CHECK_EQ(fstat(fd, &st), 0);
	return (uint64_t)st.st_ino;
}

#endif
