/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 and HMAC-SHA-256 (src/os/sha256.h) against the published vectors: the FIPS 180-2
 * examples (appendix B: "abc", the 448-bit message, one million 'a') and the seven test
 * cases of RFC 4231. Then the incremental API split at every offset, the padding around
 * the block boundary against one-shot digests of the same bytes, and the constant-time
 * compare.
 */
#include <string.h>

#include "check.h"
#include "os/sha256.h"

/* Hex digits to bytes; the vectors below are written as the documents print them. */
static size_t unhex(uint8_t *out, size_t max, const char *hex)
{
	size_t n = 0;

	for (const char *p = hex; *p; p += 2) {
		unsigned int v;

		CHECK(n < max);
		CHECK_EQ(sscanf(p, "%2x", &v), 1);
		out[n++] = (uint8_t)v;
	}
	return n;
}

static void digest_is(const uint8_t *got, const char *hex, size_t len)
{
	uint8_t want[ULS_SHA256_LEN];

	CHECK_U64(unhex(want, sizeof(want), hex), ==, len);
	CHECK_MEM(got, want, len);
}

static void fips_vectors(void)
{
	static const char m448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	static uint8_t million[1000000];
	uint8_t d[ULS_SHA256_LEN];
	struct uls_sha256 s;

	check_context("FIPS 180-2 B.1 abc");
	uls_sha256("abc", 3, d);
	digest_is(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", 32);

	check_context("FIPS 180-2 B.2 448 bits");
	uls_sha256(m448, strlen(m448), d);
	CHECK_EQ(strlen(m448), 56);
	digest_is(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", 32);

	/* One million 'a', once in one call and once in uneven pieces. */
	check_context("FIPS 180-2 B.3 one million a");
	memset(million, 'a', sizeof(million));
	uls_sha256(million, sizeof(million), d);
	digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", 32);
	uls_sha256_init(&s);
	for (size_t off = 0, step = 1; off < sizeof(million); off += step, step = step * 3 % 997)
		uls_sha256_update(&s, million + off,
				  step < sizeof(million) - off ? step : sizeof(million) - off);
	uls_sha256_final(&s, d);
	digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", 32);

	check_context("empty message");
	uls_sha256(NULL, 0, d);
	digest_is(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 32);
}

struct hmac_case {
	const char *key;   /* hex */
	const char *data;  /* hex */
	const char *mac;   /* hex, possibly truncated (case 5) */
};

/* RFC 4231 section 4, HMAC-SHA-256 rows. Keys and data as the RFC gives them in hex. */
static const struct hmac_case rfc4231[] = {
	{ /* 4.2 */ "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "4869205468657265",
	  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
	{ /* 4.3 */ "4a656665",
	  "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
	  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
	{ /* 4.4 */ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	  "dddddddddddddddddd",
	  "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe" },
	{ /* 4.5 */ "0102030405060708090a0b0c0d0e0f10111213141516171819",
	  "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
	  "cdcdcdcdcdcdcdcdcd",
	  "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b" },
	{ /* 4.6: the RFC gives only the first 128 bits */
	  "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c", "546573742057697468205472756e636174696f6e",
	  "a3b6167473100ee06e0c796c2955552b" },
	{ /* 4.7: a 131-byte key, hashed first */
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048"
	  "617368204b6579204669727374",
	  "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
	{ /* 4.8: a 131-byte key and 152 bytes of data */
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d"
	  "73697a65206b657920616e642061206c6172676572207468616e20626c6f636b2d73697a6520646174"
	  "612e20546865206b6579206e6565647320746f20626520686173686564206265666f7265206265696e"
	  "6720757365642062792074686520484d414320616c676f726974686d2e",
	  "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2" },
};

static void rfc4231_vectors(void)
{
	uint8_t key[160], data[200], mac[ULS_SHA256_LEN], mac2[ULS_SHA256_LEN];

	for (size_t i = 0; i < sizeof(rfc4231) / sizeof(rfc4231[0]); i++) {
		const struct hmac_case *c = &rfc4231[i];
		size_t klen = unhex(key, sizeof(key), c->key);
		size_t dlen = unhex(data, sizeof(data), c->data);
		size_t mlen = strlen(c->mac) / 2;
		struct uls_hmac_sha256 h;

		check_context("RFC 4231 test case %zu", i + 1);
		uls_hmac_sha256(key, klen, data, dlen, mac);
		digest_is(mac, c->mac, mlen);
		/* The same through the incremental API, the data in two unequal halves. */
		uls_hmac_sha256_init(&h, key, klen);
		uls_hmac_sha256_update(&h, data, dlen / 3);
		uls_hmac_sha256_update(&h, data + dlen / 3, dlen - dlen / 3);
		uls_hmac_sha256_final(&h, mac2);
		CHECK_MEM(mac2, mac, ULS_SHA256_LEN);
	}
	/* The key lengths the RFC covers: one under a block (20..25 bytes), one over (131). */
	CHECK_U64(unhex(key, sizeof(key), rfc4231[5].key), ==, 131);
	CHECK_U64(unhex(data, sizeof(data), rfc4231[6].data), ==, 152);
}

/* Every split point of one vector (the 448-bit message), and every split into three. */
static void split_everywhere(void)
{
	static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	static const char want[] =
		"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
	size_t n = strlen(m);
	uint8_t d[ULS_SHA256_LEN];
	struct uls_sha256 s;

	for (size_t a = 0; a <= n; a++) {
		for (size_t b = a; b <= n; b++) {
			check_context("split at %zu and %zu", a, b);
			uls_sha256_init(&s);
			uls_sha256_update(&s, m, a);
			uls_sha256_update(&s, m + a, b - a);
			uls_sha256_update(&s, m + b, n - b);
			uls_sha256_final(&s, d);
			digest_is(d, want, 32);
		}
	}
}

/*
 * Lengths around the padding's edges (55, 56, 63, 64, 119, 120 bytes ...): byte by byte
 * updates must equal the one-shot digest, and each length must give its own digest. The
 * absolute values are pinned by the vectors above; this catches a padding that is only
 * right for the vectors' lengths.
 */
static void padding_edges(void)
{
	uint8_t msg[200], d1[ULS_SHA256_LEN], d2[ULS_SHA256_LEN], prev[ULS_SHA256_LEN];
	struct uls_sha256 s;
	uint64_t seed = 4231;

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)check_rand(&seed);
	memset(prev, 0, sizeof(prev));
	for (size_t len = 0; len <= sizeof(msg); len++) {
		check_context("length %zu", len);
		uls_sha256(msg, len, d1);
		uls_sha256_init(&s);
		for (size_t i = 0; i < len; i++)
			uls_sha256_update(&s, msg + i, 1);
		uls_sha256_final(&s, d2);
		CHECK_MEM(d2, d1, ULS_SHA256_LEN);
		CHECK(memcmp(d1, prev, ULS_SHA256_LEN) != 0);
		memcpy(prev, d1, sizeof(prev));
	}
	/* 9.4's keys are 32 to 1024 bytes: a 64-byte key is used as is, a 65-byte one is
	 * hashed, so the two must differ even though they agree on the first 64 bytes. */
	uls_hmac_sha256(msg, 64, "x", 1, d1);
	uls_hmac_sha256(msg, 65, "x", 1, d2);
	CHECK(memcmp(d1, d2, ULS_SHA256_LEN) != 0);
	/* RFC 2104: a key longer than a block is the same key as its digest. */
	uls_sha256(msg, 65, prev);
	uls_hmac_sha256(prev, ULS_SHA256_LEN, "x", 1, d1);
	CHECK_MEM(d1, d2, ULS_SHA256_LEN);
}

static void equal(void)
{
	uint8_t a[ULS_SHA256_LEN], b[ULS_SHA256_LEN];

	for (int i = 0; i < ULS_SHA256_LEN; i++)
		a[i] = b[i] = (uint8_t)(i * 37 + 1);
	CHECK_EQ(uls_sha256_equal(a, b), 1);
	for (int i = 0; i < ULS_SHA256_LEN; i++) {
		for (int bit = 0; bit < 8; bit++) {
			check_context("byte %d bit %d", i, bit);
			b[i] ^= (uint8_t)(1 << bit);
			CHECK_EQ(uls_sha256_equal(a, b), 0);
			CHECK_EQ(uls_sha256_equal(b, a), 0);
			b[i] ^= (uint8_t)(1 << bit);
		}
	}
	memset(b, 0xff, sizeof(b));
	CHECK_EQ(uls_sha256_equal(a, b), 0);
	CHECK_EQ(uls_sha256_equal(b, b), 1);
}

int main(void)
{
	fips_vectors();
	rfc4231_vectors();
	split_everywhere();
	padding_edges();
	equal();
	return CHECK_PASS;
}
