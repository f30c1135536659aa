/* SPDX-License-Identifier: MIT */
/*
 * splice between a pipe and an accelerated socket. The kernel's splice reads and writes
 * the kernel socket, which on an accelerated connection carries wake-up bytes, not data
 * (a TCP proxy that splices, such as haproxy, forwarded those and lost the data). So a
 * splice with such a socket on one side moves the bytes through a buffer here, and never
 * takes from one side more than the other took:
 * - socket to pipe: the bytes are peeked from the connection, written into a private
 *   pipe and spliced on to the program's pipe without waiting, and as many as it took
 *   are consumed;
 * - pipe to socket: the pipe's bytes are copied with tee into a private pipe, sent, and
 *   as many as the connection took are read off the program's pipe.
 * Blocking follows the kernel's splice: the socket side waits unless the socket is
 * non-blocking (pipe to socket: or SPLICE_F_NONBLOCK), the pipe side unless
 * SPLICE_F_NONBLOCK. tee and vmsplice work on pipes only,
 * and an accelerated socket with anything but a pipe gets the kernel's own error.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload.h"
#include "../core/conn.h"
#include "../core/fdtable.h"
#include "../os/ownfd.h"

static ssize_t real_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len,
			   unsigned int flags)
{
	uls_libc_init();
	return uls_libc.splice(in, off_in, out, off_out, len, flags);
}

/* The private pipe of this thread, made on first use. */
static __thread int tee_pipe[2] = {-1, -1};
static pthread_key_t tee_key;
static pthread_once_t tee_once = PTHREAD_ONCE_INIT;

/*
 * The buffer the bytes cross (splice here, sendfile into a socket in io.c): one per
 * thread, mapped at its first use and unmapped with the thread. Not thread-local storage,
 * which in a library loaded at start-up is static TLS that every thread's stack carries
 * (64 KiB there made pthread_create refuse small stacks: EINVAL, Node.js's own threads),
 * nor the stack, which a thread made with a small one does not have. A call that finds
 * it in use (a signal handler's, inside another call) maps one of its own.
 */
static __thread char *chunk;
static __thread int chunk_busy;

static void tee_pipe_gone(void *unused)
{
	(void)unused;
	uls_own_fd_close(&tee_pipe[0]);
	uls_own_fd_close(&tee_pipe[1]);
	if (chunk)
		munmap(chunk, ULS_CHUNK);
	chunk = NULL;
}

static void tee_key_make(void)
{
	pthread_key_create(&tee_key, tee_pipe_gone);
}

/* The thread's end closes the pipe and unmaps the buffer. */
static void at_thread_end(void)
{
	pthread_once(&tee_once, tee_key_make);
	pthread_setspecific(tee_key, tee_pipe);
}

static int tee_pipe_get(void)
{
	int p[2];

	if (tee_pipe[0] >= 0)
		return 0;
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	uls_own_fd_take(p[0], &tee_pipe[0]);
	uls_own_fd_take(p[1], &tee_pipe[1]);
	at_thread_end();
	return 0;
}

