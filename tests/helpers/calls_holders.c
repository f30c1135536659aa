/*
 * calls_holders: every way a process comes to hold a connected TCP socket, and what ends
 * the connection. The accepting process hands its connection to another holder (a child
 * started by vfork, clone with and without CLONE_VM, CLONE_VFORK or CLONE_FILES,
 * posix_spawn, fork; a process that receives it by SCM_RIGHTS or takes it by pidfd_getfd)
 * and closes its own copy at once, while the peer is already streaming; the new holder
 * echoes every byte and closes, and only that close ends the connection. Threads that close
 * or shut down a descriptor another thread is blocked on get the kernel's semantics.
 * Usage: calls_holders CASE. The case child_echo FD is the far end of the exec cases.
 */
#include "calls_common.h"

#include <sched.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/stat.h>

#define SEED_HOLD 91u
/* What the peer streams through each new holder, in lockstep chunks of HOLD_CHUNK. */
#define HOLD_BYTES (4u << 20)
#define HOLD_CHUNK (64u << 10)
#define CHILD_STACK (256u << 10)

extern char **environ;

/* ---- the stream through a holder ------------------------------------------------------------ */

/*
 * The peer: sends HOLD_BYTES of pattern in chunks and reads each chunk back before the next,
 * then shuts down its sending side and expects "done" and the end of the stream. It starts
 * at once, so its first bytes race with the handover.
 */
static void drive_echo(int fd)
{
	static unsigned char buf[HOLD_CHUNK];
	char done[4];

	for (uint64_t off = 0; off < HOLD_BYTES; off += HOLD_CHUNK) {
		calls_send_pat(fd, off, HOLD_CHUNK, SEED_HOLD);
		calls_read_exact(fd, buf, HOLD_CHUNK);
		CHECK_PAT(buf, off, HOLD_CHUNK, SEED_HOLD);
	}
	CHECK(shutdown(fd, SHUT_WR) == 0);
	calls_read_exact(fd, done, sizeof(done));
	CHECK_EQ(memcmp(done, "done", 4), 0);
	calls_expect_eof(fd);
}

/*
 * The holder: echoes every byte (checking it) until the peer's EOF, answers "done" and
 * closes its descriptor, which must end the connection.
 */
static void serve_echo(int fd)
{
	static unsigned char buf[HOLD_CHUNK];
	uint64_t off = 0;
	struct stat st;

	CHECK(fstat(fd, &st) == 0);
	CHECK(S_ISSOCK(st.st_mode));
	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r == -1 && errno == EINTR)
			continue;
		CHECK(r >= 0);
		if (r == 0)
			break;
		CHECK_PAT(buf, off, (size_t)r, SEED_HOLD);
		calls_write_all(fd, buf, (size_t)r);
		off += (uint64_t)r;
	}
	CHECK_EQ(off, HOLD_BYTES);
	calls_write_all(fd, "done", 4);
	CHECK(close(fd) == 0);
}

/* The exec'd holder: calls_holders child_echo FD. */
static void case_child_echo(CALLS_ARGS)
{
	CHECK(argc >= 1);
	serve_echo(atoi(argv[0]));
}

/* ---- handing over to a new program ----------------------------------------------------------- */

/* The exec'd holder's argument vector, built before any vfork (its child may not format). */
static char child_num[16];
static char *child_argv[] = {"calls_holders", "child_echo", child_num, NULL};

static void child_argv_for(int fd)
{
	snprintf(child_num, sizeof(child_num), "%d", fd);
}

static __attribute__((noreturn)) void exec_holder(void)
{
	execve("/proc/self/exe", child_argv, environ);
	_exit(127);
}

/* Moves the socket to a number of 10 or more, so that a child can move it to 3 itself. */
static int move_high(int fd)
{
	int hi = fcntl(fd, F_DUPFD, 10);

	CHECK(hi >= 10);
	CHECK(close(fd) == 0);
	return hi;
}

static pid_t start_vfork(int fd)
{
	pid_t pid;

	child_argv_for(fd);
	pid = vfork();
	if (pid == 0)
		exec_holder();
	CHECK(pid > 0);
	return pid;
}

/* The vfork child moves the socket to descriptor 3 and closes the original, as Python's
 * subprocess does with the descriptors it passes. */
