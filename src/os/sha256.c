/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 as FIPS 180-4 sections 4.1.2, 4.2.2, 5.1.1, 5.3.3 and 6.2 define it, and HMAC as
 * RFC 2104 does (sha256.h). Written for clarity over speed: the handshake hashes a few
 * hundred bytes per connection, never the data stream.
 */
#include "sha256.h"

#include <string.h>

/* FIPS 180-4 4.2.2: the first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes. */
static const uint32_t k256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5,
	0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
	0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5,
	0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* FIPS 180-4 5.3.3: the first 32 bits of the fractional parts of the square roots of the
 * first 8 primes. */
static const uint32_t h256[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static inline uint32_t rotr(uint32_t x, int n)
{
	return (x >> n) | (x << (32 - n));
}

/* The six functions of 4.1.2. */
static inline uint32_t ch(uint32_t x, uint32_t y, uint32_t z)
{
	return (x & y) ^ (~x & z);
}

static inline uint32_t maj(uint32_t x, uint32_t y, uint32_t z)
{
	return (x & y) ^ (x & z) ^ (y & z);
}

static inline uint32_t big_sigma0(uint32_t x)
{
	return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22);
}

static inline uint32_t big_sigma1(uint32_t x)
{
	return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25);
}

static inline uint32_t small_sigma0(uint32_t x)
{
	return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3);
}

static inline uint32_t small_sigma1(uint32_t x)
{
	return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10);
}

/* The standard reads message words big-endian, whatever the host's order. */
static inline uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* 6.2.2: one 512-bit block into the chaining value. */
static void compress(uint32_t h[8], const uint8_t block[ULS_SHA256_BLOCK])
{
	uint32_t w[64], v[8];

	for (int t = 0; t < 16; t++)
		w[t] = get_be32(block + 4 * t);
	for (int t = 16; t < 64; t++)
		w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];
	memcpy(v, h, sizeof(v));
	for (int t = 0; t < 64; t++) {
		/* v[0..7] are a..h of the standard. */
		uint32_t t1 = v[7] + big_sigma1(v[4]) + ch(v[4], v[5], v[6]) + k256[t] + w[t];
		uint32_t t2 = big_sigma0(v[0]) + maj(v[0], v[1], v[2]);
		memmove(v + 1, v, 7 * sizeof(v[0]));
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++)
		h[i] += v[i];
	explicit_bzero(w, sizeof(w));
	explicit_bzero(v, sizeof(v));
}

void uls_sha256_init(struct uls_sha256 *s)
{
	memcpy(s->h, h256, sizeof(s->h));
	s->len = 0;
	memset(s->buf, 0, sizeof(s->buf));
}

void uls_sha256_update(struct uls_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len > 0) {
		size_t fill = (size_t)(s->len % ULS_SHA256_BLOCK);
		size_t n = ULS_SHA256_BLOCK - fill < len ? ULS_SHA256_BLOCK - fill : len;

		if (fill == 0 && n == ULS_SHA256_BLOCK) {
			compress(s->h, p); /* whole blocks straight from the input */
		} else {
			memcpy(s->buf + fill, p, n);
			if (fill + n == ULS_SHA256_BLOCK)
				compress(s->h, s->buf);
		}
		s->len += n;
		p += n;
		len -= n;
	}
}

/* 5.1.1: a 1 bit, zeros to 448 bits mod 512, then the message length in bits. */
void uls_sha256_final(struct uls_sha256 *s, uint8_t out[ULS_SHA256_LEN])
{
	uint64_t bits = s->len * 8;
	size_t fill = (size_t)(s->len % ULS_SHA256_BLOCK);

	s->buf[fill++] = 0x80;
	if (fill > ULS_SHA256_BLOCK - 8) {
		memset(s->buf + fill, 0, ULS_SHA256_BLOCK - fill);
		compress(s->h, s->buf);
		fill = 0;
	}
	memset(s->buf + fill, 0, ULS_SHA256_BLOCK - 8 - fill);
	put_be32(s->buf + 56, (uint32_t)(bits >> 32));
	put_be32(s->buf + 60, (uint32_t)bits);
	compress(s->h, s->buf);
	for (int i = 0; i < 8; i++)
		put_be32(out + 4 * i, s->h[i]);
	explicit_bzero(s, sizeof(*s));
}

void uls_sha256(const void *data, size_t len, uint8_t out[ULS_SHA256_LEN])
{
	struct uls_sha256 s;

	uls_sha256_init(&s);
	uls_sha256_update(&s, data, len);
	uls_sha256_final(&s, out);
}

/* RFC 2104: H((K ^ opad) ‖ H((K ^ ipad) ‖ text)), K zero-padded to a block. */
void uls_hmac_sha256_init(struct uls_hmac_sha256 *h, const void *key, size_t klen)
{
	uint8_t k[ULS_SHA256_BLOCK] = { 0 }, ikey[ULS_SHA256_BLOCK];

	if (klen > ULS_SHA256_BLOCK)
		uls_sha256(key, klen, k);
	else if (klen > 0)
		memcpy(k, key, klen);
	for (int i = 0; i < ULS_SHA256_BLOCK; i++) {
		ikey[i] = k[i] ^ 0x36;
		h->okey[i] = k[i] ^ 0x5c;
	}
	uls_sha256_init(&h->inner);
	uls_sha256_update(&h->inner, ikey, sizeof(ikey));
	explicit_bzero(k, sizeof(k));
	explicit_bzero(ikey, sizeof(ikey));
}

void uls_hmac_sha256_update(struct uls_hmac_sha256 *h, const void *data, size_t len)
{
	uls_sha256_update(&h->inner, data, len);
}

void uls_hmac_sha256_final(struct uls_hmac_sha256 *h, uint8_t out[ULS_SHA256_LEN])
{
	uint8_t ihash[ULS_SHA256_LEN];
	struct uls_sha256 outer;

	uls_sha256_final(&h->inner, ihash);
	uls_sha256_init(&outer);
	uls_sha256_update(&outer, h->okey, sizeof(h->okey));
	uls_sha256_update(&outer, ihash, sizeof(ihash));
	uls_sha256_final(&outer, out);
	explicit_bzero(ihash, sizeof(ihash));
	explicit_bzero(h, sizeof(*h));
}

void uls_hmac_sha256(const void *key, size_t klen, const void *data, size_t len,
		     uint8_t out[ULS_SHA256_LEN])
{
	struct uls_hmac_sha256 h;

	uls_hmac_sha256_init(&h, key, klen);
	uls_hmac_sha256_update(&h, data, len);
	uls_hmac_sha256_final(&h, out);
}

int uls_sha256_equal(const uint8_t a[ULS_SHA256_LEN], const uint8_t b[ULS_SHA256_LEN])
{
	unsigned int diff = 0;

	/* Every byte is read whatever came before, and no branch depends on the data. */
	for (int i = 0; i < ULS_SHA256_LEN; i++)
		diff |= (unsigned int)(a[i] ^ b[i]);
	return (int)(((diff - 1) >> 8) & 1);
}
