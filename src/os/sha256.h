/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), in-tree so that the fabric handshake
 * authenticates its messages without loading a crypto library (docs/protocol.md 9.4).
 * Nothing here allocates or keeps global state; a context is plain memory the caller owns.
 *
 * The incremental functions take any split of the input: update(a) then update(b) gives
 * what update(a ‖ b) gives. A final wipes its context, which must be initialized again
 * before another use.
 */
#ifndef ULS_OS_SHA256_H
#define ULS_OS_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define ULS_SHA256_LEN 32   /* digest bytes */
#define ULS_SHA256_BLOCK 64 /* bytes per compression; HMAC's key block */

struct uls_sha256 {
	uint32_t h[8];                   /* the chaining value */
	uint64_t len;                    /* message bytes so far */
	uint8_t buf[ULS_SHA256_BLOCK];   /* the partial block */
};

struct uls_hmac_sha256 {
	struct uls_sha256 inner;         /* H((K ^ ipad) ‖ message ...) */
	uint8_t okey[ULS_SHA256_BLOCK];  /* K ^ opad, for the outer hash at final */
};

void uls_sha256_init(struct uls_sha256 *s);
void uls_sha256_update(struct uls_sha256 *s, const void *data, size_t len);
void uls_sha256_final(struct uls_sha256 *s, uint8_t out[ULS_SHA256_LEN]);
void uls_sha256(const void *data, size_t len, uint8_t out[ULS_SHA256_LEN]);

/* A key longer than a block is hashed first (RFC 2104); an empty key (NULL, 0) is valid. */
void uls_hmac_sha256_init(struct uls_hmac_sha256 *h, const void *key, size_t klen);
void uls_hmac_sha256_update(struct uls_hmac_sha256 *h, const void *data, size_t len);
void uls_hmac_sha256_final(struct uls_hmac_sha256 *h, uint8_t out[ULS_SHA256_LEN]);
void uls_hmac_sha256(const void *key, size_t klen, const void *data, size_t len,
		     uint8_t out[ULS_SHA256_LEN]);

/*
 * 1 if the 32 bytes at a and b are equal, else 0, in a time that does not depend on where
 * they differ: a MAC check must not tell a forger how many leading bytes it guessed.
 */
int uls_sha256_equal(const uint8_t a[ULS_SHA256_LEN], const uint8_t b[ULS_SHA256_LEN]);

#endif