static pid_t start_vfork_dup2(int fd)
{
	pid_t pid;

	child_argv_for(3);
	pid = vfork();
	if (pid == 0) {
		if (dup2(fd, 3) != 3 || close(fd) != 0)
			_exit(126);
		exec_holder();
	}
	CHECK(pid > 0);
	return pid;
}

/* The vfork child moves the socket to 3 and closes everything above it with close_range. */
static pid_t start_vfork_close_range(int fd)
{
	pid_t pid;

	child_argv_for(3);
	pid = vfork();
	if (pid == 0) {
		if (dup2(fd, 3) != 3 || close_range(4, ~0u, 0) != 0)
			_exit(126);
		exec_holder();
	}
	CHECK(pid > 0);
	return pid;
}

static int clone_exec_main(void *arg)
{
	(void)arg;
	exec_holder();
}

static char *child_stack(void)
{
	char *s = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);

	CHECK(s != MAP_FAILED);
	return s;
}

/* glibc's clone() with CLONE_VM|CLONE_VFORK: the parent sleeps until the child's exec. */
static pid_t start_clone_vfork(int fd)
{
	char *stack = child_stack();
	pid_t pid;

	child_argv_for(fd);
	pid = clone(clone_exec_main, stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
	CHECK(pid > 0);
	CHECK(munmap(stack, CHILD_STACK) == 0);
	return pid;
}

/*
 * clone() with CLONE_VM alone: the child runs in this address space until its exec while
 * this process goes on (and closes its copy of the socket). The stack stays mapped: when
 * the child stops using it is not known here.
 */
static pid_t start_clone_vm(int fd)
{
	char *stack = child_stack();
	pid_t pid;

	child_argv_for(fd);
	pid = clone(clone_exec_main, stack + CHILD_STACK, CLONE_VM | SIGCHLD, NULL);
	CHECK(pid > 0);
	return pid;
}

static pid_t start_spawn(int fd)
{
	pid_t pid;

	child_argv_for(fd);
	CHECK_EQ(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, child_argv, environ), 0);
	return pid;
}

