/*
 * calls_fdlife: what happens to a connected TCP socket's descriptor: dup/dup2/dup3, fork,
 * execve (with and without the preload in the new image), SCM_RIGHTS to another process
 * (with and without the preload), sendfile into it, and accept4's flags.
 * Usage: calls_fdlife CASE. The cases exec_child, scm_receiver and spawn_writer are the far
 * ends of the exec, SCM_RIGHTS and spawn cases, started by the helper itself.
 */
#include "calls_common.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <spawn.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

#define SEED_UP 61u
#define SEED_DOWN 62u
#define BIG (256u << 10)

extern char **environ;

/* ---- dup family ---------------------------------------------------------------------------- */

/*
 * Data written through a dup arrives in order with the original's; closing one keeps the
 * other working in both directions; the peer sees EOF only after the last one is closed.
 */
static void case_dup(CALLS_ARGS)
{
	char buf[8];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_read_exact(p.fd, buf, 2);
		CHECK_EQ(memcmp(buf, "AB", 2), 0);
		calls_await(&p);
		/* One descriptor closed over there: no EOF here. */
		CHECK_EQ(calls_wait_for(p.fd, POLLIN, 200), 0);
		calls_write_all(p.fd, "r", 1);
		calls_read_exact(p.fd, buf, 1);
		CHECK_EQ(buf[0], 'C');
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	int d = dup(p.fd);
	CHECK(d >= 0 && d != p.fd);
	CHECK_EQ(fcntl(d, F_GETFD) & FD_CLOEXEC, 0);
	calls_write_all(p.fd, "A", 1);
	calls_write_all(d, "B", 1);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	calls_post(&p, 'c');
	calls_read_exact(d, buf, 1);
	CHECK_EQ(buf[0], 'r');
	calls_write_all(d, "C", 1);
	CHECK(close(d) == 0);
	calls_pair_close(&p);
}

static int cmp_int(const void *a, const void *b)
{
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* The open descriptors at 900 and above (ulsock keeps its own there), ascending. */
static int high_fds(int *out, int max)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	CHECK(d != NULL);
	while ((de = readdir(d)) != NULL) {
		int fd = atoi(de->d_name);
		if (de->d_name[0] != '.' && fd >= 900 && fd != dirfd(d) && n < max)
			out[n++] = fd;
	}
	closedir(d);
	qsort(out, (size_t)n, sizeof(int), cmp_int);
	return n;
}

/* A connection whose peer checks 3 bytes each way and then sees EOF. */
static void exchange_then_eof(struct calls_pair *p)
{
	char buf[3];

	if (p->child == 0) {
		calls_write_all(p->fd, "abc", 3);
		calls_read_exact(p->fd, buf, 3);
		CHECK_EQ(memcmp(buf, "xyz", 3), 0);
		calls_expect_eof(p->fd);
		calls_pair_close(p);
	}
	calls_read_exact(p->fd, buf, 3);
	CHECK_EQ(memcmp(buf, "abc", 3), 0);
	calls_write_all(p->fd, "xyz", 3);
}

/*
 * close_range and closefrom over an accelerated socket take its connection down as close
 * does (the peer sees EOF; the number, reused by an AF_UNIX socketpair, works as a plain
 * socket); over the descriptors at 900 and above they close the program's but leave
 * ulsock's own (its log still records the next connection), as close() does; and dup2
 * onto one of those gets the number for the program.
 */
