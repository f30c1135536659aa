/* SPDX-License-Identifier: MIT */
/*
 * The directory protocol's codec (src/transport/fabric/dir.h, docs/protocol.md 9.3): each
 * message packed and parsed back; each class of malformed input rejected (every length
 * but the right one, magic, version, type, length field, each reserved byte, addr_len,
 * unterminated and unprintable strings, padding, flags, family, reasons); the 36-byte
 * 4-tuple of IPv4, IPv6 and IPv4-mapped addresses byte for byte.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "check.h"
#include "transport/fabric/dir.h"

static uint8_t buf[ULS_FAB_DIR_MAX_LEN + 8];

static struct uls_fab_where where(void)
{
	struct uls_fab_where w;

	memset(&w, 0, sizeof(w));
	for (int i = 0; i < ULS_FAB_NONCE_LEN; i++)
		w.ns[i] = (uint8_t)(0x10 + i);
	w.flags = ULS_FAB_FLAG_KEY;
	strcpy(w.provider, "verbs;ofi_rxm");
	strcpy(w.fabric, "mlx5_0 fabric");
	w.addr_len = 24;
	for (int i = 0; i < 24; i++)
		w.addr[i] = (uint8_t)(0xc0 + i);
	return w;
}

static struct uls_fab_reg reg(void)
{
	struct uls_fab_reg r;

	memset(&r, 0, sizeof(r));
	for (int i = 0; i < ULS_FAB_TUPLE_LEN; i++)
		r.tuple.b[i] = (uint8_t)i;
	r.family = 6;
	r.inode = 0x1122334455667788ull;
	r.cookie = 0x0102030405060708ull;
	r.where = where();
	return r;
}

static void where_eq(const struct uls_fab_where *a, const struct uls_fab_where *b)
{
	CHECK_MEM(a->ns, b->ns, ULS_FAB_NONCE_LEN);
	CHECK_EQ(a->flags, b->flags);
	CHECK_EQ(a->addr_len, b->addr_len);
	CHECK(!strcmp(a->provider, b->provider));
	CHECK(!strcmp(a->fabric, b->fabric));
	CHECK_MEM(a->addr, b->addr, a->addr_len);
}

static void round_trips(void)
{
	struct uls_fab_banner b = {.min_version = 1, .max_version = 3}, b2;
	struct uls_fab_hello h, h2;
	struct uls_fab_where w = where(), w2;
	struct uls_fab_reg r = reg(), r2;
	uint32_t reason;
	uint8_t type;
	size_t len;

	memset(b.nd, 0x5a, sizeof(b.nd));
	CHECK_EQ(uls_fab_banner_pack(buf, &b), ULS_FAB_BANNER_LEN);
	/* The header's bytes as 9.3 lays them out: "ULFD", 1, type, length LE. */
	CHECK_MEM(buf, "ULFD\x01\x01\x20\x00", 8);
	CHECK_EQ(uls_fab_dir_header(buf, 8, &type, &len), 0);
	CHECK_EQ(type, ULS_FAB_DIR_BANNER);
	CHECK_EQ(len, ULS_FAB_BANNER_LEN);
	CHECK_EQ(uls_fab_banner_parse(buf, ULS_FAB_BANNER_LEN, &b2), 0);
	CHECK_MEM(b2.nd, b.nd, sizeof(b.nd));
	CHECK_EQ(b2.max_version, 3);

	memset(&h, 0, sizeof(h));
	memset(h.nd, 0xa5, sizeof(h.nd));
	h.tuple = reg().tuple;
	CHECK_EQ(uls_fab_hello_pack(buf, &h), ULS_FAB_HELLO_LEN);
	CHECK_EQ(uls_fab_hello_parse(buf, ULS_FAB_HELLO_LEN, &h2), 0);
	CHECK_MEM(&h2, &h, sizeof(h));

	CHECK_EQ(uls_fab_offer_pack(buf, &w), ULS_FAB_OFFER_LEN);
	CHECK_EQ(buf[24], 1);    /* flags */
	CHECK_EQ(buf[28], 24);   /* addr_len */
	CHECK_EQ(buf[32], 'v');  /* provider */
	CHECK_EQ(buf[64], 'm');  /* fabric */
	CHECK_EQ(buf[128], 0xc0); /* address */
	CHECK_EQ(uls_fab_offer_parse(buf, ULS_FAB_OFFER_LEN, &w2), 0);
	where_eq(&w2, &w);

	CHECK_EQ(uls_fab_no_pack(buf, ULS_FAB_NO_BUSY), ULS_FAB_NO_LEN);
	CHECK_EQ(uls_fab_no_parse(buf, ULS_FAB_NO_LEN, &reason), 0);
	CHECK_EQ(reason, ULS_FAB_NO_BUSY);

	CHECK_EQ(uls_fab_reg_pack(buf, &r), ULS_FAB_REG_LEN);
	CHECK_EQ(buf[44], 6);
	CHECK_EQ(buf[46], 1);
	CHECK_EQ(buf[48], 0x88); /* inode, little-endian */
	CHECK_EQ(buf[56], 0x08);
	CHECK_EQ(buf[64], 0x10); /* Ns */
	CHECK_EQ(buf[80], 24);
	CHECK_EQ(buf[88], 'v');
	CHECK_EQ(buf[120], 'm');
	CHECK_EQ(buf[184], 0xc0);
	CHECK_EQ(uls_fab_reg_parse(buf, ULS_FAB_REG_LEN, &r2), 0);
	CHECK_MEM(r2.tuple.b, r.tuple.b, ULS_FAB_TUPLE_LEN);
	CHECK_EQ(r2.family, 6);
	CHECK_U64(r2.inode, ==, r.inode);
	CHECK_U64(r2.cookie, ==, r.cookie);
	where_eq(&r2.where, &r.where);

	/* The longest strings that fit, and the full address. */
	memset(w.provider, 'p', sizeof(w.provider) - 1);
	memset(w.fabric, 'f', sizeof(w.fabric) - 1);
	w.addr_len = ULS_FAB_ADDR_MAX;
	CHECK_EQ(uls_fab_offer_pack(buf, &w), ULS_FAB_OFFER_LEN);
	CHECK_EQ(uls_fab_offer_parse(buf, ULS_FAB_OFFER_LEN, &w2), 0);
	where_eq(&w2, &w);
}

