/* SPDX-License-Identifier: MIT */
/*
 * The unit tests' check header: a failed check prints the expression and both values and
 * ends the test with exit status 1; CHECK_SKIP ends it with 77, which ctest reports as
 * skipped. A test is a plain executable, so a check may fail in a forked child too: the
 * messages go to stderr unbuffered and the child's status carries the verdict.
 */
#ifndef ULS_TEST_CHECK_H
#define ULS_TEST_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_PASS 0
#define CHECK_FAIL 1
#define CHECK_SKIPPED 77

/* A context string the failure messages include, e.g. the case or PRNG seed under test. */
static char check_ctx[160];

static inline void check_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void check_context(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(check_ctx, sizeof(check_ctx), fmt, ap);
	va_end(ap);
}

static inline void check_where(const char *file, int line)
{
	fprintf(stderr, "%s:%d: check failed%s%s%s\n", file, line, check_ctx[0] ? " [" : "",
		check_ctx, check_ctx[0] ? "]" : "");
}

__attribute__((noreturn)) static inline void check_fail(const char *file, int line,
							 const char *expr)
{
	check_where(file, line);
	fprintf(stderr, "  %s\n", expr);
	exit(CHECK_FAIL);
}

__attribute__((noreturn)) static inline void check_fail_int(const char *file, int line,
							     const char *a, const char *op,
							     const char *b, long long va,
							     long long vb)
{
	check_where(file, line);
	fprintf(stderr, "  %s %s %s\n  left:  %s = %lld (%#llx)\n  right: %s = %lld (%#llx)\n",
		a, op, b, a, va, (unsigned long long)va, b, vb, (unsigned long long)vb);
	exit(CHECK_FAIL);
}

__attribute__((noreturn)) static inline void check_fail_uint(const char *file, int line,
							      const char *a, const char *op,
							      const char *b, unsigned long long va,
							      unsigned long long vb)
{
	check_where(file, line);
	fprintf(stderr, "  %s %s %s\n  left:  %s = %llu (%#llx)\n  right: %s = %llu (%#llx)\n",
		a, op, b, a, va, va, b, vb, vb);
	exit(CHECK_FAIL);
}

/* CHECK(expr): a condition. */
#define CHECK(expr)                                                                        \
	do {                                                                               \
		if (!(expr))                                                               \
			check_fail(__FILE__, __LINE__, #expr);                             \
	} while (0)

/* Signed comparisons (errors, byte counts): CHECK_INT(a, ==, b). */
#define CHECK_INT(a, op, b)                                                                \
	do {                                                                               \
		long long va_ = (long long)(a), vb_ = (long long)(b);                      \
		if (!(va_ op vb_))                                                         \
			check_fail_int(__FILE__, __LINE__, #a, #op, #b, va_, vb_);         \
	} while (0)

/* Unsigned comparisons (ring positions, sizes, inodes): CHECK_U64(a, <=, b). */
#define CHECK_U64(a, op, b)                                                                \
	do {                                                                               \
		unsigned long long va_ = (unsigned long long)(a),                          \
				   vb_ = (unsigned long long)(b);                          \
		if (!(va_ op vb_))                                                         \
			check_fail_uint(__FILE__, __LINE__, #a, #op, #b, va_, vb_);        \
	} while (0)

#define CHECK_EQ(a, b) CHECK_INT(a, ==, b)

/* Byte ranges: prints the first differing offset and the two bytes there. */
#define CHECK_MEM(a, b, len)                                                               \
	do {                                                                               \
		const unsigned char *ma_ = (const void *)(a), *mb_ = (const void *)(b);    \
		size_t ml_ = (len), mi_ = 0;                                               \
		if (memcmp(ma_, mb_, ml_) != 0) {                                          \
			while (ma_[mi_] == mb_[mi_])                                       \
				mi_++;                                                     \
			check_where(__FILE__, __LINE__);                                   \
			fprintf(stderr,                                                    \
				"  memcmp(%s, %s, %s): first difference at %zu of %zu: "  \
				"%#x != %#x\n",                                            \
				#a, #b, #len, mi_, ml_, ma_[mi_], mb_[mi_]);               \
			exit(CHECK_FAIL);                                                  \
		}                                                                          \
	} while (0)

/* Ends the test as skipped, with the reason. */
#define CHECK_SKIP(...)                                                                    \
	do {                                                                               \
		fprintf(stderr, "SKIP: ");                                                 \
		fprintf(stderr, __VA_ARGS__);                                              \
		fprintf(stderr, "\n");                                                     \
		exit(CHECK_SKIPPED);                                                       \
	} while (0)

/* A small deterministic PRNG (xorshift64*), so a failing seed can be replayed. */
static inline uint64_t check_rand(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n), n > 0. */
static inline uint64_t check_rand_below(uint64_t *s, uint64_t n)
{
	return check_rand(s) % n;
}

/*
 * A reproducible byte stream: byte k for a seed, computed from k alone, so a consumer can
 * verify any chunk without keeping the producer's state. Fills buf with bytes [off, off+n).
 */
static inline uint64_t check_stream_word(uint64_t seed, uint64_t w)
{
	uint64_t x = (w + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return x;
}

static inline void check_stream_fill(uint8_t *buf, size_t n, uint64_t seed, uint64_t off)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t k = off + i;
		buf[i] = (uint8_t)(check_stream_word(seed, k >> 3) >> ((k & 7) * 8));
	}
}

/* The offset of the first byte of buf that differs from the stream, or n. */
static inline size_t check_stream_cmp(const uint8_t *buf, size_t n, uint64_t seed, uint64_t off)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t k = off + i;
		if (buf[i] != (uint8_t)(check_stream_word(seed, k >> 3) >> ((k & 7) * 8)))
			return i;
	}
	return n;
}

#endif
