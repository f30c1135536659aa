/*
 * calls_glibc: the ways glibc reaches a TCP socket's bytes past the ordinary socket calls,
 * between two processes.
 *
 * dprintf and its relatives (vdprintf, __dprintf_chk, __vdprintf_chk); glibc's exported
 * double-underscore aliases (__read, __write, __send, __close, __connect, __dup2, __fcntl,
 * __poll, __select); stdio on a socket that is standard input, output or error, both made
 * so with dup2/dup3 and handed to a new image as its descriptors 0 and 1; sockatmark;
 * children the fork handlers do not see (_Fork, syscall(SYS_fork), popen, system);
 * fexecve and execveat, with and without the preload in the new image; SO_RCVTIMEO and
 * SO_SNDTIMEO across exec; TCP_INQ control messages; TCP_ZEROCOPY_RECEIVE; sendfile from a
 * socket into a pipe; MSG_FASTOPEN on a connected socket; recv and recvfrom with
 * MSG_ERRQUEUE; syscall(SYS_epoll_pwait2); the kernel's own AIO (io_submit) on a socket;
 * moves back to kernel TCP (fdopen, MSG_OOB) right after the client's switch to the ring,
 * while the peer makes no call on the connection, and after the peer's shutdown;
 * O_NONBLOCK set and cleared by another process; and the part of SO_TIMESTAMPING that
 * matches the kernel under ulsock (docs/calls.md section 9 lists what does not).
 *
 * Every byte is checked. Usage: calls_glibc CASE. The cases exec_reader, timeo_reader,
 * stdio_child and fd_writer are the far ends of other cases, started by the helper itself.
 */
#include "calls_common.h"

#include <linux/aio_abi.h>
#include <linux/net_tstamp.h>
#include <net/if.h>
#include <sched.h>
#include <spawn.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>

#define SEED_UP 71u   /* client -> server */
#define SEED_DOWN 72u /* server -> client */

#define WAIT_MS 10000

extern char **environ;

/* glibc exports these without declaring them in its headers. */
pid_t _Fork(void);
int __dprintf_chk(int fd, int flag, const char *fmt, ...);
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);
ssize_t __read(int fd, void *buf, size_t len);
ssize_t __write(int fd, const void *buf, size_t len);
ssize_t __send(int fd, const void *buf, size_t len, int flags);
int __close(int fd);
int __connect(int fd, const struct sockaddr *addr, socklen_t len);
int __dup2(int oldfd, int newfd);
int __fcntl(int fd, int cmd, ...);
int __poll(struct pollfd *fds, nfds_t n, int timeout);
int __select(int n, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv);

/* ---- small helpers --------------------------------------------------------------------------- */

/* Reads exactly strlen(want) bytes and fails, showing both, unless they are `want`. */
static void expect_text(int fd, const char *want)
{
	size_t n = strlen(want);
	char *got = malloc(n + 1);

	CHECK(got != NULL);
	calls_read_exact(fd, got, n);
	got[n] = 0;
	if (memcmp(got, want, n) != 0) {
		dprintf(2, "calls[%d] %s: got '%.200s', want '%.200s'\n", (int)getpid(),
			calls_case_name, got, want);
		calls_fail(__FILE__, __LINE__, "bytes differ from the expected text", 0);
	}
	free(got);
}

static void send_text(int fd, const char *s)
{
	calls_write_all(fd, s, strlen(s));
}

/* Reads one line, byte by byte (nothing past its newline is taken), into buf. */
static void read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		calls_read_exact(fd, buf + n, 1);
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = 0;
	CHECK(n > 0 && buf[n - 1] == '\n');
}

/* Whether this image runs with libulsock preloaded. */
static int preloaded(void)
{
	const char *v = getenv("LD_PRELOAD");

	return v && strstr(v, "ulsock") != NULL;
}

/* This program's path, for a shell command line. */
static void self_path(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);

	CHECK(n > 0 && (size_t)n < len - 1);
	buf[n] = 0;
	CHECK(strchr(buf, '\'') == NULL);
}

/*
 * A connected pair as calls_pair_open makes it, except that the client connects with
 * `conn` and no greeting is exchanged: the case decides what crosses first. With `first`,
 * the client sends those bytes before the server accepts: under ulsock they travel on
 * TCP, before the client's switch to the ring (docs/protocol.md section 4). `expect` is
 * the listener's `calls: expect` kind, or NULL for none.
 */
static void open_pair_raw(struct calls_pair *p,
			  int (*conn)(int, const struct sockaddr *, socklen_t), const char *first,
			  const char *expect)
{
	int lfd = calls_listen(AF_INET, &p->server, expect);

	calls_pair_fork(p, lfd);
	if (p->child == 0) {
		p->fd = socket(AF_INET, SOCK_STREAM, 0);
		CHECK(p->fd >= 0);
		CHECK_EQ(conn(p->fd, (const struct sockaddr *)&p->server.ss, p->server.len), 0);
		if (first) {
			send_text(p->fd, first);
			calls_post(p, 'a');
		}
		return;
	}
	if (first)
		CHECK_EQ(calls_await(p), 'a');
	p->fd = calls_accept(lfd);
	close(lfd);
}

/* Receives pattern bytes until EOF; returns how many arrived (all checked). */
static uint64_t recv_pat_to_eof(int fd, unsigned seed)
{
	static unsigned char buf[65536];
	uint64_t off = 0;

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == -1 && errno == EINTR)
			continue;
		CHECK(n >= 0);
		if (n == 0)
			return off;
		CHECK_PAT(buf, off, (size_t)n, seed);
		off += (uint64_t)n;
	}
}

/* ---- dprintf --------------------------------------------------------------------------------- */

#define DPRINTF_MSGS 40
#define DPRINTF_BIG 200000

static char dprintf_big[DPRINTF_BIG + 1];

static void dprintf_big_fill(unsigned seed)
{
	for (size_t i = 0; i < DPRINTF_BIG; i++)
		dprintf_big[i] = (char)('a' + calls_pat(i, seed) % 26);
	dprintf_big[DPRINTF_BIG] = 0;
}

static int via_vdprintf(int chk, int fd, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = chk ? __vdprintf_chk(fd, 1, fmt, ap) : vdprintf(fd, fmt, ap);
	va_end(ap);
	return r;
}

/* Message i of a dprintf stream, as text. */
static int dprintf_text(char *buf, size_t len, int i, const char *who)
{
	return snprintf(buf, len, "msg %d of %s: %x|%-6s|\n", i, who, i * 7919, "pad");
}

/*
 * Sends DPRINTF_MSGS messages, each with dprintf, vdprintf, __dprintf_chk or
 * __vdprintf_chk in turn and a plain write of "#" after it, then one formatted message
 * of DPRINTF_BIG + 3 bytes.
 */
static void dprintf_send(int fd, const char *who, unsigned seed)
{
	char want[128];
	int r;

	for (int i = 0; i < DPRINTF_MSGS; i++) {
		int n = dprintf_text(want, sizeof(want), i, who);
		const char *fmt = "msg %d of %s: %x|%-6s|\n";
		switch (i % 4) {
		case 0:
			r = dprintf(fd, fmt, i, who, i * 7919, "pad");
			break;
		case 1:
			r = via_vdprintf(0, fd, fmt, i, who, i * 7919, "pad");
			break;
		case 2:
			r = __dprintf_chk(fd, 1, fmt, i, who, i * 7919, "pad");
			break;
		default:
			r = via_vdprintf(1, fd, fmt, i, who, i * 7919, "pad");
			break;
		}
		CHECK_EQ(r, n);
		calls_write_all(fd, "#", 1);
	}
	dprintf_big_fill(seed);
	CHECK_EQ(dprintf(fd, "[%s]\n", dprintf_big), DPRINTF_BIG + 3);
}

static void dprintf_recv(int fd, const char *who, unsigned seed)
{
	static char got[DPRINTF_BIG + 3];
	char want[128];

	for (int i = 0; i < DPRINTF_MSGS; i++) {
		dprintf_text(want, sizeof(want), i, who);
		strcat(want, "#");
		expect_text(fd, want);
	}
	dprintf_big_fill(seed);
	calls_read_exact(fd, got, sizeof(got));
	CHECK_EQ(got[0], '[');
	CHECK_EQ(memcmp(got + 1, dprintf_big, DPRINTF_BIG), 0);
	CHECK_EQ(memcmp(got + 1 + DPRINTF_BIG, "]\n", 2), 0);
}

