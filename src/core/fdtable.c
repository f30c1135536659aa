/* SPDX-License-Identifier: MIT */
#include "fdtable.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "conn.h"
#include "event.h"
#include "../os/libc.h"

#define FD_LIMIT (1 << 20)

struct uls_fd *uls_fd_table;
int uls_fd_table_size;

int uls_fdtable_init(void)
{
	struct rlimit rl;
	size_t n = FD_LIMIT;
	void *p;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < FD_LIMIT)
		n = rl.rlim_max < 1024 ? 1024 : rl.rlim_max;
	/* Untouched pages cost nothing: reserve for the hard limit at once. */
	p = mmap(NULL, n * sizeof(struct uls_fd), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	uls_fd_table = p;
	uls_fd_table_size = (int)n;
	return 0;
}

int uls_fd_max(void)
{
	return uls_fd_table_size;
}


static int sockopt_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (uls_libc.getsockopt(fd, level, name, &v, &len) < 0)
		return -1;
	return v;
}

int uls_fd_listening(int fd)
{
	return sockopt_int(fd, SOL_SOCKET, SO_ACCEPTCONN) == 1;
}

static enum uls_fd_kind classify(int fd, struct uls_fd *e)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct stat st;
	int domain;

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return ULS_FD_PLAIN;
	domain = sockopt_int(fd, SOL_SOCKET, SO_DOMAIN);
	if ((domain != AF_INET && domain != AF_INET6) ||
	    sockopt_int(fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP)
		return ULS_FD_PLAIN;
	if (uls_fd_listening(fd))
		return ULS_FD_PLAIN;
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return ULS_FD_TCP;
	e->conn = uls_conn_adopt(fd);
	if (e->conn) {
		int fl = uls_libc.fcntl(fd, F_GETFL);
		atomic_store(&e->conn->nonblock, fl >= 0 && (fl & O_NONBLOCK));
	}
	return e->conn ? ULS_FD_CONN : ULS_FD_PLAIN;
}

struct uls_fd *uls_fd_classify(int fd)
{
	struct uls_fd *e = uls_fd_get(fd);

	if (e && atomic_load_explicit(&e->kind, memory_order_acquire) == ULS_FD_UNKNOWN) {
		enum uls_fd_kind k = classify(fd, e);
		atomic_store_explicit(&e->kind, (uint8_t)k, memory_order_release);
	}
	return e;
}

struct uls_conn *uls_fd_conn(int fd)
{
	struct uls_fd *e = uls_fd_classify(fd);

	return e && atomic_load_explicit(&e->kind, memory_order_acquire) == ULS_FD_CONN ? e->conn
										  : NULL;
}

void uls_fd_clear(int fd)
{
	struct uls_fd *e = uls_fd_get(fd);

	if (!e)
		return;
	atomic_store(&e->kind, ULS_FD_UNKNOWN);
	e->conn = NULL;
	e->ep = NULL;
	e->nonblock = 0;
	e->sndbuf = e->rcvbuf = 0;
	e->rcvtimeo_ns = e->sndtimeo_ns = 0;
	e->rcvlowat = 0;
}

void uls_fd_dup(int oldfd, int newfd)
{
	struct uls_fd *o = uls_fd_classify(oldfd), *n = uls_fd_get(newfd);

	if (!n)
		return;
	if (!o) {
		uls_fd_clear(newfd);
		return;
	}
	uint8_t kind = atomic_load(&o->kind);
	if (kind == ULS_FD_CONN && o->conn)
		uls_conn_get(o->conn);
	if (kind == ULS_FD_EPOLL && o->ep)
		uls_epoll_get(o->ep);
	n->nonblock = o->nonblock;
	n->sndbuf = o->sndbuf;
	n->rcvbuf = o->rcvbuf;
	n->rcvtimeo_ns = o->rcvtimeo_ns;
	n->sndtimeo_ns = o->sndtimeo_ns;
	n->rcvlowat = o->rcvlowat;
	n->conn = o->conn;
	n->ep = o->ep;
	atomic_store(&n->kind, kind);
}
