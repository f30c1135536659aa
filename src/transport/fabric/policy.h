/* SPDX-License-Identifier: MIT */
/*
 * The fabric transport's allow-list, ULSOCK_FABRIC_PEERS (docs/protocol.md 9.1): the peers
 * and server ports with which a connection may leave kernel TCP for the fabric. Empty by
 * default, and then nothing of the fabric happens at all.
 *
 * The list is NET[:PORTS] entries separated by commas. NET is a.b.c.d/len or
 * [x:y::z/len]; a bare address means /32 or /128. PORTS is * (the default), p or p-q. The
 * port is always the server's. IPv4 entries are kept as IPv4-mapped IPv6 prefixes, so an
 * IPv4-mapped peer of a dual-stack socket matches them. A list that does not parse is
 * rejected whole.
 */
#ifndef ULS_FAB_POLICY_H
#define ULS_FAB_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define ULS_FAB_PEERS_MAX 64

struct uls_fab_net {
	uint8_t addr[16]; /* IPv6, or IPv4-mapped; bits past plen are 0 */
	uint8_t plen;     /* prefix length over the 128 bits */
	uint16_t port_lo, port_hi;
};

struct uls_fab_policy {
	int n;
	struct uls_fab_net net[ULS_FAB_PEERS_MAX];
};

/*
 * Parses spec (NULL or blank: the empty list). Returns 0, or -1 with why (wlen bytes)
 * naming the entry that does not parse; p is then the empty list.
 */
int uls_fab_policy_parse(struct uls_fab_policy *p, const char *spec, char *why, size_t wlen);

/* Does an entry take peer (AF_INET or AF_INET6) with server port port (host order)? */
int uls_fab_policy_allows(const struct uls_fab_policy *p, const struct sockaddr *peer,
			  uint16_t port);

#endif
