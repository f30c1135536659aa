/* SPDX-License-Identifier: MIT */
/* Shared by the interposer files: start-up and libc's error convention. */
#ifndef ULS_PRELOAD_H
#define ULS_PRELOAD_H

#include <errno.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "../os/guard.h"
#include "../os/libc.h"
#include "../core/conn.h"
#include "../core/fdtable.h"
#include "../transport/shm/shm.h"

#define ULS_EXPORT __attribute__((visibility("default")))

struct sockaddr;
struct pollfd;
/* Interposed names that glibc's headers do not declare in this build. */
int fcntl64(int fd, int cmd, ...);
ssize_t sendfile64(int out, int in, long *offset, size_t count);
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       struct sockaddr *addr, unsigned int *alen);
int __poll_chk(struct pollfd *fds, unsigned long n, int timeout, size_t fdslen);
struct timespec;
int __ppoll_chk(struct pollfd *fds, unsigned long n, const struct timespec *ts,
		const sigset_t *mask, size_t fdslen);

/* Resolves libc and loads the configuration; cheap after the first call. */
void uls_preload_init(void);
/* What fork's handlers do, for the forks they do not see (clone.c). */
void uls_atfork_prepare(void);
void uls_atfork_child(void);

/*
 * A child of vfork, or of clone with CLONE_VM, runs in the parent's memory until it
 * execs (clone.c): an interposed call that finds itself in one does what the kernel does
 * and nothing to ulsock's tables, which are the parent's. One branch when no vfork ran
 * in this thread; one getpid the first time after one.
 */
extern __thread int uls_vfork_armed __attribute__((tls_model("initial-exec")));
int uls_vfork_child_slow(void);
static inline int uls_vfork_child(void)
{
	return __builtin_expect(uls_vfork_armed, 0) && uls_vfork_child_slow();
}
void uls_clone_init(void);
/* In a fork child: the per-thread pipe of splice is the parent's (splice.c). */
void uls_splice_atfork_child(void);
/*
 * The thread's buffer of ULS_CHUNK bytes for bytes that cross ulsock (splice, sendfile
 * into a socket), or NULL (no memory); give it back when done (splice.c).
 */
#define ULS_CHUNK 65536
char *uls_chunk_take(void);
void uls_chunk_give(char *buf);
/* At the exec of a vfork child: the sockets it keeps are shared with the parent. */
void uls_vfork_exec_prepare(void);
/* Set, with release, once the library is started: the first calls may race in threads. */
extern _Atomic int uls_ready;

static inline void uls_ensure_init(void)
{
	if (__builtin_expect(!atomic_load_explicit(&uls_ready, memory_order_acquire), 0))
		uls_preload_init();
}

/*
 * The entry of an interposed socket, descriptor, readiness or data call: 1 when ulsock
 * serves it, 0 when it must go to libc untouched because the thread is inside ulsock
 * (its start-up, or a library it called: os/guard.h). Starts the library when needed.
 */
static inline int uls_enter(void)
{
	if (uls_is_inside())
		return 0;
	uls_ensure_init();
	return 1;
}

/*
 * The connection of fd when some of its bytes may travel off the kernel path, else NULL.
 * No classification: a descriptor ulsock never saw made is plain.
 */
static inline struct uls_conn *uls_fd_accel(int fd)
{
	struct uls_conn *c = uls_fd_conn(fd);

	return uls_conn_accelerated(c) ? c : NULL;
}

/*
 * Send and receive of the program's calls: through the connection's transport, with the
 * shared-memory one called directly when it is the connection's: link-time optimization
 * then inlines its send and receive into the interposed calls (docs/PERFORMANCE.md), as
 * it did before the table, which a call through a pointer would prevent.
 */
static inline ssize_t uls_io_send(struct uls_conn *c, int fd, const struct iovec *iov,
				  int iovcnt, int flags)
{
	ssize_t n;

	if (__builtin_expect(c->tp == &uls_shm_transport, 1))
		n = uls_shm_send(c, fd, iov, iovcnt, flags);
	else
		n = uls_conn_send(c, fd, iov, iovcnt, flags);
	uls_conn_count(c, n, 0);
	return n;
}

static inline ssize_t uls_io_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags)
{
	ssize_t n;

	if (__builtin_expect(c->tp == &uls_shm_transport, 1))
		n = uls_shm_recv(c, fd, msg, flags);
	else
		n = uls_conn_recv(c, fd, msg, flags);
	uls_conn_count(c, n, 1);
	return n;
}

/* Turns the core's -errno convention into libc's -1 and errno. */
static inline ssize_t uls_ret(ssize_t r)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

#endif
