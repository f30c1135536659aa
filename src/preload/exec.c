/* SPDX-License-Identifier: MIT */
/*
 * execve and friends, and fdopen. An accelerated socket that survives exec
 * keeps working if the new program runs ulsock too (it finds the connection again through
 * the socket's inode). When the new environment drops the library, each inherited
 * accelerated socket first moves back to kernel TCP in place; if the peer does not answer
 * in time, the library is put back into the environment instead, so that no byte is lost.
 * posix_spawn and posix_spawnp get the same treatment for the child they start. Static
 * binaries cannot be helped: see the README's limitations.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "../core/conn.h"
#include "../core/event.h"
#include "../core/fdtable.h"
#include "../core/log.h"
#include "../core/wait.h"

static const char *library_path(void)
{
	static char path[4096];
	Dl_info info;

	if (!path[0] && dladdr((void *)library_path, &info) && info.dli_fname)
		strncpy(path, info.dli_fname, sizeof(path) - 1);
	return path[0] ? path : NULL;
}

static int preload_has(const char *value, const char *lib)
{
	const char *p = value;
	size_t n = strlen(lib);

	while (p && (p = strstr(p, lib)) != NULL) {
		if ((p == value || p[-1] == ':' || p[-1] == ' ') &&
		    (p[n] == '\0' || p[n] == ':' || p[n] == ' '))
			return 1;
		p += n;
	}
	return 0;
}

/*
 * The new program will not run ulsock: move every accelerated socket it inherits back to
 * kernel TCP first. With all, close-on-exec ones too (a posix_spawn file action may dup
 * them into the child). Returns 0 when all could be moved.
 */
static int revert_inherited(int all)
{
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	int failed = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL) {
		int fd = atoi(de->d_name);
		if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dirfd(d))
			continue;
		struct uls_conn *c = uls_fd_conn(fd);
		if (!uls_conn_accelerated(c))
			continue;
		int fl = uls_libc.fcntl(fd, F_GETFD);
		if (fl < 0 || ((fl & FD_CLOEXEC) && !all))
			continue;
		int r = uls_conn_revert(c, fd, 2000);
		if (r < 0) {
			uls_warn("exec: fd=%d could not move back to kernel TCP: %s", fd, strerror(-r));
			failed = 1;
		}
	}
	closedir(d);
	return failed ? -1 : 0;
}

/* Returns envp, or a new environment with the library added to LD_PRELOAD. */
static char **fixed_env(char *const envp[], char **to_free, int all)
{
	const char *lib = library_path(), *old = NULL;
	size_t n = 0, k = 0;
	char **env, *entry;
	int at = -1;

	*to_free = NULL;
	if (!lib || !uls_conn_any_accelerated())
		return (char **)envp;
	for (n = 0; envp && envp[n]; n++)
		if (strncmp(envp[n], "LD_PRELOAD=", 11) == 0) {
			old = envp[n] + 11;
			at = (int)n;
		}
	if (old && preload_has(old, lib))
		return (char **)envp;
	/* The preload was dropped: go back to TCP in place, else keep the library. */
	if (revert_inherited(all) == 0)
		return (char **)envp;
	env = malloc((n + 2) * sizeof(*env));
	entry = malloc(strlen(lib) + (old ? strlen(old) : 0) + 16);
	if (!env || !entry) {
		free(env);
		free(entry);
		return (char **)envp;
	}
	strcpy(entry, "LD_PRELOAD=");
	strcat(entry, lib);
	if (old && *old) {
		strcat(entry, ":");
		strcat(entry, old);
	}
	for (k = 0; k < n; k++)
		env[k] = (int)k == at ? entry : envp[k];
	if (at < 0)
		env[n++] = entry;
	env[n] = NULL;
	uls_warn("exec: LD_PRELOAD restored so that accelerated sockets keep working");
	*to_free = entry;
	return env;
}

/*
 * What every exec does before the real call: the environment that keeps the library
 * (fixed_env; *entry is its LD_PRELOAD entry, to free), the epoll sets unshared, or in a
 * vfork child only what the child keeps (the parent goes on), and the transports told.
 */
static char **exec_begin(char *const envp[], char **entry)
{
	char **env = fixed_env(envp, entry, 0);

	if (uls_vfork_child())
		uls_vfork_exec_prepare();
	else
		uls_epoll_unshare();
	uls_transports_exec_begin();
	return env;
}

/* After a real exec call that returned (it failed): undoes exec_begin, errno kept. */
static void exec_failed(char *const envp[], char **env, char *entry)
{
	int err = errno;

	uls_transports_exec_failed();
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
 * fexecve and execveat: the same preparation as execve (fixed_env and the rest), then the
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
	env = fixed_env(envp, &entry, fa != NULL);
	/* The child may inherit an epoll fd: no hidden registrations in it. */
	uls_epoll_unshare();
	uls_transports_exec_begin();
	r = (search ? uls_libc.posix_spawnp : uls_libc.posix_spawn)(pid, file, fa, attr, argv, env);
	uls_transports_exec_failed();
	/* The child holds what it inherited: the last close is no longer this process's. */
	if (r == 0)
		uls_conn_mark_shared_all();
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
	struct uls_conn *c;

	uls_ensure_init();
	c = uls_fd_conn(fd);
	if (uls_conn_accelerated(c)) {
		int r = uls_conn_revert(c, fd, 2000);
		if (r < 0)
			uls_err("fdopen: fd=%d stays accelerated (%s): stdio will not see its data",
				fd, strerror(-r));
	}
	return uls_libc.fdopen(fd, mode);
}
