/*
 * cli.h - what every command-line program of tickbus does the same way:
 * parse unsigned numbers and IPv4 addresses, refuse bad usage with a line
 * that names the program and what is wrong, answer -h/--help, and stop its
 * main loop on SIGINT/SIGTERM.  Header-only; for the programs, not the
 * library.
 *
 * Exit statuses: 0 done (and -h/--help), 1 error, 2 usage
 * (TB_CLI_EXIT_USAGE).  The usual tail of an option loop:
 *
 *	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
 *		switch (c) {
 *		case 'p':
 *			if (tb_cli_u64(optarg, &port) || port > 65535)
 *				return tb_cli_bad_value(prog, NULL, "--port",
 *							optarg);
 *			break;
 *		case 'h':
 *		default: return tb_cli_usage_exit(usage, c);
 *		}
 *	}
 *	if (optind < argc)
 *		return tb_cli_unexpected(prog, NULL, argv[optind]);
 *	tb_cli_on_stop_signals(&stop);
 *
 * Time limits and rates use the library's monotonic clock,
 * tb_clock_mono_ns() / tb_clock_mono_ms() in <tickbus/tickbus.h>.
 */
#ifndef TB_CLI_H
#define TB_CLI_H

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TB_CLI_EXIT_USAGE 2

/* A program's usage text, written to `out`. */
typedef void (*tb_cli_usage_fn)(FILE *out);

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

/* Writes "<prog>: <message>" on stderr, then the usage text when `usage`
 * is not NULL; returns TB_CLI_EXIT_USAGE for main() to return. */
static inline int tb_cli_usage_error(const char *prog, tb_cli_usage_fn usage,
				     const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline int tb_cli_usage_error(const char *prog, tb_cli_usage_fn usage,
				     const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (usage)
		usage(stderr);
	return TB_CLI_EXIT_USAGE;
}

/* "<prog>: bad value '<value>' for <opt>" (`opt` may say what is wanted:
 * "--mode: pingpong or oneway"), then the usage text when `usage` is not
 * NULL; returns TB_CLI_EXIT_USAGE. */
static inline int tb_cli_bad_value(const char *prog, tb_cli_usage_fn usage,
				   const char *opt, const char *value)
{
	return tb_cli_usage_error(prog, usage, "bad value '%s' for %s", value,
				  opt);
}

/* "<prog>: unexpected argument '<arg>'" for an operand the program takes
 * none of, then the usage text when `usage` is not NULL; returns
 * TB_CLI_EXIT_USAGE. */
static inline int tb_cli_unexpected(const char *prog, tb_cli_usage_fn usage,
				    const char *arg)
{
	return tb_cli_usage_error(prog, usage, "unexpected argument '%s'", arg);
}

/* The end of an option switch: for -h (--help) the usage text on stdout
 * and exit status 0; for anything else (getopt has said what) the usage
 * text on stderr and TB_CLI_EXIT_USAGE. */
static inline int tb_cli_usage_exit(tb_cli_usage_fn usage, int opt)
{
	if (opt == 'h') {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return TB_CLI_EXIT_USAGE;
}

static volatile sig_atomic_t *tb_cli_stop_flag_;

static inline void tb_cli_on_stop_(int sig)
{
	(void)sig;
	*tb_cli_stop_flag_ = 1;
}

/* From now on SIGINT and SIGTERM set *flag to 1, for the program's loops
 * to see and finish cleanly (installed with signal(): reads and writes
 * restart, sleeps and polls return EINTR).  `flag` must live as long as
 * the program; one per program. */
static inline void tb_cli_on_stop_signals(volatile sig_atomic_t *flag)
{
	tb_cli_stop_flag_ = flag;
	signal(SIGINT, tb_cli_on_stop_);
	signal(SIGTERM, tb_cli_on_stop_);
}

#endif
