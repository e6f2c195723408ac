/*
 * rng.h - seeded pseudo-random numbers for tests: a fixed seed makes every
 * run the same run, and a failure can be replayed.
 *
 *   rng_xorshift64s  xorshift64*, for mutation loops and random workloads
 *                    (the state must not be 0);
 *   rng_splitmix64   splitmix64, for drawing losses (any seed, 0 included;
 *                    its step is one addition, so a shared generator can
 *                    take it with an atomic fetch-add and mix the result
 *                    with rng_splitmix64_mix).
 */
#ifndef TB_TEST_RNG_H
#define TB_TEST_RNG_H

#include "tools/hash.h"

#include <stdint.h>

#define RNG_SPLITMIX64_GAMMA 0x9e3779b97f4a7c15ull

static inline uint64_t rng_xorshift64s(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * 0x2545f4914f6cdd1dull;
}

/* The output of splitmix64 for the state after a step: the tools' one
 * finaliser (tools/hash.h). */
static inline uint64_t rng_splitmix64_mix(uint64_t z)
{
	return tb_hash_mix64(z);
}

static inline uint64_t rng_splitmix64(uint64_t *state)
{
	return rng_splitmix64_mix(*state += RNG_SPLITMIX64_GAMMA);
}

#endif
