/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory transport's operations (core/transport.h), declared for its table
 * (attach.c), its own code, and the interposer's direct calls of the hot ones
 * (preload/preload.h). They are implemented in io.c, revert.c and tcpinfo.c.
 */
#ifndef ULS_SHM_H
#define ULS_SHM_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct uls_conn;

/* The transport's table (attach.c), in the transport table as "shm". */
extern const struct uls_transport_ops uls_shm_transport;

ssize_t uls_shm_send(struct uls_conn *c, int fd, const struct iovec *iov, int iovcnt,
		     int flags);
ssize_t uls_shm_recv(struct uls_conn *c, int fd, struct msghdr *msg, int flags);
int uls_shm_shutdown(struct uls_conn *c, int fd, int how);
int uls_shm_kernel_parts(struct uls_conn *c);
int uls_shm_ready(struct uls_conn *c, int events);
void uls_shm_arm(struct uls_conn *c, int events, int bell);
void uls_shm_drain(struct uls_conn *c, int fd);
void uls_shm_tcp_end(struct uls_conn *c, int fd);
int uls_shm_sleep_recv(struct uls_conn *c, int fd);
uint64_t uls_shm_gen(struct uls_conn *c, int events);
int uls_shm_inq(struct uls_conn *c, int fd, int *out);
int uls_shm_outq(struct uls_conn *c, int fd, int *out);
int uls_shm_atmark(struct uls_conn *c, int fd, int *out);
int uls_shm_revert(struct uls_conn *c, int fd, int timeout_ms);
int uls_shm_tx_to_kernel(struct uls_conn *c, int fd);
void uls_shm_async(struct uls_conn *c, int fd);
void uls_shm_tcp_info(struct uls_conn *c, void *info, socklen_t len);

#endif