/* dprintf, vdprintf, __dprintf_chk and __vdprintf_chk on the socket, each way; and a pipe. */
static void case_dprintf(CALLS_ARGS)
{
	struct calls_pair p;
	int pp[2];

	CHECK(pipe(pp) == 0);
	CHECK_EQ(dprintf(pp[1], "pipe %d", 5), 6);
	expect_text(pp[0], "pipe 5");
	close(pp[0]);
	close(pp[1]);

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		dprintf_send(p.fd, "client", SEED_UP);
		dprintf_recv(p.fd, "server", SEED_DOWN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	dprintf_recv(p.fd, "client", SEED_UP);
	dprintf_send(p.fd, "server", SEED_DOWN);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- glibc's exported aliases ---------------------------------------------------------------- */

static void alias_read_exact(int fd, void *buf, size_t n)
{
	char *b = buf;

	while (n > 0) {
		ssize_t r = __read(fd, b, n);
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r > 0);
		b += r;
		n -= (size_t)r;
	}
}

static void alias_expect(int fd, const char *want)
{
	char got[64];
	size_t n = strlen(want);

	CHECK(n < sizeof(got));
	alias_read_exact(fd, got, n);
	CHECK_EQ(memcmp(got, want, n), 0);
}

/*
 * __connect makes the connection; __write and __send send, __read receives; __poll and
 * __select wait; __fcntl sets O_NONBLOCK (then __read on an empty socket is EAGAIN);
 * __dup2 makes a second descriptor that writes in order; __close of the last one is EOF.
 */
static void case_write_alias(CALLS_ARGS)
{
	struct calls_pair p;
	struct pollfd pf;
	struct timeval tv;
	fd_set rd;
	char c;

	open_pair_raw(&p, __connect, NULL, "shm");
	if (p.child == 0) {
		CHECK_EQ(__write(p.fd, "alias-write", 11), 11);
		CHECK_EQ(__send(p.fd, "alias-send", 10, 0), 10);
		calls_await(&p);
		CHECK_EQ(__write(p.fd, "x", 1), 1);
		alias_expect(p.fd, "duporig");
		CHECK_EQ(__close(p.fd), 0);
		p.fd = -1;
		calls_pair_close(&p);
	}
	alias_expect(p.fd, "alias-writealias-send");
	pf = (struct pollfd){.fd = p.fd, .events = POLLIN};
	CHECK_EQ(__poll(&pf, 1, 0), 0);
	FD_ZERO(&rd);
	FD_SET(p.fd, &rd);
	tv = (struct timeval){0, 0};
	CHECK_EQ(__select(p.fd + 1, &rd, NULL, NULL, &tv), 0);

	int fl = __fcntl(p.fd, F_GETFL);
	CHECK(fl >= 0 && !(fl & O_NONBLOCK));
	CHECK_EQ(__fcntl(p.fd, F_SETFL, fl | O_NONBLOCK), 0);
	CHECK_ERR(__read(p.fd, &c, 1), EAGAIN);
	CHECK_EQ(__fcntl(p.fd, F_SETFL, fl), 0);
	CHECK_EQ(fcntl(p.fd, F_GETFL) & O_NONBLOCK, 0);

	calls_post(&p, 'x');
	pf.revents = 0;
	CHECK_EQ(__poll(&pf, 1, WAIT_MS), 1);
	CHECK_EQ(pf.revents, POLLIN);
	FD_ZERO(&rd);
	FD_SET(p.fd, &rd);
	tv = (struct timeval){WAIT_MS / 1000, 0};
	CHECK_EQ(__select(p.fd + 1, &rd, NULL, NULL, &tv), 1);
	CHECK(FD_ISSET(p.fd, &rd));
	alias_expect(p.fd, "x");

	CHECK_EQ(__dup2(p.fd, 50), 50);
	CHECK_EQ(__write(50, "dup", 3), 3);
	CHECK_EQ(__close(50), 0);
	CHECK_EQ(__write(p.fd, "orig", 4), 4);
	CHECK_EQ(__read(p.fd, &c, 1), 0);
	calls_pair_close(&p);
}

/* ---- stdio on the standard streams ----------------------------------------------------------- */

#define STDIO_BIG 100000

/*
 * The client makes the socket its standard output (dup2), then its standard error:
 * printf, puts, fwrite, fputc and fprintf(stderr) arrive in order, then write on the
 * socket's own descriptor, and the server's reply comes back.
 */
static void case_stdout_socket(CALLS_ARGS)
{
	static unsigned char big[STDIO_BIG];
	struct calls_pair p;
	int saved;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK(fflush(stdout) == 0);
		saved = dup(1);
		CHECK(saved >= 0);
		CHECK_EQ(dup2(p.fd, 1), 1);
		CHECK_EQ(printf("printf %d\n", 42), 10);
		CHECK(puts("puts line") >= 0);
		calls_pat_fill(big, 0, sizeof(big), SEED_UP);
		CHECK_EQ(fwrite(big, 1, sizeof(big), stdout), sizeof(big));
		CHECK_EQ(fputc('!', stdout), '!');
		CHECK(fflush(stdout) == 0);
		CHECK_EQ(dup2(saved, 1), 1);
		close(saved);

		saved = dup(2);
		CHECK(saved >= 0);
		CHECK_EQ(dup2(p.fd, 2), 2);
		CHECK_EQ(fprintf(stderr, "stderr %s\n", "line"), 12);
		CHECK_EQ(dup2(saved, 2), 2);
		close(saved);

		send_text(p.fd, "end");
		expect_text(p.fd, "bye");
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	expect_text(p.fd, "printf 42\nputs line\n");
	calls_recv_pat(p.fd, 0, STDIO_BIG, SEED_UP);
	expect_text(p.fd, "!stderr line\nend");
	send_text(p.fd, "bye");
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * The client makes the socket its standard input (dup3) and says so: fgets, getc, scanf
 * and fread read what the server sent then, in order, and EOF after the server's
 * shutdown (revert_after_shutdown covers a shutdown that came first).
 */
static void case_stdin_socket(CALLS_ARGS)
{
	static unsigned char big[STDIO_BIG];
	struct calls_pair p;
	char line[64], word[16];
	int saved, num = 0;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		saved = dup(0);
		CHECK(saved >= 0);
		CHECK_EQ(dup3(p.fd, 0, 0), 0);
		send_text(p.fd, "ready");
		CHECK(fgets(line, sizeof(line), stdin) != NULL);
		CHECK_EQ(strcmp(line, "line one\n"), 0);
		CHECK_EQ(getc(stdin), 'x');
		CHECK_EQ(scanf("%d %15s", &num, word), 2);
		CHECK_EQ(num, 12345);
		CHECK_EQ(strcmp(word, "word"), 0);
		CHECK_EQ(getc(stdin), '\n');
		CHECK_EQ(fread(big, 1, sizeof(big), stdin), sizeof(big));
		CHECK_PAT(big, 0, sizeof(big), SEED_DOWN);
		CHECK_EQ(getc(stdin), EOF);
		CHECK(feof(stdin));
		clearerr(stdin);
		CHECK_EQ(dup2(saved, 0), 0);
		close(saved);
		send_text(p.fd, "done");
		calls_pair_close(&p);
	}
	expect_text(p.fd, "ready");
	send_text(p.fd, "line one\nx12345 word\n");
	calls_send_pat(p.fd, 0, STDIO_BIG, SEED_DOWN);
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	expect_text(p.fd, "done");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * The inetd idiom: the client closes descriptor 0 and dup()s the socket, which lands
 * there, then does the same for descriptor 1 with fcntl(F_DUPFD): fgets(stdin) reads the
 * server's line and printf's answer arrives. A shorter watchdog: a stream that reads
 * wake-up bytes may wait for ever.
 */
static void case_stdio_lowest_fd(CALLS_ARGS)
{
	struct calls_pair p;
	char line[64];
	int saved_in, saved_out;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		alarm(6);
		saved_in = dup(0);
		saved_out = dup(1);
		CHECK(saved_in >= 0 && saved_out >= 0);
		CHECK(fflush(stdout) == 0);
		CHECK(close(0) == 0);
		CHECK_EQ(dup(p.fd), 0);
		CHECK(close(1) == 0);
		CHECK_EQ(fcntl(p.fd, F_DUPFD, 1), 1);
		send_text(p.fd, "ready");
		CHECK(fgets(line, sizeof(line), stdin) != NULL);
		CHECK_EQ(strcmp(line, "question\n"), 0);
		CHECK_EQ(printf("answer to %s", line), 19);
		CHECK(fflush(stdout) == 0);
		CHECK_EQ(dup2(saved_in, 0), 0);
		CHECK_EQ(dup2(saved_out, 1), 1);
		close(saved_in);
		close(saved_out);
		calls_pair_close(&p);
	}
	expect_text(p.fd, "ready");
	send_text(p.fd, "question\n");
	expect_text(p.fd, "answer to question\n");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * The new image of case stdio_exec, started with the socket as its standard input and
 * output (an inetd-style child). Its "calls: preload" and "calls: PASS" lines go to the
 * socket too; the server checks them.
 */
static void case_stdio_child(CALLS_ARGS)
{
	static unsigned char big[STDIO_BIG];
	char line[64];

	CHECK(fgets(line, sizeof(line), stdin) != NULL);
	CHECK_EQ(strcmp(line, "hello child\n"), 0);
	CHECK_EQ(fread(big, 1, sizeof(big), stdin), sizeof(big));
	CHECK_PAT(big, 0, sizeof(big), SEED_DOWN);
	CHECK_EQ(printf("got %s", line), 16);
	calls_pat_fill(big, 0, sizeof(big), SEED_UP);
	CHECK_EQ(fwrite(big, 1, sizeof(big), stdout), sizeof(big));
	CHECK(fflush(stdout) == 0);
}

/*
 * The client hands the socket to a new image of this program as its descriptors 0 and 1
 * (posix_spawn file actions, which ulsock does not see) and closes its own copy; the new
 * image talks to the server with stdio alone. Under ulsock the connection starts on the
 * rings and the new image moves it back to kernel TCP as it starts: the helper prints
 * `calls: handover ADDR` instead of an expect line, and the test checks both.
 */
static void case_stdio_exec(CALLS_ARGS)
{
	struct calls_pair p;
	char line[256];

	open_pair_raw(&p, connect, NULL, NULL);
	calls_addr_str(&p.server, line, sizeof(line));
	if (p.child != 0)
		dprintf(1, "calls: handover %s\n", line);
	calls_greet(p.fd);
	if (p.child == 0) {
		posix_spawn_file_actions_t fa;
		char *args[] = {"calls_glibc", "stdio_child", NULL};
		pid_t pid;

		CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
		CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, p.fd, 0), 0);
		CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, p.fd, 1), 0);
		CHECK_EQ(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ), 0);
		posix_spawn_file_actions_destroy(&fa);
		CHECK(close(p.fd) == 0);
		p.fd = -1;
		calls_wait_child(pid);
		calls_pair_close(&p);
	}
	send_text(p.fd, "hello child\n");
	calls_send_pat(p.fd, 0, STDIO_BIG, SEED_DOWN);
	read_line(p.fd, line, sizeof(line));
	CHECK_EQ(strncmp(line, "calls: preload ", 15), 0);
	CHECK_EQ(strstr(line, "ulsock") != NULL, preloaded());
	expect_text(p.fd, "got hello child\n");
	calls_recv_pat(p.fd, 0, STDIO_BIG, SEED_UP);
	expect_text(p.fd, "calls: PASS stdio_child\n");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* ---- sockatmark ------------------------------------------------------------------------------ */