/* A valid message of each type into m; returns its length. */
static size_t valid(int type, uint8_t *m)
{
	struct uls_fab_banner b = {.min_version = 1, .max_version = 1};
	struct uls_fab_hello h;
	struct uls_fab_where w = where();
	struct uls_fab_reg r = reg();

	memset(&h, 0, sizeof(h));
	switch (type) {
	case ULS_FAB_DIR_BANNER:
		return (size_t)uls_fab_banner_pack(m, &b);
	case ULS_FAB_DIR_HELLO:
		return (size_t)uls_fab_hello_pack(m, &h);
	case ULS_FAB_DIR_OFFER:
		return (size_t)uls_fab_offer_pack(m, &w);
	case ULS_FAB_DIR_NO:
		return (size_t)uls_fab_no_pack(m, ULS_FAB_NO_NOT_REGISTERED);
	default:
		return (size_t)uls_fab_reg_pack(m, &r);
	}
}

static int parse(int type, const uint8_t *m, size_t n)
{
	struct uls_fab_banner b;
	struct uls_fab_hello h;
	struct uls_fab_where w;
	struct uls_fab_reg r;
	uint32_t reason;

	switch (type) {
	case ULS_FAB_DIR_BANNER:
		return uls_fab_banner_parse(m, n, &b);
	case ULS_FAB_DIR_HELLO:
		return uls_fab_hello_parse(m, n, &h);
	case ULS_FAB_DIR_OFFER:
		return uls_fab_offer_parse(m, n, &w);
	case ULS_FAB_DIR_NO:
		return uls_fab_no_parse(m, n, &reason);
	default:
		return uls_fab_reg_parse(m, n, &r);
	}
}