static void case_close_range(CALLS_ARGS)
{
	int before[16], after[16], u[2], nb, na;
	char buf[3];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	exchange_then_eof(&p);
	int old = p.fd;
	nb = high_fds(before, 16);
	CHECK_EQ(close_range((unsigned)old, (unsigned)old, 0), 0);
	p.fd = -1;
	calls_pair_close(&p);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, u) == 0);
	CHECK(u[0] == old || u[1] == old);
	calls_write_all(u[0], "uvw", 3);
	calls_read_exact(u[1], buf, 3);
	CHECK_EQ(memcmp(buf, "uvw", 3), 0);

	/* A program descriptor up there goes; ulsock's stay. */
	int mine = fcntl(u[0], F_DUPFD, 950);
	CHECK(mine >= 950);
	CHECK_EQ(close_range(900, ~0u, 0), 0);
	CHECK(fcntl(mine, F_GETFD) < 0 && errno == EBADF);
	na = high_fds(after, 16);
	CHECK_EQ(na, nb);
	CHECK_EQ(memcmp(after, before, sizeof(int) * (size_t)nb), 0);
	mine = fcntl(u[0], F_DUPFD, 950);
	CHECK(mine >= 950);
	closefrom(900);
	CHECK(fcntl(mine, F_GETFD) < 0 && errno == EBADF);
	CHECK_EQ(high_fds(after, 16), nb);
	/* A close-everything loop: close() of ulsock's own succeeds and leaves them open. */
	for (int i = 0; i < nb; i++)
		CHECK(close(before[i]) == 0);
	CHECK_EQ(high_fds(after, 16), nb);

	/* dup2 onto one of ulsock's numbers: the program gets it, ulsock keeps as many. */
	if (nb > 0) {
		CHECK_EQ(dup2(u[1], before[0]), before[0]);
		calls_write_all(u[0], "rst", 3);
		calls_read_exact(before[0], buf, 3);
		CHECK_EQ(memcmp(buf, "rst", 3), 0);
		CHECK_EQ(high_fds(after, 16), nb + 1);
		CHECK(close(before[0]) == 0);
		CHECK(fcntl(before[0], F_GETFD) < 0 && errno == EBADF);
		CHECK_EQ(high_fds(after, 16), nb);
	}
	CHECK(close(u[0]) == 0 && close(u[1]) == 0);

	/* ulsock still works, and still logs: the test checks this connection's path. */
	calls_pair_open(&p, AF_INET);
	exchange_then_eof(&p);
	calls_pair_close(&p);
}

/* dup2 onto a free number, onto an open descriptor (replacing it), and onto itself. */
static void case_dup2(CALLS_ARGS)
{
	char buf[8];
	int pfd[2];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_read_exact(p.fd, buf, 3);
		CHECK_EQ(memcmp(buf, "xyz", 3), 0);
		calls_write_all(p.fd, "q", 1);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK_EQ(dup2(p.fd, 50), 50);
	CHECK_EQ(dup2(p.fd, p.fd), p.fd);
	CHECK(pipe(pfd) == 0);
	/* Replace the pipe's read end with the socket. */
	CHECK_EQ(dup2(p.fd, pfd[0]), pfd[0]);
	struct stat st;
	CHECK(fstat(pfd[0], &st) == 0);
	CHECK(S_ISSOCK(st.st_mode));
	calls_write_all(50, "x", 1);
	calls_write_all(pfd[0], "y", 1);
	calls_write_all(p.fd, "z", 1);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	CHECK(close(50) == 0);
	calls_read_exact(pfd[0], buf, 1);
	CHECK_EQ(buf[0], 'q');
	close(pfd[0]);
	close(pfd[1]);
	CHECK_ERR(dup2(50, 51), EBADF);
	calls_pair_close(&p);
}