/* The sending side of urgent_mark: "abc", then "!" as urgent data, then (later) "def". */
static void urgent_send(struct calls_pair *p)
{
	CHECK_EQ(send(p->fd, "abc", 3, 0), 3);
	CHECK_EQ(send(p->fd, "!", 1, MSG_OOB), 1);
	calls_post(p, 'u');
	calls_await(p);
	CHECK_EQ(send(p->fd, "def", 3, 0), 3);
	calls_post(p, 'd');
}

/* sockatmark agrees with SIOCATMARK and returns `want`. */
static void check_mark(int fd, int want)
{
	int at = -1;

	CHECK_EQ(ioctl(fd, SIOCATMARK, &at), 0);
	CHECK_EQ(at, want);
	CHECK_EQ(sockatmark(fd), want);
}

/*
 * The receiving side: 0 before the three normal bytes are read, 1 at the mark and still
 * 1 once the urgent byte was taken, 0 once the normal bytes after it were read.
 */
static void urgent_recv(struct calls_pair *p)
{
	char b[16];

	check_mark(p->fd, 0);
	calls_await(p);
	/* No call on the socket before this one: the urgent byte is there on loopback, and
	 * the three bytes before it are unread (and 0 is right even if it were late). */
	check_mark(p->fd, 0);
	calls_read_exact(p->fd, b, 3);
	CHECK_EQ(memcmp(b, "abc", 3), 0);
	CHECK(calls_wait_for(p->fd, POLLPRI, WAIT_MS) & POLLPRI);
	check_mark(p->fd, 1);
	CHECK_EQ(recv(p->fd, b, 1, MSG_OOB), 1);
	CHECK_EQ(b[0], '!');
	check_mark(p->fd, 1);
	calls_post(p, 'm');
	calls_await(p);
	calls_read_exact(p->fd, b, 3);
	CHECK_EQ(memcmp(b, "def", 3), 0);
	check_mark(p->fd, 0);
}

/*
 * sockatmark answers as ioctl(SIOCATMARK) does: on a fresh connection and each way on a
 * settled one; ENOTTY for a pipe, EBADF for no descriptor.
 */
static void case_sockatmark(CALLS_ARGS)
{
	struct calls_pair p;
	int pp[2];

	CHECK(pipe(pp) == 0);
	CHECK_ERR(sockatmark(pp[0]), ENOTTY);
	close(pp[0]);
	close(pp[1]);
	CHECK_ERR(sockatmark(-1), EBADF);

	/* A receiver that never waited on the socket before (no greeting). */
	open_pair_raw(&p, connect, NULL, "shm");
	if (p.child == 0) {
		urgent_recv(&p);
		calls_pair_close(&p);
	}
	urgent_send(&p);
	calls_pair_close(&p);

	/* A settled connection, each way. */
	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		urgent_send(&p);
		urgent_recv(&p);
		calls_pair_close(&p);
	}
	urgent_recv(&p);
	urgent_send(&p);
	calls_pair_close(&p);
}

/* ---- children the fork handlers do not see --------------------------------------------------- */

#define FORK_BYTES (64u << 10)

static pid_t fork_underscore(void)
{
	return _Fork();
}

static pid_t fork_raw(void)
{
	return (pid_t)syscall(SYS_fork);
}

/* The clone system call as a fork: no CLONE_VM, no stack of its own. */
static pid_t fork_raw_clone(void)
{
	return (pid_t)syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
}

/*
 * The client forks with `forker`; the child keeps the socket and uses it only after the
 * client closed its own copy: its bytes arrive, the server's reply reaches it, and the
 * connection ends when the child closes.
 */
static void fork_case(pid_t (*forker)(void))
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		int go[2];
		char c;

		CHECK(pipe(go) == 0);
		pid_t pid = forker();
		CHECK(pid >= 0);
		if (pid == 0) {
			calls_watchdog();
			close(go[1]);
			CHECK_EQ(read(go[0], &c, 1), 1);
			send_text(p.fd, "from child");
			calls_send_pat(p.fd, 0, FORK_BYTES, SEED_UP);
			expect_text(p.fd, "reply");
			calls_expect_eof(p.fd);
			CHECK(close(p.fd) == 0);
			_exit(0);
		}
		close(go[0]);
		CHECK(close(p.fd) == 0);
		p.fd = -1;
		CHECK_EQ(write(go[1], "g", 1), 1);
		close(go[1]);
		calls_wait_child(pid);
		calls_pair_close(&p);
	}
	expect_text(p.fd, "from child");
	calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_UP);
	send_text(p.fd, "reply");
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

static void case_fork_underscore(CALLS_ARGS)
{
	fork_case(fork_underscore);
}

static void case_raw_fork(CALLS_ARGS)
{
	fork_case(fork_raw);
}