/* posix_spawn with file actions: the socket moved to 3, the original closed. */
static pid_t start_spawn_dup2(int fd)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;

	child_argv_for(3);
	CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
	CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, fd, 3), 0);
	CHECK_EQ(posix_spawn_file_actions_addclose(&fa, fd), 0);
	CHECK_EQ(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, child_argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

/* posix_spawn with the socket moved to 3 and every descriptor from 4 up closed. */
static pid_t start_spawn_closefrom(int fd)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;

	child_argv_for(3);
	CHECK_EQ(posix_spawn_file_actions_init(&fa), 0);
	CHECK_EQ(posix_spawn_file_actions_adddup2(&fa, fd, 3), 0);
	CHECK_EQ(posix_spawn_file_actions_addclosefrom_np(&fa, 4), 0);
	CHECK_EQ(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, child_argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

/*
 * The accepting process starts a new holder with `start` (which may move the socket to
 * a number of 10 or more first, `high`), closes its own copy at once and waits for the holder to
 * pass. The peer streams from the moment the connection is up.
 */
static void handover(pid_t (*start)(int fd), int high)
{
	struct calls_pair p;
	pid_t pid;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		drive_echo(p.fd);
		calls_pair_close(&p);
	}
	if (high) {
		p.fd = move_high(p.fd);
		/* Something above the socket for close_range to close. */
		CHECK(fcntl(p.sync_rd, F_DUPFD_CLOEXEC, 20) >= 20);
	}
	pid = start(p.fd);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	calls_wait_child(pid);
	calls_pair_close(&p);
}

static void case_vfork_exec(CALLS_ARGS)
{
	handover(start_vfork, 0);
}

static void case_vfork_dup2(CALLS_ARGS)
{
	handover(start_vfork_dup2, 1);
}

static void case_vfork_close_range(CALLS_ARGS)
{
	handover(start_vfork_close_range, 1);
}

static void case_clone_vfork(CALLS_ARGS)
{
	handover(start_clone_vfork, 0);
}

static void case_clone_vm(CALLS_ARGS)
{
	handover(start_clone_vm, 0);
}

static void case_spawn(CALLS_ARGS)
{
	handover(start_spawn, 0);
}

static void case_spawn_dup2(CALLS_ARGS)
{
	handover(start_spawn_dup2, 1);
}

static void case_spawn_closefrom(CALLS_ARGS)
{
	handover(start_spawn_closefrom, 1);
}

/* ---- holders without exec ----------------------------------------------------------------- */

static int hold_fd;

static int serve_main(void *arg)
{
	(void)arg;
	calls_child_setup();
	serve_echo(hold_fd);
	return 0;
}

static pid_t start_fork(int fd)
{
	pid_t pid;

	hold_fd = fd;
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(serve_main(NULL));
	return pid;
}

/* clone() without CLONE_VM: a copy of the address space, as fork, but no atfork handlers. */
static pid_t start_clone_copy(int fd)
{
	char *stack = child_stack();
	pid_t pid;

	hold_fd = fd;
	pid = clone(serve_main, stack + CHILD_STACK, SIGCHLD, NULL);
	CHECK(pid > 0);
	CHECK(munmap(stack, CHILD_STACK) == 0);
	return pid;
}

static void case_fork_serve(CALLS_ARGS)
{
	handover(start_fork, 0);
}

static void case_clone_fork(CALLS_ARGS)
{
	handover(start_clone_copy, 0);
}

/*
 * clone() with CLONE_FILES: one descriptor table for both processes. The child serves and
 * closes the descriptor, which closes it for this process too (EBADF here afterwards); the
 * number, reused by a pipe here, then works as that pipe.
 */
static void case_clone_files(CALLS_ARGS)
{
	struct calls_pair p;
	char *stack = child_stack();
	int pp[2], fd;
	char buf[8];
	pid_t pid;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		drive_echo(p.fd);
		calls_pair_close(&p);
	}
	CHECK(pipe(pp) == 0);
	hold_fd = p.fd;
	pid = clone(serve_main, stack + CHILD_STACK, CLONE_FILES | SIGCHLD, NULL);
	CHECK(pid > 0);
	calls_wait_child(pid);
	CHECK(munmap(stack, CHILD_STACK) == 0);
	CHECK_ERR(fcntl(p.fd, F_GETFD), EBADF);

	/* The lowest free number from the socket's up is the socket's own. */
	fd = fcntl(pp[0], F_DUPFD, p.fd);
	CHECK_EQ(fd, p.fd);
	calls_write_all(pp[1], "reuse", 5);
	CHECK_EQ(calls_wait_for(fd, POLLIN, 5000), POLLIN);
	CHECK_EQ(calls_fionread(fd), 5);
	calls_read_exact(fd, buf, 5);
	CHECK_EQ(memcmp(buf, "reuse", 5), 0);
	CHECK(close(fd) == 0);
	CHECK(close(pp[0]) == 0 && close(pp[1]) == 0);
	p.fd = -1;
	calls_pair_close(&p);
}

/* ---- SCM_RIGHTS and pidfd_getfd -------------------------------------------------------------- */

static void send_fd(int unix_fd, int fd)
{
	char byte = 'F';
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;

	memset(&ctl, 0, sizeof(ctl));
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
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
	struct cmsghdr *c;
	int fd = -1;

	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	CHECK_EQ(recvmsg(unix_fd, &m, 0), 1);
	CHECK_EQ(byte, 'F');
	c = CMSG_FIRSTHDR(&m);
	CHECK(c != NULL);
	CHECK_EQ(c->cmsg_type, SCM_RIGHTS);
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	CHECK(fd >= 0);
	return fd;
}

/*
 * SCM_RIGHTS to a process that never held the connection (forked before it existed); the
 * sender closes its copy right after sendmsg, while the descriptor is still in flight.
 */
static void case_scm_close_now(CALLS_ARGS)
{
	struct calls_pair p;
	int u[2];
	pid_t r;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u) == 0);
	r = fork();
	CHECK(r >= 0);
	if (r == 0) {
		calls_child_setup();
		close(u[0]);
		serve_echo(recv_fd(u[1]));
		_exit(0);
	}
	close(u[1]);
	calls_pair_open_as(&p, AF_INET, "moved");
	if (p.child == 0) {
		close(u[0]);
		drive_echo(p.fd);
		calls_pair_close(&p);
	}
	send_fd(u[0], p.fd);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	close(u[0]);
	calls_wait_child(r);
	calls_pair_close(&p);
}

/*
 * The accepting process sends the descriptor and exits without closing it: for a while the
 * only reference to the socket is the message in the AF_UNIX queue. This process receives
 * it after the sender is gone and serves the connection.
 */