/* dup3 honours O_CLOEXEC and refuses the same number or unknown flags. */
static void case_dup3(CALLS_ARGS)
{
	char buf[8];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_read_exact(p.fd, buf, 2);
		CHECK_EQ(memcmp(buf, "34", 2), 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK_EQ(dup3(p.fd, 60, O_CLOEXEC), 60);
	CHECK(fcntl(60, F_GETFD) & FD_CLOEXEC);
	CHECK_EQ(dup3(p.fd, 61, 0), 61);
	CHECK_EQ(fcntl(61, F_GETFD) & FD_CLOEXEC, 0);
	CHECK_ERR(dup3(p.fd, p.fd, 0), EINVAL);
	CHECK_ERR(dup3(p.fd, 62, 0x4000000), EINVAL);
	calls_write_all(60, "3", 1);
	CHECK(close(60) == 0);
	calls_write_all(61, "4", 1);
	CHECK(close(61) == 0);
	calls_pair_close(&p);
}

/* ---- fork ---------------------------------------------------------------------------------- */

/*
 * After fork both processes use the same socket: the forked child writes and reads first,
 * exits, then the parent writes and reads; the peer sees everything in order, and no EOF
 * when the forked child exits.
 */
static void case_fork(CALLS_ARGS)
{
	char buf[16];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, BIG, SEED_UP);
		calls_read_exact(p.fd, buf, 5);
		CHECK_EQ(memcmp(buf, "child", 5), 0);
		calls_await(&p); /* the forked child has exited */
		CHECK_EQ(calls_wait_for(p.fd, POLLIN, 200), 0);
		calls_post(&p, 'y');
		calls_send_pat(p.fd, BIG, BIG, SEED_UP);
		calls_read_exact(p.fd, buf, 6);
		CHECK_EQ(memcmp(buf, "parent", 6), 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	pid_t c = fork();
	CHECK(c >= 0);
	if (c == 0) {
		calls_child_setup();
		calls_write_all(p.fd, "child", 5);
		calls_recv_pat(p.fd, 0, BIG, SEED_UP);
		_exit(0);
	}
	calls_wait_child(c);
	calls_post(&p, 'x');
	calls_await(&p);
	calls_write_all(p.fd, "parent", 6);
	calls_recv_pat(p.fd, BIG, BIG, SEED_UP);
	calls_pair_close(&p);
}

/*
 * The last holder of a socket is a forked child that exits without closing it: the peer,
 * polling with non-blocking reads only (never sleeping on the socket), still gets every
 * byte and then the end of the stream, as with kernel TCP.
 */
static void case_fork_exit(CALLS_ARGS)
{
	struct calls_pair p;
	char buf[64];
	size_t got = 0;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_set_nonblock(p.fd, 1);
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (;;) {
			ssize_t n = recv(p.fd, buf + got, sizeof(buf) - got, 0);
			if (n == 0)
				break;
			if (n > 0) {
				got += (size_t)n;
				continue;
			}
			CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
			clock_gettime(CLOCK_MONOTONIC, &t);
			/* The end of the stream must come, long before this bound. */
			CHECK(t.tv_sec - t0.tv_sec <= 10);
			usleep(200);
		}
		CHECK_EQ(got, 3);
		CHECK_EQ(memcmp(buf, "bye", 3), 0);
		calls_pair_close(&p);
	}
	pid_t c = fork();
	CHECK(c >= 0);
	if (c == 0) {
		calls_child_setup();
		calls_write_all(p.fd, "bye", 3);
		_exit(0); /* no close: the kernel closes the socket at exit */
	}
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	calls_wait_child(c);
	calls_pair_close(&p);
}

/* ---- exec ---------------------------------------------------------------------------------- */

/* Execs this program's case `name` with one numeric argument. */
static __attribute__((noreturn)) void exec_self(const char *name, int arg, int plain)
{
	char num[16];
	char *args[] = {"calls_fdlife", (char *)name, num, NULL};

	snprintf(num, sizeof(num), "%d", arg);
	execve("/proc/self/exe", args, plain ? calls_env_without_preload() : environ);
	calls_fail(__FILE__, __LINE__, "execve", errno);
}

/*
 * The exec'd end. Before the exec, the peer sent 10 marker bytes and BIG pattern bytes, of
 * which the old image read 4. Here: read the other 6 and BIG, write "post" and BIG bytes,
 * read the peer's "after", and close.
 */
static void case_exec_child(CALLS_ARGS)
{
	char buf[16];
	int fd;

	CHECK(argc >= 1);
	fd = atoi(argv[0]);
	if (argc >= 2 && strcmp(argv[1], "plain") == 0)
		CHECK(getenv("LD_PRELOAD") == NULL);
	calls_read_exact(fd, buf, 6);
	CHECK_EQ(memcmp(buf, "456789", 6), 0);
	calls_recv_pat(fd, 0, BIG, SEED_DOWN);
	calls_write_all(fd, "post", 4);
	calls_send_pat(fd, 0, BIG, SEED_UP);
	calls_read_exact(fd, buf, 5);
	CHECK_EQ(memcmp(buf, "after", 5), 0);
	CHECK(close(fd) == 0);
}

/*
 * The peer of a handover (exec, posix_spawn): 10 marker bytes and BIG pattern bytes down,
 * of which the old image reads 4; then "pre" from the old image and "post" and BIG
 * pattern bytes from the new one; "after" down; EOF once both are done.
 */
