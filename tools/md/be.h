/*
 * be.h - big-endian loads and stores for the exchange's wire formats
 * (MoldUDP64 in mold.h, ITCH in itch.h: network byte order throughout,
 * fields at any byte offset).
 *
 * Byte by byte, so alignment never matters and the compiler is free to fuse
 * each into one load or store and a byte swap.  Hot path: no allocation,
 * lock or system call.  The caller has checked the bounds.
 */
#ifndef TB_BE_H
#define TB_BE_H

#include <stdint.h>

static inline uint16_t tb_be_get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t tb_be_get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
	       ((uint32_t)p[2] << 8) | p[3];
}

/* ITCH timestamps: 6 bytes. */
static inline uint64_t tb_be_get48(const uint8_t *p)
{
	return ((uint64_t)tb_be_get16(p) << 32) | tb_be_get32(p + 2);
}

static inline uint64_t tb_be_get64(const uint8_t *p)
{
	return ((uint64_t)tb_be_get32(p) << 32) | tb_be_get32(p + 4);
}

static inline void tb_be_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void tb_be_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* The low 48 bits of `v`. */
static inline void tb_be_put48(uint8_t *p, uint64_t v)
{
	tb_be_put16(p, (uint16_t)(v >> 32));
	tb_be_put32(p + 2, (uint32_t)v);
}

static inline void tb_be_put64(uint8_t *p, uint64_t v)
{
	tb_be_put32(p, (uint32_t)(v >> 32));
	tb_be_put32(p + 4, (uint32_t)v);
}

#endif