/* Reserved ranges (offset, size) of each type, from 9.3's table. */
static const struct {
	int type;
	int off, size;
} reserved[] = {
	{ULS_FAB_DIR_BANNER, 26, 6}, {ULS_FAB_DIR_HELLO, 60, 4}, {ULS_FAB_DIR_OFFER, 30, 2},
	{ULS_FAB_DIR_NO, 12, 4},     {ULS_FAB_DIR_REG, 82, 6},
};

/* Each message with one thing wrong, per class. */
static void malformed(void)
{
	for (int type = ULS_FAB_DIR_BANNER; type <= ULS_FAB_DIR_REG; type++) {
		uint8_t m[ULS_FAB_DIR_MAX_LEN + 8];
		size_t n = valid(type, m);

		check_context("type %d", type);
		CHECK_EQ(parse(type, m, n), 0);
		/* Every length but the right one: short reads and a trailing byte. */
		for (size_t k = 0; k <= n + 1; k++)
			if (k != n)
				CHECK_EQ(parse(type, m, k), -EBADMSG);
		/* Magic, version, type (another known one and unknown ones), length field. */
		for (int byte = 0; byte < 8; byte++) {
			for (int bit = 0; bit < 8; bit++) {
				n = valid(type, m);
				m[byte] ^= (uint8_t)(1 << bit);
				CHECK_EQ(parse(type, m, n), -EBADMSG);
			}
		}
		/* Each reserved byte. */
		for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
			if (reserved[i].type != type)
				continue;
			for (int off = reserved[i].off; off < reserved[i].off + reserved[i].size; off++) {
				n = valid(type, m);
				m[off] = 0x80;
				CHECK_EQ(parse(type, m, n), -EBADMSG);
			}
		}
	}
	check_context("%s", "");
}

/* The OFFER/REG strings, address and flags; BANNER versions; NO reasons; REG family. */
static void malformed_fields(void)
{
	const struct {
		int type, off;
		uint8_t v;
	} one[] = {
		/* addr_len 257 (0x0101) */
		{ULS_FAB_DIR_OFFER, 29, 1},  {ULS_FAB_DIR_REG, 81, 1},
		/* unterminated provider / fabric: their last byte not NUL */
		{ULS_FAB_DIR_OFFER, 63, 'x'}, {ULS_FAB_DIR_OFFER, 127, 'x'},
		{ULS_FAB_DIR_REG, 119, 'x'},  {ULS_FAB_DIR_REG, 183, 'x'},
		/* an unprintable character, and a byte after the NUL */
		{ULS_FAB_DIR_OFFER, 33, 0x07}, {ULS_FAB_DIR_OFFER, 60, 'x'},
		{ULS_FAB_DIR_REG, 89, 0xff},   {ULS_FAB_DIR_REG, 180, 'x'},
		/* address bytes past addr_len */
		{ULS_FAB_DIR_OFFER, 128 + 24, 1}, {ULS_FAB_DIR_REG, 184 + 255, 1},
		/* unknown flags */
		{ULS_FAB_DIR_OFFER, 24, 2}, {ULS_FAB_DIR_OFFER, 27, 0x80}, {ULS_FAB_DIR_REG, 46, 3},
		{ULS_FAB_DIR_REG, 47, 1},
		/* family neither 4 nor 6; 4 with addresses that are not IPv4-mapped */
		{ULS_FAB_DIR_REG, 44, 5}, {ULS_FAB_DIR_REG, 44, 0}, {ULS_FAB_DIR_REG, 45, 1},
		{ULS_FAB_DIR_REG, 44, 4},
		/* NO reasons 0 and 5 */
		{ULS_FAB_DIR_NO, 8, 0}, {ULS_FAB_DIR_NO, 8, 5}, {ULS_FAB_DIR_NO, 11, 1},
		/* banners not offering version 1 */
		{ULS_FAB_DIR_BANNER, 24, 0}, {ULS_FAB_DIR_BANNER, 24, 2}, {ULS_FAB_DIR_BANNER, 25, 0},
	};

	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
		uint8_t m[ULS_FAB_DIR_MAX_LEN + 8];
		size_t n = valid(one[i].type, m);

		check_context("case %zu", i);
		m[one[i].off] = one[i].v;
		CHECK_EQ(parse(one[i].type, m, n), -EBADMSG);
	}
	check_context("%s", "");
}

