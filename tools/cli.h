/*
 * cli.h - what every command-line program of tickbus parses the same way:
 * unsigned numbers, IPv4 addresses, and a monotonic clock for its time
 * limits and rates.  Header-only; for the programs, not the library.
 */
#ifndef TB_CLI_H
#define TB_CLI_H

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* `s` as an unsigned number in `base` (10; or 0: C literals, 0x.. hex,
 * 0.. octal): 0, or -1 when it is empty, negative, out of range or has
 * anything after the digits. */
static inline int tb_cli_u64_base(const char *s, int base, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	*out = strtoull(s, &end, base);
	return *end || errno ? -1 : 0;
}

static inline int tb_cli_u64(const char *s, uint64_t *out)
{
	return tb_cli_u64_base(s, 10, out);
}

/* Accepts 0x.. hex as well (seeds, masks). */
static inline int tb_cli_u64_c(const char *s, uint64_t *out)
{
	return tb_cli_u64_base(s, 0, out);
}

static inline int tb_cli_is_ipv4(const char *s)
{
	struct in_addr a;

	return inet_pton(AF_INET, s, &a) == 1;
}

static inline uint64_t tb_cli_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tb_cli_mono_ms(void)
{
	return tb_cli_mono_ns() / 1000000;
}

#endif
