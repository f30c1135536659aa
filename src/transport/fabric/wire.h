/* SPDX-License-Identifier: MIT */
/*
 * Little-endian fields and reserved-byte checks, shared by the fabric's two wire codecs:
 * the directory's (dir.c, also built into fabricd) and the fabric's own (msg.c).
 */
#ifndef ULS_FAB_WIRE_H
#define ULS_FAB_WIRE_H

#include <stddef.h>
#include <stdint.h>

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t get32(const uint8_t *p)
{
	return get16(p) | (uint32_t)get16(p + 2) << 16;
}

static inline uint64_t get64(const uint8_t *p)
{
	return get32(p) | (uint64_t)get32(p + 4) << 32;
}

static inline int all_zero(const uint8_t *p, size_t n)
{
	uint8_t any = 0;

	for (size_t i = 0; i < n; i++)
		any |= p[i];
	return any == 0;
}

#endif
