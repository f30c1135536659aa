/* SPDX-License-Identifier: MIT */
/*
 * execve and friends, posix_spawn and posix_spawnp, and fdopen: the interposed names. What
 * happens to the accelerated sockets a new program inherits (they keep ulsock, move back
 * to kernel TCP, or the library goes back into LD_PRELOAD) and to a socket stdio will
 * read is hand-off policy, in core/handoff.c; here are the calls around the real one that
 * only the interposer knows (a vfork child, the epoll sets, the transports' exec hooks).
 * Static binaries cannot be helped: see the README's limitations.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "preload.h"
#include "../core/bell.h"
#include "../core/conn.h"
#include "../core/event.h"
#include "../core/handoff.h"
#include "../core/wait.h"

/*
 * What every exec does before the real call: the environment that keeps the library
 * (uls_handoff_exec_env; *entry is its LD_PRELOAD entry, to free), the epoll sets unshared, or in a
 * vfork child only what the child keeps (the parent goes on), and the transports told.
 */
static char **exec_begin(char *const envp[], char **entry)
{
	char **env = uls_handoff_exec_env(envp, entry, 0, !uls_vfork_child());

	if (uls_vfork_child())
		uls_vfork_exec_prepare();
	else {
		uls_epoll_unshare();
		uls_bell_unname(); /* the new program has none of the bells */
	}
	uls_transports_exec_begin(0);
	return env;
}

/* After a real exec call that returned (it failed): undoes exec_begin, errno kept. */
static void exec_failed(char *const envp[], char **env, char *entry)
{
	int err = errno;

	uls_transports_exec_failed();
	uls_handoff_exec_end();
	if (env != (char **)envp) {
		free(entry);
		free(env);
	}
	errno = err;
}

static int do_exec(const char *file, char *const argv[], char *const envp[], int search)
{
	char *entry, **env;
	int r;

	uls_ensure_init();
	env = exec_begin(envp, &entry);
	r = search ? uls_libc.execvpe(file, argv, env) : uls_libc.execve(file, argv, env);
	exec_failed(envp, env, entry);
	return r;
}

/*
 * fexecve and execveat: the same preparation as execve (exec_begin), then the
 * real call; glibc would reach the kernel past execve.
 */
static int do_execat(int dirfd, const char *path, char *const argv[], char *const envp[],
		     int flags)
{
	char *entry, **env;

	uls_ensure_init();
	env = exec_begin(envp, &entry);
	int r = uls_libc.execveat ? uls_libc.execveat(dirfd, path, argv, env, flags)
				  : (errno = ENOSYS, -1);
	exec_failed(envp, env, entry);
	return r;
}

ULS_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			int flags)
{
	return do_execat(dirfd, path, argv, envp, flags);
}

ULS_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	return do_execat(fd, "", argv, envp, AT_EMPTY_PATH);
}

ULS_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	return do_exec(path, argv, envp, 0);
}

ULS_EXPORT int execv(const char *path, char *const argv[])
{
	return do_exec(path, argv, environ, 0);
}

ULS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	return do_exec(file, argv, envp, 1);
}

ULS_EXPORT int execvp(const char *file, char *const argv[])
{
	return do_exec(file, argv, environ, 1);
}

/*
 * posix_spawn: the child runs a new program, as after fork and exec, but no fork handler
 * or exec of this process runs on the way (glibc uses clone and a raw execve). The parent
 * goes on using its sockets; a child that joins one under ulsock is seen when it does.
 */
static int do_spawn(int search, pid_t *pid, const char *file,
		    const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
		    char *const argv[], char *const envp[])
{
	char *entry, **env;
	int r;

	uls_ensure_init();
	env = uls_handoff_exec_env(envp, &entry, fa != NULL, 1);
	/* The child may inherit an epoll fd: no hidden registrations in it. */
	uls_epoll_unshare();
	uls_transports_exec_begin(1);
	r = (search ? uls_libc.posix_spawnp : uls_libc.posix_spawn)(pid, file, fa, attr, argv, env);
	uls_transports_exec_failed();
	uls_handoff_exec_end(); /* the child has its descriptors: new connections are not its */
	/* The child holds what it inherited: the last close is no longer this process's. */
	if (r == 0)
		uls_conn_mark_shared_all(ULS_SHARED_STICKY);
	if (env != envp) {
		free(entry);
		free(env);
	}
	return r;
}

ULS_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return do_spawn(0, pid, path, fa, attr, argv, envp);
}

ULS_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			    const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return do_spawn(1, pid, file, fa, attr, argv, envp);
}

/* The execl family: the variadic arguments become an argv. */
static char **collect(const char *arg0, va_list ap, char ***envp_out)
{
	size_t n = 1, cap = 16;
	char **argv = malloc(cap * sizeof(*argv)), *a;

	if (!argv)
		return NULL;
	argv[0] = (char *)arg0;
	while (arg0 && (a = va_arg(ap, char *)) != NULL) {
		if (n + 2 > cap) {
			char **nv = realloc(argv, (cap *= 2) * sizeof(*argv));
			if (!nv) {
				free(argv);
				return NULL;
			}
			argv = nv;
		}
		argv[n++] = a;
	}
	argv[n] = NULL;
	if (envp_out)
		*envp_out = va_arg(ap, char **);
	return argv;
}

static int exec_list(const char *file, const char *arg0, va_list ap, int with_env, int search)
{
	char **envp = environ, **argv = collect(arg0, ap, with_env ? &envp : NULL);
	int r, err;

	if (!argv) {
		errno = ENOMEM;
		return -1;
	}
	r = do_exec(file, argv, envp, search);
	err = errno;
	free(argv);
	errno = err;
	return r;
}

ULS_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int r = exec_list(path, arg, ap, 0, 0);
	va_end(ap);
	return r;
}

ULS_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int r = exec_list(file, arg, ap, 0, 1);
	va_end(ap);
	return r;
}

ULS_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int r = exec_list(path, arg, ap, 1, 0);
	va_end(ap);
	return r;
}

/* stdio reads a descriptor with glibc's internal calls, which ulsock cannot see. */
ULS_EXPORT FILE *fdopen(int fd, const char *mode)
{
	uls_ensure_init();
	uls_handoff_fdopen(fd);
	return uls_libc.fdopen(fd, mode);
}