static void case_scm_sender_exits(CALLS_ARGS)
{
	struct calls_addr server;
	int u[2], lfd;
	pid_t client, sender;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u) == 0);
	lfd = calls_listen(AF_INET, &server, "moved");
	client = fork();
	CHECK(client >= 0);
	if (client == 0) {
		calls_child_setup();
		close(lfd);
		close(u[0]);
		close(u[1]);
		int fd = calls_connect(&server);
		calls_greet(fd);
		drive_echo(fd);
		CHECK(close(fd) == 0);
		_exit(0);
	}
	sender = fork();
	CHECK(sender >= 0);
	if (sender == 0) {
		calls_child_setup();
		close(u[1]);
		int fd = calls_accept(lfd);
		calls_greet(fd);
		send_fd(u[0], fd);
		_exit(0);
	}
	close(lfd);
	close(u[0]);
	calls_wait_child(sender);
	serve_echo(recv_fd(u[1]));
	close(u[1]);
	calls_wait_child(client);
}

/*
 * pidfd_getfd: this process takes a copy of another process's connected socket; the other
 * closes its copy and exits; this one serves the connection. Skips where the kernel refuses
 * (ENOSYS, EPERM).
 */
static void case_pidfd_getfd(CALLS_ARGS)
{
	struct calls_addr server;
	int lfd, num[2], go[2], remote = -1, pidfd, fd;
	pid_t client, holder;
	char c = 0;

	lfd = calls_listen(AF_INET, &server, "shm");
	CHECK(pipe2(num, O_CLOEXEC) == 0);
	CHECK(pipe2(go, O_CLOEXEC) == 0);
	client = fork();
	CHECK(client >= 0);
	if (client == 0) {
		calls_child_setup();
		close(lfd);
		int cfd = calls_connect(&server);
		calls_greet(cfd);
		drive_echo(cfd);
		CHECK(close(cfd) == 0);
		_exit(0);
	}
	holder = fork();
	CHECK(holder >= 0);
	if (holder == 0) {
		calls_child_setup();
		int hfd = calls_accept(lfd);
		calls_greet(hfd);
		calls_write_all(num[1], &hfd, sizeof(hfd));
		/* Holds the socket until the other process has its copy (or gave up). */
		CHECK(read(go[0], &c, 1) >= 0);
		CHECK(close(hfd) == 0);
		_exit(0);
	}
	close(lfd);
	close(num[1]);
	close(go[0]);
	calls_read_exact(num[0], &remote, sizeof(remote));
	pidfd = pidfd_open(holder, 0);
	if (pidfd < 0 && (errno == ENOSYS || errno == EPERM))
		calls_skip("pidfd_open refused");
	CHECK(pidfd >= 0);
	fd = pidfd_getfd(pidfd, remote, 0);
	if (fd < 0 && (errno == ENOSYS || errno == EPERM))
		calls_skip("pidfd_getfd refused");
	CHECK(fd >= 0);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	calls_write_all(go[1], "g", 1);
	calls_wait_child(holder);
	close(pidfd);
	serve_echo(fd);
	close(go[1]);
	close(num[0]);
	calls_wait_child(client);
}

/* ---- threads closing what another thread uses ------------------------------------------------ */

struct blocked {
	int fd;
	int entered;	/* set just before the blocking call */
	ssize_t result;
	int err;
	short revents;
	char buf[16];
};

static void *recv_main(void *arg)
{
	struct blocked *b = arg;

	__atomic_store_n(&b->entered, 1, __ATOMIC_RELEASE);
	b->result = recv(b->fd, b->buf, sizeof(b->buf), 0);
	b->err = errno;
	return NULL;
}

static void *poll_main(void *arg)
{
	struct blocked *b = arg;
	struct pollfd pf = {.fd = b->fd, .events = POLLIN};

	__atomic_store_n(&b->entered, 1, __ATOMIC_RELEASE);
	b->result = poll(&pf, 1, 10000);
	b->err = errno;
	b->revents = pf.revents;
	return NULL;
}

/*
 * Starts `fn` on the socket and returns once that thread is (as far as can be told) asleep
 * in its call: it said it is about to call, and 200 ms have passed.
 */