static void case_raw_clone(CALLS_ARGS)
{
	fork_case(fork_raw_clone);
}

/* The far end of case popen_child, run by a shell: writes TEXT on descriptor FD, closes it. */
static void case_fd_writer(CALLS_ARGS)
{
	CHECK(argc >= 2);
	int fd = atoi(argv[0]);
	send_text(fd, argv[1]);
	CHECK(close(fd) == 0);
}

/*
 * popen runs a shell that holds the inherited socket and, once it has read a line, execs
 * this program to write on it. The client closes its own copy before it sends that line:
 * its close must not end the connection while the shell holds the socket. Every byte
 * arrives, then EOF once the writer is done.
 */
static void case_popen_child(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		char self[512], cmd[700];
		FILE *f;

		CHECK(p.fd < 10);
		self_path(self, sizeof(self));
		snprintf(cmd, sizeof(cmd), "read go && exec '%s' fd_writer %d \"from popen: $go\"",
			 self, p.fd);
		f = popen(cmd, "w");
		CHECK(f != NULL);
		CHECK(close(p.fd) == 0);
		p.fd = -1;
		CHECK(fputs("after the close\n", f) >= 0);
		CHECK_EQ(pclose(f), 0);
		calls_pair_close(&p);
	}
	expect_text(p.fd, "from popen: after the close");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * The same through system: the shell leaves a background job that holds the socket and
 * writes on it (through this program) only after system returned, the client closed its
 * copy and then sent the job a line on a pipe.
 */
static void case_system_child(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		char self[512], cmd[700];
		int go[2];

		CHECK(pipe(go) == 0);
		CHECK(p.fd < 10 && go[0] < 10);
		self_path(self, sizeof(self));
		snprintf(cmd, sizeof(cmd),
			 "(read go <&%d && exec '%s' fd_writer %d \"from system: $go\") &",
			 go[0], self, p.fd);
		CHECK_EQ(system(cmd), 0);
		close(go[0]);
		CHECK(close(p.fd) == 0);
		p.fd = -1;
		send_text(go[1], "after the close\n");
		close(go[1]);
		calls_pair_close(&p);
	}
	expect_text(p.fd, "from system: after the close");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* ---- fexecve and execveat -------------------------------------------------------------------- */

#define EXEC_BYTES (64u << 10)

/*
 * The exec'd end: before the exec the server sent "0123456789" and EXEC_BYTES pattern
 * bytes, of which the old image read 4 and then wrote "pre". Here: the other 6 and the
 * pattern, "post" and pattern bytes up, the server's "after", then close.
 */
static void case_exec_reader(CALLS_ARGS)
{
	CHECK(argc >= 1);
	int fd = atoi(argv[0]);
	if (argc >= 2 && strcmp(argv[1], "plain") == 0)
		CHECK(getenv("LD_PRELOAD") == NULL);
	expect_text(fd, "456789");
	calls_recv_pat(fd, 0, EXEC_BYTES, SEED_DOWN);
	send_text(fd, "post");
	calls_send_pat(fd, 0, EXEC_BYTES, SEED_UP);
	expect_text(fd, "after");
	CHECK(close(fd) == 0);
}

enum exec_how { EXEC_FEXECVE, EXEC_EXECVEAT, EXEC_RAW_EXECVE, EXEC_RAW_EXECVEAT };

static void exec_case(enum exec_how how, int plain)
{
	struct calls_pair p;
	char buf[8];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		char num[16];
		char *args[] = {"calls_glibc", "exec_reader", num, plain ? "plain" : NULL, NULL};
		char **env = plain ? calls_env_without_preload() : environ;

		calls_await(&p);
		calls_read_exact(p.fd, buf, 4);
		CHECK_EQ(memcmp(buf, "0123", 4), 0);
		send_text(p.fd, "pre");
		snprintf(num, sizeof(num), "%d", p.fd);
		if (how == EXEC_FEXECVE) {
			int self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
			CHECK(self >= 0);
			fexecve(self, args, env);
		} else if (how == EXEC_EXECVEAT) {
			execveat(AT_FDCWD, "/proc/self/exe", args, env, 0);
		} else if (how == EXEC_RAW_EXECVE) {
			syscall(SYS_execve, "/proc/self/exe", args, env);
		} else {
			syscall(SYS_execveat, AT_FDCWD, "/proc/self/exe", args, env, 0);
		}
		calls_fail(__FILE__, __LINE__, "exec", errno);
	}
	send_text(p.fd, "0123456789");
	calls_send_pat(p.fd, 0, EXEC_BYTES, SEED_DOWN);
	calls_post(&p, 'g');
	expect_text(p.fd, "prepost");
	calls_recv_pat(p.fd, 0, EXEC_BYTES, SEED_UP);
	send_text(p.fd, "after");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

static void case_fexecve(CALLS_ARGS)
{
	exec_case(EXEC_FEXECVE, 0);
}

static void case_fexecve_plain(CALLS_ARGS)
{
	exec_case(EXEC_FEXECVE, 1);
}

static void case_execveat_plain(CALLS_ARGS)
{
	exec_case(EXEC_EXECVEAT, 1);
}

static void case_raw_execve_plain(CALLS_ARGS)
{
	exec_case(EXEC_RAW_EXECVE, 1);
}

static void case_raw_execveat_plain(CALLS_ARGS)
{
	exec_case(EXEC_RAW_EXECVEAT, 1);
}

/* ---- SO_RCVTIMEO and SO_SNDTIMEO across exec ------------------------------------------------- */

#define TIMEO_US 200000

/* A blocking read that fails with EAGAIN (the timeout) must not take a byte. */
static void expect_timeout_recv(int fd)
{
	char c;

	CHECK_ERR(recv(fd, &c, 1, 0), EAGAIN);
	CHECK_ERR(read(fd, &c, 1), EAGAIN);
}

/*
 * The exec'd end of timeo_after_exec (arguments: the socket, and a descriptor on which to
 * tell the server that the socket is full): the timeouts the old image set read back,
 * bound an empty socket's receives and a full socket's send; the bytes around them are
 * exact.
 */
static void case_timeo_reader(CALLS_ARGS)
{
	struct timeval tv;
	socklen_t len = sizeof(tv);
	uint64_t off = 0, count = 0;

	CHECK(argc >= 2);
	int fd = atoi(argv[0]);
	int full_fd = atoi(argv[1]);
	CHECK_EQ(getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len), 0);
	CHECK_EQ(tv.tv_sec * 1000000 + tv.tv_usec, TIMEO_US);
	len = sizeof(tv);
	CHECK_EQ(getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &len), 0);
	CHECK_EQ(tv.tv_sec * 1000000 + tv.tv_usec, TIMEO_US);

	expect_timeout_recv(fd);
	send_text(fd, "ready");
	/* Waits without the timeout: the server may be slow to answer on a loaded machine. */
	CHECK(calls_wait_for(fd, POLLIN, WAIT_MS) & POLLIN);
	expect_text(fd, "data");
	expect_timeout_recv(fd);

	/* A full socket (the server reads nothing until told): a blocking send gives up with
	 * EAGAIN after the timeout. A byte that still went in (room freed late) is counted,
	 * and the socket filled again. */
	off = calls_fill(fd, 0, SEED_UP);
	for (int i = 0;; i++) {
		unsigned char b = calls_pat(off, SEED_UP);
		CHECK(i < 50);
		ssize_t r = send(fd, &b, 1, MSG_NOSIGNAL);
		if (r == -1) {
			CHECK_EQ(errno, EAGAIN);
			break;
		}
		CHECK_EQ(r, 1);
		off += 1;
		off += calls_fill(fd, off, SEED_UP);
	}
	CHECK(shutdown(fd, SHUT_WR) == 0);
	CHECK_EQ(write(full_fd, "f", 1), 1);
	close(full_fd);
	CHECK(calls_wait_for(fd, POLLIN, WAIT_MS) & POLLIN);
	calls_read_exact(fd, &count, sizeof(count));
	CHECK_EQ(count, off);
	CHECK(calls_wait_for(fd, POLLIN, WAIT_MS) & POLLIN);
	calls_expect_eof(fd);
	CHECK(close(fd) == 0);
}