static void handover_peer(struct calls_pair *p)
{
	char buf[16];

	calls_write_all(p->fd, "0123456789", 10);
	calls_send_pat(p->fd, 0, BIG, SEED_DOWN);
	calls_post(p, 'g');
	calls_read_exact(p->fd, buf, 7);
	CHECK_EQ(memcmp(buf, "prepost", 7), 0);
	calls_recv_pat(p->fd, 0, BIG, SEED_UP);
	calls_write_all(p->fd, "after", 5);
	calls_expect_eof(p->fd);
	calls_pair_close(p);
}

/*
 * An inherited socket across execve: bytes the peer sent before the exec (partly read by the
 * old image) and bytes the old image wrote are neither lost nor duplicated.
 */
static void exec_case(int plain)
{
	char buf[16];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_read_exact(p.fd, buf, 4);
		CHECK_EQ(memcmp(buf, "0123", 4), 0);
		calls_write_all(p.fd, "pre", 3);
		CHECK_EQ(fcntl(p.fd, F_GETFD) & FD_CLOEXEC, 0);
		if (plain) {
			char num[16];
			char *args[] = {"calls_fdlife", "exec_child", num, "plain", NULL};
			snprintf(num, sizeof(num), "%d", p.fd);
			execve("/proc/self/exe", args, calls_env_without_preload());
			calls_fail(__FILE__, __LINE__, "execve", errno);
		}
		exec_self("exec_child", p.fd, 0);
	}
	handover_peer(&p);
}

static void case_exec(CALLS_ARGS)
{
	exec_case(0);
}

static void case_exec_plain(CALLS_ARGS)
{
	exec_case(1);
}

/* ---- SCM_RIGHTS ---------------------------------------------------------------------------- */

/* The descriptor passes by sendmmsg and recvmmsg (one message each) instead. */
static int scm_mmsg;

static void send_fd(int unix_fd, int fd)
{
	char byte = 'F';
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	memset(&ctl, 0, sizeof(ctl));
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (scm_mmsg) {
		struct mmsghdr v = {.msg_hdr = m};
		CHECK_EQ(sendmmsg(unix_fd, &v, 1, 0), 1);
		CHECK_EQ(v.msg_len, 1u);
		return;
	}
	CHECK_EQ(sendmsg(unix_fd, &m, 0), 1);
}

static int recv_fd(int unix_fd)
{
	char byte = 0;
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	int fd = -1;

	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	if (scm_mmsg) {
		struct mmsghdr v = {.msg_hdr = m};
		CHECK_EQ(recvmmsg(unix_fd, &v, 1, MSG_CMSG_CLOEXEC, NULL), 1);
		CHECK_EQ(v.msg_len, 1u);
		m = v.msg_hdr;
	} else {
		CHECK_EQ(recvmsg(unix_fd, &m, MSG_CMSG_CLOEXEC), 1);
	}
	CHECK_EQ(byte, 'F');
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	CHECK(c != NULL);
	CHECK_EQ(c->cmsg_type, SCM_RIGHTS);
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	CHECK(fd >= 0);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	return fd;
}

/*
 * The receiving process: gets the socket, reads the 6 marker bytes the sender left and BIG
 * pattern bytes, writes "recv" and BIG bytes, reads "after", closes.
 */
static void scm_receive(int unix_fd)
{
	char buf[16];
	int fd = recv_fd(unix_fd);
	int type = 0;
	socklen_t len = sizeof(type);

	CHECK(getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0);
	CHECK_EQ(type, SOCK_STREAM);
	calls_read_exact(fd, buf, 6);
	CHECK_EQ(memcmp(buf, "456789", 6), 0);
	calls_recv_pat(fd, 0, BIG, SEED_DOWN);
	calls_write_all(fd, "recv", 4);
	calls_send_pat(fd, 0, BIG, SEED_UP);
	calls_read_exact(fd, buf, 5);
	CHECK_EQ(memcmp(buf, "after", 5), 0);
	CHECK(close(fd) == 0);
	CHECK_EQ(write(unix_fd, "d", 1), 1);
}

static void case_scm_receiver(CALLS_ARGS)
{
	CHECK(argc >= 1);
	CHECK(getenv("LD_PRELOAD") == NULL);
	scm_receive(atoi(argv[0]));
}

static void case_scm_receiver_mmsg(CALLS_ARGS)
{
	scm_mmsg = 1;
	case_scm_receiver(argc, argv);
}