static char *chunk_map(void)
{
	void *p = mmap(NULL, ULS_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

char *uls_chunk_take(void)
{
	if (chunk_busy)
		return chunk_map();
	if (!chunk) {
		if (!(chunk = chunk_map()))
			return NULL;
		at_thread_end();
	}
	chunk_busy = 1;
	return chunk;
}

void uls_chunk_give(char *buf)
{
	int err = errno;

	if (buf == chunk)
		chunk_busy = 0;
	else if (buf)
		munmap(buf, ULS_CHUNK);
	errno = err;
}

void uls_splice_atfork_child(void)
{
	/* The parent's pipe: another process's tee would mix with this one's. */
	uls_own_fd_close(&tee_pipe[0]);
	uls_own_fd_close(&tee_pipe[1]);
}

static int is_pipe(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static ssize_t recv_flags(struct uls_conn *c, int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	return uls_io_recv(c, fd, &m, flags);
}

/* Empties the private pipe (bytes that did not go where they were meant to). */
static void priv_drain(char *buf)
{
	while (uls_libc.read(tee_pipe[0], buf, ULS_CHUNK) > 0)
		;
}

static ssize_t socket_to_pipe(struct uls_conn *c, int sfd, int pfd, size_t len,
			      unsigned int flags, char *buf)
{
	size_t want = len < ULS_CHUNK ? len : ULS_CHUNK;
	int r;

	/* As the kernel: wait for room in the pipe (unless SPLICE_F_NONBLOCK), then move
	 * what fits, never waiting for more: its reader may be this very thread. */
	if (!(flags & SPLICE_F_NONBLOCK)) {
		struct pollfd p = {.fd = pfd, .events = POLLOUT};
		if (uls_libc.poll(&p, 1, -1) < 0)
			return -1;
	}
	if ((r = tee_pipe_get()) < 0)
		return uls_ret(r);
	/* The socket side waits as the socket says (the kernel's tcp_splice_read). */
	uls_peek_raw = 1; /* the program's SO_PEEK_OFF is not splice's */
	ssize_t n = recv_flags(c, sfd, buf, want, MSG_PEEK);
	uls_peek_raw = 0;
	if (n <= 0)
		return uls_ret(n);
	/* Through the private pipe, so that the program's pipe takes what fits without the
	 * write waiting for the rest: a pipe-to-pipe splice that does not block. */
	if (uls_libc.write(tee_pipe[1], buf, (size_t)n) != n) {
		priv_drain(buf);
		return uls_ret(-EIO);
	}
	ssize_t w = real_splice(tee_pipe[0], NULL, pfd, NULL, (size_t)n, SPLICE_F_NONBLOCK);
	int err = errno;
	priv_drain(buf);
	if (w <= 0) {
		errno = err;
		return w;
	}
	/* Exactly what the pipe took leaves the connection; it is there (peeked). */
	recv_flags(c, sfd, NULL, (size_t)w, MSG_TRUNC | MSG_DONTWAIT);
	return w;
}

/* Waits until the pipe has bytes; 1 when it has, 0 at its end (no writer), or -errno. */
static int pipe_wait_data(int pfd, int nonblock)
{
	for (;;) {
		int avail = 0;
		if (uls_libc.ioctl(pfd, FIONREAD, &avail) == 0 && avail > 0)
			return 1;
		struct pollfd p = {.fd = pfd, .events = POLLIN};
		int r = uls_libc.poll(&p, 1, nonblock ? 0 : -1);
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EAGAIN;
		if ((p.revents & POLLHUP) && !(p.revents & POLLIN))
			return 0;
		if (p.revents & POLLIN)
			continue; /* FIONREAD again: a writer may still be filling it */
		if (p.revents & (POLLERR | POLLNVAL))
			return -EBADF;
	}
}

static ssize_t pipe_to_socket(struct uls_conn *c, int pfd, int sfd, size_t len,
			      unsigned int flags, char *buf)
{
	int r = pipe_wait_data(pfd, (flags & SPLICE_F_NONBLOCK) != 0);

	if (r <= 0)
		return r < 0 ? uls_ret(r) : 0;
	if ((r = tee_pipe_get()) < 0)
		return uls_ret(r);
	ssize_t t = tee(pfd, tee_pipe[1], len < ULS_CHUNK ? len : ULS_CHUNK, SPLICE_F_NONBLOCK);
	if (t <= 0)
		return t;
	ssize_t got = uls_libc.read(tee_pipe[0], buf, (size_t)t);
	if (got != t)
		return uls_ret(-EIO);
	struct iovec iov = {.iov_base = buf, .iov_len = (size_t)t};
	ssize_t n = uls_io_send(c, sfd, &iov, 1,
				  (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0);
	if (n <= 0)
		return uls_ret(n);
	/* Exactly what the connection took leaves the program's pipe. */
	for (ssize_t left = n; left > 0;) {
		ssize_t k = uls_libc.read(pfd, buf, (size_t)left);
		if (k <= 0)
			break;
		left -= k;
	}
	return n;
}

/* fn, one of the two directions, with the thread's buffer. */
static ssize_t with_chunk(ssize_t (*fn)(struct uls_conn *, int, int, size_t, unsigned int,
					char *),
			  struct uls_conn *c, int from, int to, size_t len, unsigned int flags)
{
	char *buf = uls_chunk_take();

	if (!buf)
		return uls_ret(-ENOMEM);
	ssize_t n = fn(c, from, to, len, flags, buf);
	uls_chunk_give(buf);
	return n;
}

ULS_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			  unsigned int flags)
{
	struct uls_conn *cin, *cout;

	if (!uls_enter())
		return real_splice(fd_in, off_in, fd_out, off_out, len, flags);
	cin = uls_fd_accel(fd_in);
	cout = uls_fd_accel(fd_out);
	if (!cin && !cout)
		return real_splice(fd_in, off_in, fd_out, off_out, len, flags);
	/* A socket takes no offset, a pipe no offset either: the kernel's answers. */
	if ((cin && off_in) || (cout && off_out))
		return uls_ret(-EINVAL);
	if (cin && cout)
		return uls_ret(-EINVAL);
	if (cin && !is_pipe(fd_out))
		return real_splice(fd_in, off_in, fd_out, off_out, len, flags);
	if (cout && !is_pipe(fd_in))
		return real_splice(fd_in, off_in, fd_out, off_out, len, flags);
	if ((cin && off_out) || (cout && off_in))
		return uls_ret(-ESPIPE);
	if (len == 0)
		return 0;
	return cin ? with_chunk(socket_to_pipe, cin, fd_in, fd_out, len, flags)
		   : with_chunk(pipe_to_socket, cout, fd_in, fd_out, len, flags);
}