/* SO_RCVTIMEO and SO_SNDTIMEO set before execve bound the new image's waits. */
static void case_timeo_after_exec(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		struct timeval tv = {0, TIMEO_US};
		char num[16], full[16];
		char *args[] = {"calls_glibc", "timeo_reader", num, full, NULL};
		int full_fd = dup(p.sync_wr); /* without close-on-exec */

		CHECK(full_fd >= 0);
		CHECK_EQ(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
		CHECK_EQ(setsockopt(p.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
		snprintf(num, sizeof(num), "%d", p.fd);
		snprintf(full, sizeof(full), "%d", full_fd);
		execve("/proc/self/exe", args, environ);
		calls_fail(__FILE__, __LINE__, "execve", errno);
	}
	expect_text(p.fd, "ready");
	send_text(p.fd, "data");
	CHECK_EQ(calls_await(&p), 'f');
	uint64_t n = recv_pat_to_eof(p.fd, SEED_UP);
	CHECK(n > 0);
	calls_write_all(p.fd, &n, sizeof(n));
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_pair_close(&p);
}

/* ---- TCP_INQ --------------------------------------------------------------------------------- */

#define INQ_BYTES 5000

/* One recvmsg of up to len bytes; returns its count and the TCP_CM_INQ value (-1: none). */
static ssize_t inq_recvmsg(int fd, void *buf, size_t len, int *inq, struct msghdr *out)
{
	union {
		char buf[CMSG_SPACE(sizeof(int)) * 2];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};
	ssize_t n = recvmsg(fd, &m, 0);
	int found = 0;

	*inq = -1;
	for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; cm; cm = CMSG_NXTHDR(&m, cm)) {
		CHECK_EQ(cm->cmsg_level, SOL_TCP);
		CHECK_EQ(cm->cmsg_type, TCP_CM_INQ);
		CHECK_EQ(cm->cmsg_len, CMSG_LEN(sizeof(int)));
		memcpy(inq, CMSG_DATA(cm), sizeof(int));
		found++;
	}
	CHECK(found <= 1);
	if (out)
		*out = m;
	return n;
}

/* The sender of inq_side: "12345", then INQ_BYTES pattern bytes, then "z", each on cue. */
static void inq_sender(struct calls_pair *p, unsigned seed)
{
	calls_await(p);
	send_text(p->fd, "12345");
	calls_await(p);
	calls_send_pat(p->fd, 0, INQ_BYTES, seed);
	calls_await(p);
	send_text(p->fd, "z");
}

/*
 * The receiver: with TCP_INQ on, each recvmsg carries the bytes still queued after it
 * (exact, since everything sent has arrived); with no room for it, MSG_CTRUNC; with
 * TCP_INQ off again, no control message.
 */
static void inq_receiver(struct calls_pair *p, unsigned seed)
{
	static unsigned char buf[INQ_BYTES];
	struct msghdr m;
	int one = 1, zero = 0, v = -1, inq;
	socklen_t len = sizeof(v);
	char b[8];

	CHECK_EQ(setsockopt(p->fd, IPPROTO_TCP, TCP_INQ, &one, sizeof(one)), 0);
	CHECK_EQ(getsockopt(p->fd, IPPROTO_TCP, TCP_INQ, &v, &len), 0);
	CHECK_EQ(v, 1);
	calls_post(p, '1');
	CHECK_EQ(calls_wait_fionread(p->fd, 5, WAIT_MS), 5);
	CHECK_EQ(inq_recvmsg(p->fd, b, 2, &inq, &m), 2);
	CHECK_EQ(memcmp(b, "12", 2), 0);
	CHECK_EQ(inq, 3);
	CHECK_EQ(m.msg_controllen, CMSG_SPACE(sizeof(int)));
	CHECK_EQ(m.msg_flags, 0);

	/* No control buffer: the bytes, and MSG_CTRUNC for the message that did not fit. */
	struct iovec iov = {.iov_base = b, .iov_len = 1};
	struct msghdr bare = {.msg_iov = &iov, .msg_iovlen = 1};
	CHECK_EQ(recvmsg(p->fd, &bare, 0), 1);
	CHECK_EQ(b[0], '3');
	CHECK_EQ(bare.msg_flags, MSG_CTRUNC);
	CHECK_EQ(bare.msg_controllen, 0);

	CHECK_EQ(inq_recvmsg(p->fd, b, sizeof(b), &inq, NULL), 2);
	CHECK_EQ(memcmp(b, "45", 2), 0);
	CHECK_EQ(inq, 0);

	calls_post(p, '2');
	CHECK_EQ(calls_wait_fionread(p->fd, INQ_BYTES, WAIT_MS), INQ_BYTES);
	for (size_t got = 0; got < INQ_BYTES;) {
		size_t want = INQ_BYTES - got < 777 ? INQ_BYTES - got : 777;
		ssize_t n = inq_recvmsg(p->fd, buf + got, want, &inq, NULL);
		CHECK_EQ(n, want);
		got += (size_t)n;
		CHECK_EQ(inq, INQ_BYTES - got);
	}
	CHECK_PAT(buf, 0, INQ_BYTES, seed);

	CHECK_EQ(setsockopt(p->fd, IPPROTO_TCP, TCP_INQ, &zero, sizeof(zero)), 0);
	calls_post(p, '3');
	CHECK_EQ(inq_recvmsg(p->fd, b, sizeof(b), &inq, &m), 1);
	CHECK_EQ(b[0], 'z');
	CHECK_EQ(inq, -1);
	CHECK_EQ(m.msg_controllen, 0);
}

/* TCP_INQ control messages on recvmsg, each way. */
static void case_tcp_inq(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		inq_sender(&p, SEED_UP);
		inq_receiver(&p, SEED_DOWN);
		calls_pair_close(&p);
	}
	inq_receiver(&p, SEED_UP);
	inq_sender(&p, SEED_DOWN);
	calls_pair_close(&p);
}

/*
 * A recvmsg that fails (EAGAIN on the empty socket) leaves the msghdr as it was: its name
 * and control lengths keep their room, so the same msghdr, used again once bytes came,
 * still receives the TCP_INQ message.
 */
static void case_recvmsg_eagain(CALLS_ARGS)
{
	union {
		char buf[64];
		struct cmsghdr align;
	} ctl;
	struct sockaddr_storage from;
	struct calls_pair p;
	char b[8];
	int one = 1, inq = -1;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		send_text(p.fd, "abc");
		calls_await(&p); /* no FIN before the read: TCP_INQ would count it */
		calls_pair_close(&p);
	}
	CHECK_EQ(setsockopt(p.fd, IPPROTO_TCP, TCP_INQ, &one, sizeof(one)), 0);
	struct iovec iov = {.iov_base = b, .iov_len = sizeof(b)};
	struct msghdr m = {.msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov,
			   .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
	CHECK_ERR(recvmsg(p.fd, &m, MSG_DONTWAIT), EAGAIN);
	CHECK_EQ(m.msg_namelen, sizeof(from));
	CHECK_EQ(m.msg_controllen, sizeof(ctl.buf));
	calls_post(&p, 'g');
	CHECK_EQ(calls_wait_fionread(p.fd, 3, WAIT_MS), 3);
	CHECK_EQ(recvmsg(p.fd, &m, 0), 3);
	CHECK_EQ(memcmp(b, "abc", 3), 0);
	CHECK_EQ(m.msg_flags, 0);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	CHECK(cm != NULL);
	CHECK_EQ(cm->cmsg_type, TCP_CM_INQ);
	memcpy(&inq, CMSG_DATA(cm), sizeof(inq));
	CHECK_EQ(inq, 0);
	calls_post(&p, 'e');
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * TCP_INQ once the peer's FIN arrived: the kernel counts the FIN as one more byte, so the
 * value stays 1 above the bytes left (1 with none left, and at EOF) and a reader knows an
 * EOF waits.
 */
static void case_tcp_inq_eof(CALLS_ARGS)
{
	struct calls_pair p;
	int one = 1, inq;
	char b[8];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		send_text(p.fd, "abcde");
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_await(&p);
		calls_pair_close(&p);
	}
	CHECK_EQ(setsockopt(p.fd, IPPROTO_TCP, TCP_INQ, &one, sizeof(one)), 0);
	CHECK(calls_wait_for(p.fd, POLLRDHUP, WAIT_MS) & POLLRDHUP);
	CHECK_EQ(inq_recvmsg(p.fd, b, 2, &inq, NULL), 2);
	CHECK_EQ(memcmp(b, "ab", 2), 0);
	CHECK_EQ(inq, 4);
	CHECK_EQ(inq_recvmsg(p.fd, b, sizeof(b), &inq, NULL), 3);
	CHECK_EQ(memcmp(b, "cde", 3), 0);
	CHECK_EQ(inq, 1);
	CHECK_EQ(inq_recvmsg(p.fd, b, sizeof(b), &inq, NULL), 0);
	CHECK_EQ(inq, 1);
	calls_post(&p, 'd');
	calls_pair_close(&p);
}

