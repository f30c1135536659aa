/* SPDX-License-Identifier: MIT */
/* The fabric allow-list (policy.h). */
#include "policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENTRY_MAX 96 /* the longest entry: [full IPv6/128]:65535-65535 */

/* A decimal number of at most 5 digits in [lo, hi] that is all of s; -1 otherwise. */
static long number(const char *s, long lo, long hi)
{
	char *end;

	if (!isdigit((unsigned char)s[0]) || strlen(s) > 5)
		return -1;
	long v = strtol(s, &end, 10);
	return *end || v < lo || v > hi ? -1 : v;
}

static int ports(const char *s, struct uls_fab_net *n)
{
	char buf[16];
	char *dash;

	if (strcmp(s, "*") == 0) {
		n->port_lo = 1;
		n->port_hi = 65535;
		return 0;
	}
	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	dash = strchr(buf, '-');
	if (dash)
		*dash = '\0';
	long lo = number(buf, 1, 65535), hi = dash ? number(dash + 1, 1, 65535) : lo;
	if (lo < 0 || hi < lo)
		return -1;
	n->port_lo = (uint16_t)lo;
	n->port_hi = (uint16_t)hi;
	return 0;
}

/* Clears the bits of a past plen. */
static void mask(uint8_t a[16], int plen)
{
	for (int i = 0; i < 16; i++) {
		int keep = plen - 8 * i;
		a[i] &= keep >= 8 ? 0xff : keep <= 0 ? 0 : (uint8_t)(0xff << (8 - keep));
	}
}

/* One entry, without spaces around it. */
static int entry(char *s, struct uls_fab_net *n)
{
	char *addr = s, *colon, *slash;
	int v6 = s[0] == '[', max;

	if (v6) {
		char *rb = strchr(s, ']');
		if (!rb)
			return -1;
		*rb = '\0';
		addr = s + 1;
		colon = rb + 1;
		if (*colon != '\0' && *colon != ':')
			return -1;
	} else {
		colon = strchr(s, ':');
		if (!colon)
			colon = s + strlen(s);
	}
	n->port_lo = 1;
	n->port_hi = 65535;
	if (*colon == ':') {
		*colon = '\0';
		if (ports(colon + 1, n) < 0)
			return -1;
	}
	slash = strchr(addr, '/');
	max = v6 ? 128 : 32;
	long plen = max;
	if (slash) {
		*slash = '\0';
		if ((plen = number(slash + 1, 0, max)) < 0)
			return -1;
	}
	memset(n->addr, 0, sizeof(n->addr));
	if (v6) {
		if (inet_pton(AF_INET6, addr, n->addr) != 1)
			return -1;
		n->plen = (uint8_t)plen;
	} else {
		n->addr[10] = n->addr[11] = 0xff;
		if (inet_pton(AF_INET, addr, n->addr + 12) != 1)
			return -1;
		n->plen = (uint8_t)(96 + plen);
	}
	mask(n->addr, n->plen);
	return 0;
}

int uls_fab_policy_parse(struct uls_fab_policy *p, const char *spec, char *why, size_t wlen)
{
	const char *s = spec ? spec : "";

	p->n = 0;
	while (isspace((unsigned char)*s))
		s++;
	if (!*s)
		return 0;
	for (;;) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		char buf[ENTRY_MAX];
		while (len && isspace((unsigned char)*s))
			s++, len--;
		while (len && isspace((unsigned char)s[len - 1]))
			len--;
		if (len == 0 || len >= sizeof(buf) || p->n == ULS_FAB_PEERS_MAX ||
		    (memcpy(buf, s, len), buf[len] = '\0', entry(buf, &p->net[p->n]) < 0)) {
			snprintf(why, wlen, "ULSOCK_FABRIC_PEERS: %s entry %d (\"%.*s\")",
				 p->n == ULS_FAB_PEERS_MAX ? "more than 64 entries at" : "bad",
				 p->n + 1, (int)(len < 40 ? len : 40), s);
			p->n = 0;
			return -1;
		}
		p->n++;
		if (!end)
			return 0;
		s = end + 1;
	}
}

int uls_fab_policy_allows(const struct uls_fab_policy *p, const struct sockaddr *peer,
			  uint16_t port)
{
	uint8_t a[16] = {0};

	if (peer->sa_family == AF_INET) {
		a[10] = a[11] = 0xff;
		memcpy(a + 12, &((const struct sockaddr_in *)peer)->sin_addr, 4);
	} else if (peer->sa_family == AF_INET6) {
		memcpy(a, &((const struct sockaddr_in6 *)peer)->sin6_addr, 16);
	} else {
		return 0;
	}
	for (int i = 0; i < p->n; i++) {
		const struct uls_fab_net *n = &p->net[i];
		uint8_t m[16];
		memcpy(m, a, 16);
		mask(m, n->plen);
		if (memcmp(m, n->addr, 16) == 0 && port >= n->port_lo && port <= n->port_hi)
			return 1;
	}
	return 0;
}