/*
 * Passing a connected socket to another process: the sender reads part of what the peer sent,
 * writes a little, passes the socket and closes its own descriptor; the receiver carries on
 * from exactly where the sender stopped, in both directions. Under ulsock the connection
 * moves back to kernel TCP before the pass, whoever receives it.
 */
static void scm_case(int plain)
{
	char buf[16];
	int u[2];
	struct calls_pair p;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, u) == 0);
	pid_t r = fork();
	CHECK(r >= 0);
	if (r == 0) {
		calls_child_setup();
		close(u[0]);
		if (plain)
			exec_self(scm_mmsg ? "scm_receiver_mmsg" : "scm_receiver", u[1], 1);
		scm_receive(u[1]);
		_exit(0);
	}
	close(u[1]);
	calls_pair_open_as(&p, AF_INET, "moved");
	if (p.child == 0) {
		close(u[0]);
		calls_write_all(p.fd, "0123456789", 10);
		calls_send_pat(p.fd, 0, BIG, SEED_DOWN);
		calls_read_exact(p.fd, buf, 8);
		CHECK_EQ(memcmp(buf, "sentrecv", 8), 0);
		calls_recv_pat(p.fd, 0, BIG, SEED_UP);
		calls_write_all(p.fd, "after", 5);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	calls_read_exact(p.fd, buf, 4);
	CHECK_EQ(memcmp(buf, "0123", 4), 0);
	calls_write_all(p.fd, "sent", 4);
	send_fd(u[0], p.fd);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	CHECK_EQ(read(u[0], buf, 1), 1);
	CHECK_EQ(buf[0], 'd');
	close(u[0]);
	calls_wait_child(r);
	calls_pair_close(&p);
}

static void case_scm_rights(CALLS_ARGS)
{
	scm_case(0);
}

static void case_scm_rights_plain(CALLS_ARGS)
{
	scm_case(1);
}

static void case_scm_rights_mmsg(CALLS_ARGS)
{
	scm_mmsg = 1;
	scm_case(0);
}

static void case_scm_rights_mmsg_plain(CALLS_ARGS)
{
	scm_mmsg = 1;
	scm_case(1);
}

/* ---- sendfile ------------------------------------------------------------------------------ */

/*
 * sendfile from a file into the socket, with an offset pointer (updated, file position
 * untouched) and without (file position advances): the bytes arrive exactly.
 */
static void case_sendfile(CALLS_ARGS)
{
	const size_t size = (3u << 20) + 123;
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_recv_pat(p.fd, 0, size, SEED_DOWN);
		calls_recv_pat(p.fd, 1000, 5000, SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	char path[] = "/tmp/calls_sendfile_XXXXXX";
	int f = mkstemp(path);
	CHECK(f >= 0);
	unlink(path);
	calls_send_pat(f, 0, size, SEED_DOWN);
	CHECK(lseek(f, 0, SEEK_SET) == 0);
	off_t off = 0;
	while ((size_t)off < size) {
		size_t want = size - (size_t)off;
		if (want > 1000000)
			want = 1000000;
		off_t before = off;
		ssize_t r = sendfile(p.fd, f, &off, want);
		CHECK(r > 0);
		CHECK_EQ(off, before + r);
	}
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 0);
	CHECK_EQ(lseek(f, 1000, SEEK_SET), 1000);
	size_t left = 5000;
	while (left > 0) {
		ssize_t r = sendfile(p.fd, f, NULL, left);
		CHECK(r > 0);
		left -= (size_t)r;
	}
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 6000);
	close(f);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- accept4 ------------------------------------------------------------------------------- */

static void check_conn(int fd, char tag)
{
	char c;

	calls_read_exact(fd, &c, 1);
	CHECK_EQ(c, tag);
	calls_write_all(fd, &c, 1);
}

/*
 * accept4 applies SOCK_NONBLOCK and SOCK_CLOEXEC exactly as asked, fills in the peer address,
 * refuses unknown flags; plain accept never inherits the listener's O_NONBLOCK.
 */