/* ---- TCP_ZEROCOPY_RECEIVE -------------------------------------------------------------------- */

/* The kernel's struct tcp_zerocopy_receive (linux/tcp.h clashes with netinet/tcp.h). */
struct zc_receive {
	uint64_t address;
	uint32_t length;
	uint32_t recv_skip_hint;
	uint32_t inq;
	int32_t err;
	uint64_t copybuf_address;
	int32_t copybuf_len;
	uint32_t flags;
	uint64_t msg_control;
	uint64_t msg_controllen;
	uint32_t msg_flags;
	uint32_t reserved;
};

#define ZC_MAP (64u << 10)

/*
 * Receiving by mapping the socket: 11 queued bytes (less than a page) come back in the
 * copy buffer and leave the queue; then ordinary bytes flow both ways exactly. The peer
 * waits in a receive meanwhile (revert_idle_peer covers one that does not).
 */
static void case_zerocopy_receive(CALLS_ARGS)
{
	struct calls_pair p;
	struct zc_receive z;
	char copy[64];
	socklen_t len = sizeof(z);

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		/* Then waits in a receive on the connection, as a peer awaiting an answer. */
		send_text(p.fd, "zerocopy-rx");
		calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
		calls_send_pat(p.fd, 0, FORK_BYTES, SEED_UP);
		calls_pair_close(&p);
	}
	CHECK_EQ(calls_wait_fionread(p.fd, 11, WAIT_MS), 11);
	void *map = mmap(NULL, ZC_MAP, PROT_READ, MAP_SHARED, p.fd, 0);
	if (map == MAP_FAILED)
		calls_skip("mmap of a TCP socket failed");
	memset(&z, 0, sizeof(z));
	memset(copy, 0, sizeof(copy));
	z.address = (uint64_t)(uintptr_t)map;
	z.length = ZC_MAP;
	z.copybuf_address = (uint64_t)(uintptr_t)copy;
	z.copybuf_len = sizeof(copy);
	CHECK_EQ(getsockopt(p.fd, IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE, &z, &len), 0);
	CHECK_EQ(len, sizeof(z));
	CHECK_EQ(z.err, 0);
	CHECK_EQ(z.length, 0);
	CHECK_EQ(z.copybuf_len, 11);
	CHECK_EQ(memcmp(copy, "zerocopy-rx", 11), 0);
	CHECK_EQ(calls_fionread(p.fd), 0);
	CHECK(munmap(map, ZC_MAP) == 0);
	calls_send_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
	calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_UP);
	calls_pair_close(&p);
}

/* ---- sendfile from a socket into a pipe ------------------------------------------------------ */

#define SENDFILE_BYTES 200000

/*
 * sendfile(pipe, socket): ten queued bytes move into the pipe; an offset is ESPIPE and
 * takes nothing; then SENDFILE_BYTES pattern bytes in pieces the pipe can hold.
 */
static void case_sendfile_to_pipe(CALLS_ARGS)
{
	static unsigned char buf[65536];
	struct calls_pair p;
	int pp[2];
	off_t off = 0;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		send_text(p.fd, "0123456789");
		calls_await(&p);
		calls_send_pat(p.fd, 0, SENDFILE_BYTES, SEED_UP);
		expect_text(p.fd, "done");
		calls_pair_close(&p);
	}
	CHECK(pipe(pp) == 0);
	CHECK_EQ(calls_wait_fionread(p.fd, 10, WAIT_MS), 10);
	CHECK_ERR(sendfile(pp[1], p.fd, &off, 10), ESPIPE);
	CHECK_EQ(calls_fionread(p.fd), 10);
	CHECK_EQ(sendfile(pp[1], p.fd, NULL, 10), 10);
	expect_text(pp[0], "0123456789");
	calls_post(&p, 'g');
	for (uint64_t got = 0; got < SENDFILE_BYTES;) {
		size_t want = SENDFILE_BYTES - got < 50000 ? SENDFILE_BYTES - got : 50000;
		ssize_t n = sendfile(pp[1], p.fd, NULL, want);
		CHECK(n > 0 && (size_t)n <= want);
		calls_read_exact(pp[0], buf, (size_t)n);
		CHECK_PAT(buf, got, (size_t)n, SEED_UP);
		got += (uint64_t)n;
	}
	send_text(p.fd, "done");
	close(pp[0]);
	close(pp[1]);
	calls_pair_close(&p);
}

/* ---- MSG_FASTOPEN on a connected socket ------------------------------------------------------ */

/* The kernel's answer: EISCONN when client fast open is enabled, else EOPNOTSUPP. */
static int fastopen_errno(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_fastopen", "r");
	int v = 1;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 1;
		fclose(f);
	}
	return (v & 1) ? EISCONN : EOPNOTSUPP;
}

/* send, sendto and sendmsg with MSG_FASTOPEN fail and send nothing. */
static void fastopen_try(int fd, int want)
{
	struct iovec iov = {.iov_base = "tfo", .iov_len = 3};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	CHECK_ERR(sendto(fd, "tfo", 3, MSG_FASTOPEN, NULL, 0), want);
	CHECK_ERR(send(fd, "tfo", 3, MSG_FASTOPEN), want);
	CHECK_ERR(sendmsg(fd, &m, MSG_FASTOPEN), want);
}

static void case_fastopen_connected(CALLS_ARGS)
{
	struct calls_pair p;
	int want = fastopen_errno();

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		fastopen_try(p.fd, want);
		send_text(p.fd, "ok");
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		expect_text(p.fd, "ok2");
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	expect_text(p.fd, "ok");
	calls_expect_eof(p.fd);
	fastopen_try(p.fd, want);
	send_text(p.fd, "ok2");
	calls_pair_close(&p);
}

/*
 * The same in a network namespace of its own with client fast open off (the setting is
 * per namespace): EOPNOTSUPP. Needs CAP_SYS_ADMIN; skipped without it.
 */
static void case_fastopen_off(CALLS_ARGS)
{
	struct ifreq ifr = {.ifr_name = "lo"};

	if (unshare(CLONE_NEWNET) != 0)
		calls_skip("no network namespace of its own (unshare: not permitted)");
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(s >= 0);
	CHECK(ioctl(s, SIOCGIFFLAGS, &ifr) == 0);
	ifr.ifr_flags |= IFF_UP;
	CHECK(ioctl(s, SIOCSIFFLAGS, &ifr) == 0);
	close(s);
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_fastopen", "w");
	CHECK(f != NULL);
	CHECK(fputs("0", f) >= 0);
	CHECK(fclose(f) == 0);
	CHECK_EQ(fastopen_errno(), EOPNOTSUPP);
	case_fastopen_connected(argc, argv);
}

/* ---- MSG_ERRQUEUE through recv and recvfrom -------------------------------------------------- */

/* Waits for the completion of a MSG_ZEROCOPY send (POLLERR) and takes it with `how`. */
static void errqueue_take(int fd, int how)
{
	struct sockaddr_storage from;
	socklen_t fromlen = sizeof(from);
	char b[8];

	CHECK(calls_wait_for(fd, 0, WAIT_MS) & POLLERR);
	if (how == 0)
		CHECK_EQ(recv(fd, b, sizeof(b), MSG_ERRQUEUE), 0);
	else
		CHECK_EQ(recvfrom(fd, b, sizeof(b), MSG_ERRQUEUE, (struct sockaddr *)&from,
				  &fromlen),
			 0);
	CHECK_EQ(calls_wait_for(fd, 0, 0), 0);
	CHECK_ERR(recv(fd, b, sizeof(b), MSG_ERRQUEUE), EAGAIN);
}

