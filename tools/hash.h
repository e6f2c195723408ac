/*
 * hash.h - the tools' hashes: the splitmix64 finaliser and FNV-1a.
 *
 * Checksums the tools print are compared across processes (a publisher's
 * against its subscribers', a feed simulator's books against a feed
 * handler's, a handler's top of book against a strategy's), so every tool
 * computes them from this one header.  Header-only; for the programs and
 * the market-data applications, not the library.  Nothing here allocates
 * or makes a system call: it may run on a hot path.
 */
#ifndef TB_HASH_H
#define TB_HASH_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64's increment, 2^64 / the golden ratio: tb_hash_mix64(x +
 * TB_HASH_GOLDEN) is one whole splitmix64 step, which also mixes x = 0. */
#define TB_HASH_GOLDEN 0x9e3779b97f4a7c15ull

/* FNV-1a's 64-bit offset basis: the running value before the first byte. */
#define TB_HASH_FNV1A_INIT 0xcbf29ce484222325ull

/* The splitmix64 finaliser: a bijection of 64-bit words in which every
 * input bit flips about half the output bits.  Maps 0 to 0. */
static inline uint64_t tb_hash_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* Folds `n` bytes into the running FNV-1a value `h` (start from
 * TB_HASH_FNV1A_INIT); returns the new value. */
static inline uint64_t tb_hash_fnv1a64(uint64_t h, const void *buf, size_t n)
{
	const uint8_t *p = (const uint8_t *)buf;

	while (n--) {
		h ^= *p++;
		h *= 0x100000001b3ull;
	}
	return h;
}

#endif
