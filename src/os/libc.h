/* SPDX-License-Identifier: MIT */
/*
 * The real libc functions behind the interposed symbols, resolved once with
 * dlsym(RTLD_NEXT) under pthread_once. The core calls these for its own socket work, the
 * interposer for the program's calls it passes on. A name this libc lacks (execveat
 * before glibc 2.34, pidfd_getfd before 2.36) stays NULL; its callers say what then.
 * vfork and clone are not here: clone.c calls them in its own way; nor the calls of
 * other libraries (libaio, librt) that direct.c looks up where they are.
 */
#ifndef ULS_LIBC_H
#define ULS_LIBC_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

struct mmsghdr;

#define ULS_LIBC_FUNCS(X)                                                                  \
	X(int, socket, (int, int, int))                                                    \
	X(int, socketpair, (int, int, int, int *))                                         \
	X(int, connect, (int, const struct sockaddr *, socklen_t))                         \
	X(int, accept, (int, struct sockaddr *, socklen_t *))                              \
	X(int, accept4, (int, struct sockaddr *, socklen_t *, int))                        \
	X(ssize_t, read, (int, void *, size_t))                                            \
	X(ssize_t, write, (int, const void *, size_t))                                     \
	X(ssize_t, readv, (int, const struct iovec *, int))                                \
	X(ssize_t, writev, (int, const struct iovec *, int))                               \
	X(ssize_t, send, (int, const void *, size_t, int))                                 \
	X(ssize_t, recv, (int, void *, size_t, int))                                       \
	X(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *,       \
			    socklen_t))                                                    \
	X(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *))  \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int))                             \
	X(ssize_t, recvmsg, (int, struct msghdr *, int))                                   \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int))                       \
	X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *))    \
	X(ssize_t, sendfile, (int, int, off_t *, size_t))                                  \
	X(int, close, (int))                                                               \
	X(int, shutdown, (int, int))                                                       \
	X(int, getsockopt, (int, int, int, void *, socklen_t *))                           \
	X(int, setsockopt, (int, int, int, const void *, socklen_t))                       \
	X(int, fcntl, (int, int, ...))                                                     \
	X(int, ioctl, (int, unsigned long, ...))                                           \
	X(int, dup, (int))                                                                 \
	X(int, dup2, (int, int))                                                           \
	X(int, dup3, (int, int, int))                                                      \
	X(int, poll, (struct pollfd *, nfds_t, int))                                       \
	X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)) \
	X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *))              \
	X(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *,      \
			 const sigset_t *))                                                \
	X(int, epoll_create, (int))                                                        \
	X(int, epoll_create1, (int))                                                       \
	X(int, epoll_ctl, (int, int, int, struct epoll_event *))                           \
	X(int, epoll_wait, (int, struct epoll_event *, int, int))                          \
	X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *))       \
	X(ssize_t, splice, (int, loff_t *, int, loff_t *, size_t, unsigned int))           \
	X(int, sigaction, (int, const struct sigaction *, struct sigaction *))             \
	X(int, execve, (const char *, char *const *, char *const *))                       \
	X(int, execvpe, (const char *, char *const *, char *const *))                      \
	X(int, execveat, (int, const char *, char *const *, char *const *, int))           \
	X(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *,    \
			     const posix_spawnattr_t *, char *const *, char *const *))     \
	X(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *,   \
			      const posix_spawnattr_t *, char *const *, char *const *))    \
	X(pid_t, _Fork, (void))                                                            \
	X(FILE *, fdopen, (int, const char *))                                             \
	X(FILE *, popen, (const char *, const char *))                                     \
	X(int, system, (const char *))                                                     \
	X(int, vdprintf, (int, const char *, va_list))                                     \
	X(int, __vdprintf_chk, (int, int, const char *, va_list))                          \
	X(int, pidfd_getfd, (int, int, unsigned int))                                      \
	X(int, setuid, (uid_t))                                                            \
	X(int, seteuid, (uid_t))                                                           \
	X(int, setreuid, (uid_t, uid_t))                                                   \
	X(int, setresuid, (uid_t, uid_t, uid_t))

#define ULS_LIBC_FIELD(ret, name, args) ret(*name) args;
struct uls_libc {
	ULS_LIBC_FUNCS(ULS_LIBC_FIELD)
};
#undef ULS_LIBC_FIELD

extern struct uls_libc uls_libc;

/*
 * The library's own raw system calls: never through the exported syscall(), which
 * serves the program's socket calls (preload/direct.c) and would come back here.
 */
long uls_raw_syscall(long nr, long a, long b, long c, long d, long e, long f);
#define ULS_SC_ARGS(nr, a, b, c, d, e, f, ...) \
	uls_raw_syscall((long)(nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define uls_syscall(...) ULS_SC_ARGS(__VA_ARGS__, 0, 0, 0, 0, 0, 0)

/*
 * Reads up to size - 1 bytes of a small file (one under /proc) with raw system calls, the
 * library's read and close being interposed names, and ends them with a NUL. The length
 * read, or -1; errno stays as it was.
 */
long uls_read_small_file(const char *path, char *buf, size_t size);

/*
 * uls_libc.write, with signal sig (SIGPIPE, SIGXFSZ) blocked around it, and the one the
 * write raised taken back when it failed with err (EPIPE, EFBIG) and sig was not pending
 * before: the write's error is the library's business, never the program's signal.
 */
ssize_t uls_write_unsignalled(int fd, const void *buf, size_t n, int sig, int err);

/*
 * 1 when no process pid exists: 0, a value no pid takes (above INT32_MAX: kill would
 * read it as a process group), or kill's ESRCH. A process of another user exists
 * (EPERM).
 */
int uls_pid_gone(uint64_t pid);

/* Resolves the table; safe to call from any thread, any number of times. */
void uls_libc_init(void);

#endif
