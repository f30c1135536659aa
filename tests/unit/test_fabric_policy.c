/* SPDX-License-Identifier: MIT */
/*
 * The fabric allow-list, ULSOCK_FABRIC_PEERS (src/transport/fabric/policy.h): which lists
 * parse, which are rejected whole, and which peers and server ports each one takes,
 * IPv4-mapped peers of dual-stack sockets included.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "check.h"
#include "transport/fabric/policy.h"

static struct sockaddr_storage peer(const char *a)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(a, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		CHECK_EQ(inet_pton(AF_INET6, a, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		CHECK_EQ(inet_pton(AF_INET, a, &s4->sin_addr), 1);
	}
	return ss;
}

static int allows(const struct uls_fab_policy *p, const char *a, uint16_t port)
{
	struct sockaddr_storage ss = peer(a);

	return uls_fab_policy_allows(p, (struct sockaddr *)&ss, port);
}

static void parses(const char *spec, int n)
{
	struct uls_fab_policy p;
	char why[160] = "";

	if (uls_fab_policy_parse(&p, spec, why, sizeof(why)) != 0)
		check_context("spec \"%s\": %s", spec, why);
	CHECK_EQ(uls_fab_policy_parse(&p, spec, why, sizeof(why)), 0);
	CHECK_INT(p.n, ==, n);
}

static void rejected(const char *spec)
{
	struct uls_fab_policy p;
	char why[160] = "";

	check_context("spec \"%s\"", spec);
	CHECK_INT(uls_fab_policy_parse(&p, spec, why, sizeof(why)), ==, -1);
	CHECK_INT(p.n, ==, 0);
	CHECK(strstr(why, "ULSOCK_FABRIC_PEERS") != NULL);
}

int main(void)
{
	struct uls_fab_policy p;
	char why[160];

	/* Empty: nothing is allowed. */
	parses(NULL, 0);
	parses("", 0);
	parses("   ", 0);
	CHECK_EQ(uls_fab_policy_parse(&p, "", why, sizeof(why)), 0);
	CHECK(!allows(&p, "10.0.0.1", 80));

	parses("10.200.7.0/30", 1);
	parses("10.200.7.2", 1);
	parses("10.0.0.0/8:*, 192.168.1.5:80 ,[2001:db8::/32]:1000-2000,[::1]", 4);
	parses("0.0.0.0/0", 1);
	parses("[::/0]:443", 1);

	rejected("10.0.0.0/33");
	rejected("10.0.0.0/-1");
	rejected("10.0.0.256");
	rejected("10.0.0.1:0");
	rejected("10.0.0.1:65536");
	rejected("10.0.0.1:90-80");
	rejected("10.0.0.1:80-");
	rejected("10.0.0.1:x");
	rejected("10.0.0.1,");
	rejected(",10.0.0.1");
	rejected("10.0.0.1,,10.0.0.2");
	rejected("[2001:db8::/129]");
	rejected("[2001:db8::");
	rejected("[2001:db8::]80");
	rejected("2001:db8::1");       /* IPv6 needs its brackets */
	rejected("10.0.0.1 10.0.0.2"); /* a space is no separator */
	rejected("host.example:80");
	/* A good list with one bad entry is rejected whole. */
	rejected("10.0.0.0/8,bogus");
	/* At most 64 entries. */
	char many[65 * 16] = "";
	for (int i = 0; i < 65; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s10.0.%d.1",
			 i ? "," : "", i);
	rejected(many);
	many[strrchr(many, ',') - many] = '\0';
	parses(many, 64);

	CHECK_EQ(uls_fab_policy_parse(&p,
				      "10.200.7.0/30:5000-5001, 192.168.1.5:80, [2001:db8::/32], "
				      "172.16.3.77/16:22",
				      why, sizeof(why)),
		 0);
	CHECK(allows(&p, "10.200.7.1", 5000));
	CHECK(allows(&p, "10.200.7.3", 5001));
	CHECK(!allows(&p, "10.200.7.4", 5000)); /* outside /30 */
	CHECK(!allows(&p, "10.200.7.1", 4999)); /* outside the ports */
	CHECK(!allows(&p, "10.200.7.1", 5002));
	CHECK(allows(&p, "192.168.1.5", 80));
	CHECK(!allows(&p, "192.168.1.6", 80)); /* a bare address is /32 */
	CHECK(!allows(&p, "192.168.1.5", 81));
	CHECK(allows(&p, "2001:db8:ffff::1", 9));
	CHECK(!allows(&p, "2001:db9::1", 9));
	/* Host bits of an entry are ignored: 172.16.3.77/16 is 172.16.0.0/16. */
	CHECK(allows(&p, "172.16.200.1", 22));
	CHECK(!allows(&p, "172.17.0.1", 22));
	/* An IPv4-mapped peer (a dual-stack socket's) matches the IPv4 entries only. */
	CHECK(allows(&p, "::ffff:10.200.7.2", 5000));
	CHECK(!allows(&p, "::ffff:10.200.8.2", 5000));
	/* An IPv6 entry never takes an IPv4 peer, nor an IPv4 entry a native IPv6 one. */
	CHECK_EQ(uls_fab_policy_parse(&p, "[::/0]", why, sizeof(why)), 0);
	CHECK(allows(&p, "fe80::1", 1));
	CHECK(allows(&p, "::ffff:1.2.3.4", 1)); /* ::/0 is every IPv6 address, mapped ones too */
	CHECK_EQ(uls_fab_policy_parse(&p, "0.0.0.0/0", why, sizeof(why)), 0);
	CHECK(allows(&p, "1.2.3.4", 1));
	CHECK(!allows(&p, "2001:db8::1", 1));
	return CHECK_PASS;
}