static void case_accept4(CALLS_ARGS)
{
	struct calls_addr server;
	int to_child[2];
	int lfd = calls_listen(AF_INET, &server, "shm");

	CHECK(pipe(to_child) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		calls_child_setup();
		close(lfd);
		close(to_child[1]);
		for (char tag = 'a'; tag <= 'c'; tag++) {
			char c;
			CHECK_EQ(read(to_child[0], &c, 1), 1);
			int fd = calls_connect(&server);
			CHECK_EQ(read(to_child[0], &c, 1), 1);
			struct calls_addr me;
			me.len = sizeof(me.ss);
			CHECK(getsockname(fd, (struct sockaddr *)&me.ss, &me.len) == 0);
			calls_write_all(fd, &me, sizeof(me));
			calls_write_all(fd, &tag, 1);
			calls_read_exact(fd, &c, 1);
			CHECK_EQ(c, tag);
			calls_expect_eof(fd);
			close(fd);
		}
		_exit(0);
	}
	close(to_child[0]);
	struct calls_addr peer, claimed;
	char c;

	CHECK_ERR(accept4(lfd, NULL, NULL, 0x1234567), EINVAL);
	CHECK_EQ(write(to_child[1], "g", 1), 1);
	peer.len = sizeof(peer.ss);
	int fd = accept4(lfd, (struct sockaddr *)&peer.ss, &peer.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	CHECK_ERR(recv(fd, &c, 1, 0), EAGAIN);
	CHECK_EQ(write(to_child[1], "w", 1), 1);
	CHECK(calls_wait_for(fd, POLLIN, 5000) & POLLIN);
	calls_set_nonblock(fd, 0);
	calls_read_exact(fd, &claimed, sizeof(claimed));
	CHECK_EQ(peer.len, claimed.len);
	CHECK_EQ(memcmp(&peer.ss, &claimed.ss, peer.len), 0);
	check_conn(fd, 'a');
	close(fd);

	CHECK_EQ(write(to_child[1], "g", 1), 1);
	fd = accept4(lfd, NULL, NULL, 0);
	CHECK(fd >= 0);
	CHECK_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	CHECK_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
	CHECK_EQ(write(to_child[1], "w", 1), 1);
	calls_read_exact(fd, &claimed, sizeof(claimed));
	check_conn(fd, 'b');
	close(fd);

	calls_set_nonblock(lfd, 1);
	CHECK_ERR(accept(lfd, NULL, NULL), EAGAIN);
	CHECK_EQ(write(to_child[1], "g", 1), 1);
	CHECK(calls_wait_for(lfd, POLLIN, 5000) & POLLIN);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0);
	CHECK_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	CHECK_EQ(write(to_child[1], "w", 1), 1);
	calls_read_exact(fd, &claimed, sizeof(claimed));
	check_conn(fd, 'c');
	close(fd);
	close(lfd);
	close(to_child[1]);
	calls_wait_child(pid);
}

/* ---- two processes sending on one socket, the second started without fork ------------- */

#define REC 16
#define NREC 100000u

static void put_rec(unsigned char *b, uint32_t who, uint32_t seq)
{
	uint64_t x = who * 1000003ull ^ seq * 0x9e3779b97f4a7c15ull;

	memcpy(b, &who, 4);
	memcpy(b + 4, &seq, 4);
	memcpy(b + 8, &x, 8);
}

static void send_recs(int fd, uint32_t who)
{
	unsigned char b[REC];

	for (uint32_t i = 0; i < NREC; i++) {
		put_rec(b, who, i);
		calls_write_all(fd, b, REC);
	}
}

/* The spawned writer: its records, then close. */
static void case_spawn_writer(CALLS_ARGS)
{
	CHECK(argc >= 1);
	int fd = atoi(argv[0]);
	send_recs(fd, 2);
	CHECK(close(fd) == 0);
}

/*
 * The parent sends records of 16 bytes while a second writer, started by posix_spawn (no
 * fork: nothing tells the parent), sends its own on the same socket. Each must arrive
 * whole, in its writer's order, none lost: kernel TCP never cuts a small blocking write
 * for another writer's. The peer reads in uneven pieces (1 to 61 bytes), so the room a
 * sender finds is seldom a whole number of records. Under ulsock the parent runs
 * single-threaded without locks until the second process joins the connection's side
 * (shm/io.c, solo path), and a blocking send waits for room for a whole small message
 * (ring_send).
 */
