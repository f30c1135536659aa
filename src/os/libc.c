/* SPDX-License-Identifier: MIT */
#include "libc.h"
#include "guard.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define ULS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ULS_TSAN 1
#endif
#endif
#ifndef ULS_TSAN
#define ULS_TSAN 0
#endif

struct uls_libc uls_libc;
__thread unsigned uls_inside __attribute__((tls_model("initial-exec")));
static pthread_once_t libc_once = PTHREAD_ONCE_INIT;

static void resolve(void)
{
#define ULS_LIBC_RESOLVE(ret, name, args) uls_libc.name = (ret(*) args)dlsym(RTLD_NEXT, #name);
	ULS_LIBC_FUNCS(ULS_LIBC_RESOLVE)
#undef ULS_LIBC_RESOLVE
#if ULS_TSAN && !defined(ULS_PRELOAD)
	/*
	 * Under ThreadSanitizer, without the preload (the unit tests link the core): the
	 * descriptors the core closes must go through TSan's close, which RTLD_NEXT skips,
	 * or a number the kernel hands out again (open after a close TSan did not see) reads
	 * as a race on the descriptor.
	 */
	uls_libc.close = close;
#endif
	if (!uls_libc.write || !uls_libc.close || !uls_libc.socket) {
		static const char msg[] = "ulsock: cannot resolve libc functions\n";
		ssize_t r = write(2, msg, sizeof(msg) - 1);
		(void)r;
		abort();
	}
}

void uls_libc_init(void)
{
	pthread_once(&libc_once, resolve);
}

/*
 * A system call made here, with syscall()'s convention (-1 and errno): neither through
 * the syscall() this library exports (preload/direct.c) nor through libc's, which may not
 * be resolved yet when an allocator calls it while the library starts.
 */
long uls_raw_syscall(long nr, long a, long b, long c, long d, long e, long f)
{
	long r;
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	r = x0;
#else
#error "uls_raw_syscall: add this architecture"
#endif
	if ((unsigned long)r > -4096ul) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

long uls_read_small_file(const char *path, char *buf, size_t size)
{
	int err = errno;
	long fd = uls_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	long len = fd < 0 ? -1 : uls_syscall(SYS_read, (int)fd, buf, size - 1);

	if (fd >= 0)
		uls_syscall(SYS_close, (int)fd);
	errno = err;
	if (len < 0)
		return -1;
	buf[len] = '\0';
	return len;
}

ssize_t uls_write_unsignalled(int fd, const void *buf, size_t n, int sig, int err)
{
	sigset_t one, old, pending;
	struct timespec zero = {0, 0};

	sigemptyset(&one);
	sigaddset(&one, sig);
	if (pthread_sigmask(SIG_BLOCK, &one, &old) != 0)
		return uls_libc.write(fd, buf, n);
	/* Unblocked until now, it cannot have been pending for this thread. */
	int was_pending = sigismember(&old, sig) && sigpending(&pending) == 0 &&
			  sigismember(&pending, sig);
	ssize_t r = uls_libc.write(fd, buf, n);
	int saved = errno;
	if (r < 0 && saved == err && !was_pending)
		sigtimedwait(&one, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	return r;
}

int uls_pid_gone(uint64_t pid)
{
	return pid == 0 || pid > INT32_MAX || (kill((pid_t)pid, 0) < 0 && errno == ESRCH);
}
