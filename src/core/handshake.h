/* SPDX-License-Identifier: MIT */
/*
 * How a connection proves it has ulsock at both ends, without a byte on the TCP stream.
 *
 * The client creates its segment before connect(), named after its socket's inode, and
 * stamps it with the socket's cookie. After accept(), the server asks the kernel
 * (NETLINK_SOCK_DIAG, an exact 4-tuple lookup in its own network namespace) for the inode,
 * cookie and owner of the peer socket. Only a ulsock process that holds that very socket
 * can have created a segment with that name and cookie; the kernel's answer cannot be faked
 * by the peer. See docs/protocol.md.
 */
#ifndef ULS_HANDSHAKE_H
#define ULS_HANDSHAKE_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct uls_sockid {
	uint64_t ino;
	uint64_t cookie;
	uid_t uid;
};

/*
 * Looks up the TCP socket whose local address is `self` and remote address `other`
 * (either family; v4-mapped IPv6 is looked up as IPv4 when the IPv6 lookup fails).
 * Returns 0, -ENOENT when there is no such socket in this namespace, or -errno. Never
 * waits for another lookup: it may run in a signal handler.
 */
int uls_diag_lookup(const struct sockaddr *self, const struct sockaddr *other,
		    struct uls_sockid *out);

/* The SO_COOKIE of a socket, or 0. */
uint64_t uls_sock_cookie(int fd);

/* 1 if the address belongs to this host in this namespace (loopback or an interface). */
int uls_addr_is_local(const struct sockaddr *sa);

/* Formats an address as 1.2.3.4:80 or [::1]:80. */
void uls_addr_str(const struct sockaddr *sa, char *buf, size_t len);

/* The port of an IPv4 or IPv6 address, in host order; 0 for another family. */
uint16_t uls_addr_port(const struct sockaddr *sa);

#endif