static void case_spawn_shared(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		uint32_t next[3] = {0, 0, 0}, step = 0;
		unsigned char b[REC * 64], want[REC];
		size_t have = 0;
		for (;;) {
			size_t ask = 1 + (step++ * 7) % 61;
			if (ask > sizeof(b) - have)
				ask = sizeof(b) - have;
			ssize_t n = recv(p.fd, b + have, ask, 0);
			CHECK(n >= 0);
			if (n == 0)
				break;
			have += (size_t)n;
			size_t off = 0;
			for (; have - off >= REC; off += REC) {
				uint32_t who, seq;
				memcpy(&who, b + off, 4);
				memcpy(&seq, b + off + 4, 4);
				CHECK(who == 1 || who == 2);
				CHECK_EQ(seq, next[who]);
				put_rec(want, who, seq);
				CHECK_EQ(memcmp(b + off, want, REC), 0);
				next[who]++;
			}
			memmove(b, b + off, have - off);
			have -= off;
		}
		CHECK_EQ(have, 0);
		CHECK_EQ(next[1], NREC);
		CHECK_EQ(next[2], NREC);
		calls_pair_close(&p);
	}
	char num[16];
	char *args[] = {"calls_fdlife", "spawn_writer", num, NULL};
	pid_t pid;
	int st;
	snprintf(num, sizeof(num), "%d", p.fd);
	CHECK(fcntl(p.fd, F_SETFD, 0) == 0);
	CHECK(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) == 0);
	send_recs(p.fd, 1);
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/*
 * The handover of case exec_plain, to a posix_spawn child whose environment drops
 * LD_PRELOAD: the spawning process stays (and keeps the socket open) while the child,
 * without ulsock, reads and writes the kernel socket; the spawner closes after it.
 */
static void case_spawn_plain(CALLS_ARGS)
{
	char buf[16];
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		char num[16];
		char *args[] = {"calls_fdlife", "exec_child", num, "plain", NULL};
		pid_t pid;
		int st;

		calls_await(&p);
		calls_read_exact(p.fd, buf, 4);
		CHECK_EQ(memcmp(buf, "0123", 4), 0);
		calls_write_all(p.fd, "pre", 3);
		snprintf(num, sizeof(num), "%d", p.fd);
		CHECK(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args,
				  calls_env_without_preload()) == 0);
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		calls_pair_close(&p);
	}
	handover_peer(&p);
}

/* ---- exec while another thread connects ------------------------------------------------------ */

#define ET_CONNS 16 /* connections the connecting thread makes, at most */

struct et_state {
	struct calls_addr to;
	atomic_int made;
};

static void *et_connector(void *arg)
{
	struct et_state *s = arg;

	for (int i = 0; i < ET_CONNS; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		CHECK(fd >= 0);
		CHECK(connect(fd, (const struct sockaddr *)&s->to.ss, s->to.len) == 0);
		atomic_fetch_add(&s->made, 1);
	}
	for (;;)
		pause(); /* the exec ends it */
}

/*
 * The image exec'd without the preload (case exec_threads_plain): every connection it
 * inherited to the listener's port gets "x" and must answer "y", on kernel TCP at both
 * ends whichever moment of its set-up the exec found it in.
 */
static void case_exec_threads_child(CALLS_ARGS)
{
	int fds[ET_CONNS + 8], n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char c;

	CHECK(argc >= 1);
	int port = atoi(argv[0]);
	CHECK(getenv("LD_PRELOAD") == NULL);
	CHECK(d != NULL);
	while ((de = readdir(d)) != NULL) {
		struct calls_addr peer = {.len = sizeof(peer.ss)};
		int fd = atoi(de->d_name);
		if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dirfd(d))
			continue;
		if (getpeername(fd, (struct sockaddr *)&peer.ss, &peer.len) != 0 ||
		    peer.ss.ss_family != AF_INET || calls_addr_port(&peer) != port)
			continue; /* not one of them, or still connecting when its thread ended */
		CHECK(n < (int)(sizeof(fds) / sizeof(fds[0])));
		fds[n++] = fd;
	}
	closedir(d);
	CHECK(n >= 3);
	for (int i = 0; i < n; i++)
		calls_write_all(fds[i], "x", 1);
	for (int i = 0; i < n; i++) {
		calls_read_exact(fds[i], &c, 1);
		CHECK_EQ(c, 'y');
		CHECK(close(fds[i]) == 0);
	}
}