/*
 * A MSG_ZEROCOPY send's completion read with recv(MSG_ERRQUEUE), then another's with
 * recvfrom: each returns 0 bytes and clears POLLERR; an empty error queue is EAGAIN.
 */
static void case_errqueue_recv(CALLS_ARGS)
{
	struct calls_pair p;
	int one = 1;
	char b[8];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		if (setsockopt(p.fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0)
			calls_skip("no SO_ZEROCOPY");
		CHECK_ERR(recv(p.fd, b, sizeof(b), MSG_ERRQUEUE), EAGAIN);
		CHECK_EQ(send(p.fd, "zc1", 3, MSG_ZEROCOPY), 3);
		errqueue_take(p.fd, 0);
		CHECK_EQ(send(p.fd, "zc2", 3, MSG_ZEROCOPY), 3);
		errqueue_take(p.fd, 1);
		send_text(p.fd, "end");
		calls_pair_close(&p);
	}
	expect_text(p.fd, "zc1zc2end");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* ---- syscall(SYS_epoll_pwait2) --------------------------------------------------------------- */

static long raw_pwait2(int ep, struct epoll_event *ev, int n, const struct timespec *ts)
{
	return syscall(SYS_epoll_pwait2, ep, ev, n, ts, NULL, 8);
}

/*
 * An epoll set holding the socket, waited on with the raw system call: nothing while the
 * socket is empty, then the socket with the program's data once a byte is sent.
 */
static void case_raw_epoll_pwait2(CALLS_ARGS)
{
	struct calls_pair p;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x1234abcdull}, out[4];
	struct timespec zero = {0, 0}, ten = {WAIT_MS / 1000, 0};

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		send_text(p.fd, "x");
		calls_await(&p);
		send_text(p.fd, "y");
		calls_pair_close(&p);
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	CHECK_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd, &ev), 0);
	long n = raw_pwait2(ep, out, 4, &zero);
	if (n == -1 && errno == ENOSYS)
		calls_skip("no epoll_pwait2 system call");
	CHECK_EQ(n, 0);
	calls_post(&p, 'x');
	memset(out, 0, sizeof(out));
	CHECK_EQ(raw_pwait2(ep, out, 4, &ten), 1);
	CHECK_EQ(out[0].events, EPOLLIN);
	CHECK_EQ(out[0].data.u64, 0x1234abcdull);
	expect_text(p.fd, "x");
	CHECK_EQ(raw_pwait2(ep, out, 4, &zero), 0);
	calls_post(&p, 'y');
	memset(out, 0, sizeof(out));
	CHECK_EQ(raw_pwait2(ep, out, 4, NULL), 1);
	CHECK_EQ(out[0].data.u64, 0x1234abcdull);
	expect_text(p.fd, "y");
	CHECK(close(ep) == 0);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* ---- the kernel's AIO: io_submit ------------------------------------------------------------- */

/* Submits one iocb on fd and waits for its completion; returns the result. */
static long aio_one(aio_context_t ctx, int fd, int op, void *buf, size_t len, long long off)
{
	struct iocb cb;
	struct iocb *list[1] = {&cb};
	struct io_event ev;
	struct timespec ts = {WAIT_MS / 1000, 0};

	memset(&cb, 0, sizeof(cb));
	cb.aio_fildes = (uint32_t)fd;
	cb.aio_lio_opcode = (uint16_t)op;
	cb.aio_buf = (uint64_t)(uintptr_t)buf;
	cb.aio_nbytes = len;
	cb.aio_offset = off;
	cb.aio_data = 0x5151;
	CHECK_EQ(syscall(SYS_io_submit, ctx, 1, list), 1);
	memset(&ev, 0, sizeof(ev));
	CHECK_EQ(syscall(SYS_io_getevents, ctx, 1, 1, &ev, &ts), 1);
	CHECK_EQ(ev.data, 0x5151);
	CHECK_EQ(ev.obj, (uint64_t)(uintptr_t)&cb);
	return (long)ev.res;
}

/*
 * IOCB_CMD_PREAD of ten queued bytes, IOCB_CMD_PWRITE of nine, a PWRITE at an offset
 * (ESPIPE in the completion), then ordinary bytes each way.
 */
static void case_io_submit(CALLS_ARGS)
{
	struct calls_pair p;
	aio_context_t ctx = 0;
	char buf[32];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		send_text(p.fd, "native-io");
		expect_text(p.fd, "aio-write");
		calls_send_pat(p.fd, 0, FORK_BYTES, SEED_UP);
		calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
		calls_pair_close(&p);
	}
	if (syscall(SYS_io_setup, 4, &ctx) != 0)
		calls_skip("io_setup failed");
	CHECK_EQ(calls_wait_fionread(p.fd, 9, WAIT_MS), 9);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(aio_one(ctx, p.fd, IOCB_CMD_PREAD, buf, sizeof(buf), 0), 9);
	CHECK_EQ(memcmp(buf, "native-io", 10), 0);
	CHECK_EQ(aio_one(ctx, p.fd, IOCB_CMD_PWRITE, "aio-write", 9, 0), 9);
	CHECK_EQ(aio_one(ctx, p.fd, IOCB_CMD_PWRITE, "never", 5, 100), -ESPIPE);
	CHECK_EQ(syscall(SYS_io_destroy, ctx), 0);
	calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_UP);
	calls_send_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
	calls_pair_close(&p);
}

/* ---- moves back to kernel TCP: after the client's switch, an idle peer, a shutdown ----------- */

#define REVERT_ROUNDS 3
#define REVERT_DOWN (3u << 20) /* more than a ring holds */

/*
 * The client sends "A" before the server accepts (on TCP: the server has not attached
 * yet), switches to the ring in the receive that takes the server's "B", and
 * moves the connection back before the server read "A":
 * - fdopen: the server is still sending REVERT_DOWN bytes (more than the ring holds), so
 *   it answers the move from its send; the client reads them all through stdio and
 *   writes a line through it;
 * - an urgent byte: only the client's sending direction moves, the server waits idle.
 * The server then reads "A" and the rest exactly, and bytes flow both ways after.
 */
static void revert_round(int oob)
{
	static unsigned char big[REVERT_DOWN];
	struct calls_pair p;
	char c = 0;

	open_pair_raw(&p, connect, "A", "shm");
	if (p.child == 0) {
		FILE *f = NULL;

		calls_read_exact(p.fd, &c, 1);
		CHECK_EQ(c, 'B');
		if (oob) {
			CHECK_EQ(send(p.fd, "!", 1, MSG_OOB), 1);
		} else {
			f = fdopen(p.fd, "r+");
			CHECK(f != NULL);
			CHECK(fputs("line\n", f) >= 0);
			CHECK(fflush(f) == 0);
			CHECK_EQ(fread(big, 1, sizeof(big), f), sizeof(big));
			CHECK_PAT(big, 0, sizeof(big), SEED_DOWN);
		}
		calls_post(&p, 'r');
		send_text(p.fd, "C");
		calls_send_pat(p.fd, 0, FORK_BYTES, SEED_UP);
		calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
		if (f) {
			CHECK(fclose(f) == 0);
			p.fd = -1;
		}
		calls_pair_close(&p);
	}
	send_text(p.fd, "B");
	if (!oob)
		calls_send_pat(p.fd, 0, REVERT_DOWN, SEED_DOWN);
	calls_await(&p);
	if (oob) {
		CHECK(calls_wait_for(p.fd, POLLPRI, WAIT_MS) & POLLPRI);
		CHECK_EQ(recv(p.fd, &c, 1, 0), 1);
		CHECK_EQ(c, 'A');
		CHECK_EQ(sockatmark(p.fd), 1);
		CHECK_EQ(recv(p.fd, &c, 1, MSG_OOB), 1);
		CHECK_EQ(c, '!');
		expect_text(p.fd, "C");
	} else {
		expect_text(p.fd, "Aline\nC");
	}
	calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_UP);
	calls_send_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

static void case_revert_after_switch(CALLS_ARGS)
{
	for (int i = 0; i < REVERT_ROUNDS; i++) {
		revert_round(0);
		revert_round(1);
	}
}

