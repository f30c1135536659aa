/* SPDX-License-Identifier: MIT */
/*
 * vfork and clone. A child made with vfork, or with clone and CLONE_VM, runs in this
 * process's memory until it execs: ulsock's tables are the parent's, and so is the thread
 * area of the thread that called (a vfork child runs on it). Such a child often closes
 * and dups descriptors before its exec (Python's subprocess does, through close_range);
 * done through the tables, that would close the parent's connections. So the thread that
 * calls vfork marks itself, and an interposed call that finds the mark and a pid other
 * than the process's own is in such a child: it does only what the kernel does
 * (uls_vfork_child). At its exec, each accelerated socket it keeps open is marked as
 * shared, in the parent's memory, so that the parent's close leaves the connection to
 * its new holder.
 *
 * clone without CLONE_VM is a fork the fork handlers never see: the same handlers run
 * around it here. clone with CLONE_VM but without CLONE_VFORK runs beside the parent on
 * the same thread area; it gets the shared marks, and no more (README, limitations).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "../core/config.h"
#include "../core/conn.h"
#include "../core/event.h"
#include "../core/fdtable.h"

/* The thread has called vfork (or clone with CLONE_VM) and not looked since. */
__thread int uls_vfork_armed __attribute__((tls_model("initial-exec")));

int uls_vfork_child_slow(void)
{
	if ((pid_t)uls_syscall(SYS_getpid) != uls_pid())
		return 1;
	uls_vfork_armed = 0; /* the parent, back from vfork */
	return 0;
}

/*
 * Each accelerated socket the child may keep gets its inode noted now, while the
 * parent's descriptors still name them: the child finds them by inode at its exec, since
 * its dup2 calls may have moved them.
 */
static void note_sockets(void)
{
	int max = uls_fd_max();

	for (int fd = 0; fd < max; fd++) {
		struct uls_conn *c = uls_fd_conn(fd);
		if (uls_conn_accelerated(c))
			uls_conn_note_socket(c, fd);
	}
}

/* Called by the vfork entry point (below) before the real vfork. */
void uls_before_vfork(void);
__attribute__((used)) void uls_before_vfork(void)
{
	uls_ensure_init();
	if (uls_conn_any_accelerated())
		note_sockets();
	uls_vfork_armed = 1;
}

/*
 * vfork cannot be wrapped by a C function: the child returns from it into the caller's
 * frame and would leave the wrapper's frame, which the parent needs, clobbered. So the
 * entry point calls the preparation above and then jumps to the real vfork, whose
 * return goes straight to the program.
 */
__attribute__((used)) void *uls_real_vfork;

#if defined(__x86_64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, @function\n"
	"vfork:\n"
	"	subq $8, %rsp\n"
	"	call uls_before_vfork\n"
	"	addq $8, %rsp\n"
	"	jmp *uls_real_vfork(%rip)\n"
	".size vfork, .-vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, %function\n"
	"vfork:\n"
	"	stp x29, x30, [sp, #-16]!\n"
	"	bl uls_before_vfork\n"
	"	ldp x29, x30, [sp], #16\n"
	"	adrp x16, uls_real_vfork\n"
	"	ldr x16, [x16, :lo12:uls_real_vfork]\n"
	"	br x16\n"
	".size vfork, .-vfork\n");
#else
#error "vfork entry point: add this architecture"
#endif

void uls_clone_init(void)
{
	uls_real_vfork = dlsym(RTLD_NEXT, "vfork");
	if (!uls_real_vfork)
		uls_real_vfork = dlsym(RTLD_NEXT, "fork"); /* vfork may always be a fork */
}

/*
 * At the exec of a vfork child: every descriptor the new program keeps that is an
 * accelerated socket of the parent is shared from now on (the parent's close must leave
 * the connection to it); an epoll set it keeps must hold no hidden registrations. The
 * numbers come from the child's own table, without allocating (the parent's heap).
 */
void uls_vfork_exec_prepare(void)
{
	_Alignas(8) char buf[4096];
	int dir = (int)uls_syscall(SYS_openat, AT_FDCWD, "/proc/self/fd",
				   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long n;
	int epoll_kept = 0;

	while (dir >= 0 && (n = uls_syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *de = (struct dirent64 *)(buf + off);
			char path[64], target[64];
			off += de->d_reclen;
			int fd = atoi(de->d_name);
			if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dir)
				continue;
			int fl = uls_libc.fcntl(fd, F_GETFD);
			if (fl < 0 || (fl & FD_CLOEXEC))
				continue;
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			ssize_t len = readlink(path, target, sizeof(target) - 1);
			if (len <= 0)
				continue;
			target[len] = '\0';
			unsigned long long ino;
			if (sscanf(target, "socket:[%llu]", &ino) == 1) {
				struct uls_conn *c = uls_conn_by_socket(ino);
				if (c)
					atomic_store(&c->shared, ULS_SHARED_STICKY);
			} else if (strcmp(target, "anon_inode:[eventpoll]") == 0) {
				epoll_kept = 1;
			}
		}
	}
	if (dir >= 0)
		uls_libc.close(dir);
	if (epoll_kept)
		uls_epoll_unshare();
}

/* ---- clone ---- */

typedef int (*clone_fn)(int (*)(void *), void *, int, void *, ...);

struct clone_start {
	int (*fn)(void *);
	void *arg;
};

/* The child of a clone without CLONE_VM: what fork's child handler would do first. */
static int forked_child_start(void *p)
{
	struct clone_start s = *(struct clone_start *)p;

	uls_atfork_child();
	return s.fn(s.arg);
}

ULS_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	static clone_fn real;
	va_list ap;
	pid_t *ptid;
	void *tls;
	pid_t *ctid;
	struct clone_start start = {fn, arg};

	uls_ensure_init();
	va_start(ap, arg);
	ptid = va_arg(ap, pid_t *);
	tls = va_arg(ap, void *);
	ctid = va_arg(ap, pid_t *);
	va_end(ap);
	if (!real)
		real = (clone_fn)dlsym(RTLD_NEXT, "clone");
	if (flags & CLONE_THREAD)
		return real(fn, stack, flags, arg, ptid, tls, ctid);
	if (!(flags & CLONE_VM)) {
		/* A fork: the same handlers as fork's, the child's in its own memory. The
		 * start record is on this stack, which the child gets a copy of. */
		uls_atfork_prepare();
		return real(forked_child_start, stack, flags, &start, ptid, tls, ctid);
	}
	/* The child runs in this memory: it may keep any socket. */
	uls_conn_mark_shared_all(ULS_SHARED_STICKY);
	if (flags & CLONE_VFORK) {
		if (uls_conn_any_accelerated())
			note_sockets();
		uls_vfork_armed = 1;
	}
	return real(fn, stack, flags, arg, ptid, tls, ctid);
}