/* The client starts the new program with posix_spawn and waits for it, not execve. */
static int et_spawn;

/*
 * exec of a program without the preload while another thread of the process connects: a
 * connection that thread sets up while the exec looks at the descriptors must not reach
 * the new program accelerated (ulsock keeps new ones on TCP from the exec's start, and
 * waits for those under way). The server answers each "x" with "y" until the client is
 * gone.
 */
static void exec_threads_case(void)
{
	static struct et_state s;
	struct pollfd pf[ET_CONNS + 9];
	int lfd = calls_listen(AF_INET, &s.to, NULL), n = 0, answered = 0, open = 0;
	pid_t child = fork();

	CHECK(child >= 0);
	if (child == 0) {
		char num[16];
		char *args[] = {"calls_fdlife", "exec_threads_child", num, NULL};
		pthread_t t;
		calls_child_setup();
		close(lfd);
		CHECK(pthread_create(&t, NULL, et_connector, &s) == 0);
		while (atomic_load(&s.made) < 3)
			usleep(100);
		snprintf(num, sizeof(num), "%d", calls_addr_port(&s.to));
		if (et_spawn) {
			pid_t pid;
			int st;
			CHECK(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args,
					  calls_env_without_preload()) == 0);
			CHECK(waitpid(pid, &st, 0) == pid);
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
			_exit(0); /* the connector thread with it; the sockets close */
		}
		execve("/proc/self/exe", args, calls_env_without_preload());
		calls_fail(__FILE__, __LINE__, "execve", errno);
	}
	calls_set_nonblock(lfd, 1);
	pf[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
	for (int reaped = 0; !reaped || open > 0;) {
		int st;
		if (!reaped && waitpid(child, &st, WNOHANG) == child) {
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
			reaped = 1;
		}
		CHECK(poll(pf, (nfds_t)n, 50) >= 0);
		for (int i = 1; i < n; i++) {
			char c;
			if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t r = read(pf[i].fd, &c, 1);
			if (r == 1) {
				CHECK_EQ(c, 'x');
				calls_write_all(pf[i].fd, "y", 1);
				answered++;
			} else if (r == 0 || (r < 0 && errno == ECONNRESET)) {
				close(pf[i].fd);
				pf[i].fd = -1;
				open--;
			} else {
				CHECK(errno == EAGAIN || errno == EINTR);
			}
		}
		if (pf[0].revents & POLLIN) {
			int fd = accept(lfd, NULL, NULL);
			if (fd >= 0) {
				CHECK(n < (int)(sizeof(pf) / sizeof(pf[0])));
				pf[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
				open++;
			}
		}
	}
	CHECK(answered >= 3);
	close(lfd);
}

static void case_exec_threads_plain(CALLS_ARGS)
{
	exec_threads_case();
}

static void case_spawn_threads_plain(CALLS_ARGS)
{
	et_spawn = 1;
	exec_threads_case();
}

static const struct calls_case cases[] = {
	{"dup", case_dup},
	{"dup2", case_dup2},
	{"dup3", case_dup3},
	{"close_range", case_close_range},
	{"fork", case_fork},
	{"fork_exit", case_fork_exit},
	{"exec", case_exec},
	{"exec_plain", case_exec_plain},
	{"exec_child", case_exec_child},
	{"scm_rights", case_scm_rights},
	{"scm_rights_plain", case_scm_rights_plain},
	{"scm_rights_mmsg", case_scm_rights_mmsg},
	{"scm_rights_mmsg_plain", case_scm_rights_mmsg_plain},
	{"scm_receiver", case_scm_receiver},
	{"scm_receiver_mmsg", case_scm_receiver_mmsg},
	{"sendfile", case_sendfile},
	{"accept4", case_accept4},
	{"spawn_shared", case_spawn_shared},
	{"spawn_plain", case_spawn_plain},
	{"spawn_writer", case_spawn_writer},
	{"exec_threads_plain", case_exec_threads_plain},
	{"spawn_threads_plain", case_spawn_threads_plain},
	{"exec_threads_child", case_exec_threads_child},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