/*
 * A move back to kernel TCP while the peer makes no call on the connection: the server
 * sends a line and pattern bytes, then waits on a pipe until the client is done. The
 * client reads them all, then opens a stream with fdopen (which moves the connection back)
 * and answers through it; the server then shuts down and the stream reads EOF. Nothing
 * the server sent is unread when the client moves, so the client can move the server's
 * direction for it (a peer with unread bytes of its own must make a call on the
 * connection within 2 s: README, limitations). A shorter watchdog: a stream that reads
 * wake-up bytes may wait for ever.
 */
static void case_revert_idle_peer(CALLS_ARGS)
{
	static unsigned char big[FORK_BYTES];
	struct calls_pair p;
	char line[7];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		alarm(6);
		CHECK_EQ(calls_await(&p), 'g');
		calls_read_exact(p.fd, line, 6);
		line[6] = '\0';
		CHECK_EQ(strcmp(line, "hello\n"), 0);
		calls_read_exact(p.fd, big, sizeof(big));
		CHECK_PAT(big, 0, sizeof(big), SEED_DOWN);
		FILE *f = fdopen(p.fd, "r+");
		CHECK(f != NULL);
		CHECK(fputs("answer\n", f) >= 0);
		CHECK(fflush(f) == 0);
		calls_post(&p, 'd');
		CHECK_EQ(fgetc(f), EOF);
		CHECK(fclose(f) == 0);
		p.fd = -1;
		calls_pair_close(&p);
	}
	send_text(p.fd, "hello\n");
	calls_send_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
	calls_post(&p, 'g');
	CHECK_EQ(calls_await(&p), 'd');
	expect_text(p.fd, "answer\n");
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * The server sends a line and shuts its side down while the connection is on the rings,
 * then waits in a receive; only then does the client move the connection back (fdopen):
 * its stream reads the line, then EOF, and its answer arrives.
 */
static void case_revert_after_shutdown(CALLS_ARGS)
{
	struct calls_pair p;
	char line[64];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		alarm(6);
		calls_await(&p);
		FILE *f = fdopen(p.fd, "r+");
		CHECK(f != NULL);
		CHECK(fgets(line, sizeof(line), f) != NULL);
		CHECK_EQ(strcmp(line, "last line\n"), 0);
		CHECK_EQ(fgetc(f), EOF);
		CHECK(feof(f));
		CHECK(fputs("answer\n", f) >= 0);
		CHECK(fclose(f) == 0);
		p.fd = -1;
		calls_pair_close(&p);
	}
	send_text(p.fd, "last line\n");
	CHECK(shutdown(p.fd, SHUT_WR) == 0);
	calls_post(&p, 's');
	expect_text(p.fd, "answer\n");
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* ---- O_NONBLOCK set by another process ------------------------------------------------------- */

/* A forked process sets or clears O_NONBLOCK of the shared open file, and exits. */
static void nonblock_elsewhere(int fd, int on)
{
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		calls_watchdog();
		calls_set_nonblock(fd, on);
		_exit(0);
	}
	calls_wait_child(pid);
	CHECK_EQ((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0, on);
}

/*
 * O_NONBLOCK is one flag of the open file, whoever sets it. Set by another process: a
 * receive on the empty socket and a send on the full one fail with EAGAIN here. Cleared
 * by another process: a send waits until the peer made room, a receive until bytes come.
 */
static void case_nonblock_other(CALLS_ARGS)
{
	struct calls_pair p;
	uint64_t off = 0;
	char c;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK_EQ(read(p.sync_rd, &off, sizeof(off)), sizeof(off));
		calls_recv_pat(p.fd, 0, off + FORK_BYTES, SEED_DOWN);
		calls_send_pat(p.fd, 0, FORK_BYTES, SEED_UP);
		calls_pair_close(&p);
	}
	nonblock_elsewhere(p.fd, 1);
	CHECK_ERR(recv(p.fd, &c, 1, 0), EAGAIN);
	CHECK_ERR(read(p.fd, &c, 1), EAGAIN);
	CHECK_ERR(recv(p.fd, &c, 1, MSG_DONTWAIT), EAGAIN);
	off = calls_fill(p.fd, 0, SEED_DOWN);
	calls_expect_full(p.fd, &off, SEED_DOWN, 0);

	nonblock_elsewhere(p.fd, 0);
	CHECK_EQ(write(p.sync_wr, &off, sizeof(off)), sizeof(off));
	calls_send_pat(p.fd, off, FORK_BYTES, SEED_DOWN);
	calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_UP);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/* ---- SO_TIMESTAMPING (docs/calls.md section 9) ----------------------------------------------- */

/*
 * SO_TIMESTAMPING transmit reports (docs/calls.md D10): the option reads back as set, the
 * bytes arrive exactly each way, and a non-blocking read of the error queue never waits
 * and returns only well-formed timestamp reports (ulsock makes none for ring sends).
 */
static void case_timestamping_tx(CALLS_ARGS)
{
	struct calls_pair p;
	int v = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE |
		SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY | SOF_TIMESTAMPING_TX_ACK;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		int got = 0;
		socklen_t len = sizeof(got);

		if (setsockopt(p.fd, SOL_SOCKET, SO_TIMESTAMPING, &v, sizeof(v)) != 0)
			calls_skip("no SO_TIMESTAMPING");
		CHECK_EQ(getsockopt(p.fd, SOL_SOCKET, SO_TIMESTAMPING, &got, &len), 0);
		CHECK_EQ(got, v);
		for (int i = 0; i < 3; i++)
			CHECK_EQ(send(p.fd, "abc", 3, 0), 3);
		calls_send_pat(p.fd, 0, FORK_BYTES, SEED_UP);
		calls_await(&p);
		for (;;) {
			union {
				char buf[512];
				struct cmsghdr align;
			} ctl;
			char b[8];
			struct iovec iov = {.iov_base = b, .iov_len = sizeof(b)};
			struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
					   .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
			ssize_t n = recvmsg(p.fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT);
			if (n == -1) {
				CHECK_EQ(errno, EAGAIN);
				break;
			}
			int stamps = 0;
			for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
				if (cm->cmsg_level == SOL_SOCKET &&
				    cm->cmsg_type == SO_TIMESTAMPING)
					stamps++;
			CHECK_EQ(stamps, 1);
		}
		calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
		calls_pair_close(&p);
	}
	expect_text(p.fd, "abcabcabc");
	calls_recv_pat(p.fd, 0, FORK_BYTES, SEED_UP);
	calls_post(&p, 'g');
	calls_send_pat(p.fd, 0, FORK_BYTES, SEED_DOWN);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"dprintf", case_dprintf},
	{"write_alias", case_write_alias},
	{"stdout_socket", case_stdout_socket},
	{"stdin_socket", case_stdin_socket},
	{"stdio_lowest_fd", case_stdio_lowest_fd},
	{"stdio_exec", case_stdio_exec},
	{"stdio_child", case_stdio_child},
	{"sockatmark", case_sockatmark},
	{"fork_underscore", case_fork_underscore},
	{"raw_fork", case_raw_fork},
	{"raw_clone", case_raw_clone},
	{"popen_child", case_popen_child},
	{"system_child", case_system_child},
	{"fd_writer", case_fd_writer},
	{"fexecve", case_fexecve},
	{"fexecve_plain", case_fexecve_plain},
	{"execveat_plain", case_execveat_plain},
	{"raw_execve_plain", case_raw_execve_plain},
	{"raw_execveat_plain", case_raw_execveat_plain},
	{"exec_reader", case_exec_reader},
	{"timeo_after_exec", case_timeo_after_exec},
	{"timeo_reader", case_timeo_reader},
	{"tcp_inq", case_tcp_inq},
	{"recvmsg_eagain", case_recvmsg_eagain},
	{"tcp_inq_eof", case_tcp_inq_eof},
	{"zerocopy_receive", case_zerocopy_receive},
	{"sendfile_to_pipe", case_sendfile_to_pipe},
	{"fastopen_connected", case_fastopen_connected},
	{"fastopen_off", case_fastopen_off},
	{"errqueue_recv", case_errqueue_recv},
	{"raw_epoll_pwait2", case_raw_epoll_pwait2},
	{"io_submit", case_io_submit},
	{"revert_after_switch", case_revert_after_switch},
	{"revert_idle_peer", case_revert_idle_peer},
	{"revert_after_shutdown", case_revert_after_shutdown},
	{"nonblock_other", case_nonblock_other},
	{"timestamping_tx", case_timestamping_tx},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