static void start_blocked(pthread_t *t, void *(*fn)(void *), struct blocked *b)
{
	CHECK(pthread_create(t, NULL, fn, b) == 0);
	while (!__atomic_load_n(&b->entered, __ATOMIC_ACQUIRE))
		calls_sleep_ms(1);
	calls_sleep_ms(200);
}

/*
 * Thread A sleeps in recv; thread B closes the descriptor. On Linux the close does not wake
 * A, and the socket lives on while A's call holds it: the peer sees no EOF, its bytes reach
 * A's recv, and only when that recv returns does the connection end (EOF at the peer).
 */
static void case_close_while_recv(CALLS_ARGS)
{
	struct calls_pair p;
	struct blocked b = {0};
	pthread_t t;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		CHECK_EQ(calls_wait_for(p.fd, POLLIN, 200), 0);
		calls_write_all(p.fd, "data", 4);
		CHECK_EQ(calls_wait_for(p.fd, POLLIN, 5000), POLLIN);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	b.fd = p.fd;
	start_blocked(&t, recv_main, &b);
	CHECK(close(p.fd) == 0);
	CHECK_ERR(fcntl(p.fd, F_GETFD), EBADF);
	p.fd = -1;
	calls_post(&p, 'c');
	CHECK(pthread_join(t, NULL) == 0);
	errno = b.err;
	CHECK_EQ(b.result, 4);
	CHECK_EQ(memcmp(b.buf, "data", 4), 0);
	calls_pair_close(&p);
}

/* Thread A sleeps in recv; thread B's shutdown(SHUT_RDWR) wakes it with 0, the peer sees EOF. */
static void case_shutdown_while_recv(CALLS_ARGS)
{
	struct calls_pair p;
	struct blocked b = {0};
	pthread_t t;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		CHECK_EQ(calls_wait_for(p.fd, POLLIN, 5000), POLLIN);
		calls_expect_eof(p.fd);
		calls_await(&p);
		calls_pair_close(&p);
	}
	b.fd = p.fd;
	start_blocked(&t, recv_main, &b);
	CHECK(shutdown(p.fd, SHUT_RDWR) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	errno = b.err;
	CHECK_EQ(b.result, 0);
	calls_post(&p, 'd');
	calls_pair_close(&p);
}

/*
 * Thread A sleeps in poll (10 s); thread B closes the descriptor. The close does not wake A
 * (poll holds the file): the peer sees no EOF. A byte from the peer wakes A, whose poll then
 * finds the number closed and reports POLLNVAL. The socket ends when poll lets go of it, with
 * that byte unread: the peer gets a reset (ECONNRESET).
 */
static void case_close_while_poll(CALLS_ARGS)
{
	struct calls_pair p;
	struct blocked b = {0};
	pthread_t t;
	char c;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		CHECK_EQ(calls_wait_for(p.fd, POLLIN, 200), 0);
		calls_write_all(p.fd, "x", 1);
		CHECK(calls_wait_for(p.fd, POLLIN, 5000) & POLLIN);
		CHECK_ERR(recv(p.fd, &c, 1, 0), ECONNRESET);
		calls_pair_close(&p);
	}
	b.fd = p.fd;
	start_blocked(&t, poll_main, &b);
	CHECK(close(p.fd) == 0);
	p.fd = -1;
	calls_post(&p, 'c');
	CHECK(pthread_join(t, NULL) == 0);
	errno = b.err;
	CHECK_EQ(b.result, 1);
	CHECK_EQ(b.revents, POLLNVAL);
	calls_pair_close(&p);
}

static const struct calls_case cases[] = {
	{"vfork_exec", case_vfork_exec},
	{"vfork_dup2", case_vfork_dup2},
	{"vfork_close_range", case_vfork_close_range},
	{"clone_vfork", case_clone_vfork},
	{"clone_vm", case_clone_vm},
	{"spawn", case_spawn},
	{"spawn_dup2", case_spawn_dup2},
	{"spawn_closefrom", case_spawn_closefrom},
	{"fork_serve", case_fork_serve},
	{"clone_fork", case_clone_fork},
	{"clone_files", case_clone_files},
	{"scm_close_now", case_scm_close_now},
	{"scm_sender_exits", case_scm_sender_exits},
	{"pidfd_getfd", case_pidfd_getfd},
	{"close_while_recv", case_close_while_recv},
	{"shutdown_while_recv", case_shutdown_while_recv},
	{"close_while_poll", case_close_while_poll},
	{"child_echo", case_child_echo},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