/* What pack refuses to encode. */
static void unencodable(void)
{
	struct uls_fab_where w = where();
	struct uls_fab_reg r = reg();

	w.addr_len = ULS_FAB_ADDR_MAX + 1;
	CHECK_EQ(uls_fab_offer_pack(buf, &w), -EINVAL);
	w = where();
	memset(w.provider, 'p', sizeof(w.provider)); /* no room for the NUL */
	CHECK_EQ(uls_fab_offer_pack(buf, &w), -EINVAL);
	w = where();
	w.fabric[0] = '\n';
	CHECK_EQ(uls_fab_offer_pack(buf, &w), -EINVAL);
	w = where();
	w.flags = 2;
	CHECK_EQ(uls_fab_offer_pack(buf, &w), -EINVAL);
	r.family = 4; /* the tuple is not IPv4-mapped */
	CHECK_EQ(uls_fab_reg_pack(buf, &r), -EINVAL);
	r.family = 0;
	CHECK_EQ(uls_fab_reg_pack(buf, &r), -EINVAL);
	CHECK_EQ(uls_fab_no_pack(buf, 0), -EINVAL);
	CHECK_EQ(uls_fab_no_pack(buf, 9), -EINVAL);
}

static void tuples(void)
{
	struct sockaddr_in c4 = {.sin_family = AF_INET, .sin_port = htons(40000)};
	struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(80)};
	struct sockaddr_in6 c6 = {.sin6_family = AF_INET6, .sin6_port = htons(0x1234)};
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(0xabcd)};
	struct sockaddr_in6 m6 = {.sin6_family = AF_INET6, .sin6_port = htons(80)}, back;
	struct uls_fab_tuple t, t2;
	struct sockaddr_un {
		sa_family_t f;
	} un = {AF_UNIX};
	static const uint8_t v4[ULS_FAB_TUPLE_LEN] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 0, 9,
		0x40, 0x9c, 80, 0, /* 40000 and 80, little-endian */
	};

	inet_pton(AF_INET, "10.1.2.3", &c4.sin_addr);
	inet_pton(AF_INET, "192.168.0.9", &s4.sin_addr);
	CHECK_EQ(uls_fab_tuple_make(&t, (struct sockaddr *)&c4, (struct sockaddr *)&s4), 0);
	CHECK_MEM(t.b, v4, ULS_FAB_TUPLE_LEN);

	/* A dual-stack socket's view of the same connection gives the same bytes. */
	inet_pton(AF_INET6, "::ffff:192.168.0.9", &m6.sin6_addr);
	CHECK_EQ(uls_fab_tuple_make(&t2, (struct sockaddr *)&c4, (struct sockaddr *)&m6), 0);
	CHECK_MEM(t2.b, v4, ULS_FAB_TUPLE_LEN);

	inet_pton(AF_INET6, "2001:db8::1", &c6.sin6_addr);
	inet_pton(AF_INET6, "fe80::2", &s6.sin6_addr);
	CHECK_EQ(uls_fab_tuple_make(&t, (struct sockaddr *)&c6, (struct sockaddr *)&s6), 0);
	CHECK_MEM(t.b, &c6.sin6_addr, 16);
	CHECK_MEM(t.b + 16, &s6.sin6_addr, 16);
	CHECK_MEM(t.b + 32, "\x34\x12\xcd\xab", 4);
	uls_fab_tuple_addr(&t, 1, &back);
	CHECK_MEM(&back.sin6_addr, &s6.sin6_addr, 16);
	CHECK_EQ(back.sin6_port, s6.sin6_port);

	CHECK_EQ(uls_fab_tuple_make(&t, (struct sockaddr *)&un, (struct sockaddr *)&s6),
		 -EAFNOSUPPORT);
}

int main(void)
{
	round_trips();
	malformed();
	malformed_fields();
	unencodable();
	tuples();
	return CHECK_PASS;
}
