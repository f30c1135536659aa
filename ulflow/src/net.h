/* SPDX-License-Identifier: MIT */
/* TCP helpers with deadlines: nothing in set-up may wait forever. */
#ifndef ULF_NET_H
#define ULF_NET_H

#include <stdint.h>

/* Monotonic milliseconds. */
int64_t ulf_now_ms(void);
/* A listening socket on host:port (port 0: any); the bound port in *bound. */
int ulf_listen(const char *host, unsigned port, unsigned *bound);
/* Connects to host:port, retrying refused attempts until the deadline (ulf_now_ms()). */
int ulf_connect(const char *host, unsigned port, int64_t deadline);
/* Accepts one connection before the deadline; -ETIMEDOUT after it. */
int ulf_accept(int lfd, int64_t deadline);
/* Waits for fd to become readable before the deadline: 1, 0 on time-out, -errno. */
int ulf_wait_readable(int fd, int64_t deadline);

#endif
